"""Runtime settings: one typed model per area (pydantic-settings), each field's default written once, its
environment variable named beside it (``env=``), read once per call site (``load_settings()``).

Every knob has a default that works on a fresh clone: the embedded Postgres and the upload store live under the
git-ignored ``.data/`` folder of the project (or ``INGESTION_HOME``). A model built directly (``BatchSettings(
max_files=3)``) is its defaults and arguments only; ``Area.from_environment()`` (``load_settings``) reads the
environment too. A bad value is a ``ValueError`` naming the variable. ``core/environment.py`` renders the
fields' variables, defaults and descriptions as docs/configuration.md.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic_settings import NoDecode, SettingsConfigDict

from ingestion_pipeline.core.setting_fields import (  # noqa: F401 (QUEUE_NAME, MAX_TOKEN_HOURS: read from here)
    MAX_TOKEN_HOURS,
    QUEUE_NAME,
    WHOLE_AT_LEAST_ONE,
    _Area,
    _at_least,
    _at_least_one,
    _bool,
    _comma_list,
    _finite,
    _float,
    _http_url,
    _int,
    _nice,
    _one_of,
    _Parse,
    _path,
    _positive,
    _queue_name,
    _redis_url,
    _s3_store_uri,
    _seconds_list,
    _token_hours,
    env,
)


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


class UploadSettings(_Area):
    upload_dir: Path = env("INGESTION_UPLOAD_DIR", default_factory=lambda: (data_dir() / "uploads").resolve(),
                           parse=_path, shown="`<data>/uploads`",
                           description="Where uploaded documents wait (content-addressed).")
    max_bytes: int = env("INGESTION_MAX_UPLOAD_BYTES", default=50 * 1024 * 1024, parse=_int, expected="an integer",
                         shown="52428800 (50 MB)", description="Largest document accepted.")
    # s3://bucket/prefix: both upload stores live there (core/s3_upload_store)
    store_uri: str | None = env("INGESTION_UPLOAD_STORE", parse=_s3_store_uri,
                                expected="s3://bucket or s3://bucket/prefix", shown="local (the two folders above)",
                                description="`s3://bucket/prefix`: both upload stores in S3 (`<prefix>/documents/`, "
                                            "`<prefix>/metrics/`), so hosts share no disk (docs/deployment.md).")
    store_endpoint_url: str | None = env("INGESTION_UPLOAD_STORE_ENDPOINT_URL", shown="the AWS environment's",
                                         description="The S3 endpoint of `INGESTION_UPLOAD_STORE` (MinIO, moto).")


class BatchSettings(_Area):
    """Bounds of one `document_batches` partition (and so of one run)."""

    # a run's fixed cost is paid once a batch: fewer, larger batches ingest many small files faster
    # (benchmarks/first_ingest.py)
    max_files: int = env("INGESTION_BATCH_MAX_FILES", default=200, parse=_int, expected="an integer",
                         description="Files in one batch (one partition, one run).")
    max_bytes: int = env("INGESTION_BATCH_MAX_BYTES", default=200 * 1024 * 1024, parse=_int, expected="an integer",
                         shown="209715200 (200 MB)", description="Bytes in one batch.")
    # a person waiting: queued ahead of bulk runs, a run slot of its own (defs/partitions.py: RUN_CLASS_TAG)
    interactive_max_files: int = env("INGESTION_BATCH_INTERACTIVE_FILES", default=10, parse=_at_least_one,
                                     expected=WHOLE_AT_LEAST_ONE,
                                     description="A batch of at most this many files, not from an S3 source's "
                                                 "listing (uploads, queue jobs, objects an S3 event told of), is "
                                                 "interactive: queued first, a run slot bulk runs never take.")
    lanes: int = env("INGESTION_BATCH_LANES", default=2, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
                     description="Files a step works on at once (at most the run's 4 connections).")
    index_nice: int = env("INGESTION_INDEX_SWEEP_NICE", default=10, parse=_nice, expected="a whole number from 0 to 19",
                          description="The CPU priority (nice) of the database backends that put promoted vectors "
                                      "into their HNSW graph, where the database runs on this host (0: normal).")


class ChunkSettings(_Area):
    """Token budgets; the hard cap is further clamped to the model's own max sequence length."""

    target_tokens: int = env("INGESTION_CHUNK_TARGET_TOKENS", default=200, parse=_int, expected="an integer",
                             description="A chunk's target size, in the model's tokens.")
    max_tokens: int = env("INGESTION_CHUNK_MAX_TOKENS", default=256, parse=_int, expected="an integer",
                          description="A chunk's hard cap (further capped by the model's own).")


