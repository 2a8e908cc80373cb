"""``queue_jobs``: one row per job a queue intake accepted or refused, and the ledger state it follows.

The row is written in the transaction that writes the job's ledger row (``record_accepted``), so "this job
is in the ledger" and "this job was accepted" are one fact: a redelivered job finds its row and is only
acknowledged. A job refused at intake gets a finished row (``record_refused``). ``unreported`` reads every
job whose final status has not yet been written back to its queue, with its file's ledger state.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.queues.job_errors import SUGGESTIONS

QUEUED, PROCESSING, DONE, FAILED = "queued", "processing", "done", "failed"
# the ledger's file status -> the job's status
_FROM_FILE_STATUS = {"queued": QUEUED, "running": PROCESSING, "succeeded": DONE, "failed": FAILED,
                     "dead_letter": FAILED, "canceled": FAILED}


def find(conn: psycopg.Connection, job_id: str) -> dict | None:
    return conn.execute("SELECT * FROM queue_jobs WHERE job_id = %s", (job_id,)).fetchone()


def record_accepted(conn: psycopg.Connection, *, job_id: str, intake: str, tenant_id: str, filename: str,
                    message: dict[str, Any], file_id: int | None, status: str, rag_id: str | None = None,
                    source_path: str | None = None, outcome: dict[str, Any] | None = None) -> None:
    """In the caller's transaction (the one writing the ledger row). ``status`` is ``queued`` for a file in the
    ledger, ``done`` for identical content that is already the active version."""
    conn.execute(
        """INSERT INTO queue_jobs (job_id, intake, rag_id, tenant_id, file_id, source_path, filename, message,
                                   status, outcome, finished_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, CASE WHEN %s IN ('done', 'failed') THEN now() END)""",
        (job_id, intake, rag_id, tenant_id, file_id, source_path, filename, Jsonb(message), status,
         Jsonb(outcome or {}), status),
    )


def record_refused(conn: psycopg.Connection, *, job_id: str, intake: str, tenant_id: str, filename: str,
                   message: dict[str, Any], code: str, error: str, rag_id: str | None = None,
                   source_path: str | None = None) -> bool:
    """A job that failed at intake with the ``ERR_*`` ``code`` (its suggestions come with it); False if the
    job already has a row (a redelivery)."""
    outcome = {"error": error, "error_code": code, "suggestions": list(SUGGESTIONS.get(code, ()))}
    row = conn.execute(
        """INSERT INTO queue_jobs (job_id, intake, rag_id, tenant_id, source_path, filename, message, status,
                                   outcome, finished_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, 'failed', %s, now())
           ON CONFLICT (job_id) DO NOTHING RETURNING job_id""",
        (job_id, intake, rag_id, tenant_id, source_path, filename, Jsonb(message), Jsonb(outcome)),
    ).fetchone()
    return row is not None


def unreported(conn: psycopg.Connection, intake: str, limit: int = 1000) -> list[dict]:
    """Jobs whose final status is not yet written to their queue, oldest first, each with its file's
    ledger state (``file_status`` …; NULL for a job without a file) and the job status that state means."""
    rows = conn.execute(
        """SELECT j.*, r.status AS file_status, r.attempts, r.error AS file_error, r.error_code AS file_error_code,
                  r.suggestion AS file_suggestion, r.stats AS file_stats, r.started_at AS file_started_at,
                  r.finished_at AS file_finished_at
             FROM queue_jobs j LEFT JOIN ingestion_runs r ON r.run_id = j.file_id
            WHERE j.reported_at IS NULL AND j.intake = %s
            ORDER BY j.accepted_at LIMIT %s""",
        (intake, limit),
    ).fetchall()
    for row in rows:
        row["now_status"] = _FROM_FILE_STATUS[row["file_status"]] if row["file_status"] else row["status"]
    return rows


def advance(conn: psycopg.Connection, job_id: str, status: str, *, reported: bool) -> None:
    """Record the status last written to the queue; ``reported``: the job's final status is written."""
    conn.execute(
        """UPDATE queue_jobs SET status = %s,
                  finished_at = CASE WHEN %s IN ('done', 'failed') THEN coalesce(finished_at, now()) END,
                  reported_at = CASE WHEN %s THEN now() END
            WHERE job_id = %s""",
        (status, status, reported, job_id),
    )


def counts(conn: psycopg.Connection, intake: str) -> dict[str, int]:
    rows = conn.execute("SELECT status, count(*) AS n FROM queue_jobs WHERE intake = %s GROUP BY status",
                        (intake,)).fetchall()
    return {r["status"]: r["n"] for r in rows}


def follow_ledger(conn: psycopg.Connection, intake: str) -> int:
    """Move the jobs of an intake without a status hash (SQS) along with their files' ledger states, in one
    statement; a finished job is reported. How many jobs changed."""
    moved = conn.execute(
        """UPDATE queue_jobs j
              SET status = CASE r.status WHEN 'queued' THEN 'queued' WHEN 'running' THEN 'processing'
                                         WHEN 'succeeded' THEN 'done' ELSE 'failed' END,
                  finished_at = CASE WHEN r.status IN ('succeeded', 'failed', 'dead_letter', 'canceled')
                                     THEN coalesce(j.finished_at, now()) END,
                  reported_at = CASE WHEN r.status IN ('succeeded', 'failed', 'dead_letter', 'canceled') THEN now() END
             FROM ingestion_runs r
            WHERE r.run_id = j.file_id AND j.intake = %s AND j.reported_at IS NULL""",
        (intake,),
    ).rowcount
    return moved + conn.execute(
        """UPDATE queue_jobs SET reported_at = now()
            WHERE intake = %s AND file_id IS NULL AND reported_at IS NULL AND status IN ('done', 'failed')""",
        (intake,),
    ).rowcount


def list_jobs(conn: psycopg.Connection, *, intake: str | None = None, status: str | None = None,
              job_id: str | None = None, limit: int = 100) -> list[dict]:
    """Jobs newest first, each with its file's ledger status and error (`queue jobs`): the view of an SQS job,
    which has no status hash, and of a Redis job after its hash expired."""
    return conn.execute(
        """SELECT j.job_id, j.intake, j.tenant_id, j.filename, j.status, j.file_id, r.status AS file_status,
                  coalesce(j.outcome->>'error_code', r.error_code) AS error_code,
                  coalesce(j.outcome->>'error', r.error) AS error, j.accepted_at, j.finished_at
             FROM queue_jobs j LEFT JOIN ingestion_runs r ON r.run_id = j.file_id
            WHERE (%(intake)s::text IS NULL OR j.intake = %(intake)s)
              AND (%(status)s::text IS NULL OR j.status = %(status)s)
              AND (%(job)s::text IS NULL OR j.job_id = %(job)s)
            ORDER BY j.accepted_at DESC, j.job_id LIMIT %(limit)s""",
        {"intake": intake, "status": status, "job": job_id, "limit": limit},
    ).fetchall()
