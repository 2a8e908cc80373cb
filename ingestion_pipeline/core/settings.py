"""Runtime settings: one pydantic-settings model per area, each field's type, default, variable and description
written once, read once per call site (``load_settings()``).

Every default works on a fresh clone (the embedded Postgres and the upload store live under the git-ignored
``.data/``, or ``INGESTION_HOME``). Built directly (``BatchSettings(max_files=3)``) a model is its defaults and
arguments; ``from_environment()`` reads the environment too. Pydantic parses and checks the values; a validator of
our own only where a rule is the project's. A bad value is a ``ValueError`` naming the variable.
``core/environment.py`` renders the fields as docs/configuration.md.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Self, get_args, get_origin

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
)
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict

MAX_TOKEN_HOURS = 24 * 365
QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")  # a Celery queue (cli/worker.py checks --queue)


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


@dataclass(frozen=True)
class Expected:
    """What a variable's text should be, in the error message, where its type alone does not say it."""

    text: str


def env(name: str, description: str, default: Any = None, *, factory: Callable[[], Any] | None = None,
        shown: str | None = None, also: tuple[str, ...] = ()) -> Any:
    """A field read from the variable ``name`` (else from the first of ``also`` that is set). ``description`` and
    ``shown`` (the default, where ``str(default)`` would not do) are its row of docs/configuration.md."""
    kwargs: dict[str, Any] = {"validation_alias": AliasChoices(name, *also), "description": description,
                              "json_schema_extra": {"shown": shown} if shown else None}
    return Field(default_factory=factory, **kwargs) if factory else Field(default, **kwargs)


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _split(value: Any) -> Any:
    """A comma-separated variable as its items (a tuple given as an argument stays as it is)."""
    return tuple(part.strip() for part in value.split(",") if part.strip()) if isinstance(value, str) else value


def _s3_store(value: str | None) -> str | None:
    """``s3://bucket[/prefix]`` without a trailing slash; ``local`` (or nothing): the two local folders."""
    value = (value or "").strip()
    if value in ("", "local"):
        return None
    if not re.match(r"s3://[^/]", value):
        raise ValueError(value)
    return value.rstrip("/")


def _http_url(value: str | None) -> str | None:
    """An http(s) URL without a trailing slash, or ``off``."""
    if value is None or value.strip().lower() == "off":
        return None if value is None else "off"
    url = value.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or len(url) < 10:
        raise ValueError(value)
    return url


def _networks(entries: tuple[str, ...]) -> tuple[str, ...]:
    """Each entry an address or a network, written as a network (uvicorn would take a typo, or a network with
    host bits, for a name that matches nothing); not every address (``*``, ``0.0.0.0/0``: any client's claim)."""
    networks = [ipaddress.ip_network(entry, strict=False) for entry in entries]
    if any(network.prefixlen == 0 for network in networks):
        raise ValueError("every address")
    return tuple(str(network) for network in networks)


Choice = BeforeValidator(_lower)  # " CPU " is cpu
FLAG_WORDS = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def _flag(value: Any) -> Any:
    """A switch's text as one of its eight words only (pydantic alone would also take "t", "n"...: a typo of a
    security switch such as AUTH_ENABLED must not pass as a word)."""
    if not isinstance(value, str):
        return value
    if (word := value.strip().lower()) not in FLAG_WORDS:
        raise ValueError(value)
    return FLAG_WORDS[word]


Flag = Annotated[bool, BeforeValidator(_flag), Expected("true or false (1/0, yes/no, on/off)")]
AtLeastOne = Annotated[int, Field(ge=1), Expected("a whole number of at least 1")]
Seconds = Annotated[float, Field(gt=0), Expected("a number of seconds above 0")]
ResolvedPath = Annotated[Path, AfterValidator(Path.resolve)]
Items = Annotated[tuple[str, ...], NoDecode, BeforeValidator(_split)]
S3Store = Annotated[str | None, AfterValidator(_s3_store), Expected("s3://bucket or s3://bucket/prefix")]
HttpUrlOrOff = Annotated[str | None, AfterValidator(_http_url), Expected("an http:// or https:// URL, or off")]


