"""Metric uploads (`data_uploads`): intake and read-side listings.

The status machine (pending -> processing -> staging_complete -> promoting -> completed | partial |
failed) runs through the shared ledger mechanism, ``core.ledger`` with ``METRIC_UPLOADS``.
"""

from __future__ import annotations

import io
from dataclasses import asdict, dataclass, fields
from datetime import datetime
from typing import BinaryIO

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType, check_extension
from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.identifiers import key_part
from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id
from ingestion_pipeline.core.upload_store import StoredFile, UploadStore
from ingestion_pipeline.metrics.exports import sniff_layout
from ingestion_pipeline.metrics.formats import METRIC_FORMATS, PLATFORMS
from ingestion_pipeline.metrics.layouts import UnknownLayout
from ingestion_pipeline.metrics.readers import SAMPLE_BYTES, MalformedFileError, refuse_binary_sample


@dataclass(frozen=True)
class MetricUpload:
    """One metric upload as the steps, the Dagster assets and the CLI see it (a row of ``data_uploads``)."""

    upload_id: int
    workspace_id: str
    platform: str
    filename: str
    file_format: str
    content_hash: str
    size_bytes: int
    status: str
    attempts: int
    client_id: str | None = None
    raw_path: str | None = None
    owner: str | None = None
    force_partial: bool = False
    valid_threshold: float = 0.9
    total_rows: int | None = None
    valid_rows: int | None = None
    invalid_rows: int | None = None
    promoted_rows: int | None = None
    unpromotable_rows: int | None = None
    error: str | None = None
    error_code: str | None = None
    partition_key: str | None = None

    @classmethod
    def from_row(cls, row: dict) -> MetricUpload:
        """From a ``SELECT *`` of ``data_uploads`` (or a ledger transition's ``RETURNING *``)."""
        values = {f.name: row[f.name] for f in fields(cls) if f.name in row}
        values["valid_threshold"] = float(values.get("valid_threshold", 0.9))
        return cls(**values)


@dataclass
class MetricSubmitResult:
    status: str  # pending | duplicate | rejected
    filename: str
    workspace_id: str
    platform: str | None
    reason: str | None = None
    layout: str | None = None  # the export layout the platform was detected from
    upload_id: int | None = None
    duplicate_of: int | None = None
    partition_key: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def partition_key_for(workspace_id: str, platform: str, upload_id: int) -> str:
    return f"{key_part(workspace_id)}-{platform}-{upload_id}"


def check_metric_file(filename: str, platform: str | None) -> str:
    """The file format for an export's name and platform (None: detected from the file); raises
    ``ValueError`` with the reason."""
    if platform is not None and platform not in PLATFORMS:
        raise ValueError(f"unknown platform {platform!r}; expected one of {', '.join(PLATFORMS)}")
    try:
        return METRIC_FORMATS[check_extension(filename, METRIC_FORMATS)]
    except UnsupportedFileType as exc:
        raise ValueError(str(exc)) from exc


def submit_metric_file(
    db: Database, store: UploadStore, *, workspace_id: str, platform: str | None, filename: str,
    stream: BinaryIO, max_bytes: int, client_id: str | None = None, force_partial: bool = False,
    valid_threshold: float = 0.9, source_id: int | None = None, source_key: str | None = None,
) -> MetricSubmitResult:
    """Stream a CSV/JSON export into the raw store with SHA-256 and record a pending upload."""
    validate_tenant_id(workspace_id)
    result = MetricSubmitResult("rejected", filename, workspace_id, platform)
    try:
        check_metric_file(filename, platform)
    except ValueError as exc:
        result.reason = str(exc)
        return result
    if not 0 <= valid_threshold <= 1:
        raise ValueError("the valid-row threshold is a ratio between 0 and 1")
    try:
        stored = store.put(workspace_id, stream, max_bytes=max_bytes)
    except SizeLimitExceeded as exc:
        result.reason = str(exc)
        return result
    return submit_stored_metric_file(
        db, store, stored, workspace_id=workspace_id, platform=platform, filename=filename, client_id=client_id,
        force_partial=force_partial, valid_threshold=valid_threshold, source_id=source_id, source_key=source_key,
    )