class EmbeddingSettings(_Area):
    model_path: str | None = env("INGESTION_EMBEDDING_MODEL", shown="the packaged all-MiniLM-L6-v2",
                                 description="A sentence-transformers model folder.")
    # measured: benchmarks/embedding_backends.py
    batch_size: int = env("INGESTION_EMBEDDING_BATCH_SIZE", default=16, parse=lambda raw: min(256, int(raw)),
                          expected="an integer", description="Chunks per model call (at most 256).")
    backend: str = env("INGESTION_EMBEDDING_BACKEND", default="auto",
                       parse=_one_of("auto", "openvino", "onnx", "torch"), expected="auto, openvino, onnx or torch",
                       description="`auto`, `openvino`, `onnx` or `torch`.")
    precision: str = env("INGESTION_EMBEDDING_PRECISION", default="auto",
                         parse=_one_of("auto", "int8", "bf16", "f16", "f32"), expected="auto, int8, bf16, f16 or f32",
                         description="`auto`, `int8`, `bf16`, `f16` or `f32`: what `ingestion-pipeline model prepare` "
                                     "asks for when it makes the deployment's model decision (a reduced precision only "
                                     "if it passes the quality gate and this host can run it faster; `auto` takes the "
                                     "fastest that does; `f16` on CUDA only). Every process then embeds as recorded, "
                                     "whatever this says on its host (docs/pipeline.md).")
    device: str = env("INGESTION_EMBEDDING_DEVICE", default="auto", parse=_one_of("auto", "cpu", "cuda"),
                      expected="auto, cpu or cuda",
                      description="`auto` (an NVIDIA GPU where this host has one), `cpu` or `cuda` (an error without "
                                  "one): where this host embeds. `model prepare` records the device it judged on as "
                                  "part of the deployment's decision (docs/pipeline.md).")
    share_chunks: int = env("INGESTION_EMBEDDING_SHARE_CHUNKS", default=1024, parse=_at_least_one,
                            expected=WHOLE_AT_LEAST_ONE,
                            description="With Celery workers, a batch's chunks still to encode are split into "
                                        "shares of about this many, each a step of its own that any embedding "
                                        "worker takes (a big document's vectors on several hosts at once).")
    cache_dir: Path | None = env("INGESTION_MODEL_CACHE_DIR", default_factory=lambda: (data_dir() / "models").resolve(),
                                 parse=_path, shown="`<data>/models`",
                                 description="The exported ONNX / OpenVINO models.")


class S3SyncSettings(_Area):
    """Bounded listing work: a round of the intake service lists at most pages_per_tick pages of page_size keys
    per source, every sync_interval_seconds."""

    page_size: int = env("INGESTION_S3_PAGE_SIZE", default=1000, parse=lambda raw: min(1000, int(raw)),
                         expected="an integer", description="Keys per listing page (at most 1000).")
    pages_per_tick: int = env("INGESTION_S3_PAGES_PER_TICK", default=5, parse=_int, expected="an integer",
                              description="Listing pages per source per round of `ingestion-pipeline intake`.")
    sync_interval_seconds: float = env("INGESTION_SOURCE_SYNC_INTERVAL_SECONDS", default=30.0, parse=_positive,
                                       expected="a number of seconds above 0", shown="30",
                                       description="Seconds between the intake service's listings of the S3 "
                                                   "sources.")


