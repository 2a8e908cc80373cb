"""Runtime settings, read from the environment once per call site.

Every knob has a default that works on a fresh clone: the embedded Postgres and the upload store live
under the git-ignored ``.data/`` folder of the project (or ``INGESTION_HOME``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar


def project_root() -> Path:
    """The checkout the package is installed from (editable install), or ``INGESTION_HOME``."""
    home = os.environ.get("INGESTION_HOME")
    if home:
        return Path(home).resolve()
    return Path(__file__).resolve().parents[2]


def instance_home() -> Path:
    """The project's Dagster instance folder (``dagster_home/dagster.yaml``), the CLI's default ``DAGSTER_HOME``."""
    return project_root() / "dagster_home"


def data_dir() -> Path:
    return Path(os.environ.get("INGESTION_DATA_DIR", project_root() / ".data")).resolve()


T = TypeVar("T")


def _env(name: str, default: T, parse: Callable[[str], T], expected: str, *, empty_is_default: bool = True) -> T:
    """``parse(os.environ[name])``, or ``default`` when unset; a bad value names the variable."""
    raw = os.environ.get(name)
    if raw is None or (raw == "" and empty_is_default):
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be {expected}, got {raw!r}") from exc


def _int_env(name: str, default: int) -> int:
    return _env(name, default, int, "an integer")


def _at_least_one(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


def _s3_store_uri(raw: str) -> str | None:
    value = raw.strip()
    if value in ("", "local"):
        return None
    bucket = value[5:].split("/", 1)[0] if value.startswith("s3://") else ""
    if not bucket:
        raise ValueError(raw)
    return value.rstrip("/")


def _finite(raw: str) -> float:
    value = float(raw)
    if not math.isfinite(value):  # float() takes "nan" and "inf": no setting means either
        raise ValueError(raw)
    return value


def _float_env(name: str, default: float) -> float:
    return _env(name, default, _finite, "a finite number")


def _positive(raw: str) -> float:
    value = _finite(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


def _not_negative(raw: str) -> float:
    value = _finite(raw)
    if value < 0:
        raise ValueError(raw)
    return value


MAX_TOKEN_HOURS = 24 * 365


def _token_hours(raw: str) -> float:
    value = _finite(raw)
    if not 0 < value <= MAX_TOKEN_HOURS or value * 3600 < 1:
        raise ValueError(raw)
    return value


def _floats_env(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
    """A comma-separated list of seconds, e.g. INGESTION_RETRY_BACKOFF=5,10,30 (empty: no retries)."""
    return _env(name, default, lambda raw: tuple(float(part) for part in raw.split(",") if part.strip()),
                "comma-separated seconds like 5,10,30", empty_is_default=False)


@dataclass(frozen=True)
class UploadSettings:
    upload_dir: Path
    max_bytes: int
    store_uri: str | None = None  # s3://bucket/prefix: both upload stores live there (core/s3_upload_store)
    store_endpoint_url: str | None = None  # the store's S3 endpoint (None: the AWS environment's)


@dataclass(frozen=True)
class BatchSettings:
    """Bounds of one `document_batches` partition (and so of one run)."""

    max_files: int = 200  # measured: 300 small files in 6 runs of 50 took 50.6 s, in one run 44.6 s
    max_bytes: int = 200 * 1024 * 1024
    lanes: int = 2  # files a step works on at once (documents/pipeline.py); at most the pool's connections


@dataclass(frozen=True)
class ChunkSettings:
    """Token budgets; the hard cap is further clamped to the model's own max sequence length."""

    target_tokens: int = 200
    max_tokens: int = 256


@dataclass(frozen=True)
class EmbeddingSettings:
    model_path: str | None = None  # None: the packaged all-MiniLM-L6-v2
    batch_size: int = 16  # measured: benchmarks/embedding_backends.py
    backend: str = "auto"  # auto | onnx | torch (documents/embedding.py)
    precision: str = "auto"  # auto | int8 | bf16 | f32 (documents/precision.py)
    cache_dir: Path | None = None  # exported ONNX models; None: <data dir>/models


@dataclass(frozen=True)
class S3SyncSettings:
    """Bounded listing work: a tick lists at most pages_per_tick pages of page_size keys per source."""

    page_size: int = 1000
    pages_per_tick: int = 5


