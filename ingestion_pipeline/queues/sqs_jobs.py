"""Job messages on SQS: the internal job payload, naming bytes already in S3 (no file bytes in the message).

``{"tenant", "upload_uri": "s3://bucket/key", "content_hash": "<sha256 hex>", "filename"}`` and optionally
``job_id`` (default: the SQS message id), ``doc`` (a stable document key: a later job with the same key is
a new version of that document) and ``title``. The object is streamed into the upload store and hashed on
the way; bytes that do not match ``content_hash`` fail the job (``ERR_CHECKSUM``). The job's
``queue_jobs`` row is written in the transaction that writes its ledger row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType
from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.documents.intake import SKIPPED, SubmitResult, check_document_name, keyed_uri, submit_stored
from ingestion_pipeline.queues import job_records
from ingestion_pipeline.queues.job_messages import MalformedJob
from ingestion_pipeline.sources.registry import parse_s3_uri

_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class SqsJob:
    job_id: str
    tenant: str
    bucket: str
    key: str
    content_hash: str
    filename: str
    doc: str | None = None
    title: str | None = None


def is_job_payload(body: dict) -> bool:
    return "upload_uri" in body or "content_hash" in body


def parse_sqs_job(body: dict, message_id: str) -> SqsJob:
    def text(name: str, required: bool = True) -> str | None:
        value = body.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value:
            raise MalformedJob(f"field {name!r} must be a non-empty string")
        return value

    try:
        tenant = validate_tenant_id(text("tenant"))
        bucket, key = parse_s3_uri(text("upload_uri"))
        doc = text("doc", required=False)
        if doc is not None:
            keyed_uri(tenant, doc)
    except ValueError as exc:
        raise MalformedJob(str(exc)) from None
    content_hash = text("content_hash").lower()
    if not _SHA256.fullmatch(content_hash):
        raise MalformedJob("content_hash must be 64 hex digits (SHA-256)")
    filename = text("filename")
    if "/" in filename:
        raise MalformedJob(f"filename must not contain '/': {filename!r}")
    return SqsJob(text("job_id", required=False) or f"sqs-{message_id}", tenant, bucket, key, content_hash, filename,
                  doc, text("title", required=False))


def accept_sqs_job(db: Database, store: UploadStore, job: SqsJob, s3_client: Any, *, fingerprint: str,
                   max_bytes: int, message: dict) -> str:
    """``accepted``, ``already accepted`` or ``failed`` (recorded; the message can be deleted). Errors of S3,
    the database or the disk propagate: the message is received again later."""
    from botocore.exceptions import ClientError

    with db.connection() as conn:
        if job_records.find(conn, job.job_id) is not None:
            return "already accepted"

    def failed(code: str, text: str) -> str:
        with db.transaction() as conn:
            job_records.record_refused(conn, job_id=job.job_id, intake="sqs", tenant_id=job.tenant,
                                       filename=job.filename, message=message, code=code, error=text)
        return "failed"

    try:
        check_document_name(job.filename)
    except UnsupportedFileType as exc:
        return failed("ERR_UNSUPPORTED_TYPE", str(exc))
    try:
        body = s3_client.get_object(Bucket=job.bucket, Key=job.key)["Body"]
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NoSuchBucket"):
            return failed("ERR_FILE_NOT_FOUND", f"s3://{job.bucket}/{job.key} does not exist")
        raise
    try:
        stored = store.put(job.tenant, body, max_bytes=max_bytes)
    except SizeLimitExceeded as exc:
        return failed("ERR_FILE_TOO_LARGE", str(exc))
    finally:
        body.close()
    if stored.sha256 != job.content_hash:
        if stored.created:
            store.release(stored.path)
        return failed("ERR_CHECKSUM", f"s3://{job.bucket}/{job.key} has SHA-256 {stored.sha256}, the job says "
                                      f"{job.content_hash}")

    def record(conn: psycopg.Connection, result: SubmitResult) -> None:
        job_records.record_accepted(
            conn, job_id=job.job_id, intake="sqs", tenant_id=job.tenant, filename=job.filename, message=message,
            file_id=result.run_id, status=job_records.DONE if result.status == SKIPPED else job_records.QUEUED,
            outcome={"submit": result.status, "doc_id": result.doc_id})

    try:
        submit_stored(db, store, stored, tenant_id=job.tenant, filename=job.filename, fingerprint=fingerprint,
                      title=job.title, key=job.doc, in_same_transaction=record)
    except psycopg.errors.UniqueViolation:  # another consumer accepted the same job a moment earlier
        return "already accepted"
    return "accepted"