class MetricsSettings(_Area):
    upload_dir: Path = env("INGESTION_METRICS_UPLOAD_DIR", default_factory=lambda: (data_dir() / "metric_uploads")
                           .resolve(), parse=_path, shown="`<data>/metric_uploads`",
                           description="Where metric exports wait.")
    # exports stream (Arrow batches / row by row); memory does not grow with size
    max_bytes: int = env("INGESTION_METRICS_MAX_UPLOAD_BYTES", default=2 * 1024**3, parse=_int,
                         expected="an integer", shown="2147483648 (2 GiB)", description="Largest export accepted.")
    valid_threshold: float = env("INGESTION_METRICS_VALID_THRESHOLD", default=0.9, parse=_float,
                                 expected="a number", description="Share of valid rows an upload needs to be promoted.")
    staging_retention_days: int = env("INGESTION_STAGING_RETENTION_DAYS", default=7, parse=_int,
                                      expected="an integer", description="Staged rows are deleted after this.")


class ReliabilitySettings(_Area):
    """Leases, retries and retention (README: Failure and recovery)."""

    lease_seconds: float = env("INGESTION_LEASE_SECONDS", default=900.0, parse=_finite, expected="a finite number",
                               shown="900", description="A claim expires without a heartbeat for this long.")
    # waits before attempts 2, 3, 4
    retry_backoff_seconds: Annotated[tuple[float, ...], NoDecode] = env(
        "INGESTION_RETRY_BACKOFF", default=(5.0, 10.0, 30.0), parse=_seconds_list,
        expected="comma-separated seconds like 5,10,30", empty_is_default=False, shown="5,10,30",
        description="Seconds before attempts 2, 3, 4 of a transient failure.")
    janitor_interval_seconds: float = env("INGESTION_JANITOR_INTERVAL_SECONDS", default=60.0, parse=_positive,
                                          expected="a number of seconds above 0", shown="60",
                                          description="Seconds between the janitor's rounds in "
                                                      "`ingestion-pipeline intake` (dead runs, expired claims).")
    relaunch_queued_after_seconds: float = env("INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS", default=3600.0,
                                               parse=_finite, expected="a finite number", shown="3600",
                                               description="Queued work no run picked up is relaunched.")
    failed_ttl_days: float = env("INGESTION_FAILED_TTL_DAYS", default=7.0, parse=_finite, expected="a finite number",
                                 shown="7", description="Raw bytes of failed, dead-lettered, canceled work are kept.")
    orphan_ttl_hours: float = env("INGESTION_ORPHAN_TTL_HOURS", default=24.0, parse=_finite,
                                  expected="a finite number", shown="24",
                                  description="Stored files no ledger row refers to are kept.")
    partition_retention_days: float = env(
        "INGESTION_PARTITION_RETENTION_DAYS", default=30.0, parse=_finite, expected="a finite number", shown="30",
        description="A finished batch's (or upload's) Dagster partition is deleted after this; its runs stay. "
                    "Re-index older batches with `ingestion-pipeline reindex`.")

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

    redis_url: str | None = env("REDIS_URL", default="redis://127.0.0.1:6379/0", parse=_redis_url,
                                description="The Redis server of the job queue (`rag:ingest:*`). Unset and nothing "
                                            "listening there, or `none`: no Redis queue; set and not answering: an "
                                            "error.")
    # REDIS_URL set: a server that does not answer is an error, not "no queue" (the same variable, read as "is it set")
    redis_configured: bool = Field(False, validation_alias=AliasChoices("REDIS_URL"),
                                   json_schema_extra={"env": None, "parse": _Parse(lambda raw: bool(raw), "", True)})
    jobs_per_tick: int = env("INGESTION_QUEUE_JOBS_PER_TICK", default=100, parse=_at_least_one,
                             expected=WHOLE_AT_LEAST_ONE,
                             description="Redis jobs one round of `ingestion-pipeline intake` (or of `process`) "
                                         "takes.")
    intake_interval_seconds: float = env(
        "INGESTION_INTAKE_INTERVAL_SECONDS", default=1.0, parse=_positive, expected="a number of seconds above 0",
        shown="1", description="Seconds between the intake service's rounds on the Redis queue and on each SQS "
                               "queue.")
    consumer_heartbeat_seconds: float = env(
        "INGESTION_QUEUE_HEARTBEAT_SECONDS", default=30.0, parse=_positive, expected="a number of seconds above 0",
        shown="30", description="A Redis consumer silent this long is dead: the next consumer hands the jobs it held "
                                "back to their queues.")
    dead_letter_max_entries: int = env(
        "INGESTION_DEAD_LETTER_MAX_ENTRIES", default=10_000, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
        shown="10000", description="Entries the Redis dead-letter list keeps, newest first (queues/redis_contract.py).")
    dead_letter_max_age_days: float = env(
        "INGESTION_DEAD_LETTER_MAX_AGE_DAYS", default=30.0, parse=_positive, expected="a number of days above 0",
        shown="30", description="Days a Redis dead letter is kept; older entries are trimmed at each round.")
    dead_letter_max_bytes: int = env(
        "INGESTION_DEAD_LETTER_MAX_BYTES", default=64 * 1024 * 1024, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
        shown="67108864", description="Bytes the Redis dead-letter list may hold; the oldest entries beyond them are "
                                      "trimmed at each round (an entry is at most ~90 KB: a 64 KiB message, kept "
                                      "whole for replay).")
    sqs_queue_urls: Annotated[tuple[str, ...], NoDecode] = env(
        "INGESTION_SQS_QUEUE_URLS", default=(), parse=_comma_list, shown="none",
        description="Comma-separated SQS queue URLs, polled in turn by `ingestion-pipeline intake`. Endpoint "
                    "and credentials: boto3's `AWS_*` variables (`AWS_ENDPOINT_URL_SQS`).")
    sqs_messages_per_tick: int = env("INGESTION_SQS_MESSAGES_PER_TICK", default=100, parse=_at_least_one,
                                     expected=WHOLE_AT_LEAST_ONE,
                                     description="SQS messages one intake round takes per queue.")
    sqs_wait_seconds: int = env("INGESTION_SQS_WAIT_SECONDS", default=1, parse=lambda raw: min(20, max(0, int(raw))),
                                expected="a whole number of seconds, 0-20",
                                description="Long polling per receive, 0-20 s.")