class _Area(BaseSettings):
    """One area's settings. Built directly: defaults and arguments only; ``from_environment()``: the environment
    too. No setting means nan or infinity (``allow_inf_nan=False``)."""

    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True, case_sensitive=True,
                                      allow_inf_nan=False)
    # variables whose empty text is a value, not the default (INGESTION_RETRY_BACKOFF: no retries)
    _EMPTY_IS_A_VALUE: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: Any, **_: Any) -> tuple:
        return (init_settings,)  # the environment only through from_environment()

    @classmethod
    def from_environment(cls, **overrides: Any) -> Self:
        """The area from its variables (an empty one: the default) and ``overrides``; a bad value: ``ValueError``
        "NAME must be EXPECTED, got 'raw'"."""
        overridden = {name for key in overrides if key in cls.model_fields for name in variables(cls.model_fields[key])}
        text = {name: value for name, value in EnvSettingsSource(cls)().items()  # keyed by each field's variable
                if name not in (*cls.model_fields, *overridden) and (value != "" or name in cls._EMPTY_IS_A_VALUE)}
        try:
            return cls(**{**text, **overrides})
        except ValidationError as exc:  # the first problem, in the variable's terms
            raise ValueError(_message(cls, exc.errors()[0], text)) from None


def _message(area: type[_Area], error: ErrorDetails, text: dict[str, str]) -> str:
    """Pydantic's complaint as "NAME must be EXPECTED, got 'raw'", in the variable's terms and with its text."""
    name = str(error["loc"][0])
    field = next(field for key, field in area.model_fields.items() if name == key or name in variables(field))
    return f"{name} must be {_expected(field, error['msg'])}, got {text.get(name, error['input'])!r}"


def _expected(field: FieldInfo, message: str) -> str:
    """The field's ``Expected``, else its choices, else what its type or pydantic's message says."""
    for item in field.metadata:
        if isinstance(item, Expected):
            return item.text
    if get_origin(field.annotation) is Literal:
        *choices, last = get_args(field.annotation)
        return f"{', '.join(choices)} or {last}"
    by_type = {int: "an integer", float: "a finite number", bool: "true or false"}
    return by_type.get(field.annotation) or message.removeprefix("Input should be ")


def variables(field: FieldInfo) -> tuple[str, ...]:
    """A field's variable and its other spellings (none: a field no variable sets)."""
    alias = field.validation_alias
    return tuple(str(choice) for choice in alias.choices) if isinstance(alias, AliasChoices) else ()


class UploadSettings(_Area):
    upload_dir: ResolvedPath = env("INGESTION_UPLOAD_DIR", "Where uploaded documents wait (content-addressed).",
                                   factory=lambda: (data_dir() / "uploads").resolve(), shown="`<data>/uploads`")
    max_bytes: int = env("INGESTION_MAX_UPLOAD_BYTES", "Largest document accepted.", default=50 * 1024 * 1024,
                         shown="52428800 (50 MB)")
    # s3://bucket/prefix: both upload stores live there (core/s3_upload_store)
    store_uri: S3Store = env("INGESTION_UPLOAD_STORE", "`s3://bucket/prefix`: both upload stores in S3 "
                             "(`<prefix>/documents/`, `<prefix>/metrics/`), so hosts share no disk "
                             "(docs/deployment.md).", shown="local (the two folders above)")
    store_endpoint_url: str | None = env("INGESTION_UPLOAD_STORE_ENDPOINT_URL", "The S3 endpoint of "
                                         "`INGESTION_UPLOAD_STORE` (MinIO, moto).", shown="the AWS environment's")


class BatchSettings(_Area):
    """Bounds of one `document_batches` partition (and so of one run)."""

    # a run's fixed cost is paid once a batch: fewer, larger batches ingest many small files faster
    # (benchmarks/first_ingest.py)
    max_files: int = env("INGESTION_BATCH_MAX_FILES", "Files in one batch (one partition, one run).", default=200)
    max_bytes: int = env("INGESTION_BATCH_MAX_BYTES", "Bytes in one batch.", default=200 * 1024 * 1024,
                         shown="209715200 (200 MB)")
    # a person waiting: queued ahead of bulk runs, a run slot of its own (defs/partitions.py: RUN_CLASS_TAG)
    interactive_max_files: AtLeastOne = env("INGESTION_BATCH_INTERACTIVE_FILES", "A batch of at most this many files, "
                                            "not from an S3 source's listing (uploads, queue jobs, objects an S3 event "
                                            "told of), is interactive: queued first, a run slot bulk runs never take.",
                                            default=10)
    lanes: AtLeastOne = env("INGESTION_BATCH_LANES", "Files a step works on at once (at most the run's 4 connections).",
                            default=2)
    index_nice: Annotated[int, Field(ge=0, le=19), Expected("a whole number from 0 to 19")] = env(
        "INGESTION_INDEX_SWEEP_NICE", "The CPU priority (nice) of the database backends that put promoted vectors into "
        "their HNSW graph, where the database runs on this host (0: normal).", default=10)