@dataclass(frozen=True)
class MetricsSettings:
    upload_dir: Path = Path(".data/metric_uploads")
    max_bytes: int = 2 * 1024**3  # exports stream (Arrow batches / row by row); memory does not grow with size
    valid_threshold: float = 0.9
    staging_retention_days: int = 7


@dataclass(frozen=True)
class ReliabilitySettings:
    """Leases, retries and retention (README: Failure and recovery)."""

    lease_seconds: float = 900.0  # a claim expires without a heartbeat for this long
    retry_backoff_seconds: tuple[float, ...] = (5.0, 10.0, 30.0)  # waits before attempts 2, 3, 4
    relaunch_queued_after_seconds: float = 3600.0  # a queued row with no live run is relaunched
    failed_ttl_days: float = 7.0  # raw bytes of failed / dead-lettered / canceled work are kept this long
    orphan_ttl_hours: float = 24.0  # stored files no ledger row refers to
    partition_retention_days: float = 30.0  # a finished batch's Dagster partition is deleted after this

    @property
    def max_attempts(self) -> int:
        return len(self.retry_backoff_seconds) + 1

    def backoff_after(self, attempts_used: int) -> float | None:
        """Seconds to wait before the next attempt, or None when the attempts are spent."""
        if attempts_used < 1 or attempts_used > len(self.retry_backoff_seconds):
            return None
        return self.retry_backoff_seconds[attempts_used - 1]


@dataclass(frozen=True)
class QueueSettings:
    """The queue intakes (queues/): the Redis job queue and SQS queues."""

    redis_url: str | None = "redis://127.0.0.1:6379/0"  # None (REDIS_URL=none): no Redis queue
    redis_configured: bool = False  # REDIS_URL set: a server that does not answer is an error, not "no queue"
    jobs_per_tick: int = 100  # Redis jobs one sensor tick (or one `process` round) takes
    consumer_heartbeat_seconds: float = 30.0  # a consumer silent this long is dead: its jobs go back
    sqs_queue_urls: tuple[str, ...] = ()
    sqs_messages_per_tick: int = 100  # SQS messages one sensor tick takes per queue (10 per receive)
    sqs_wait_seconds: int = 1  # long polling per receive (at most 20)


@dataclass(frozen=True)
class ExtractionLimits:
    """Per-file bounds: a file over one fails with the reason; the rest of its batch goes on."""

    timeout_seconds: float = 300.0
    memory_mb: int = 3072  # address space of the extraction worker process
    max_text_chars: int = 20_000_000  # characters of text a file may hold, every format
    max_chunks: int = 50_000  # chunks of one file (20M characters make ~25,000)
    max_tokens: int = 10_000_000  # the model's tokens in one file's chunks
    max_member_bytes: int = 200 * 1024 * 1024  # one uncompressed part of a DOCX (zip)
    max_compression_ratio: float = 100.0  # uncompressed / compressed, for parts over 1 MiB


@dataclass(frozen=True)
class ExecutorSettings:
    """Where a run's steps execute (defs/executor.py): in the run's process, or on Celery workers."""

    executor: str = "in_process"  # in_process | celery
    broker_url: str = "redis://127.0.0.1:6379/0"  # CELERY_BROKER_URL, else REDIS_URL
    # a step taken by a worker that then vanished (its host died) is handed to another worker after this long;
    # it must exceed the longest step, or a slow step is run twice
    redeliver_seconds: int = 600
    concurrency: int = 1  # steps one `ingestion-pipeline worker` runs at once (processes; each loads the model)