class ExtractionLimits(_Area):
    """Per-file bounds: a file over one fails with the reason; the rest of its batch goes on."""

    timeout_seconds: float = env("INGESTION_EXTRACTION_TIMEOUT_SECONDS", default=300.0, parse=_finite,
                                 expected="a finite number", shown="300",
                                 description="A file's extraction is killed after this.")
    memory_mb: int = env("INGESTION_EXTRACTION_MEMORY_MB", default=3072, parse=_int, expected="an integer",
                         description="Address space of the extraction worker process.")
    max_text_chars: int = env("INGESTION_MAX_TEXT_CHARS", default=20_000_000, parse=_at_least_one,
                              expected=WHOLE_AT_LEAST_ONE, shown="20000000",
                              description="Characters of text one file may hold, every format (beyond: "
                                          "`file_too_much_text`; HTML, Markdown and text are refused before "
                                          "decoding: `text_too_large`).")
    max_chunks: int = env("INGESTION_MAX_CHUNKS_PER_FILE", default=50_000, parse=_at_least_one,
                          expected=WHOLE_AT_LEAST_ONE, shown="50000",
                          description="Chunks one file may make (beyond: `file_too_much_text`).")  # 20M chars: ~25,000
    max_tokens: int = env("INGESTION_MAX_TOKENS_PER_FILE", default=10_000_000, parse=_at_least_one,
                          expected=WHOLE_AT_LEAST_ONE, shown="10000000",
                          description="Tokens of one file's chunks (beyond: `file_too_much_text`).")
    # 8 times the corpus's largest PDF (619 pages; benchmarks/big_documents.py reads it); checked from the page
    # count alone
    max_pages: int = env("INGESTION_MAX_PAGES_PER_FILE", default=5_000, parse=_at_least_one,
                         expected=WHOLE_AT_LEAST_ONE, shown="5000",
                         description="Pages one PDF may have (beyond: `file_too_many_pages`, refused when it is "
                                     "opened, before any page is read).")
    # a long scanned book: OCR is the costliest work done to a page (benchmarks/big_documents.py), so this bounds
    # one file's OCR time
    max_ocr_pages: int = env("INGESTION_MAX_OCR_PAGES_PER_FILE", default=1_000, parse=_at_least_one,
                             expected=WHOLE_AT_LEAST_ONE, shown="1000",
                             description="Pages of one PDF to read by OCR: pages without a text layer, less blank "
                                         "ones and an earlier version's unchanged ones (beyond: "
                                         "`file_too_many_pages`, refused before any page is read).")
    max_member_bytes: int = env("INGESTION_MAX_ZIP_MEMBER_BYTES", default=200 << 20, parse=_int, expected="an integer",
                                shown="209715200 (200 MB)",
                                description="One uncompressed part of an office file.")
    max_compression_ratio: float = env("INGESTION_MAX_COMPRESSION_RATIO", default=100.0, parse=_finite, shown="100",
                                       expected="a finite number",
                                       description="Uncompressed / compressed, for parts over 1 MiB.")
    page_images: bool = env("INGESTION_PAGE_IMAGES", default=True, parse=_bool, expected="true or false",
                            shown="true",
                            description="Render each PDF page at ingest, with where its text lies (OCR's word "
                                        "boxes on a scan), for the web app's inspector (kept in the upload store "
                                        "beside the file).")
    # measured by benchmarks/big_documents.py: see docs/benchmarks.md (a unit is one extraction worker's job)
    unit_pages: int = env("INGESTION_UNIT_PAGES", default=8, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
                          description="A PDF of more pages to OCR than this is read in units of about this many, "
                                      "side by side (on the step's lanes; on Celery, one step per unit on any "
                                      "worker); a unit already read is kept when the file is retried.")
    unit_text_pages: int = env("INGESTION_UNIT_TEXT_PAGES", default=100, parse=_at_least_one,
                               expected=WHOLE_AT_LEAST_ONE, description="Pages with a text layer that weigh as "
                               "much as one page to OCR when a PDF is cut into units (1: every page counts alike).")
    # a tenth of War and Peace, ~60 pages of a manual: a revision re-chunks the sections it changed, not the rest
    unit_characters: int = env("INGESTION_UNIT_CHARACTERS", default=100_000, parse=_at_least_one,
                               expected=WHOLE_AT_LEAST_ONE, shown="100000",
                               description="A document of more text than this (any format) is chunked in sections "
                                           "of about this many characters, cut only at headings; a new version "
                                           "of it reuses the chunks of every unchanged section.")
    part_characters: int = env("INGESTION_CHUNK_PART_CHARACTERS", default=1_000_000, parse=_at_least_one,
                               expected=WHOLE_AT_LEAST_ONE, shown="1000000",
                               description="On Celery workers, a document with more text to chunk than this is "
                                           "chunked in parts of whole sections of about this size, a step each.")


