"""The document ledger's files (``ingestion_runs``, keyed by ``file_id``): one row per file per submission.

The transitions are the shared mechanism of ``core.ledger`` (claims with owners and leases,
retries, dead letters, cancel); this module adds what is particular to documents: creating a row for
a file, reading a batch's rows, mirroring an outcome onto the S3 object the file came from, and one
JSON log line per finished file (``"event": "file_finished"``) or retry (``"file_retry_scheduled"``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.failures import FailureInfo
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, Worker
from ingestion_pipeline.core.settings import ReliabilitySettings

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
DEAD_LETTER, CANCELED = "dead_letter", "canceled"
STATUSES = (QUEUED, RUNNING, SUCCEEDED, FAILED, DEAD_LETTER, CANCELED)
_log = logging.getLogger("ingestion_pipeline.ledger")


def create_queued_file(
    conn: psycopg.Connection,
    *,
    tenant_id: str,
    doc_id: int,
    source_uri: str,
    raw_path: str,
    content_hash: str,
    size_bytes: int,
    config: dict[str, Any],
    run_type: str = "upload",
) -> int:
    row = conn.execute(
        """INSERT INTO ingestion_runs
               (tenant_id, doc_id, run_type, status, source_uri, raw_path, content_hash, size_bytes, config)
           VALUES (%s, %s, %s, 'queued', %s, %s, %s, %s, %s)
           RETURNING file_id""",
        (tenant_id, doc_id, run_type, source_uri, raw_path, content_hash, size_bytes, Jsonb(config)),
    ).fetchone()
    return row["file_id"]


def claim(conn: psycopg.Connection, worker: Worker, partition_key: str, *, replay_finished: bool,
          replay_failed: bool = False) -> list[dict]:
    return ledger.claim(conn, DOCUMENT_FILES, worker, partition_key=partition_key, replay_finished=replay_finished,
                        replay_failed=replay_failed)


def held_rows(conn: psycopg.Connection, partition_key: str, owner: str) -> list[dict]:
    """Rows of the partition this owner is still working on."""
    return conn.execute(
        """SELECT * FROM ingestion_runs WHERE partition_key = %s AND status = 'running' AND owner = %s
            ORDER BY file_id""",
        (partition_key, owner),
    ).fetchall()


def partition_rows(conn: psycopg.Connection, partition_key: str) -> list[dict]:
    return conn.execute(
        "SELECT * FROM ingestion_runs WHERE partition_key = %s ORDER BY file_id", (partition_key,)
    ).fetchall()


def hold(conn: psycopg.Connection, file_id: int, owner: str) -> dict:
    return ledger.hold(conn, DOCUMENT_FILES, file_id, owner)


def hold_many(conn: psycopg.Connection, file_ids: list[int], owner: str) -> dict[int, str]:
    """Hold (and touch) the files ``owner`` still works on; the others, with why they are not held."""
    return ledger.hold_many(conn, DOCUMENT_FILES, file_ids, owner)


def heartbeat(conn: psycopg.Connection, file_id: int, owner: str, stats: dict[str, Any] | None = None) -> dict:
    return ledger.heartbeat(conn, DOCUMENT_FILES, file_id, owner, stats)


def heartbeat_many(conn: psycopg.Connection, stats_by_file: dict[int, dict[str, Any]], owner: str) -> dict[int, str]:
    """Merge each held file's ``stats`` (one statement); the files not held, with why."""
    return ledger.heartbeat_many(conn, DOCUMENT_FILES, stats_by_file, owner)


def record_fetched_object(conn: psycopg.Connection, file_id: int, owner: str, *, raw_path: str, sha256: str,
                          size: int) -> dict:
    """Where an S3 object's bytes were stored, and their hash and size (known only after download)."""
    hold(conn, file_id, owner)
    return conn.execute(
        """UPDATE ingestion_runs
              SET raw_path = %s, content_hash = %s, size_bytes = %s, updated_at = now(),
                  config = config || jsonb_build_object('sha256', %s::text, 'size_bytes', %s::bigint)
            WHERE file_id = %s RETURNING *""",
        (raw_path, sha256, size, sha256, size, file_id),
    ).fetchone()


def mark_succeeded(conn: psycopg.Connection, file_id: int, owner: str, stats: dict[str, Any]) -> dict:
    row = ledger.finish(conn, DOCUMENT_FILES, file_id, owner, stats=stats)
    report(conn, [row])
    return row