def submit_stored_metric_file(
    db: Database, store: UploadStore, stored: StoredFile, *, workspace_id: str, platform: str | None,
    filename: str,
    client_id: str | None = None, force_partial: bool = False, valid_threshold: float = 0.9,
    source_id: int | None = None, source_key: str | None = None,
) -> MetricSubmitResult:
    """Record a pending upload for an export already in the store (the CLI, S3 and the API all end here)."""
    result = MetricSubmitResult("rejected", filename, workspace_id, platform)
    try:
        file_format = check_metric_file(filename, platform)
        if not 0 <= valid_threshold <= 1:
            raise ValueError("the valid-row threshold is a ratio between 0 and 1")
    except ValueError:
        if stored.created:
            store.release(stored.path)
        raise
    result.sha256, result.size_bytes = stored.sha256, stored.size
    # these checks read the start of the stored file (an S3 object: ranged GETs of what is read, not the object)
    with store.reader(stored.path) as stream:
        refusal, platform = _refused_or_platform(stream, stored.size, file_format, platform, result)
    if refusal is not None:
        if stored.created:
            store.release(stored.path)
        result.reason = refusal
        return result
    try:
        row = _record_upload(db, stored, result, workspace_id, platform, client_id, filename, file_format,
                             force_partial, valid_threshold, source_id, source_key)
    except BaseException:
        if stored.created:
            store.release(stored.path)
        raise
    if row is None:  # a duplicate shares the stored bytes of the first upload
        return result
    result.status, result.upload_id, result.partition_key = "pending", row["upload_id"], row["partition_key"]
    return result


def _refused_or_platform(stream: io.BufferedReader, size: int, file_format: str, platform: str | None,
                         result: MetricSubmitResult) -> tuple[str | None, str | None]:
    """Why the stored export is refused (binary, no known layout), or its platform (detected when not given)."""
    try:
        refuse_binary_sample(stream.peek(SAMPLE_BYTES)[:SAMPLE_BYTES])
    except MalformedFileError as exc:
        return str(exc), platform
    if platform is None:  # detected from the columns; a file no layout fits is refused here, with why
        try:
            plan = sniff_layout(stream, file_format, size=size)
        except (UnknownLayout, MalformedFileError) as exc:
            return f"cannot tell the platform: {exc}", None
        platform, result.layout = plan.layout.platform, plan.layout.name
        result.platform = platform
    return None, platform


def _record_upload(db, stored, result, workspace_id, platform, client_id, filename, file_format, force_partial,
                   valid_threshold, source_id, source_key) -> dict | None:
    with db.transaction() as conn:
        ensure_tenant(conn, workspace_id)  # a workspace is a tenant: it can be paused like one
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                     (f"metrics:{workspace_id}:{platform}:{stored.sha256}",))
        previous = conn.execute(
            """SELECT upload_id FROM data_uploads WHERE workspace_id = %s AND platform = %s AND content_hash = %s
                  AND status <> 'failed' ORDER BY upload_id LIMIT 1""",
            (workspace_id, platform, stored.sha256),
        ).fetchone()
        if previous is not None:
            result.status, result.duplicate_of = "duplicate", previous["upload_id"]
            result.reason = f"the same file was already uploaded as upload {previous['upload_id']}"
            return None
        row = conn.execute(
            """INSERT INTO data_uploads (workspace_id, platform, client_id, filename, file_format, raw_path,
                                         content_hash, size_bytes, force_partial, valid_threshold, source_id,
                                         source_key)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING upload_id""",
            (workspace_id, platform, client_id, filename, file_format, str(stored.path), stored.sha256, stored.size,
             force_partial, valid_threshold, source_id, source_key),
        ).fetchone()
        key = partition_key_for(workspace_id, platform, row["upload_id"])
        conn.execute("UPDATE data_uploads SET partition_key = %s WHERE upload_id = %s", (key, row["upload_id"]))
    return {"upload_id": row["upload_id"], "partition_key": key}


def get_upload(conn: psycopg.Connection, upload_id: int, *, workspace_id: str | None) -> dict | None:
    """One upload; ``workspace_id=None`` (operator tools only) finds it in any workspace."""
    return conn.execute(
        "SELECT * FROM data_uploads WHERE upload_id = %s AND (%s::text IS NULL OR workspace_id = %s)",
        (upload_id, workspace_id, workspace_id),
    ).fetchone()


def upload_for_partition(conn: psycopg.Connection, partition_key: str) -> MetricUpload:
    row = conn.execute("SELECT * FROM data_uploads WHERE partition_key = %s", (partition_key,)).fetchone()
    if row is None:
        raise ValueError(f"no metric upload for partition {partition_key!r}")
    return MetricUpload.from_row(row)