class ChunkSettings(_Area):
    """Token budgets; the hard cap is further clamped to the model's own max sequence length."""

    # chosen on the natural questions against 96, 128 and 256: benchmarks/retrieval_quality.py
    target_tokens: int = env("INGESTION_CHUNK_TARGET_TOKENS", "A chunk's target size, in the model's tokens.",
                             default=200)
    max_tokens: int = env("INGESTION_CHUNK_MAX_TOKENS", "A chunk's hard cap (further capped by the model's own).",
                          default=256)


class EmbeddingSettings(_Area):
    model_path: str | None = env("INGESTION_EMBEDDING_MODEL", "A sentence-transformers model folder.",
                                 shown="the packaged all-MiniLM-L6-v2")
    # measured: benchmarks/embedding_backends.py
    batch_size: Annotated[int, AfterValidator(lambda size: min(256, size))] = env(
        "INGESTION_EMBEDDING_BATCH_SIZE", "Chunks per model call (at most 256).", default=16)
    backend: Annotated[Literal["auto", "openvino", "onnx", "torch"], Choice] = env(
        "INGESTION_EMBEDDING_BACKEND", "`auto`, `openvino`, `onnx` or `torch`.", default="auto")
    precision: Annotated[Literal["auto", "int8", "bf16", "f16", "f32"], Choice] = env(
        "INGESTION_EMBEDDING_PRECISION", "`auto`, `int8`, `bf16`, `f16` or `f32`: what `ingestion-pipeline model "
        "prepare` asks for when it makes the deployment's model decision (a reduced precision only if it passes the "
        "quality gate and this host can run it faster; `auto` takes the fastest that does; `f16` on CUDA only). Every "
        "process then embeds as recorded, whatever this says on its host (docs/pipeline.md).", default="auto")
    device: Annotated[Literal["auto", "cpu", "cuda"], Choice] = env(
        "INGESTION_EMBEDDING_DEVICE", "`auto` (an NVIDIA GPU where this host has one), `cpu` or `cuda` (an error "
        "without one): where this host embeds. `model prepare` records the device it judged on as part of the "
        "deployment's decision (docs/pipeline.md).", default="auto")
    share_chunks: AtLeastOne = env("INGESTION_EMBEDDING_SHARE_CHUNKS", "With Celery workers, a batch's chunks still to "
                                   "encode are split into shares of about this many, each a step of its own that any "
                                   "embedding worker takes (a big document's vectors on several hosts at once).",
                                   default=1024)
    cache_dir: ResolvedPath | None = env("INGESTION_MODEL_CACHE_DIR", "The exported ONNX / OpenVINO models.",
                                         factory=lambda: (data_dir() / "models").resolve(), shown="`<data>/models`")


class S3SyncSettings(_Area):
    """Bounded listing work: a round of the intake service lists at most pages_per_tick pages of page_size keys
    per source, every sync_interval_seconds."""

    page_size: Annotated[int, AfterValidator(lambda size: min(1000, size))] = env(
        "INGESTION_S3_PAGE_SIZE", "Keys per listing page (at most 1000).", default=1000)
    pages_per_tick: int = env("INGESTION_S3_PAGES_PER_TICK", "Listing pages per source per round of "
                              "`ingestion-pipeline intake`.", default=5)
    sync_interval_seconds: Seconds = env("INGESTION_SOURCE_SYNC_INTERVAL_SECONDS", "Seconds between the intake "
                                         "service's listings of the S3 sources.", default=30.0)


class MetricsSettings(_Area):
    upload_dir: ResolvedPath = env("INGESTION_METRICS_UPLOAD_DIR", "Where metric exports wait.",
                                   factory=lambda: (data_dir() / "metric_uploads").resolve(),
                                   shown="`<data>/metric_uploads`")
    # exports stream (Arrow batches / row by row); memory does not grow with size
    max_bytes: int = env("INGESTION_METRICS_MAX_UPLOAD_BYTES", "Largest export accepted.", default=2 * 1024**3,
                         shown="2147483648 (2 GiB)")
    valid_threshold: float = env("INGESTION_METRICS_VALID_THRESHOLD", "Share of valid rows an upload needs to be "
                                 "promoted.", default=0.9)
    staging_retention_days: int = env("INGESTION_STAGING_RETENTION_DAYS", "Staged rows are deleted after this.",
                                      default=7)


