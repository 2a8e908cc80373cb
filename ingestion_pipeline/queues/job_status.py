"""The status hash ``rag:ingest:job:<job_id>``: written by the producer (``submitted``), the consumer
(``queued`` or ``failed`` at intake) and ``sync_statuses``, which follows each job's file through the ledger
(``processing`` while a run holds it, then ``done`` or ``failed``) - read from the ledger, never guessed.

A finished job's hash expires 7 days after completion; its file is moved (``job_files``) before the job is
marked reported, so a crash in between only repeats the move's check.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.queues import job_files, job_records, redis_keys
from ingestion_pipeline.queues.job_errors import NON_RECOVERABLE, RECOVERABLE, SUGGESTIONS, err_code
from ingestion_pipeline.queues.job_messages import JobMessage, utc_timestamp

FIELDS = ("job_id", "rag_id", "filename", "status", "submitted_at", "started_at", "completed_at", "failed_at",
          "duration_seconds", "chunks_created", "embeddings_generated", "tokens_used", "error", "error_type",
          "error_code", "retry_count", "max_retries", "suggestions")


def field_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return utc_timestamp(value)
    if isinstance(value, list | tuple):
        return json.dumps(list(value))
    return str(value)


def write(redis, job_id: str, values: dict[str, Any], *, final: bool = False) -> None:
    """Set fields of the job's hash; a final status starts its 7-day expiry."""
    key = redis_keys.status(job_id)
    pipe = redis.pipeline(transaction=True)
    pipe.hset(key, mapping={name: field_text(v) for name, v in values.items()})
    if final:
        pipe.expire(key, redis_keys.STATUS_TTL_SECONDS)
    else:  # a replayed job that had failed is alive again
        pipe.persist(key)
    pipe.execute()


def initial(job: JobMessage, status: str) -> dict[str, Any]:
    """Every field of a new hash (those not known yet empty)."""
    return {**dict.fromkeys(FIELDS), "job_id": job.job_id, "rag_id": job.rag_id, "filename": job.filename,
            "status": status, "submitted_at": job.submitted_at, "retry_count": job.retry_count,
            "max_retries": job.max_retries}


def read(redis, job_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in redis.hgetall(redis_keys.status(job_id)).items()}


def _values(row: dict) -> dict[str, Any]:
    """The hash fields the job's ledger state gives."""
    status = row["now_status"]
    message = row["message"]
    attempts = row["attempts"] or 0
    # retries begun or scheduled: a queued file with attempts behind it waits out the backoff of its next one
    retries = attempts if row["file_status"] == "queued" else max(attempts - 1, 0)
    values: dict[str, Any] = {"status": status, "retry_count": message.get("retry_count", 0) + retries}
    if row["file_started_at"] is not None:
        values["started_at"] = row["file_started_at"]
    if row["file_status"] == "queued" and attempts and row["file_error_code"]:  # the last attempt's error
        values.update(error=f"{row['file_error_code']}: {row['file_error']}",
                      error_code=err_code(row["file_error_code"]), error_type=RECOVERABLE)
    if status == job_records.DONE:
        stats = row["file_stats"] or {}
        finished = row["file_finished_at"] or row["finished_at"]
        values.update(error=None, error_code=None, error_type=None, suggestions=None)  # a retry's error is over
        values.update(completed_at=finished, chunks_created=stats.get("chunks", 0),
                      embeddings_generated=stats.get("chunks", 0), tokens_used=stats.get("tokens", 0))
        if row["file_started_at"] is not None and finished is not None:
            values["duration_seconds"] = round((finished - row["file_started_at"]).total_seconds(), 3)
    elif status == job_records.FAILED:
        outcome = row["outcome"] or {}
        if row["file_id"] is None:  # refused at intake
            code, error, suggestions, kind = (outcome.get("error_code"), outcome.get("error"),
                                              outcome.get("suggestions", []), NON_RECOVERABLE)
        else:
            code = err_code(row["file_error_code"])
            error = f"{row['file_error_code']}: {row['file_error']}" if row["file_error_code"] else row["file_error"]
            suggestions = [*SUGGESTIONS.get(code, ()), *([row["file_suggestion"]] if row["file_suggestion"] else [])]
            kind = RECOVERABLE if row["file_status"] == "dead_letter" else NON_RECOVERABLE
        values.update(failed_at=row["file_finished_at"] or row["finished_at"], error=error, error_code=code,
                      error_type=kind, suggestions=suggestions)
    return values


def sync_statuses(db: Database, redis, *, limit: int = 1000) -> dict[str, int]:
    """Write every unreported job's status as its file's ledger state says; settle finished jobs' files.
    Returns how many jobs moved to each status."""
    moved: dict[str, int] = {}
    with db.connection() as conn:
        rows = job_records.unreported(conn, "redis", limit)
    for row in rows:
        status = row["now_status"]
        final = status in (job_records.DONE, job_records.FAILED)
        if status == row["status"] and not final:
            continue
        values = _values(row)
        if final:
            failure = None
            if status == job_records.FAILED:
                failure = {"job_id": row["job_id"], "rag_id": row["rag_id"], "filename": row["filename"],
                           "source_path": row["source_path"], "file_id": row["file_id"],
                           **{k: field_text(values.get(k)) for k in ("error", "error_code", "error_type", "failed_at")},
                           "suggestions": values.get("suggestions", []), "retry_count": values["retry_count"]}
            moved_to = job_files.settle(row["source_path"], status, row["job_id"], failure)
            if moved_to is not None:
                values["moved_to"] = str(moved_to)
        write(redis, row["job_id"], values, final=final)
        with db.transaction() as conn:
            job_records.advance(conn, row["job_id"], status, reported=final)
        moved[status] = moved.get(status, 0) + 1
    return moved
