"""S3 sources (`ingestion_sources`): a tenant's bucket prefix kept in sync with its knowledge base."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime

import psycopg

from ingestion_pipeline.core.identifiers import key_part, validate_identifier
from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id
from ingestion_pipeline.metrics.formats import PLATFORMS
from ingestion_pipeline.sources import locations


@dataclass(frozen=True)
class Source:
    source_id: int
    tenant_id: str
    name: str
    kind: str
    bucket: str
    prefix: str
    endpoint_url: str | None
    paused: bool
    platform: str | None
    list_cursor: str | None
    pass_number: int
    last_pass_completed_at: datetime | None

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


_COLUMNS = ("source_id, tenant_id, name, kind, bucket, prefix, endpoint_url, paused, platform, list_cursor, "
            "pass_number, last_pass_completed_at")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/prefix/`` -> (bucket, prefix). The prefix may be empty."""
    match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])(?:/(.*))?", uri or "")
    if not match:
        raise ValueError(f"not an S3 location: {uri!r} (expected s3://bucket/prefix/)")
    return match.group(1), match.group(2) or ""


def default_source_name(bucket: str, prefix: str) -> str:
    return key_part(f"{bucket}-{prefix}", 63) or "source"


def add_source(
    conn: psycopg.Connection, uri: str, *, tenant_id: str, name: str | None = None,
    endpoint_url: str | None = None, kind: str = "documents", platform: str | None = None,
    bound_by: str | None = "operator",
) -> Source:
    """A documents source, or a metrics source (its CSV/JSON objects become metric uploads of ``platform``).

    ``bound_by``: the operator adding it binds its location to the tenant (``locations.bind``; refused for the
    project's own buckets and for another tenant's location); None: the location must already be bound
    (``locations.require``: a tenant's own request, which binds nothing)."""
    bucket, prefix = parse_s3_uri(uri)
    validate_tenant_id(tenant_id)
    name = name or default_source_name(bucket, prefix)
    validate_identifier(name, "source name")
    if kind not in ("documents", "metrics"):
        raise ValueError(f"unknown source kind {kind!r}: documents or metrics")
    if kind == "metrics" and platform not in PLATFORMS:
        raise ValueError(f"a metrics source needs --platform {' | '.join(PLATFORMS)}")
    if kind == "documents" and platform is not None:
        raise ValueError("--platform is only for metrics sources")
    where = locations.location(bucket, prefix, endpoint_url)
    if bound_by is None:  # before the transaction: the refusal's audit row stays
        locations.require(conn, tenant_id, where, entrance="source add (request)")
    with conn.transaction():
        if bound_by is not None:  # in it: a source that cannot be added leaves no binding behind
            locations.bind(conn, tenant_id, where, by=bound_by)
        ensure_tenant(conn, tenant_id)
        try:
            row = conn.execute(
                f"""INSERT INTO ingestion_sources (tenant_id, name, kind, bucket, prefix, endpoint_url, platform)
                    VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING {_COLUMNS}""",
                (tenant_id, name, kind, bucket, prefix, endpoint_url, platform),
            ).fetchone()
        except psycopg.errors.UniqueViolation as exc:
            raise ValueError(
                f"a source named {name!r} or for s3://{bucket}/{prefix} and tenant {tenant_id!r} already exists"
            ) from exc
    return Source(**row)


def name_for_tenant(conn: psycopg.Connection, tenant_id: str, wanted: str) -> str:
    """The source name ``<tenant>-<wanted>`` a tenant's request gets: names are global (the CLI and the runs'
    tags use them), and tenant ids may hold '-', so ``acme`` + ``x-kb`` and ``acme-x`` + ``kb`` would meet. A name
    another tenant holds (or held) gets a suffix of this tenant's own instead of a 409 that would tell the
    caller it exists."""
    name = key_part(f"{tenant_id}-{wanted}", 63)
    owner = conn.execute("SELECT tenant_id FROM ingestion_sources WHERE name = %s", (name,)).fetchone()
    if owner is None or owner["tenant_id"] == tenant_id:
        return name
    suffix = hashlib.sha256(tenant_id.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{suffix}"


def get_source(conn: psycopg.Connection, name: str) -> Source:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM ingestion_sources WHERE name = %s AND removed_at IS NULL", (name,)
    ).fetchone()
    if row is None:
        raise ValueError(f"no source named {name!r}")
    return Source(**row)


def get_tenant_source(conn: psycopg.Connection, source_id: int, *, tenant_id: str) -> Source:
    """A source of the tenant by id; LookupError when there is none (or it is another tenant's)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM ingestion_sources WHERE source_id = %s AND tenant_id = %s AND removed_at IS NULL",
        (source_id, tenant_id),
    ).fetchone()
    if row is None:
        raise LookupError(f"no source {source_id}")
    return Source(**row)


def list_sources(conn: psycopg.Connection, *, kind: str | None = None, active_only: bool = False) -> list[Source]:
    rows = conn.execute(
        f"""SELECT {_COLUMNS} FROM ingestion_sources
             WHERE removed_at IS NULL AND (%(kind)s::text IS NULL OR kind = %(kind)s)
               AND (NOT %(active)s OR NOT paused)
             ORDER BY name""",
        {"kind": kind, "active": active_only},
    ).fetchall()
    return [Source(**r) for r in rows]


def set_paused(conn: psycopg.Connection, name: str, paused: bool) -> Source:
    get_source(conn, name)
    conn.execute(
        "UPDATE ingestion_sources SET paused = %s, updated_at = now() WHERE name = %s AND removed_at IS NULL",
        (paused, name),
    )
    return get_source(conn, name)


def remove_source(conn: psycopg.Connection, name: str) -> None:
    """Stop syncing a source. Its documents stay as they are (deletion is never implied)."""
    get_source(conn, name)
    conn.execute(
        "UPDATE ingestion_sources SET removed_at = now(), paused = true, updated_at = now() WHERE name = %s",
        (name,),
    )


def source_status(conn: psycopg.Connection, *, tenant_id: str | None = None) -> list[dict]:
    """Every source that is not removed (of one tenant, or all), with its objects counted by status."""
    return conn.execute(
        """SELECT s.source_id, s.name, s.tenant_id, s.kind, 's3://' || s.bucket || '/' || s.prefix AS uri,
                  s.endpoint_url, s.paused, s.last_sync_at, s.last_sync_error, s.platform,
                  s.pass_number - 1 AS passes_completed, s.last_pass_completed_at,
                  count(o.key) FILTER (WHERE o.status = 'active') AS active_objects,
                  count(o.key) FILTER (WHERE o.status = 'queued') AS queued_objects,
                  count(o.key) FILTER (WHERE o.status = 'skipped') AS skipped_objects,
                  count(o.key) FILTER (WHERE o.status = 'failed') AS failed_objects,
                  count(o.key) FILTER (WHERE o.status = 'deleted') AS deleted_objects
             FROM ingestion_sources s LEFT JOIN source_objects o ON o.source_id = s.source_id
            WHERE s.removed_at IS NULL AND (%(t)s::text IS NULL OR s.tenant_id = %(t)s)
            GROUP BY s.source_id ORDER BY s.name""",
        {"t": tenant_id},
    ).fetchall()


def record_sync_outcome(conn: psycopg.Connection, source_id: int, error: str | None) -> None:
    """Remember how the last on-demand sync ended (None: it worked), for `GET /v1/sources/{id}`."""
    conn.execute("UPDATE ingestion_sources SET last_sync_at = now(), last_sync_error = %s WHERE source_id = %s",
                 (error, source_id))