@dataclass(frozen=True)
class Settings:
    upload: UploadSettings
    batch: BatchSettings = field(default_factory=BatchSettings)
    chunk: ChunkSettings = field(default_factory=ChunkSettings)
    embedding: EmbeddingSettings = field(default_factory=EmbeddingSettings)
    s3: S3SyncSettings = field(default_factory=S3SyncSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    reliability: ReliabilitySettings = field(default_factory=ReliabilitySettings)
    limits: ExtractionLimits = field(default_factory=ExtractionLimits)
    queues: QueueSettings = field(default_factory=QueueSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API (README: HTTP API). ``jwt_secret`` is checked when the server starts."""

    auth_enabled: bool = True
    jwt_secret: str | None = None
    jwt_expiry_hours: float = 24.0
    max_inflight_uploads: int = 8
    upload_idle_seconds: float = 10.0  # a request body (an upload's or a JSON one) silent this long ends with 408
    upload_min_bytes_per_second: float = 16 * 1024  # and one slower than this on average, after the idle time
    header_timeout_seconds: float = 10.0  # a request's headers not complete this long after the connection: 408
    upload_bucket: str | None = None  # presigned uploads land here
    upload_s3_endpoint: str | None = None  # None: the AWS environment
    upload_prefix: str = "api-uploads/"
    presign_seconds: int = 900
    allowed_s3_endpoints: tuple[str, ...] = ()  # endpoints a tenant may give a source; empty: none

    @property
    def jwt_expiry_seconds(self) -> int:
        return int(self.jwt_expiry_hours * 3600)


def _one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(raw)
        return value

    return parse


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def load_api_settings() -> ApiSettings:
    return ApiSettings(
        auth_enabled=_env("AUTH_ENABLED", True, _bool, "true or false"),
        jwt_secret=os.environ.get("JWT_SECRET") or None,
        jwt_expiry_hours=_env("JWT_EXPIRY_HOURS", 24.0, _token_hours,
                              f"a number of hours above 0 and at most {MAX_TOKEN_HOURS} (a year)"),
        max_inflight_uploads=_env("INGESTION_API_MAX_INFLIGHT_UPLOADS", 8, _at_least_one,
                                  "a whole number of at least 1"),
        upload_idle_seconds=_env("INGESTION_API_UPLOAD_IDLE_SECONDS", 10.0, _positive, "a number of seconds above 0"),
        upload_min_bytes_per_second=_env("INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND", 16384.0, _not_negative,
                                         "a number of bytes per second, 0 or more"),
        header_timeout_seconds=_env("INGESTION_API_HEADER_TIMEOUT_SECONDS", 10.0, _positive,
                                    "a number of seconds above 0"),
        upload_bucket=os.environ.get("INGESTION_UPLOAD_BUCKET") or None,
        upload_s3_endpoint=os.environ.get("INGESTION_UPLOAD_S3_ENDPOINT") or None,
        allowed_s3_endpoints=tuple(
            e.strip().rstrip("/") for e in os.environ.get("INGESTION_ALLOWED_S3_ENDPOINTS", "").split(",") if e.strip()
        ),
    )


def load_settings() -> Settings:
    return Settings(
        upload=UploadSettings(
            upload_dir=Path(os.environ.get("INGESTION_UPLOAD_DIR", data_dir() / "uploads")).resolve(),
            max_bytes=_int_env("INGESTION_MAX_UPLOAD_BYTES", 50 * 1024 * 1024),
            store_uri=_env("INGESTION_UPLOAD_STORE", None, _s3_store_uri, "s3://bucket or s3://bucket/prefix"),
            store_endpoint_url=os.environ.get("INGESTION_UPLOAD_STORE_ENDPOINT_URL") or None,
        ),
        batch=BatchSettings(
            max_files=_int_env("INGESTION_BATCH_MAX_FILES", 200),
            max_bytes=_int_env("INGESTION_BATCH_MAX_BYTES", 200 * 1024 * 1024),
            lanes=_env("INGESTION_BATCH_LANES", 2, _at_least_one, "a whole number of at least 1"),
        ),
        chunk=ChunkSettings(
            target_tokens=_int_env("INGESTION_CHUNK_TARGET_TOKENS", 200),
            max_tokens=_int_env("INGESTION_CHUNK_MAX_TOKENS", 256),
        ),
        embedding=EmbeddingSettings(
            model_path=os.environ.get("INGESTION_EMBEDDING_MODEL") or None,
            batch_size=min(256, _int_env("INGESTION_EMBEDDING_BATCH_SIZE", 16)),
            backend=_env("INGESTION_EMBEDDING_BACKEND", "auto", _one_of("auto", "openvino", "onnx", "torch"),
                         "auto, openvino, onnx or torch"),
            precision=_env("INGESTION_EMBEDDING_PRECISION", "auto", _one_of("auto", "int8", "bf16", "f32"),
                           "auto, int8, bf16 or f32"),
            cache_dir=Path(os.environ.get("INGESTION_MODEL_CACHE_DIR") or data_dir() / "models").resolve(),
        ),
        metrics=MetricsSettings(
            upload_dir=Path(os.environ.get("INGESTION_METRICS_UPLOAD_DIR", data_dir() / "metric_uploads")).resolve(),
            max_bytes=_int_env("INGESTION_METRICS_MAX_UPLOAD_BYTES", 2 * 1024**3),
            valid_threshold=float(os.environ.get("INGESTION_METRICS_VALID_THRESHOLD") or 0.9),
            staging_retention_days=_int_env("INGESTION_STAGING_RETENTION_DAYS", 7),
        ),
        s3=S3SyncSettings(
            page_size=min(1000, _int_env("INGESTION_S3_PAGE_SIZE", 1000)),
            pages_per_tick=_int_env("INGESTION_S3_PAGES_PER_TICK", 5),
        ),
        reliability=ReliabilitySettings(
            lease_seconds=_float_env("INGESTION_LEASE_SECONDS", 900.0),
            retry_backoff_seconds=_floats_env("INGESTION_RETRY_BACKOFF", (5.0, 10.0, 30.0)),
            relaunch_queued_after_seconds=_float_env("INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS", 3600.0),
            failed_ttl_days=_float_env("INGESTION_FAILED_TTL_DAYS", 7.0),
            orphan_ttl_hours=_float_env("INGESTION_ORPHAN_TTL_HOURS", 24.0),
            partition_retention_days=_float_env("INGESTION_PARTITION_RETENTION_DAYS", 30.0),
        ),
        queues=QueueSettings(
            redis_url=None if os.environ.get("REDIS_URL", "").strip().lower() == "none"
            else os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0",
            redis_configured=bool(os.environ.get("REDIS_URL")),
            jobs_per_tick=_env("INGESTION_QUEUE_JOBS_PER_TICK", 100, _at_least_one, "a whole number of at least 1"),
            consumer_heartbeat_seconds=_env("INGESTION_QUEUE_HEARTBEAT_SECONDS", 30.0, _positive,
                                            "a number of seconds above 0"),
            sqs_queue_urls=tuple(u.strip() for u in os.environ.get("INGESTION_SQS_QUEUE_URLS", "").split(",")
                                 if u.strip()),
            sqs_messages_per_tick=_env("INGESTION_SQS_MESSAGES_PER_TICK", 100, _at_least_one,
                                       "a whole number of at least 1"),
            sqs_wait_seconds=_env("INGESTION_SQS_WAIT_SECONDS", 1, lambda raw: min(20, max(0, int(raw))),
                                  "a whole number of seconds, 0-20"),
        ),
        executor=ExecutorSettings(
            executor=_env("INGESTION_EXECUTOR", "in_process", _one_of("in_process", "celery"), "in_process or celery"),
            broker_url=(os.environ.get("CELERY_BROKER_URL") or os.environ.get("REDIS_URL")
                        or "redis://127.0.0.1:6379/0"),
            redeliver_seconds=_env("INGESTION_WORKER_REDELIVER_SECONDS", 600, _at_least_one,
                                   "a whole number of seconds of at least 1"),
            concurrency=_env("INGESTION_WORKER_CONCURRENCY", 1, _at_least_one, "a whole number of at least 1"),
        ),
        limits=ExtractionLimits(
            timeout_seconds=_float_env("INGESTION_EXTRACTION_TIMEOUT_SECONDS", 300.0),
            memory_mb=_int_env("INGESTION_EXTRACTION_MEMORY_MB", 3072),
            max_text_chars=_env("INGESTION_MAX_TEXT_CHARS", 20_000_000, _at_least_one, "a whole number of at least 1"),
            max_chunks=_env("INGESTION_MAX_CHUNKS_PER_FILE", 50_000, _at_least_one, "a whole number of at least 1"),
            max_tokens=_env("INGESTION_MAX_TOKENS_PER_FILE", 10_000_000, _at_least_one, "a whole number of at least 1"),
            max_member_bytes=_int_env("INGESTION_MAX_ZIP_MEMBER_BYTES", 200 * 1024 * 1024),
            max_compression_ratio=_float_env("INGESTION_MAX_COMPRESSION_RATIO", 100.0),
        ),
    )
