"""Which S3 locations belong to which tenant: by the operator's configuration, never by a request.

The server reads S3 with its own credentials, which reach every bucket it may read: a request that named any
``s3://bucket/prefix/`` would read another tenant's objects with them. So a location a tenant's request names
(a source through the API, an SQS job's object, the object of an S3 event) must lie inside a location bound
to that tenant (``tenant_s3_locations``: endpoint, bucket, prefix), or it is refused with
``LocationNotBound`` and the refusal is audited (``tenant_s3_location_audit``).

- **Who binds**: the operator, with ``ingestion-pipeline tenant bind TENANT s3://bucket/prefix/`` (a database
  account that runs the CLI); ``ingestion-pipeline source add`` binds its location too, being the
  operator's act. No API route writes a binding.
- **No overlap across tenants**: a location inside (or around) another tenant's binding is refused, so a
  shared bucket is shared by disjoint prefixes (``s3://shared/acme/``, ``s3://shared/globex/``).
- **The project's own buckets** (``INGESTION_UPLOAD_BUCKET``, where presigned uploads land before they are
  complete, and the bucket of ``INGESTION_UPLOAD_STORE``, where every tenant's stored files are) are never
  bound: they hold every tenant's bytes. They are refused by name on any endpoint. Every service gets both
  settings (compose's and Helm's shared environment), and the database adds every bucket a presigned upload
  landed in, whatever a process's environment says.
- An endpoint is part of the location: ``''`` is the AWS environment's, another is compared as written
  (without a trailing ``/``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id

_log = logging.getLogger(__name__)


class LocationNotBound(PermissionError):
    """The location is not inside one bound to the tenant (or is one of the project's own buckets)."""


@dataclass(frozen=True)
class Location:
    bucket: str
    prefix: str = ""
    endpoint_url: str = ""

    @property
    def uri(self) -> str:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return f"s3://{self.bucket}/{self.prefix}{where}"

    def contains(self, other: Location) -> bool:
        return (self.endpoint_url, self.bucket) == (other.endpoint_url, other.bucket) and other.prefix.startswith(
            self.prefix)


def location(bucket: str, prefix: str = "", endpoint_url: str | None = None) -> Location:
    return Location(bucket, prefix or "", (endpoint_url or "").strip().rstrip("/"))


def reserved_buckets(conn: psycopg.Connection | None = None) -> set[str]:
    """The project's own buckets: never a tenant's. From this process's settings and, with ``conn``, from the
    database: every bucket a presigned upload landed in, so a process whose environment lacks
    ``INGESTION_UPLOAD_BUCKET`` still knows the upload bucket once anything waits in it."""
    from ingestion_pipeline.core.settings import load_api_settings, load_settings

    reserved = set()
    upload_bucket = load_api_settings().upload_bucket
    if upload_bucket:
        reserved.add(upload_bucket)
    store = load_settings().upload.store_uri  # s3://bucket[/prefix], checked when the settings are read
    if store:
        reserved.add(store.removeprefix("s3://").split("/", 1)[0])
    if conn is not None:
        reserved.update(row["bucket"] for row in conn.execute(_UPLOAD_BUCKETS).fetchall())
    return reserved


# the distinct buckets of api_uploads by a skip scan of its bucket index: one index probe per bucket
_UPLOAD_BUCKETS = """
WITH RECURSIVE seen AS (
    SELECT min(bucket) AS bucket FROM api_uploads
    UNION ALL
    SELECT (SELECT min(bucket) FROM api_uploads WHERE bucket > seen.bucket) FROM seen WHERE seen.bucket IS NOT NULL
)
SELECT bucket FROM seen WHERE bucket IS NOT NULL
"""


def bindings(conn: psycopg.Connection, tenant_id: str | None = None) -> list[dict]:
    where, params = ("WHERE tenant_id = %s", (tenant_id,)) if tenant_id else ("", ())
    return conn.execute(
        f"""SELECT tenant_id, endpoint_url, bucket, prefix, bound_by, bound_at FROM tenant_s3_locations {where}
            ORDER BY tenant_id, endpoint_url, bucket, prefix""", params).fetchall()


def bind(conn: psycopg.Connection, tenant_id: str, where: Location, *, by: str,
         reserved: set[str] | None = None) -> bool:
    """Bind ``where`` to the tenant; False if it already was. ``ValueError`` for one of the project's own
    buckets or a location that overlaps another tenant's."""
    from ingestion_pipeline.core.tenants import ensure_tenant

    validate_tenant_id(tenant_id)
    if where.bucket in (reserved_buckets(conn) if reserved is None else reserved):
        raise ValueError(f"s3://{where.bucket}/ is one of the project's own buckets (the upload bucket or the upload "
                         "store): it holds every tenant's files and is never bound to one")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('tenant_s3_locations'))")  # overlap checks in turn
        for row in conn.execute(
                "SELECT tenant_id, prefix FROM tenant_s3_locations WHERE endpoint_url = %s AND bucket = %s "
                "AND tenant_id <> %s", (where.endpoint_url, where.bucket, tenant_id)).fetchall():
            other = Location(where.bucket, row["prefix"], where.endpoint_url)
            if other.contains(where) or where.contains(other):
                raise ValueError(f"{where.uri} overlaps {other.uri}, bound to another tenant: tenants share a "
                                 "bucket by disjoint prefixes")
        ensure_tenant(conn, tenant_id)
        made = conn.execute(
            """INSERT INTO tenant_s3_locations (tenant_id, endpoint_url, bucket, prefix, bound_by)
               VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING tenant_id""",
            (tenant_id, where.endpoint_url, where.bucket, where.prefix, by)).fetchone()
        if made:
            _audit(conn, tenant_id, "bound", by, where)
    return made is not None