class ReliabilitySettings(_Area):
    """Leases, retries and retention (README: Failure and recovery)."""

    _EMPTY_IS_A_VALUE: ClassVar[frozenset[str]] = frozenset({"INGESTION_RETRY_BACKOFF"})

    lease_seconds: float = env("INGESTION_LEASE_SECONDS", "A claim expires without a heartbeat for this long.",
                               default=900.0)
    # waits before attempts 2, 3, 4; empty: no retries
    retry_backoff_seconds: Annotated[tuple[float, ...], NoDecode, BeforeValidator(_split),
                                     Expected("comma-separated seconds like 5,10,30")] = env(
        "INGESTION_RETRY_BACKOFF", "Seconds before attempts 2, 3, 4 of a transient failure.", default=(5.0, 10.0, 30.0),
        shown="5,10,30")
    janitor_interval_seconds: Seconds = env("INGESTION_JANITOR_INTERVAL_SECONDS", "Seconds between the janitor's "
                                            "rounds in `ingestion-pipeline intake` (dead runs, expired claims).",
                                            default=60.0)
    relaunch_queued_after_seconds: float = env("INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS", "Queued work no run picked "
                                               "up is relaunched.", default=3600.0)
    failed_ttl_days: float = env("INGESTION_FAILED_TTL_DAYS", "Raw bytes of failed, dead-lettered, canceled work are "
                                 "kept.", default=7.0)
    orphan_ttl_hours: float = env("INGESTION_ORPHAN_TTL_HOURS", "Stored files no ledger row refers to are kept.",
                                  default=24.0)
    partition_retention_days: float = env("INGESTION_PARTITION_RETENTION_DAYS", "A finished batch's (or upload's) "
                                          "Dagster partition is deleted after this; its runs stay. Re-index older "
                                          "batches with `ingestion-pipeline reindex`.", default=30.0)

    @property
    def max_attempts(self) -> int:
        return len(self.retry_backoff_seconds) + 1

    def backoff_after(self, attempts_used: int) -> float | None:
        """Seconds to wait before the next attempt, or None when the attempts are spent."""
        if attempts_used < 1 or attempts_used > len(self.retry_backoff_seconds):
            return None
        return self.retry_backoff_seconds[attempts_used - 1]


class QueueSettings(_Area):
    """The queue intakes (queues/): the Redis job queue and SQS queues."""

    redis_url: Annotated[str | None, BeforeValidator(lambda url: None if _lower(url) == "none" else url)] = env(
        "REDIS_URL", "The Redis server of the job queue (`rag:ingest:*`). Unset and nothing listening there, or "
        "`none`: no Redis queue; set and not answering: an error.", default="redis://127.0.0.1:6379/0")
    # REDIS_URL set: a server that does not answer is an error, not "no queue" (the same variable, read as "is it set")
    redis_configured: Annotated[bool, BeforeValidator(bool)] = Field(False, validation_alias=AliasChoices("REDIS_URL"))
    jobs_per_tick: AtLeastOne = env("INGESTION_QUEUE_JOBS_PER_TICK", "Redis jobs one round of `ingestion-pipeline "
                                    "intake` (or of `process`) takes.", default=100)
    intake_interval_seconds: Seconds = env("INGESTION_INTAKE_INTERVAL_SECONDS", "Seconds between the intake service's "
                                           "rounds on the Redis queue and on each SQS queue.", default=1.0)
    consumer_heartbeat_seconds: Seconds = env("INGESTION_QUEUE_HEARTBEAT_SECONDS", "A Redis consumer silent this long "
                                              "is dead: the next consumer hands the jobs it held back to their queues.",
                                              default=30.0)
    dead_letter_max_entries: AtLeastOne = env("INGESTION_DEAD_LETTER_MAX_ENTRIES", "Entries the Redis dead-letter list "
                                              "keeps, newest first (queues/redis_contract.py).", default=10_000)
    dead_letter_max_age_days: Annotated[float, Field(gt=0), Expected("a number of days above 0")] = env(
        "INGESTION_DEAD_LETTER_MAX_AGE_DAYS", "Days a Redis dead letter is kept; older entries are trimmed at each "
        "round.", default=30.0)
    dead_letter_max_bytes: AtLeastOne = env("INGESTION_DEAD_LETTER_MAX_BYTES", "Bytes the Redis dead-letter list may "
                                            "hold; the oldest entries beyond them are trimmed at each round (an entry "
                                            "is at most ~90 KB: a 64 KiB message, kept whole for replay).",
                                            default=64 * 1024 * 1024)
    sqs_queue_urls: Items = env("INGESTION_SQS_QUEUE_URLS", "Comma-separated SQS queue URLs, polled in turn by "
                                "`ingestion-pipeline intake`. Endpoint and credentials: boto3's `AWS_*` variables "
                                "(`AWS_ENDPOINT_URL_SQS`).", default=(), shown="none")
    sqs_messages_per_tick: AtLeastOne = env("INGESTION_SQS_MESSAGES_PER_TICK", "SQS messages one intake round takes "
                                            "per queue.", default=100)
    sqs_wait_seconds: Annotated[int, AfterValidator(lambda wait: min(20, max(0, wait))),
                                Expected("a whole number of seconds, 0-20")] = env(
        "INGESTION_SQS_WAIT_SECONDS", "Long polling per receive, 0-20 s.", default=1)


