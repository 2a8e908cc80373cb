"""Every environment variable the project reads, in one table: the source of ``docs/configuration.md``.

The settings models' variables come from the models themselves (``_setting``: name, default, description as
``core/settings.py`` defines them); the others (databases, folders, tests) are written here.

``python -m ingestion_pipeline.core.environment > docs/configuration.md`` writes the page; a test checks
that the page is current and that every variable the package's code reads is listed here (and nothing
else), so the docs cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from ingestion_pipeline.core import settings


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


def _model_variables() -> dict[str, Variable]:
    """The variables the settings models read: each field's variable, default and description, written once
    there (``core/settings.py``)."""
    found = {}
    for model in (settings.UploadSettings, settings.BatchSettings, settings.ChunkSettings, settings.EmbeddingSettings,
                  settings.S3SyncSettings, settings.MetricsSettings, settings.ReliabilitySettings,
                  settings.QueueSettings, settings.ExtractionLimits, settings.ExecutorSettings, settings.ApiSettings):
        for field in model.model_fields.values():
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            if extra.get("env"):
                shown = extra.get("shown") or str(field.get_default(call_default_factory=False))
                found[extra["env"]] = Variable(extra["env"], shown, field.description or "")
    return found


_FROM_MODELS = _model_variables()


def _setting(name: str) -> Variable:
    return _FROM_MODELS[name]


AREAS: dict[str, tuple[Variable, ...]] = {
    "Databases and folders": (
        Variable("DATABASE_URL", "the embedded Postgres", "The application database (psycopg URL). Unset: the "
                 "embedded PostgreSQL 18 + pgvector 0.8 under `.data/`, started on demand."),
        Variable("INGESTION_EMBEDDED_POSTGRES", "unset", "`1`: a process other than the CLI (your own `dagster "
                 "dev`, a notebook) may start the embedded Postgres when DATABASE_URL is unset."),
        Variable("DAGSTER_PG_URL", "derived from DATABASE_URL", "Dagster's own storage (`postgresql+psycopg2://`)."),
        Variable("DAGSTER_HOME", "`<home>/dagster_home`", "Where `dagster.yaml` (the instance) is read from."),
        Variable("INGESTION_HOME", "the checkout", "The project folder the default paths hang from."),
        Variable("INGESTION_DATA_DIR", "`<home>/.data`", "Embedded Postgres, upload stores and model cache."),
        _setting("INGESTION_UPLOAD_DIR"),
        _setting("INGESTION_METRICS_UPLOAD_DIR"),
        _setting("INGESTION_UPLOAD_STORE"),
        _setting("INGESTION_UPLOAD_STORE_ENDPOINT_URL"),
        _setting("INGESTION_MODEL_CACHE_DIR"),
    ),
    "Documents": (
        _setting("INGESTION_MAX_UPLOAD_BYTES"),
        _setting("INGESTION_BATCH_MAX_FILES"),
        _setting("INGESTION_BATCH_MAX_BYTES"),
        _setting("INGESTION_BATCH_LANES"),
        _setting("INGESTION_BATCH_INTERACTIVE_FILES"),
        _setting("INGESTION_INDEX_SWEEP_NICE"),
        _setting("INGESTION_CHUNK_TARGET_TOKENS"),
        _setting("INGESTION_CHUNK_MAX_TOKENS"),
        _setting("INGESTION_EMBEDDING_MODEL"),
        _setting("INGESTION_EMBEDDING_BATCH_SIZE"),
        _setting("INGESTION_EMBEDDING_BACKEND"),
        _setting("INGESTION_EMBEDDING_PRECISION"),
        _setting("INGESTION_EMBEDDING_DEVICE"),
        _setting("INGESTION_EMBEDDING_SHARE_CHUNKS"),
        _setting("INGESTION_EXTRACTION_TIMEOUT_SECONDS"),
        _setting("INGESTION_EXTRACTION_MEMORY_MB"),
        _setting("INGESTION_MAX_TEXT_CHARS"),
        _setting("INGESTION_MAX_CHUNKS_PER_FILE"),
        _setting("INGESTION_MAX_TOKENS_PER_FILE"),
        _setting("INGESTION_MAX_PAGES_PER_FILE"),
        _setting("INGESTION_MAX_OCR_PAGES_PER_FILE"),
        _setting("INGESTION_MAX_ZIP_MEMBER_BYTES"),
        _setting("INGESTION_MAX_COMPRESSION_RATIO"),
        _setting("INGESTION_PAGE_IMAGES"),
        _setting("INGESTION_UNIT_PAGES"),
        _setting("INGESTION_UNIT_TEXT_PAGES"),
        _setting("INGESTION_UNIT_CHARACTERS"),
        _setting("INGESTION_CHUNK_PART_CHARACTERS"),
        Variable("INGESTION_TESSERACT", "`tesseract` on the PATH", "The Tesseract executable for OCR."),
    ),
    "S3 sources": (
        _setting("INGESTION_S3_PAGE_SIZE"),
        _setting("INGESTION_S3_PAGES_PER_TICK"),
        _setting("INGESTION_SOURCE_SYNC_INTERVAL_SECONDS"),
    ),
    "Workers (several hosts)": (
        _setting("INGESTION_EXECUTOR"),
        _setting("CELERY_BROKER_URL"),
        _setting("INGESTION_EMBEDDING_QUEUE"),
        _setting("INGESTION_WORKER_CONCURRENCY"),
        _setting("INGESTION_DAGSTER_URL"),
        Variable("INGESTION_WARM_RUN_WORKERS", "1 (`dagster.yaml`)", "Run workers the instance's launcher keeps "
                 "idle ahead of need (Dagster, the code location and the model loaded): a launched run starts at "
                 "once. `0`: every run starts a fresh interpreter, Dagster's default."),
        _setting("INGESTION_WORKER_REDELIVER_SECONDS"),
        _setting("INGESTION_CELERY_POLL_SECONDS"),
    ),
    "Queues": (
        _setting("REDIS_URL"),
        _setting("INGESTION_INTAKE_INTERVAL_SECONDS"),
        _setting("INGESTION_QUEUE_JOBS_PER_TICK"),
        _setting("INGESTION_QUEUE_HEARTBEAT_SECONDS"),
        _setting("INGESTION_DEAD_LETTER_MAX_ENTRIES"),
        _setting("INGESTION_DEAD_LETTER_MAX_AGE_DAYS"),
        _setting("INGESTION_DEAD_LETTER_MAX_BYTES"),
        _setting("INGESTION_SQS_QUEUE_URLS"),
        _setting("INGESTION_SQS_MESSAGES_PER_TICK"),
        _setting("INGESTION_SQS_WAIT_SECONDS"),
    ),
    "Metric exports": (
        _setting("INGESTION_METRICS_MAX_UPLOAD_BYTES"),
        _setting("INGESTION_METRICS_VALID_THRESHOLD"),
        _setting("INGESTION_STAGING_RETENTION_DAYS"),
    ),
    "Reliability and retention": (
        _setting("INGESTION_LEASE_SECONDS"),
        _setting("INGESTION_RETRY_BACKOFF"),
        _setting("INGESTION_JANITOR_INTERVAL_SECONDS"),
        _setting("INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS"),
        _setting("INGESTION_FAILED_TTL_DAYS"),
        _setting("INGESTION_ORPHAN_TTL_HOURS"),
        _setting("INGESTION_PARTITION_RETENTION_DAYS"),
        Variable("INGESTION_PROGRESS_SECONDS", "2", "How often long steps report progress."),
    ),
    "HTTP API": (
        _setting("JWT_SECRET"),
        _setting("JWT_EXPIRY_HOURS"),
        _setting("AUTH_ENABLED"),
        _setting("INGESTION_API_MAX_INFLIGHT_UPLOADS"),
        _setting("INGESTION_API_SEARCHES_PER_TENANT"),
        _setting("INGESTION_API_MAX_CONCURRENT_LOGINS"),
        _setting("INGESTION_API_LOGIN_FAILURES_PER_ADDRESS"),
        _setting("INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT"),
        _setting("INGESTION_API_LOGIN_WINDOW_SECONDS"),
        _setting("INGESTION_API_TRUSTED_PROXIES"),
        _setting("INGESTION_API_UPLOAD_IDLE_SECONDS"),
        _setting("INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND"),
        _setting("INGESTION_API_HEADER_TIMEOUT_SECONDS"),
        _setting("INGESTION_UPLOAD_BUCKET"),
        _setting("INGESTION_UPLOAD_S3_ENDPOINT"),
        _setting("INGESTION_ALLOWED_S3_ENDPOINTS"),
    ),
    "Tests only": (
        Variable("INGESTION_FAILPOINT", "none", "A named point where a fault test stops a worker."),
        Variable("INGESTION_FAILPOINT_DIR", "none", "Where a reached failpoint leaves its marker."),
        Variable("INGESTION_FAILPOINT_SLEEP", "120", "How long a reached failpoint sleeps."),
        Variable("INGESTION_ALLOW_FAILPOINTS", "unset", "`1` arms failpoints outside pytest."),
        Variable("DO_NOT_TRACK", "set to `true` by the project", "Turns off unstructured's telemetry."),
    ),
}


def names() -> set[str]:
    return {variable.name for variables in AREAS.values() for variable in variables}


def markdown() -> str:
    lines = ["# Configuration", "",
             "Every setting is an environment variable with a default that works on a fresh clone. This page is "
             "generated from `ingestion_pipeline/core/environment.py` "
             "(`python -m ingestion_pipeline.core.environment > docs/configuration.md`). S3 credentials and "
             "endpoints are boto3's standard `AWS_*` variables, or the `s3` resource's fields (those of "
             "dagster-aws's `S3Resource`).", ""]
    for area, variables in AREAS.items():
        lines += [f"## {area}", "", "| variable | default | |", "|---|---|---|"]
        lines += [f"| `{v.name}` | {v.default} | {v.meaning} |" for v in variables]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