class ExecutorSettings(_Area):
    """Where a run's steps execute (runtime/executor.py): in the run's process, or on Celery workers."""

    executor: str = env("INGESTION_EXECUTOR", default="in_process", parse=_one_of("in_process", "celery"),
                        expected="in_process or celery",
                        description="`celery`: the jobs' steps run on Celery workers (`ingestion-pipeline worker`, "
                                    "any host) through dagster-celery; `in_process`: in the run's process.")
    broker_url: str = env("CELERY_BROKER_URL", "REDIS_URL", default="redis://127.0.0.1:6379/0", shown="REDIS_URL",
                          description="The Celery broker (and result backend) of the workers.")
    redeliver_seconds: int = env("INGESTION_WORKER_REDELIVER_SECONDS", default=600, parse=_at_least_one,
                                 expected="a whole number of seconds of at least 1",
                                 description="A step taken by a worker that vanished (its host died) goes to another "
                                             "worker after this long; keep it above the longest step and below "
                                             "INGESTION_LEASE_SECONDS.")
    # dagster-celery's own loop looks once a second: half a second on average after each step of a run's chain;
    # below 0.01 s the loop is a busy wait on the result backend with hundreds of steps in flight
    poll_seconds: float = env("INGESTION_CELERY_POLL_SECONDS", default=0.2, parse=_at_least(0.01),
                              expected="a number of seconds of at least 0.01",
                              description="The longest pause between a Celery run's looks for its finished steps "
                                          "(a look every tenth of the time since a step was sent or ended, from "
                                          "0.02 s; at most 500 result-backend reads a second, one per step).")
    # the fast lane (runtime/fast_lane.py): a small batch's run launched at submit, not at the sensor's next loop
    dagster_url: str | None = env("INGESTION_DAGSTER_URL", parse=_http_url,
                                  expected="an http:// or https:// URL, or off",
                                  shown="unset (`make dev`: its UI)",
                                  description="The Dagster webserver that `submit`, the HTTP API and the intake "
                                              "service ask to launch a small batch's run at once; unset: the "
                                              "upload sensor launches it at its next loop (up to 5 s later); "
                                              "`off`: never, not even beside `make dev`.")
    embedding_queue: str | None = env("INGESTION_EMBEDDING_QUEUE", parse=_queue_name, shown="dagster",
                                      expected="a Celery queue name (letters, digits, '.', '_', '-')",
                                      description="The Celery queue of the embedding steps "
                                                  "(`document_embeddings`): `gpu`, with `ingestion-pipeline worker "
                                                  "--queue gpu` on the GPU hosts, keeps embedding on them while the "
                                                  "other steps stay on the workers of the default queue `dagster`.")
    concurrency: int = env("INGESTION_WORKER_CONCURRENCY", default=1, parse=_at_least_one,
                           expected=WHOLE_AT_LEAST_ONE,
                           description="Steps one `ingestion-pipeline worker` runs at once (processes; each keeps its "
                                       "own model).")


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

    AREAS: ClassVar[tuple[str, ...]] = ("upload", "batch", "chunk", "embedding", "s3", "metrics", "reliability",
                                        "limits", "queues", "executor")


