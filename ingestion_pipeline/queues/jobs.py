"""A job, whatever queue it came by: its message, its error codes, its record, its intake.

**The Redis job message**: JSON with ``job_id`` (``rag-<rag_id>-<unix seconds>-<8 hex>``), ``rag_id``,
``source_path`` (absolute), ``source_type``, ``filename``, ``submitted_at`` (ISO 8601 UTC), and optionally
``submitted_by`` (cli | api | scheduled), ``options`` {reindex, skip_validation, preserve_metadata},
``retry_count`` and ``max_retries``. Anything that is not such a message raises ``MalformedJob`` with what is
wrong; the consumer dead-letters it with that reason and goes on.

**Error codes** (``ERR_*``), mapped from the pipeline's own failure codes, with suggestions. A job's status
hash carries ``error_code`` (``ERR_PDF_INVALID`` …), ``error_type`` (``recoverable`` or ``non_recoverable``)
and ``suggestions`` (a JSON list). The pipeline's code stays in ``error`` so nothing is lost in the mapping.

**Records** (``queue_jobs``): one row per job a queue intake accepted or refused, and the ledger state it
follows. The row is written in the transaction that writes the job's ledger row (``record_accepted``), so
"this job is in the ledger" and "this job was accepted" are one fact: a redelivered job finds its row and is
only acknowledged. A job refused at intake gets a finished row (``record_refused``). ``unreported`` reads
every job whose final status has not yet been written back to its queue, with its file's ledger state.

**Accepting one Redis job** (``accept_job``): its rag, its file, and its ledger row, or the reason it is
refused.

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

import errno
import json
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failures import classify
from ingestion_pipeline.core.file_types import MAX_NAME_BYTES, BadFileName, check_file_name
from ingestion_pipeline.core.upload_store import UploadStore
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.intake import DUPLICATE, REJECTED, SKIPPED, SubmitResult, submit_upload
from ingestion_pipeline.documents.intake import QUEUED as SUBMITTED_QUEUED
from ingestion_pipeline.queues.rag_registry import (
    RAG_ID_PATTERN,
    PathRefused,
    get_rag,
    resolve_under_root,
    validate_rag_id,
)

# -- the job message ---------------------------------------------------------------------------------------------------
_JOB_ID = re.compile(rf"rag-(?P<rag_id>{RAG_ID_PATTERN})-(?P<seconds>[0-9]{{1,12}})-(?P<hex>[0-9a-f]{{8}})")
SUBMITTERS = ("cli", "api", "scheduled")
DEFAULT_OPTIONS = {"reindex": False, "skip_validation": False, "preserve_metadata": True}
DEFAULT_MAX_RETRIES = 3
MAX_MESSAGE_BYTES = 64 * 1024  # a job names a file; it does not carry one
MAX_MESSAGE_DEPTH = 8  # a job is an object holding one object (its options)
MAX_PATH_BYTES = 4096  # Linux's PATH_MAX


class MalformedJob(ValueError):
    """The message is not a job of the contract; the reason says which field is wrong and how."""


@dataclass(frozen=True)
class JobMessage:
    job_id: str
    rag_id: str
    source_path: str
    source_type: str
    filename: str
    submitted_at: str
    submitted_by: str = "cli"
    options: dict[str, bool] = field(default_factory=lambda: dict(DEFAULT_OPTIONS))
    retry_count: int = 0
    max_retries: int = DEFAULT_MAX_RETRIES

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    def retried(self) -> JobMessage:
        """The same job, one retry later (what goes back on the queue after a recoverable error)."""
        return JobMessage(**{**asdict(self), "retry_count": self.retry_count + 1})


def new_job_id(rag_id: str, now: float | None = None) -> str:
    return f"rag-{validate_rag_id(rag_id)}-{int(now if now is not None else time.time())}-{secrets.token_hex(4)}"


def utc_timestamp(moment: datetime | None = None) -> str:
    """ISO 8601 UTC with fractional seconds, as the contract writes times: ``2026-11-29T06:01:02.345678Z``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_job(rag_id: str, path: str, *, submitted_by: str = "cli", max_retries: int = DEFAULT_MAX_RETRIES,
            options: dict[str, bool] | None = None) -> JobMessage:
    """A producer's job for the file at ``path`` (absolute)."""
    name = PurePosixPath(path).name
    return JobMessage(job_id=new_job_id(rag_id), rag_id=rag_id, source_path=path,
                      source_type=PurePosixPath(name).suffix.lower().lstrip("."), filename=name,
                      submitted_at=utc_timestamp(), submitted_by=submitted_by,
                      options={**DEFAULT_OPTIONS, **(options or {})}, max_retries=max_retries)


