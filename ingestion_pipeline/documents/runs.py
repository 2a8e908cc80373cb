"""The document ledger (``ingestion_runs``): one row per file per submission.

The transitions are the shared mechanism of ``core.ledger`` (queued -> running -> succeeded | failed);
this module adds what is particular to documents: creating a row for a file, reading a batch's rows,
mirroring a failure onto the S3 object it came from, and one JSON log line per finished file.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.ledger import DOCUMENT_RUNS

QUEUED, RUNNING, SUCCEEDED, FAILED = "queued", "running", "succeeded", "failed"
_log = logging.getLogger("ingestion_pipeline.ledger")


def create_queued_run(
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
           RETURNING run_id""",
        (tenant_id, doc_id, run_type, source_uri, raw_path, content_hash, size_bytes, Jsonb(config)),
    ).fetchone()
    return row["run_id"]


def claim_partition(conn: psycopg.Connection, partition_key: str, dagster_run_id: str) -> list[dict]:
    """Mark the partition's unfinished rows running under this Dagster run; return every row of it.

    Succeeded rows are returned too (untouched): re-materialising a batch skips them.
    """
    ledger.claim(conn, DOCUMENT_RUNS, partition_key=partition_key, dagster_run_id=dagster_run_id)
    return partition_rows(conn, partition_key)


def active_rows(conn: psycopg.Connection, partition_key: str, dagster_run_id: str) -> list[dict]:
    """Rows of the partition this run is still working on (not failed, not finished)."""
    return conn.execute(
        """SELECT * FROM ingestion_runs
            WHERE partition_key = %s AND status = 'running' AND dagster_run_id = %s ORDER BY run_id""",
        (partition_key, dagster_run_id),
    ).fetchall()


def partition_rows(conn: psycopg.Connection, partition_key: str) -> list[dict]:
    return conn.execute(
        "SELECT * FROM ingestion_runs WHERE partition_key = %s ORDER BY run_id", (partition_key,)
    ).fetchall()


def heartbeat(conn: psycopg.Connection, run_id: int, stats: dict[str, Any] | None = None) -> None:
    ledger.heartbeat(conn, DOCUMENT_RUNS, run_id, stats)


def mark_succeeded(conn: psycopg.Connection, run_id: int, stats: dict[str, Any]) -> dict:
    row = ledger.finish(conn, DOCUMENT_RUNS, run_id, stats=stats)
    log_finished(row)
    return row


def mark_failed(
    conn: psycopg.Connection, run_id: int, error: str, stats: dict[str, Any] | None = None,
    *, dagster_run_id: str | None = None,
) -> dict | None:
    """Fail a row; with ``dagster_run_id``, only while that run still owns it (never a finished row)."""
    row = ledger.fail(conn, DOCUMENT_RUNS, run_id, error, stats, only_working_under=dagster_run_id)
    if row is not None:
        _mirror_failure_to_source_objects(conn, [row["run_id"]])
    log_finished(row)
    return row


def fail_unfinished_rows(conn: psycopg.Connection, dagster_run_id: str, partition_key: str | None,
                         reason: str) -> list[int]:
    """Run-status path: the Dagster run died; its rows still running, and its batch's rows still queued, fail."""
    rows = ledger.fail_unfinished(conn, DOCUMENT_RUNS, dagster_run_id=dagster_run_id, partition_key=partition_key,
                                  reason=reason)
    _mirror_failure_to_source_objects(conn, [r["run_id"] for r in rows])
    for row in rows:
        log_finished(row)
    return [r["run_id"] for r in rows]


def _mirror_failure_to_source_objects(conn: psycopg.Connection, run_ids: list[int]) -> None:
    """An S3 object whose latest run failed shows as failed in source_objects too."""
    if run_ids:
        conn.execute(
            "UPDATE source_objects SET status = 'failed', updated_at = now() WHERE last_run_id = ANY(%s)",
            (run_ids,),
        )


def log_finished(row: dict | None) -> None:
    if row is None:
        return
    stats = row.get("stats") or {}
    _log.info(
        json.dumps(
            {
                "event": "file_finished",
                "run_id": row["run_id"],
                "tenant_id": row["tenant_id"],
                "doc_id": row["doc_id"],
                "source_uri": row["source_uri"],
                "filename": (row.get("config") or {}).get("filename"),
                "status": row["status"],
                "error": row["error"],
                "partition_key": row["partition_key"],
                "dagster_run_id": row["dagster_run_id"],
                "chunks": stats.get("chunks"),
                "tokens": stats.get("tokens"),
                "timings_ms": stats.get("timings_ms"),
            },
            default=str,
        )
    )


def list_runs(
    conn: psycopg.Connection, *, tenant_id: str | None = None, status: str | None = None, limit: int = 100
) -> list[dict]:
    return conn.execute(
        """SELECT run_id, tenant_id, doc_id, run_type, status, source_uri, config, stats, error, attempts,
                  partition_key, dagster_run_id, created_at, started_at, updated_at, finished_at
             FROM ingestion_runs
            WHERE (%(tenant)s::text IS NULL OR tenant_id = %(tenant)s)
              AND (%(status)s::text IS NULL OR status = %(status)s)
            ORDER BY run_id DESC
            LIMIT %(limit)s""",
        {"tenant": tenant_id, "status": status, "limit": limit},
    ).fetchall()


def get_run(conn: psycopg.Connection, run_id: int) -> dict | None:
    return conn.execute("SELECT * FROM ingestion_runs WHERE run_id = %s", (run_id,)).fetchone()

