"""Keeping a source's objects in sync: list with a cursor and a page budget, detect changes, sweep deletes.

A *pass* lists the whole prefix, possibly across many ticks: each page is recorded in one transaction
together with the cursor (the last key listed), so a crash resumes where it stopped and a re-listing
creates nothing twice. Per page:

- new key, or a key whose ETag changed -> a queued ledger row (`run_type = 's3_sync'`), bytes fetched
  later by the batch run;
- unchanged key -> only marked as seen (no download, no embedding);
- a key that is not an allowed document type or is too large -> `skipped` with the reason, once.

When a pass reaches the end of the listing, keys not seen in it were deleted: their active version is
deactivated (nothing is deleted) and a ledger row records it. Two syncs of one source never overlap
(a session advisory lock per source).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType, check_extension
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.metrics.formats import METRIC_FORMATS
from ingestion_pipeline.sources.registry import Source

_log = logging.getLogger("ingestion_pipeline.s3_sync")


@dataclass
class SyncReport:
    source: str
    pages: int = 0
    listed: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    skipped: int = 0
    deleted: int = 0
    pass_completed: bool = False
    busy: bool = False  # another sync of this source holds the lock

    def as_dict(self) -> dict:
        return asdict(self)


def s3_uri(bucket: str, key: str) -> str:
    return f"s3://{bucket}/{key}"


# key -> (status for source_objects: active | failed, reason or None): hands a metrics object to intake
MetricIntake = Callable[[Source, str], tuple[str, str | None]]


def skip_reason(key: str, size: int, max_bytes: int, kind: str = "documents") -> str | None:
    try:
        check_extension(PurePosixPath(key).name, METRIC_FORMATS if kind == "metrics" else DOCUMENT_TYPES)
    except UnsupportedFileType as exc:
        return str(exc)
    if size > max_bytes:
        return f"object is {size:,} bytes, over the {max_bytes:,} byte limit"
    return None


def sync_source(
    db: Database, source: Source, client: Any, *, max_bytes: int, page_size: int = 1000,
    max_pages: int | None = 5, metric_intake: MetricIntake | None = None,
) -> SyncReport:
    """List up to ``max_pages`` pages (None: to the end of the pass) and record what changed.

    Documents sources queue ledger rows for the batch runs; metrics sources hand each new or changed
    object to ``metric_intake`` (it becomes a metric upload).
    """
    if source.kind == "metrics" and metric_intake is None:
        raise ValueError(f"source {source.name} holds metric files: a metric intake is required")
    report = SyncReport(source.name)
    with db.connection() as lock_conn:
        got = lock_conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 0)) AS ok", (f"source:{source.source_id}",)
        ).fetchone()["ok"]
        if not got:
            report.busy = True
            return report
        try:
            while max_pages is None or report.pages < max_pages:
                with db.transaction() as conn:
                    state = conn.execute(
                        """SELECT list_cursor, pass_number, paused, removed_at FROM ingestion_sources
                            WHERE source_id = %s FOR NO KEY UPDATE""",
                        (source.source_id,),
                    ).fetchone()
                    if state["paused"] or state["removed_at"] is not None:
                        break
                    kwargs = {"Bucket": source.bucket, "Prefix": source.prefix, "MaxKeys": page_size}
                    if state["list_cursor"]:
                        kwargs["StartAfter"] = state["list_cursor"]
                    response = client.list_objects_v2(**kwargs)
                    objects = response.get("Contents", [])
                    report.pages += 1
                    report.listed += len(objects)
                    _record_page(conn, source, state["pass_number"], objects, max_bytes, report, metric_intake)
                    if response.get("IsTruncated") and objects:
                        conn.execute(
                            "UPDATE ingestion_sources SET list_cursor = %s, updated_at = now() WHERE source_id = %s",
                            (objects[-1]["Key"], source.source_id),
                        )
                        continue
                    report.deleted = _sweep_deleted(conn, source, state["pass_number"])
                    conn.execute(
                        """UPDATE ingestion_sources SET list_cursor = NULL, pass_number = pass_number + 1,
                                  last_pass_completed_at = now(), updated_at = now() WHERE source_id = %s""",
                        (source.source_id,),
                    )
                    report.pass_completed = True
                    break
        finally:
            lock_conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (f"source:{source.source_id}",))
    _log.info("sync %s: %s", source.name, report.as_dict())
    return report


def _record_page(
    conn: psycopg.Connection, source: Source, pass_number: int, objects: list[dict], max_bytes: int,
    report: SyncReport, metric_intake: MetricIntake | None = None, via: str = "listing",
) -> None:
    if not objects:
        return
    keys = [o["Key"] for o in objects]
    known = {
        r["key"]: r
        for r in conn.execute(
            "SELECT key, etag, status FROM source_objects WHERE source_id = %s AND key = ANY(%s)",
            (source.source_id, keys),
        )
    }
    unchanged: list[str] = []
    for obj in objects:
        key, etag, size = obj["Key"], obj["ETag"].strip('"'), int(obj["Size"])
        previous = known.get(key)
        if previous is not None and previous["etag"] == etag and previous["status"] != "deleted":
            unchanged.append(key)
            continue
        reason = skip_reason(key, size, max_bytes, source.kind)
        if reason is not None:
            _upsert_object(conn, source, obj, etag, pass_number, status="skipped", skip_reason=reason)
            report.skipped += 1
            continue
        if previous is None or previous["status"] == "deleted":
            report.new += 1
        else:
            report.changed += 1
        if source.kind == "metrics":
            status, note = metric_intake(source, key)
            _upsert_object(conn, source, obj, etag, pass_number, status=status, skip_reason=note)
        else:
            _queue_object(conn, source, obj, etag, pass_number, via)
    if unchanged:
        conn.execute(
            "UPDATE source_objects SET seen_in_pass = %s WHERE source_id = %s AND key = ANY(%s)",
            (pass_number, source.source_id, unchanged),
        )
        report.unchanged += len(unchanged)


def _upsert_object(
    conn: psycopg.Connection, source: Source, obj: dict, etag: str, pass_number: int, *, status: str,
    skip_reason: str | None = None, doc_id: int | None = None, file_id: int | None = None,
) -> None:
    conn.execute(
        """INSERT INTO source_objects (source_id, key, etag, size_bytes, last_modified, status, skip_reason, doc_id,
                                       last_file_id, seen_in_pass)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
           ON CONFLICT (source_id, key) DO UPDATE SET
               etag = EXCLUDED.etag, size_bytes = EXCLUDED.size_bytes, last_modified = EXCLUDED.last_modified,
               status = EXCLUDED.status, skip_reason = EXCLUDED.skip_reason,
               doc_id = coalesce(EXCLUDED.doc_id, source_objects.doc_id),
               last_file_id = coalesce(EXCLUDED.last_file_id, source_objects.last_file_id),
               seen_in_pass = EXCLUDED.seen_in_pass, updated_at = now()""",
        (source.source_id, obj["Key"], etag, int(obj["Size"]), obj.get("LastModified"), status, skip_reason, doc_id,
         file_id, pass_number),
    )


def _queue_object(conn: psycopg.Connection, source: Source, obj: dict, etag: str, pass_number: int,
                  via: str = "listing") -> None:
    """A ledger row for the object's current version; ``via``: ``listing`` (a sync's page) or ``event`` (an S3
    event notification: one object a person or a program just wrote, whose small batch runs as interactive)."""
    key = obj["Key"]
    uri = s3_uri(source.bucket, key)
    title = PurePosixPath(key).stem
    doc_id = conn.execute(
        """INSERT INTO documents (tenant_id, source_uri, title) VALUES (%s, %s, %s)
           ON CONFLICT (tenant_id, source_uri) DO UPDATE SET updated_at = now() RETURNING doc_id""",
        (source.tenant_id, uri, title),
    ).fetchone()["doc_id"]
    extension = PurePosixPath(key).suffix.lower()
    config = {
        "title": title,
        "filename": PurePosixPath(key).name,
        "extension": extension,
        "content_type": DOCUMENT_TYPES[extension],
        "size_bytes": int(obj["Size"]),
        "etag": etag,
        "source": source.name,
        "bucket": source.bucket,
        "key": key,
        "via": via,
    }
    row = conn.execute(
        """INSERT INTO ingestion_runs (tenant_id, doc_id, run_type, status, source_uri, size_bytes, config, source_id,
                                       source_key, source_etag)
           VALUES (%s, %s, 's3_sync', 'queued', %s, %s, %s, %s, %s, %s) RETURNING file_id""",
        (source.tenant_id, doc_id, uri, int(obj["Size"]), Jsonb(config), source.source_id, key, etag),
    ).fetchone()
    _upsert_object(conn, source, obj, etag, pass_number, status="queued", doc_id=doc_id, file_id=row["file_id"])


def _sweep_deleted(conn: psycopg.Connection, source: Source, pass_number: int) -> int:
    """Keys not seen in the finished pass are gone from the bucket: deactivate, never delete."""
    gone = conn.execute(
        """SELECT key, doc_id FROM source_objects
            WHERE source_id = %s AND seen_in_pass < %s AND status <> 'deleted' FOR UPDATE""",
        (source.source_id, pass_number),
    ).fetchall()
    for row in gone:
        _deactivate(conn, source, row["key"], row["doc_id"])
    if gone:
        conn.execute("SELECT fold_tenant_serving_totals(%s)", (source.tenant_id,))
    return len(gone)


def _deactivate(conn: psycopg.Connection, source: Source, key: str, doc_id: int | None) -> None:
    """The key is gone from the bucket: its active version is deactivated (nothing deleted), with a ledger row."""
    if doc_id is not None:
        deactivated = conn.execute(
            """UPDATE document_versions SET is_active = false, deactivated_at = now()
                WHERE tenant_id = %s AND doc_id = %s AND is_active RETURNING version_id""",
            (source.tenant_id, doc_id),
        ).fetchone()
        file_id = conn.execute(
            """INSERT INTO ingestion_runs (tenant_id, doc_id, run_type, status, source_uri, size_bytes, config,
                                           stats, source_id, source_key, started_at, finished_at)
               VALUES (%s, %s, 's3_sync', 'succeeded', %s, 0, %s, %s, %s, %s, now(), now())
               RETURNING *""",
            (source.tenant_id, doc_id, s3_uri(source.bucket, key),
             Jsonb({"filename": PurePosixPath(key).name, "source": source.name, "key": key}),
             Jsonb({"action": "deactivated", "version_id": deactivated["version_id"] if deactivated else None}),
             source.source_id, key),
        ).fetchone()
        file_ledger.log_finished(file_id)
    conn.execute(
        "UPDATE source_objects SET status = 'deleted', updated_at = now() WHERE source_id = %s AND key = %s",
        (source.source_id, key),
    )


def record_object(conn: psycopg.Connection, source: Source, obj: dict | None, key: str, *, max_bytes: int,
                  metric_intake: MetricIntake | None = None) -> SyncReport:
    """What one object's current state (``obj``: a listing entry or a HEAD as Key/ETag/Size/LastModified;
    None: the key is gone) means, as a listing page would record it; in the caller's transaction, which holds
    the source's row (S3 event notifications, ``queues/s3_events.py``)."""
    report = SyncReport(source.name)
    pass_number = conn.execute("SELECT pass_number FROM ingestion_sources WHERE source_id = %s",
                               (source.source_id,)).fetchone()["pass_number"]
    if obj is not None:
        _record_page(conn, source, pass_number, [obj], max_bytes, report, metric_intake, via="event")
        return report
    known = conn.execute(
        "SELECT doc_id FROM source_objects WHERE source_id = %s AND key = %s AND status <> 'deleted' FOR UPDATE",
        (source.source_id, key),
    ).fetchone()
    if known is not None:
        _deactivate(conn, source, key, known["doc_id"])
        report.deleted = 1
    return report