def _field(data: dict, name: str, kind: type, *, default: Any = None, required: bool = True) -> Any:
    if name not in data or data[name] is None:
        if required:
            raise MalformedJob(f"missing field {name!r}")
        return default
    value = data[name]
    # bool is an int in Python: a count given as true is as wrong as one given as "3"
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MalformedJob(f"field {name!r} must be a {kind.__name__}, not {type(value).__name__}")
    return require_text(name, value) if kind is str else value


def require_text(name: str, value: str) -> str:
    """``value`` if it is text: JSON's "\udc80" decodes to a lone surrogate that no status hash or database
    row can hold, and writing one would fail the round rather than the message."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedJob(f"field {name!r} holds a lone surrogate: not text") from None
    return value


def _depth(value: Any, limit: int) -> int:
    """How deeply ``value`` nests lists and objects, counted up to ``limit + 1`` (iteratively: a message
    must not be able to exhaust the stack of the code that checks it)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if deepest > limit:
                return deepest
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def load_message(raw: str | bytes, *, max_bytes: int = MAX_MESSAGE_BYTES, max_depth: int = MAX_MESSAGE_DEPTH) -> Any:
    """A queue message's JSON, bounded: its size, its nesting (``json`` recurses, so ``[[[…]]]`` thirty
    thousand deep raises ``RecursionError`` inside it) and its numbers (Python refuses integers of over 4,300
    digits). Anything else than a bounded JSON document is ``MalformedJob``, so that a hostile message is its
    own dead letter and never the error of the round that read it."""
    if len(raw) > max_bytes:
        raise MalformedJob(f"message of {len(raw):,} bytes, over the {max_bytes:,} byte limit")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise MalformedJob(f"JSON nested more than {max_depth} levels deep") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJob(f"not JSON: {str(exc)[:200]}") from None
    if _depth(data, max_depth) > max_depth:
        raise MalformedJob(f"JSON nested more than {max_depth} levels deep")
    return data