def unbind(conn: psycopg.Connection, tenant_id: str, where: Location, *, by: str) -> bool:
    """Remove the binding (sources inside it stop syncing: each sync checks); False if there was none."""
    with conn.transaction():
        gone = conn.execute(
            """DELETE FROM tenant_s3_locations WHERE tenant_id = %s AND endpoint_url = %s AND bucket = %s
               AND prefix = %s RETURNING tenant_id""",
            (tenant_id, where.endpoint_url, where.bucket, where.prefix)).fetchone()
        if gone:
            _audit(conn, tenant_id, "unbound", by, where)
    return gone is not None


def require(conn: psycopg.Connection, tenant_id: str, where: Location, *, entrance: str,
            reserved: set[str] | None = None, audit: bool = True) -> None:
    """Return if ``where`` lies inside a location bound to the tenant; else audit the refusal and raise
    ``LocationNotBound`` saying what an operator runs. ``conn`` is in autocommit mode (the audit row stays
    whatever the caller does next)."""
    if where.bucket in (reserved_buckets(conn) if reserved is None else reserved):
        reason = "one of the project's own buckets, which hold every tenant's files"
    else:
        rows = conn.execute(
            "SELECT prefix FROM tenant_s3_locations WHERE tenant_id = %s AND endpoint_url = %s AND bucket = %s",
            (tenant_id, where.endpoint_url, where.bucket)).fetchall()
        if any(where.prefix.startswith(row["prefix"]) for row in rows):
            return
        reason = "not inside a location bound to the tenant"
    if audit:
        _audit(conn, tenant_id, "refused", entrance, where, reason)
    _log.warning("refused %s for tenant %s (%s): %s", where.uri, tenant_id, entrance, reason)
    raise LocationNotBound(
        f"{where.uri} is {reason}; an operator binds a tenant's locations with "
        f"`ingestion-pipeline tenant bind {tenant_id} s3://BUCKET/PREFIX/`")


def audit_log(conn: psycopg.Connection, tenant_id: str | None = None, limit: int = 100) -> list[dict]:
    where, params = ("WHERE tenant_id = %s", (tenant_id,)) if tenant_id else ("", ())
    return conn.execute(
        f"""SELECT tenant_id, action, entrance, location, reason, at FROM tenant_s3_location_audit {where}
            ORDER BY audit_id DESC LIMIT %s""", (*params, limit)).fetchall()


def _audit(conn: psycopg.Connection, tenant_id: str, action: str, entrance: str, where: Location,
           reason: str | None = None) -> None:
    conn.execute(
        """INSERT INTO tenant_s3_location_audit (tenant_id, action, entrance, location, reason)
           VALUES (%s, %s, %s, %s, %s)""", (tenant_id, action, entrance[:200], where.uri[:1200], reason))