def _networks(raw: str) -> tuple[str, ...]:
    """Each entry an address or a network, written as a network (uvicorn would take a typo, or a network with
    host bits, for a name that matches nothing); not every address (``*``, ``0.0.0.0/0``: any client's claim)."""
    networks = [ipaddress.ip_network(entry, strict=False) for entry in _comma_list(raw)]
    if any(network.prefixlen == 0 for network in networks):
        raise ValueError("every address")
    return tuple(str(network) for network in networks)


class ApiSettings(_Area):
    """The HTTP API (README: HTTP API). ``jwt_secret`` is checked when the server starts."""

    # fields of no variable are not read from the environment (their "variable" is one nobody sets)
    model_config = SettingsConfigDict(frozen=True, extra="ignore", populate_by_name=True, case_sensitive=True,
                                      env_prefix="not_from_the_environment__")

    auth_enabled: bool = env("AUTH_ENABLED", default=True, parse=_bool, expected="true or false", shown="true",
                             description="`false`: development mode, tenant from `?tenant_id=`, loopback only.")
    jwt_secret: str | None = env("JWT_SECRET", shown="none (required)",
                                 description="HS256 key, at least 32 bytes; the server refuses to start without it.")
    jwt_expiry_hours: float = env("JWT_EXPIRY_HOURS", default=24.0, parse=_token_hours,
                                  expected=f"a number of hours above 0 and at most {MAX_TOKEN_HOURS} (a year)",
                                  shown="24", description="Token lifetime, in hours: above 0, at most 8760; `serve` "
                                                          "refuses others.")
    max_inflight_uploads: int = env("INGESTION_API_MAX_INFLIGHT_UPLOADS", default=8, parse=_at_least_one,
                                    expected=WHOLE_AT_LEAST_ONE,
                                    description="Concurrent streaming uploads; beyond: 503. A tenant holds at most "
                                                "half, a user half of that; beyond: 429.")
    # half the cores: on 2 cores a share of 1 kept another tenant's p95 at 50 ms under a flood, 2 at 105 ms
    # (benchmarks/tenant_fairness.py; idle 8-12 ms), with the flood's own throughput about the same
    searches_per_tenant: int = env("INGESTION_API_SEARCHES_PER_TENANT",
                                   default_factory=lambda: max(1, (os.cpu_count() or 2) // 2), parse=_at_least_one,
                                   expected=WHOLE_AT_LEAST_ONE, shown="half the CPU cores, at least 1",
                                   description="Searches one tenant runs at once per server process; 4x that more "
                                               "wait, beyond: 429 after a 1 s pause (api/read_slots.py).")
    # logins (api/login_guard.py): bcrypt is slow on purpose, so its work is bounded and failures throttled
    max_concurrent_logins: int = env("INGESTION_API_MAX_CONCURRENT_LOGINS", default=2, parse=_at_least_one,
                                     expected=WHOLE_AT_LEAST_ONE,
                                     description="Password checks at once per server process (bcrypt, ~0.3 s "
                                                 "each); over 4x that waiting: 429.")
    login_failures_per_address: int = env(
        "INGESTION_API_LOGIN_FAILURES_PER_ADDRESS", default=20, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
        description="Failed logins from one client address (an IPv6 one: its /64), whatever the accounts, within "
                    "the window; beyond: 429 with Retry-After.")
    # counted per (address, account), not per account: guesses from elsewhere never lock the owner out
    login_failures_per_account: int = env(
        "INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT", default=5, parse=_at_least_one, expected=WHOLE_AT_LEAST_ONE,
        description="Failed logins from one client address for one account (a tenant's user, or an unknown "
                    "email) within the window; beyond: each further try from there waits a delay that doubles "
                    "with each failure (5 s, 10 s, ... at most the window), 429 with Retry-After until then.")
    login_window_seconds: float = env("INGESTION_API_LOGIN_WINDOW_SECONDS", default=300.0, parse=_positive,
                                      expected="a number of seconds above 0", shown="300",
                                      description="The window the failed-login limits count in.")
    # who may say which address a request came from (api/server.py); none: the connection's peer, always
    trusted_proxies: Annotated[tuple[str, ...], NoDecode] = env(
        "INGESTION_API_TRUSTED_PROXIES", default=(), parse=_networks, shown="none",
        expected="comma-separated IP addresses or CIDR networks",
        description="Comma-separated addresses or CIDR networks of the reverse proxies in front of the API. Only "
                    "a request whose connection comes from one has its `X-Forwarded-For` believed (the client: "
                    "the rightmost address in it that is not a proxy); none: never, the client is the "
                    "connection's peer. Failed logins are counted per client address.")
    # a request body (an upload's or a JSON one) silent this long ends with 408
    upload_idle_seconds: float = env("INGESTION_API_UPLOAD_IDLE_SECONDS", default=10.0, parse=_positive,
                                     expected="a number of seconds above 0", shown="10",
                                     description="A request body (a streaming upload or a JSON body) that sends "
                                                 "nothing this long ends with 408 and its connection closed.")
    # and one slower than this on average, after the idle time
    upload_min_bytes_per_second: float = env(
        "INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND", default=16 * 1024.0, parse=_at_least(0),
        expected="a number of bytes per second, 0 or more", shown="16384",
        description="After the idle time, an upload slower than this on average ends with 408 (0: no minimum).")
    # a request's headers not complete this long after the connection: 408
    header_timeout_seconds: float = env(
        "INGESTION_API_HEADER_TIMEOUT_SECONDS", default=10.0, parse=_positive, expected="a number of seconds above 0",
        shown="10", description="A connection whose request line and headers are not complete this long after it "
                                "opened (or after its previous response) gets 408 and is closed; headers over 64 KiB "
                                "get 431.")
    upload_bucket: str | None = env("INGESTION_UPLOAD_BUCKET", shown="none",
                                    description="Where presigned uploads land; give it to every service: "
                                                "each refuses it as a tenant's location.")
    upload_s3_endpoint: str | None = env("INGESTION_UPLOAD_S3_ENDPOINT", shown="AWS",
                                         description="The presigned-upload bucket's endpoint, if not AWS.")
    upload_prefix: str = "api-uploads/"
    presign_seconds: int = 900
    # endpoints a tenant may give a source; empty: none
    allowed_s3_endpoints: Annotated[tuple[str, ...], NoDecode] = env(
        "INGESTION_ALLOWED_S3_ENDPOINTS", default=(), parse=lambda raw: tuple(e.rstrip("/") for e in _comma_list(raw)),
        shown="none (AWS only)", description="Comma-separated endpoints a tenant may give a source.")

    @property
    def jwt_expiry_seconds(self) -> int:
        return int(self.jwt_expiry_hours * 3600)


def load_api_settings() -> ApiSettings:
    return ApiSettings.from_environment()


def load_settings() -> Settings:
    """Every area from the environment (a bad value: ``ValueError`` naming the variable)."""
    return Settings(**{area: Settings.model_fields[area].annotation.from_environment() for area in Settings.AREAS})