def parse_job(raw: str | bytes) -> JobMessage:
    """The job in ``raw``, or ``MalformedJob`` saying what is wrong with it."""
    data = load_message(raw)
    if not isinstance(data, dict):
        raise MalformedJob(f"a job is a JSON object, not {type(data).__name__}")
    job_id = _field(data, "job_id", str)
    rag_id = _field(data, "rag_id", str)
    match = _JOB_ID.fullmatch(job_id)
    if match is None:
        raise MalformedJob(f"bad job_id {job_id!r}: expected rag-<rag_id>-<unix seconds>-<8 hex digits>")
    if match["rag_id"] != rag_id:
        raise MalformedJob(f"job_id {job_id!r} names rag_id {match['rag_id']!r}, the message {rag_id!r}")
    source_path = _field(data, "source_path", str)
    if not source_path.startswith("/") or "\x00" in source_path:
        raise MalformedJob(f"source_path must be an absolute path, not {source_path[:200]!r}")
    if len(source_path.encode()) > MAX_PATH_BYTES or any(
            len(part.encode()) > MAX_NAME_BYTES for part in source_path.split("/")):
        raise MalformedJob(f"source_path {source_path[:100]!r}… is longer than a path may be ({MAX_PATH_BYTES} bytes, "
                           f"{MAX_NAME_BYTES} a component)")
    filename = _field(data, "filename", str)
    try:
        check_file_name(filename)
    except BadFileName as exc:
        raise MalformedJob(f"filename: {exc}") from None
    submitted_at = _field(data, "submitted_at", str)
    try:
        datetime.fromisoformat(submitted_at.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedJob(f"submitted_at must be an ISO 8601 time, not {submitted_at!r}") from None
    submitted_by = _field(data, "submitted_by", str, default="cli", required=False)
    if submitted_by not in SUBMITTERS:
        raise MalformedJob(f"submitted_by must be one of {', '.join(SUBMITTERS)}, not {submitted_by!r}")
    options = _field(data, "options", dict, default={}, required=False)
    for name, value in options.items():
        if name in DEFAULT_OPTIONS and not isinstance(value, bool):
            raise MalformedJob(f"option {name!r} must be true or false, not {value!r}")
    retry_count = _field(data, "retry_count", int, default=0, required=False)
    max_retries = _field(data, "max_retries", int, default=DEFAULT_MAX_RETRIES, required=False)
    if retry_count < 0 or not 0 <= max_retries <= 10:
        raise MalformedJob(f"retry_count must be 0 or more and max_retries 0-10 (got {retry_count}, {max_retries})")
    return JobMessage(job_id=job_id, rag_id=rag_id, source_path=source_path,
                      source_type=_field(data, "source_type", str), filename=filename, submitted_at=submitted_at,
                      submitted_by=submitted_by,
                      options={**DEFAULT_OPTIONS, **{k: v for k, v in options.items() if k in DEFAULT_OPTIONS}},
                      retry_count=retry_count, max_retries=max_retries)


# -- error codes -------------------------------------------------------------------------------------------------------
RECOVERABLE, NON_RECOVERABLE = "recoverable", "non_recoverable"


@dataclass(frozen=True)
class JobError:
    code: str  # ERR_*
    message: str
    recoverable: bool
    suggestions: tuple[str, ...] = ()

    @property
    def error_type(self) -> str:
        return RECOVERABLE if self.recoverable else NON_RECOVERABLE


# ERR code -> suggestions a person can act on
SUGGESTIONS: dict[str, tuple[str, ...]] = {
    "ERR_FILE_NOT_FOUND": ("check that source_path exists on the consumer's host and is readable",
                           "push the job again once the file is in place"),
    "ERR_UNSUPPORTED_TYPE": ("convert the file to a supported format (pdf, docx, html, md, txt, pptx, xlsx, eml, "
                             "msg, epub, odt, rtf)",),
    "ERR_FILE_TOO_LARGE": ("split the file, or raise INGESTION_MAX_UPLOAD_BYTES / the text or page limits "
                           "(docs/configuration.md)",),
    "ERR_PATH_REFUSED": ("put the file under the rag's root (`ingestion-pipeline queue rag list`)",
                         "symlinks are resolved: a link out of the root is refused"),
    "ERR_UNKNOWN_TENANT": ("create the tenant first (an operator: `ingestion-pipeline tenant bind TENANT "
                           "s3://BUCKET/PREFIX/` makes it and binds where its jobs' objects may be)",),
    "ERR_LOCATION_NOT_BOUND": ("an operator binds the tenant's locations: `ingestion-pipeline tenant bind TENANT "
                               "s3://BUCKET/PREFIX/`",),
    "ERR_UNKNOWN_RAG": ("register it: `ingestion-pipeline queue rag add RAG_ID --tenant TENANT --root DIR`",
                        "then `ingestion-pipeline queue dead-letter replay`"),
    "ERR_PDF_INVALID": ("open the PDF in a viewer; re-export or repair it",),
    "ERR_PDF_ENCRYPTED": ("remove the password and push the file again",),
    "ERR_NO_TEXT": ("the file holds no text to index; scanned pages need Tesseract (make system-deps)",),
    "ERR_DOCUMENT_INVALID": ("the file is corrupt or not what its extension says; re-export it",),
    "ERR_ENCODING": ("save the text as UTF-8",),
    "ERR_EXTRACTION_TIMEOUT": ("split the file, or raise INGESTION_EXTRACTION_TIMEOUT_SECONDS",),
    "ERR_CHECKSUM": ("the stored bytes changed after intake; push the job again",),
    "ERR_DATABASE": ("retried with backoff; check that Postgres is reachable",),
    "ERR_NETWORK": ("retried with backoff; check S3 / the network",),
    "ERR_MEMORY": ("retried with backoff; a worker with more memory, or a smaller file",),
    "ERR_DISK": ("free space on the upload store's disk",),
    "ERR_CANCELED": ("the file was canceled; `ingestion-pipeline retry FILE_ID` replays it",),
    "ERR_INTERNAL": ("a bug or an unexpected input: see `ingestion-pipeline files show FILE_ID`",),
}

_BY_PIPELINE_CODE: dict[str, str] = {
    "pdf_corrupt": "ERR_PDF_INVALID", "pdf_no_pages": "ERR_PDF_INVALID", "pdf_page_unreadable": "ERR_PDF_INVALID",
    "pdf_password_protected": "ERR_PDF_ENCRYPTED",
    "pdf_no_text_layer": "ERR_NO_TEXT", "ocr_failed": "ERR_NO_TEXT", "ocr_timeout": "ERR_EXTRACTION_TIMEOUT",
    "file_empty": "ERR_NO_TEXT", "file_whitespace_only": "ERR_NO_TEXT", "no_text": "ERR_NO_TEXT",
    "no_chunks": "ERR_NO_TEXT", "docx_no_text": "ERR_NO_TEXT", "html_no_text": "ERR_NO_TEXT",
    "markdown_no_text": "ERR_NO_TEXT",
    "docx_corrupt": "ERR_DOCUMENT_INVALID", "docx_unreadable": "ERR_DOCUMENT_INVALID",
    "eml_unreadable": "ERR_DOCUMENT_INVALID", "rtf_unreadable": "ERR_DOCUMENT_INVALID",
    "html_unparseable": "ERR_DOCUMENT_INVALID", "html_too_deep": "ERR_DOCUMENT_INVALID",
    "extraction_failed": "ERR_DOCUMENT_INVALID", "text_truncated_json": "ERR_DOCUMENT_INVALID",
    "text_encoding_unknown": "ERR_ENCODING",
    "text_too_large": "ERR_FILE_TOO_LARGE", "file_too_much_text": "ERR_FILE_TOO_LARGE",
    "file_too_many_pages": "ERR_FILE_TOO_LARGE",
    "extraction_memory_exceeded": "ERR_FILE_TOO_LARGE",
    "extraction_timeout": "ERR_EXTRACTION_TIMEOUT",
    "unsupported_format": "ERR_UNSUPPORTED_TYPE", "format_support_missing": "ERR_UNSUPPORTED_TYPE",
    "raw_checksum_mismatch": "ERR_CHECKSUM", "raw_missing": "ERR_FILE_NOT_FOUND",
    "db_unavailable": "ERR_DATABASE", "db_conflict": "ERR_DATABASE", "lease_expired": "ERR_INTERNAL",
    "s3_unavailable": "ERR_NETWORK", "s3_error": "ERR_NETWORK",
    "worker_out_of_memory": "ERR_MEMORY", "canceled": "ERR_CANCELED",
}


def err_code(pipeline_code: str | None) -> str:
    """The contract's code for a pipeline failure code (``ERR_INTERNAL`` for one it does not name)."""
    return _BY_PIPELINE_CODE.get(pipeline_code or "", "ERR_INTERNAL")


def job_error(code: str, message: str, *, recoverable: bool = False) -> JobError:
    return JobError(code, message, recoverable, SUGGESTIONS.get(code, ()))


def from_pipeline(pipeline_code: str | None, message: str, *, transient: bool = False) -> JobError:
    return job_error(err_code(pipeline_code), message, recoverable=transient)


def from_exception(exc: BaseException) -> JobError:
    """An error met while accepting a job: recoverable when trying again can help (the database, the
    network, memory, a full or failing disk), else not."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
        return job_error("ERR_DISK", f"the upload store could not be written: {exc}", recoverable=True)
    info = classify(exc)
    return from_pipeline(info.code, info.message, transient=info.transient)


# -- records -----------------------------------------------------------------------------------------------------------
QUEUED, PROCESSING, DONE, FAILED = "queued", "processing", "done", "failed"
# the ledger's file status -> the job's status
_FROM_FILE_STATUS = {"queued": QUEUED, "running": PROCESSING, "succeeded": DONE, "failed": FAILED,
                     "dead_letter": FAILED, "canceled": FAILED}


def find(conn: psycopg.Connection, job_id: str, intake: str, tenant_id: str | None = None) -> dict | None:
    """The intake's job of this id; ``tenant_id``: that tenant's (an SQS job id is unique per tenant only; a
    Redis job id names its rag, and so its tenant, and is never confused with an SQS job's)."""
    return conn.execute(
        "SELECT * FROM queue_jobs WHERE job_id = %s AND intake = %s AND (%s::text IS NULL OR tenant_id = %s) "
        "LIMIT 1", (job_id, intake, tenant_id, tenant_id)).fetchone()


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
           ON CONFLICT (tenant_id, job_id) DO NOTHING RETURNING job_id""",
        (job_id, intake, rag_id, tenant_id, source_path, filename, Jsonb(message), Jsonb(outcome)),
    ).fetchone()
    return row is not None


def unreported(conn: psycopg.Connection, intake: str, limit: int = 1000,
               file_ids: Sequence[int] | None = None) -> list[dict]:
    """Jobs whose final status is not yet written to their queue, oldest first, each with its file's
    ledger state (``file_status`` …; NULL for a job without a file) and the job status that state means;
    ``file_ids``: only the jobs of these files."""
    rows = conn.execute(
        """SELECT j.*, r.status AS file_status, r.attempts, r.error AS file_error, r.error_code AS file_error_code,
                  r.suggestion AS file_suggestion, r.stats AS file_stats, r.started_at AS file_started_at,
                  r.finished_at AS file_finished_at
             FROM queue_jobs j LEFT JOIN ingestion_runs r ON r.file_id = j.file_id
            WHERE j.reported_at IS NULL AND j.intake = %(intake)s
              AND (%(files)s::bigint[] IS NULL OR j.file_id = ANY(%(files)s))
            ORDER BY j.accepted_at LIMIT %(limit)s""",
        {"intake": intake, "limit": limit, "files": list(file_ids) if file_ids is not None else None},
    ).fetchall()
    for row in rows:
        row["now_status"] = _FROM_FILE_STATUS[row["file_status"]] if row["file_status"] else row["status"]
    return rows


def advance(conn: psycopg.Connection, job_id: str, status: str, *, tenant_id: str, reported: bool) -> None:
    """Record the status last written to the queue; ``reported``: the job's final status is written."""
    conn.execute(
        """UPDATE queue_jobs SET status = %s,
                  finished_at = CASE WHEN %s IN ('done', 'failed') THEN coalesce(finished_at, now()) END,
                  reported_at = CASE WHEN %s THEN now() END
            WHERE tenant_id = %s AND job_id = %s""",
        (status, status, reported, tenant_id, job_id),
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
            WHERE r.file_id = j.file_id AND j.intake = %s AND j.reported_at IS NULL""",
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
             FROM queue_jobs j LEFT JOIN ingestion_runs r ON r.file_id = j.file_id
            WHERE (%(intake)s::text IS NULL OR j.intake = %(intake)s)
              AND (%(status)s::text IS NULL OR j.status = %(status)s)
              AND (%(job)s::text IS NULL OR j.job_id = %(job)s)
            ORDER BY j.accepted_at DESC, j.job_id LIMIT %(limit)s""",
        {"intake": intake, "status": status, "job": job_id, "limit": limit},
    ).fetchall()


# -- accepting a job ---------------------------------------------------------------------------------------------------
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
        existing = find(conn, job.job_id, "redis")
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
            recorded = record_refused(
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
        status = DONE if result.status == SKIPPED else QUEUED
        if result.status in (SUBMITTED_QUEUED, DUPLICATE, SKIPPED):
            record_accepted(
                conn, job_id=job.job_id, intake="redis", tenant_id=rag.tenant_id, filename=job.filename,
                message=asdict(job), file_id=result.file_id, status=status, rag_id=job.rag_id,
                source_path=str(real), outcome={"submit": result.status, "doc_id": result.doc_id,
                                                **({"note": result.reason} if result.reason else {})})

    try:
        result = submit_upload(db, store, tenant_id=rag.tenant_id, path=real, fingerprint=fingerprint,
                               max_bytes=max_bytes, title=Path(job.filename).stem, follow_symlinks=False,
                               in_same_transaction=record)
    except psycopg.errors.UniqueViolation:  # another consumer accepted the same job a moment earlier
        with db.connection() as conn:
            existing = find(conn, job.job_id, "redis")
        return Intake(ALREADY, existing["status"] if existing else None, tenant_id=rag.tenant_id)
    if result.status == REJECTED:
        reason = result.reason or "rejected"
        code = "ERR_FILE_TOO_LARGE" if "limit" in reason else "ERR_FILE_NOT_FOUND"
        return failed(code, f"{job.source_path}: {reason}")
    status = DONE if result.status == SKIPPED else QUEUED
    return Intake(ACCEPTED, status, result.file_id, rag.tenant_id,
                  details={"submit": result.status, "doc_id": result.doc_id})
