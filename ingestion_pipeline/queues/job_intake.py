"""Accepting one Redis job: its rag, its file, and its ledger row, or the reason it is refused.

- Unknown ``rag_id`` or a path outside the rag's root: *refused* (dead-lettered with the reason; nothing is
  recorded, so the job can be replayed once the configuration is fixed).
- A file that is missing, of an unsupported type or too large: *failed* at once (non-recoverable; a
  finished ``queue_jobs`` row).
- Otherwise the file is submitted like an upload (stored with its SHA-256; queued, a duplicate of work in
  flight, or already the active version) and its ``queue_jobs`` row is written in the same transaction.
- A job whose row already exists was accepted before (a redelivery): nothing is submitted again.

Errors of the database, the disk or memory propagate: the consumer retries the job with backoff.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.intake import DUPLICATE, QUEUED, REJECTED, SKIPPED, SubmitResult, submit_upload
from ingestion_pipeline.queues import job_records
from ingestion_pipeline.queues.job_errors import JobError, job_error
from ingestion_pipeline.queues.job_messages import JobMessage
from ingestion_pipeline.queues.rag_registry import PathRefused, get_rag, resolve_under_root

ACCEPTED, ALREADY, FAILED, REFUSED = "accepted", "already accepted", "failed", "refused"
SOURCE_TYPES = tuple(sorted(ext.lstrip(".") for ext in DOCUMENT_TYPES))


@dataclass
class Intake:
    """What became of one job: ``accepted`` (in the ledger: ``job_status`` queued, or done when its content
    is already active), ``already accepted``, ``failed`` (non-recoverable, recorded) or ``refused``
    (dead-lettered, not recorded)."""

    outcome: str
    job_status: str | None = None
    file_id: int | None = None
    tenant_id: str | None = None
    error: JobError | None = None
    details: dict = field(default_factory=dict)


def accept_job(db: Database, store: UploadStore, job: JobMessage, *, fingerprint: str,
               max_bytes: int) -> Intake:
    with db.connection() as conn:
        existing = job_records.find(conn, job.job_id)
        rag = get_rag(conn, job.rag_id) if existing is None else None
    if existing is not None:
        return Intake(ALREADY, existing["status"], existing["file_id"], existing["tenant_id"])
    if rag is None:
        return Intake(REFUSED, error=job_error("ERR_UNKNOWN_RAG", f"unknown rag_id {job.rag_id!r}"))
    try:
        real = resolve_under_root(rag, job.source_path)
    except PathRefused as exc:
        return Intake(REFUSED, tenant_id=rag.tenant_id, error=job_error("ERR_PATH_REFUSED", str(exc)))

    def failed(code: str, message: str) -> Intake:
        with db.transaction() as conn:
            recorded = job_records.record_refused(
                conn, job_id=job.job_id, intake="redis", tenant_id=rag.tenant_id, filename=job.filename,
                message=asdict(job), code=code, error=message, rag_id=job.rag_id, source_path=str(real))
        return Intake(FAILED if recorded else ALREADY, "failed", tenant_id=rag.tenant_id,
                      error=job_error(code, message))

    if not real.exists():
        return failed("ERR_FILE_NOT_FOUND", f"{job.source_path} does not exist")
    if not real.is_file():
        return failed("ERR_FILE_NOT_FOUND", f"{job.source_path} is not a regular file")
    extension = real.suffix.lower().lstrip(".")
    if job.source_type.lower() not in SOURCE_TYPES:
        return failed("ERR_UNSUPPORTED_TYPE", f"source_type {job.source_type!r} is not supported (supported: "
                                              f"{', '.join(SOURCE_TYPES)})")
    if extension != job.source_type.lower():
        return failed("ERR_UNSUPPORTED_TYPE", f"source_type {job.source_type!r} but the file is {real.name!r}")

    def record(conn: psycopg.Connection, result: SubmitResult) -> None:
        status = job_records.DONE if result.status == SKIPPED else job_records.QUEUED
        if result.status in (QUEUED, DUPLICATE, SKIPPED):
            job_records.record_accepted(
                conn, job_id=job.job_id, intake="redis", tenant_id=rag.tenant_id, filename=job.filename,
                message=asdict(job), file_id=result.run_id, status=status, rag_id=job.rag_id,
                source_path=str(real), outcome={"submit": result.status, "doc_id": result.doc_id,
                                                **({"note": result.reason} if result.reason else {})})

    try:
        result = submit_upload(db, store, tenant_id=rag.tenant_id, path=real, fingerprint=fingerprint,
                               max_bytes=max_bytes, title=Path(job.filename).stem, follow_symlinks=False,
                               in_same_transaction=record)
    except psycopg.errors.UniqueViolation:  # another consumer accepted the same job a moment earlier
        with db.connection() as conn:
            existing = job_records.find(conn, job.job_id)
        return Intake(ALREADY, existing["status"] if existing else None, tenant_id=rag.tenant_id)
    if result.status == REJECTED:
        reason = result.reason or "rejected"
        code = "ERR_FILE_TOO_LARGE" if "limit" in reason else "ERR_FILE_NOT_FOUND"
        return failed(code, f"{job.source_path}: {reason}")
    status = job_records.DONE if result.status == SKIPPED else job_records.QUEUED
    return Intake(ACCEPTED, status, result.run_id, rag.tenant_id,
                  details={"submit": result.status, "doc_id": result.doc_id})