class ExtractionLimits(_Area):
    """Per-file bounds: a file over one fails with the reason; the rest of its batch goes on."""

    timeout_seconds: float = env("INGESTION_EXTRACTION_TIMEOUT_SECONDS", "A file's extraction is killed after this.",
                                 default=300.0)
    memory_mb: int = env("INGESTION_EXTRACTION_MEMORY_MB", "Address space of the extraction worker process.",
                         default=3072)
    max_text_chars: AtLeastOne = env("INGESTION_MAX_TEXT_CHARS", "Characters of text one file may hold, every format "
                                     "(beyond: `file_too_much_text`; HTML, Markdown and text are refused before "
                                     "decoding: `text_too_large`).", default=20_000_000)
    max_chunks: AtLeastOne = env("INGESTION_MAX_CHUNKS_PER_FILE", "Chunks one file may make (beyond: "
                                 "`file_too_much_text`).", default=50_000)
    max_tokens: AtLeastOne = env("INGESTION_MAX_TOKENS_PER_FILE", "Tokens of one file's chunks (beyond: "
                                 "`file_too_much_text`).", default=10_000_000)
    # 8 times the corpus's largest PDF (619 pages; benchmarks/big_documents.py reads it); checked from the page
    # count alone
    max_pages: AtLeastOne = env("INGESTION_MAX_PAGES_PER_FILE", "Pages one PDF may have (beyond: "
                                "`file_too_many_pages`, refused when it is opened, before any page is read).",
                                default=5_000)
    # a long scanned book: OCR is the costliest work done to a page (benchmarks/big_documents.py), so this bounds
    # one file's OCR time
    max_ocr_pages: AtLeastOne = env("INGESTION_MAX_OCR_PAGES_PER_FILE", "Pages of one PDF to read by OCR: pages "
                                    "without a text layer, less blank ones and an earlier version's unchanged ones "
                                    "(beyond: `file_too_many_pages`, refused before any page is read).", default=1_000)
    max_member_bytes: int = env("INGESTION_MAX_ZIP_MEMBER_BYTES", "One uncompressed part of an office file.",
                                default=200 << 20, shown="209715200 (200 MB)")
    max_compression_ratio: float = env("INGESTION_MAX_COMPRESSION_RATIO", "Uncompressed / compressed, for parts over 1 "
                                       "MiB.", default=100.0)
    page_images: Flag = env("INGESTION_PAGE_IMAGES", "Render each PDF page at ingest, with where its text lies (OCR's "
                            "word boxes on a scan), for the web app's inspector (kept in the upload store beside the "
                            "file).", default=True)
    # measured by benchmarks/big_documents.py: see docs/benchmarks.md (a unit is one extraction worker's job)
    unit_pages: AtLeastOne = env("INGESTION_UNIT_PAGES", "A PDF of more pages to OCR than this is read in units of "
                                 "about this many, side by side (on the step's lanes; on Celery, one step per unit on "
                                 "any worker); a unit already read is kept when the file is retried.", default=8)
    unit_text_pages: AtLeastOne = env("INGESTION_UNIT_TEXT_PAGES", "Pages with a text layer that weigh as much as one "
                                      "page to OCR when a PDF is cut into units (1: every page counts alike).",
                                      default=100)
    # a tenth of War and Peace, ~60 pages of a manual: a revision re-chunks the sections it changed, not the rest
    unit_characters: AtLeastOne = env("INGESTION_UNIT_CHARACTERS", "A document of more text than this (any format) is "
                                      "chunked in sections of about this many characters, cut only at headings; a new "
                                      "version of it reuses the chunks of every unchanged section.", default=100_000)
    part_characters: AtLeastOne = env("INGESTION_CHUNK_PART_CHARACTERS", "On Celery workers, a document with more text "
                                      "to chunk than this is chunked in parts of whole sections of about this size, a "
                                      "step each.", default=1_000_000)