def mark_failed(conn: psycopg.Connection, file_id: int, owner: str, failure: FailureInfo,
                policy: ReliabilitySettings) -> dict:
    """A held file failed: failed, retried later, or dead-lettered (``LeaseLost`` if no longer held)."""
    row = ledger.fail(conn, DOCUMENT_FILES, file_id, owner, failure, policy)
    report(conn, [row])
    return row


def retry(conn: psycopg.Connection, file_id: int, *, tenant_id: str, actor: str) -> tuple[dict, bool] | None:
    """Replay one of the tenant's failed, dead-lettered or canceled files as a new attempt (what
    ``ingestion-pipeline retry`` does): the file and whether it was replayed (a file in another state is left as it
    is); None when the tenant has no such file."""
    row = get_file(conn, file_id, tenant_id=tenant_id)
    if row is None:
        return None
    requeued = ledger.requeue(conn, DOCUMENT_FILES, [file_id], actor=actor)
    report(conn, requeued)
    return (requeued[0], True) if requeued else (row, False)


def report(conn: psycopg.Connection, rows: Iterable[dict]) -> None:
    """After transitions: the S3 objects the files came from follow, and each row logs one JSON line."""
    rows = list(rows)
    by_status: dict[str, list[int]] = {}
    for row in rows:
        object_status = {FAILED: "failed", DEAD_LETTER: "failed", CANCELED: "failed", QUEUED: "queued"}.get(
            row["status"])
        if object_status and row.get("source_id") is not None:
            by_status.setdefault(object_status, []).append(row["file_id"])
    for status, file_ids in by_status.items():
        conn.execute(
            "UPDATE source_objects SET status = %s, updated_at = now() WHERE last_file_id = ANY(%s)",
            (status, file_ids),
        )
    for row in rows:
        if row["status"] != RUNNING:
            log_finished(row)


def log_finished(row: dict | None) -> None:
    if row is None:
        return
    stats = row.get("stats") or {}
    _log.info(
        json.dumps(
            {
                "event": "file_retry_scheduled" if row["status"] == QUEUED else "file_finished",
                "file_id": row["file_id"],
                "run_id": row["file_id"],  # the old name of file_id (deprecated)
                "tenant_id": row["tenant_id"],
                "doc_id": row["doc_id"],
                "source_uri": row["source_uri"],
                "filename": (row.get("config") or {}).get("filename"),
                "status": row["status"],
                "error_code": row.get("error_code"),
                "error": row["error"],
                "attempts": row.get("attempts"),
                "next_attempt_at": row.get("next_attempt_at") if row["status"] == QUEUED else None,
                "partition_key": row["partition_key"],
                "dagster_run_id": row["dagster_run_id"],
                "chunks": stats.get("chunks"),
                "tokens": stats.get("tokens"),
                "timings_ms": stats.get("timings_ms"),
            },
            default=str,
        )
    )


_FILES_WHERE = """(%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
              AND (%(status)s::text IS NULL OR status = %(status)s)
              AND (%(since)s::float8 IS NULL OR updated_at >= now() - make_interval(secs => %(since)s))"""


def list_files(
    conn: psycopg.Connection, *, tenant_id: str | None, status: str | None = None, limit: int = 100,
    offset: int = 0, since_seconds: float | None = None,
) -> list[dict]:
    """Newest first; ``tenant_id=None`` (operator tools only) lists every tenant."""
    return conn.execute(
        f"""SELECT file_id, tenant_id, doc_id, run_type, status, source_uri, config, stats, error_code, error,
                   suggestion, attempts, partition_key, dagster_run_id, created_at, started_at, updated_at,
                   finished_at, next_attempt_at
              FROM ingestion_runs WHERE {_FILES_WHERE}
             ORDER BY file_id DESC LIMIT %(limit)s OFFSET %(offset)s""",
        {"tenant": tenant_id, "status": status, "limit": limit, "offset": offset, "since": since_seconds},
    ).fetchall()


def count_files(conn: psycopg.Connection, *, tenant_id: str | None, status: str | None = None) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM ingestion_runs WHERE {_FILES_WHERE}",
                        {"tenant": tenant_id, "status": status, "since": None}).fetchone()["n"]


def get_file(conn: psycopg.Connection, file_id: int, *, tenant_id: str | None) -> dict | None:
    """One ledger row; ``tenant_id=None`` (operator tools only) finds it in any tenant."""
    return conn.execute(
        "SELECT * FROM ingestion_runs WHERE file_id = %s AND (%s::text IS NULL OR tenant_id = %s)",
        (file_id, tenant_id, tenant_id),
    ).fetchone()
