"""The Redis job message: its fields, how a producer makes one, and how a consumer refuses a malformed one.

A message is JSON with ``job_id`` (``rag-<rag_id>-<unix seconds>-<8 hex>``), ``rag_id``, ``source_path``
(absolute), ``source_type``, ``filename``, ``submitted_at`` (ISO 8601 UTC), and optionally ``submitted_by``
(cli | api | scheduled), ``options`` {reindex, skip_validation, preserve_metadata}, ``retry_count`` and
``max_retries``. Anything that is not such a message raises ``MalformedJob`` with what is wrong; the
consumer dead-letters it with that reason and goes on.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

RAG_ID_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_]{0,63}"  # no '-': the job id is split on it (sql/024 checks it too)
_RAG_ID = re.compile(RAG_ID_PATTERN)
_JOB_ID = re.compile(rf"rag-(?P<rag_id>{RAG_ID_PATTERN})-(?P<seconds>[0-9]{{1,12}})-(?P<hex>[0-9a-f]{{8}})")
SUBMITTERS = ("cli", "api", "scheduled")
DEFAULT_OPTIONS = {"reindex": False, "skip_validation": False, "preserve_metadata": True}
DEFAULT_MAX_RETRIES = 3
MAX_MESSAGE_BYTES = 64 * 1024  # a job names a file; it does not carry one


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


def validate_rag_id(rag_id: str) -> str:
    if not isinstance(rag_id, str) or not _RAG_ID.fullmatch(rag_id):
        raise ValueError(f"invalid rag_id {rag_id!r}: 1-64 of letters, digits and '_', starting with a letter "
                         "or digit (no '-': job ids are split on it)")
    return rag_id


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
    return value


def parse_job(raw: str | bytes) -> JobMessage:
    """The job in ``raw``, or ``MalformedJob`` saying what is wrong with it."""
    if len(raw) > MAX_MESSAGE_BYTES:
        raise MalformedJob(f"message of {len(raw):,} bytes, over the {MAX_MESSAGE_BYTES:,} byte limit")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedJob(f"not JSON: {exc}") from None
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
        raise MalformedJob(f"source_path must be an absolute path, not {source_path!r}")
    filename = _field(data, "filename", str)
    if not filename or "/" in filename or "\x00" in filename or filename in (".", ".."):
        raise MalformedJob(f"filename must be a file name without '/', not {filename!r}")
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