class ExecutorSettings(_Area):
    """Where a run's steps execute (runtime/executor.py): in the run's process, or on Celery workers."""

    executor: Annotated[Literal["in_process", "celery"], Choice] = env(
        "INGESTION_EXECUTOR", "`celery`: the jobs' steps run on Celery workers (`ingestion-pipeline worker`, any host) "
        "through dagster-celery; `in_process`: in the run's process.", default="in_process")
    broker_url: str = env("CELERY_BROKER_URL", "The Celery broker (and result backend) of the workers.",
                          default="redis://127.0.0.1:6379/0", shown="REDIS_URL", also=("REDIS_URL",))
    redeliver_seconds: Annotated[int, Field(ge=1), Expected("a whole number of seconds of at least 1")] = env(
        "INGESTION_WORKER_REDELIVER_SECONDS", "A step taken by a worker that vanished (its host died) goes to another "
        "worker after this long; keep it above the longest step and below INGESTION_LEASE_SECONDS.", default=600)
    # the fast lane (runtime/fast_lane.py): a small batch's run launched at submit, not at the sensor's next loop
    dagster_url: HttpUrlOrOff = env("INGESTION_DAGSTER_URL", "The Dagster webserver that `submit`, the HTTP API and "
                                    "the intake service ask to launch a small batch's run at once; unset: the upload "
                                    "sensor launches it at its next loop (up to 5 s later); `off`: never, not even "
                                    "beside `make dev`.", shown="unset (`make dev`: its UI)")
    concurrency: AtLeastOne = env("INGESTION_WORKER_CONCURRENCY", "Steps one `ingestion-pipeline worker` runs at once "
                                  "(processes; each keeps its own model).", default=1)