def pending_partitions(conn: psycopg.Connection) -> list[dict]:
    """Uploads due now ({partition_key, workspace_id, launch_gen}): pending, not waiting for a retry,
    not of a paused workspace."""
    return conn.execute(
        """SELECT u.partition_key, u.workspace_id, u.launch_gen FROM data_uploads u
             LEFT JOIN tenants t ON t.tenant_id = u.workspace_id
            WHERE u.status = 'pending' AND u.next_attempt_at <= now() AND NOT coalesce(t.paused, false)
            ORDER BY u.upload_id"""
    ).fetchall()


_UPLOADS_WHERE = "(%(ws)s::text IS NULL OR workspace_id = %(ws)s)"


def list_uploads(
    conn: psycopg.Connection, *, workspace_id: str | None, limit: int = 100, offset: int = 0,
) -> list[dict]:
    """Newest first; ``workspace_id=None`` (operator tools only) lists every workspace."""
    return conn.execute(
        f"""SELECT upload_id, workspace_id, platform, client_id, filename, file_format, layout, status, total_rows,
                   valid_rows, invalid_rows, skipped_rows, promoted_rows, unpromotable_rows, notes, error,
                   partition_key, created_at, finished_at
              FROM data_uploads WHERE {_UPLOADS_WHERE}
             ORDER BY upload_id DESC LIMIT %(limit)s OFFSET %(offset)s""",
        {"ws": workspace_id, "limit": limit, "offset": offset},
    ).fetchall()


def count_uploads(conn: psycopg.Connection, *, workspace_id: str | None) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM data_uploads WHERE {_UPLOADS_WHERE}",
                        {"ws": workspace_id}).fetchone()["n"]


def upload_errors(
    conn: psycopg.Connection, upload_id: int, *, workspace_id: str | None, limit: int = 1000, offset: int = 0,
) -> list[dict]:
    """The rows of an upload that did not validate (none for an upload of another workspace)."""
    return conn.execute(
        """SELECT s.row_index, s.line_number, s.entity_type, s.validation_status, s.validation_errors,
                  staged_record(s.raw_data, u.raw_columns) AS raw_data
             FROM staging_rows s JOIN data_uploads u ON u.upload_id = s.upload_id
            WHERE s.upload_id = %(id)s AND s.validation_status <> 'valid'
              AND (%(ws)s::text IS NULL OR u.workspace_id = %(ws)s)
            ORDER BY s.row_index LIMIT %(limit)s OFFSET %(offset)s""",
        {"id": upload_id, "ws": workspace_id, "limit": limit, "offset": offset},
    ).fetchall()


def error_kinds(conn: psycopg.Connection, upload_id: int, *, limit: int = 20) -> list[dict]:
    """Why an upload's rows were invalid: (field, kind of error, rows), most frequent first. The kind is the
    message without the row's value in parentheses, so "out of range (12; ...)" and "(13; ...)" count together."""
    return conn.execute(
        """SELECT e->>'field' AS field, split_part(e->>'error', ' (', 1) AS kind, count(*) AS rows
             FROM staging_rows s CROSS JOIN LATERAL jsonb_array_elements(s.validation_errors) e
            WHERE s.upload_id = %s AND s.validation_status <> 'valid'
            GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT %s""", (upload_id, limit)).fetchall()


def count_upload_errors(conn: psycopg.Connection, upload_id: int) -> int:
    return conn.execute(
        "SELECT count(*) AS n FROM staging_rows WHERE upload_id = %s AND validation_status <> 'valid'", (upload_id,)
    ).fetchone()["n"]


_EVENTS_WHERE = """(%(ws)s::text IS NULL OR workspace_id = %(ws)s)
               AND (%(since)s::timestamptz IS NULL OR created_at >= %(since)s)"""


def list_events(
    conn: psycopg.Connection, *, workspace_id: str | None, since: datetime | None = None, limit: int = 100,
    offset: int = 0,
) -> list[dict]:
    """Completion events; with ``since``, those at or after it, oldest first (a poller's feed)."""
    order = "ASC" if since is not None else "DESC"
    return conn.execute(
        f"""SELECT event_id, upload_id, workspace_id, event_type, payload, created_at FROM ingestion_events
             WHERE {_EVENTS_WHERE} ORDER BY event_id {order} LIMIT %(limit)s OFFSET %(offset)s""",
        {"ws": workspace_id, "since": since, "limit": limit, "offset": offset},
    ).fetchall()


def count_events(conn: psycopg.Connection, *, workspace_id: str | None, since: datetime | None = None) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM ingestion_events WHERE {_EVENTS_WHERE}",
                        {"ws": workspace_id, "since": since}).fetchone()["n"]