class Settings(BaseModel):
    """Every area of the pipeline's settings (``load_settings()``)."""

    model_config = ConfigDict(frozen=True)

    upload: UploadSettings = Field(default_factory=UploadSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    chunk: ChunkSettings = Field(default_factory=ChunkSettings)
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    s3: S3SyncSettings = Field(default_factory=S3SyncSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    reliability: ReliabilitySettings = Field(default_factory=ReliabilitySettings)
    limits: ExtractionLimits = Field(default_factory=ExtractionLimits)
    queues: QueueSettings = Field(default_factory=QueueSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)


class ApiSettings(_Area):
    """The HTTP API (README: HTTP API). ``jwt_secret`` is checked when the server starts."""

    auth_enabled: Flag = env("AUTH_ENABLED", "`false`: development mode, tenant from `?tenant_id=`, loopback only.",
                             default=True)
    jwt_secret: str | None = env("JWT_SECRET", "HS256 key, at least 32 bytes; the server refuses to start without it.",
                                 shown="none (required)")
    # at least a second: a shorter token is expired when issued
    jwt_expiry_hours: Annotated[float, Field(ge=1 / 3600, le=MAX_TOKEN_HOURS),
                                Expected(f"a number of hours above 0 and at most {MAX_TOKEN_HOURS} (a year)")] = env(
        "JWT_EXPIRY_HOURS", "Token lifetime, in hours: above 0, at most 8760; `serve` refuses others.", default=24.0)
    max_inflight_uploads: AtLeastOne = env("INGESTION_API_MAX_INFLIGHT_UPLOADS", "Concurrent streaming uploads; "
                                           "beyond: 503. A tenant holds at most half, a user half of that; beyond: "
                                           "429.", default=8)
    # half the cores: the share that kept another tenant's p95 lowest under a flood, with the flood's own
    # throughput about the same (benchmarks/tenant_fairness.py)
    searches_per_tenant: AtLeastOne = env("INGESTION_API_SEARCHES_PER_TENANT", "Searches one tenant runs at once per "
                                          "server process; 4x that more wait, beyond: 429 after a 1 s pause "
                                          "(api/read_slots.py).", factory=lambda: max(1, (os.cpu_count() or 2) // 2),
                                          shown="half the CPU cores, at least 1")
    # logins (api/login_guard.py): bcrypt is slow on purpose, so its work is bounded and failures throttled
    max_concurrent_logins: AtLeastOne = env("INGESTION_API_MAX_CONCURRENT_LOGINS", "Password checks at once per server "
                                            "process (bcrypt, ~0.3 s each); over 4x that waiting: 429.", default=2)
    login_failures_per_address: AtLeastOne = env("INGESTION_API_LOGIN_FAILURES_PER_ADDRESS", "Failed logins from one "
                                                 "client address (an IPv6 one: its /64), whatever the accounts, within "
                                                 "the window; beyond: 429 with Retry-After.", default=20)
    # counted per (address, account), not per account: guesses from elsewhere never lock the owner out
    login_failures_per_account: AtLeastOne = env(
        "INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT", "Failed logins from one client address for one account (a tenant's "
        "user, or an unknown email) within the window; beyond: each further try from there waits a delay that doubles "
        "with each failure (5 s, 10 s, ... at most the window), 429 with Retry-After until then.", default=5)
    login_window_seconds: Seconds = env("INGESTION_API_LOGIN_WINDOW_SECONDS", "The window the failed-login limits "
                                        "count in.", default=300.0)
    # who may say which address a request came from (api/server.py); none: the connection's peer, always
    trusted_proxies: Annotated[Items, AfterValidator(_networks),
                               Expected("comma-separated IP addresses or CIDR networks")] = env(
        "INGESTION_API_TRUSTED_PROXIES", "Comma-separated addresses or CIDR networks of the reverse proxies in front "
        "of the API. Only a request whose connection comes from one has its `X-Forwarded-For` believed (the client: "
        "the rightmost address in it that is not a proxy); none: never, the client is the connection's peer. Failed "
        "logins are counted per client address.", default=(), shown="none")
    # a request body (an upload's or a JSON one) silent this long ends with 408
    upload_idle_seconds: Seconds = env("INGESTION_API_UPLOAD_IDLE_SECONDS", "A request body (a streaming upload or a "
                                       "JSON body) that sends nothing this long ends with 408 and its connection "
                                       "closed.", default=10.0)
    # and one slower than this on average, after the idle time
    upload_min_bytes_per_second: Annotated[float, Field(ge=0),
                                           Expected("a number of bytes per second, 0 or more")] = env(
        "INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND", "After the idle time, an upload slower than this on average ends "
        "with 408 (0: no minimum).", default=16 * 1024.0)
    # a request's headers not complete this long after the connection: 408
    header_timeout_seconds: Seconds = env("INGESTION_API_HEADER_TIMEOUT_SECONDS", "A connection whose request line and "
                                          "headers are not complete this long after it opened (or after its previous "
                                          "response) gets 408 and is closed; headers over 64 KiB get 431.",
                                          default=10.0)
    upload_bucket: str | None = env("INGESTION_UPLOAD_BUCKET", "Where presigned uploads land; give it to every "
                                    "service: each refuses it as a tenant's location.", shown="none")
    upload_s3_endpoint: str | None = env("INGESTION_UPLOAD_S3_ENDPOINT", "The presigned-upload bucket's endpoint, if "
                                         "not AWS.", shown="AWS")
    upload_prefix: str = "api-uploads/"  # no variable: not read from the environment
    presign_seconds: int = 900
    # endpoints a tenant may give a source; empty: none
    allowed_s3_endpoints: Annotated[Items, AfterValidator(lambda items: tuple(e.rstrip("/") for e in items))] = env(
        "INGESTION_ALLOWED_S3_ENDPOINTS", "Comma-separated endpoints a tenant may give a source.", default=(),
        shown="none (AWS only)")

    @property
    def jwt_expiry_seconds(self) -> int:
        return int(self.jwt_expiry_hours * 3600)


def load_api_settings() -> ApiSettings:
    return ApiSettings.from_environment()


def load_settings() -> Settings:
    """Every area from the environment (a bad value: ``ValueError`` naming the variable)."""
    return Settings(**{name: area.annotation.from_environment() for name, area in Settings.model_fields.items()})
