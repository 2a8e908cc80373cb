"""Every environment variable the project reads, in one table: the source of ``docs/configuration.md``.

The settings models' variables come from the models themselves (``_settings``: name, default, description as
``core/settings.py`` defines them); the others (databases, folders, tests) are written here.

``python -m ingestion_pipeline.core.environment > docs/configuration.md`` writes the page; a test checks
that the page is current and that every variable the package's code reads is listed here (and nothing
else), so the docs cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic.fields import FieldInfo

from ingestion_pipeline.core import settings


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


def _shown(field: FieldInfo) -> str:
    """A field's default as the page writes it: its ``shown`` text, else the value (``30``, not ``30.0``)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    default = field.get_default(call_default_factory=False)
    if isinstance(default, float) and default.is_integer():
        default = int(default)
    return str(extra.get("shown") or (str(default).lower() if isinstance(default, bool) else default))


def _model_variables() -> dict[str, Variable]:
    """The variables the settings models read: each field's variable, default and description, written once
    there (``core/settings.py``); a field of no description (``redis_configured``) is another reading of one."""
    found = {}
    for model in (*(area.annotation for area in settings.Settings.model_fields.values()), settings.ApiSettings):
        for field in model.model_fields.values():
            if field.description and (names := settings.variables(field)):
                found[names[0]] = Variable(names[0], _shown(field), field.description)
    return found


_FROM_MODELS = _model_variables()


def _settings(*names: str) -> tuple[Variable, ...]:
    return tuple(_FROM_MODELS[name] for name in names)


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
        *_settings("INGESTION_UPLOAD_DIR", "INGESTION_METRICS_UPLOAD_DIR", "INGESTION_UPLOAD_STORE",
                   "INGESTION_UPLOAD_STORE_ENDPOINT_URL", "INGESTION_MODEL_CACHE_DIR"),
    ),
    "Documents": (
        *_settings("INGESTION_MAX_UPLOAD_BYTES", "INGESTION_BATCH_MAX_FILES", "INGESTION_BATCH_MAX_BYTES",
                   "INGESTION_BATCH_LANES", "INGESTION_BATCH_INTERACTIVE_FILES", "INGESTION_INDEX_SWEEP_NICE",
                   "INGESTION_CHUNK_TARGET_TOKENS", "INGESTION_CHUNK_MAX_TOKENS", "INGESTION_EMBEDDING_MODEL",
                   "INGESTION_EMBEDDING_BATCH_SIZE", "INGESTION_EMBEDDING_BACKEND", "INGESTION_EMBEDDING_PRECISION",
                   "INGESTION_EMBEDDING_DEVICE", "INGESTION_EMBEDDING_SHARE_CHUNKS",
                   "INGESTION_EXTRACTION_TIMEOUT_SECONDS", "INGESTION_EXTRACTION_MEMORY_MB", "INGESTION_MAX_TEXT_CHARS",
                   "INGESTION_MAX_CHUNKS_PER_FILE", "INGESTION_MAX_TOKENS_PER_FILE", "INGESTION_MAX_PAGES_PER_FILE",
                   "INGESTION_MAX_OCR_PAGES_PER_FILE", "INGESTION_MAX_ZIP_MEMBER_BYTES",
                   "INGESTION_MAX_COMPRESSION_RATIO", "INGESTION_PAGE_IMAGES", "INGESTION_UNIT_PAGES",
                   "INGESTION_UNIT_TEXT_PAGES", "INGESTION_UNIT_CHARACTERS", "INGESTION_CHUNK_PART_CHARACTERS"),
        Variable("INGESTION_TESSERACT", "`tesseract` on the PATH", "The Tesseract executable for OCR."),
    ),
    "S3 sources": (
        *_settings("INGESTION_S3_PAGE_SIZE", "INGESTION_S3_PAGES_PER_TICK", "INGESTION_SOURCE_SYNC_INTERVAL_SECONDS"),
    ),
    "Workers (several hosts)": (
        *_settings("INGESTION_EXECUTOR", "CELERY_BROKER_URL", "INGESTION_WORKER_CONCURRENCY",
                   "INGESTION_DAGSTER_URL"),
        Variable("INGESTION_EMBEDDING_QUEUE", "unset", "Deprecated: the embedding steps always go to the Celery "
                 "queue `embedding`, and a worker's `--queue` says whether it takes them. A worker that has it set "
                 "takes `--queue <that name>` as `--queue embedding`, and without `--queue` only the queue "
                 "`dagster`, as before, with a warning."),
        Variable("INGESTION_WARM_RUN_WORKERS", "1 (`dagster.yaml`)", "Run workers the instance's launcher keeps "
                 "idle ahead of need (Dagster, the code location and the model loaded): a launched run starts at "
                 "once. `0`: every run starts a fresh interpreter, Dagster's default."),
        *_settings("INGESTION_WORKER_REDELIVER_SECONDS"),
        Variable("INGESTION_CELERY_POLL_SECONDS", "unset", "Deprecated, no longer read: a Celery run looks for its "
                 "finished steps once a second, as dagster-celery's loop ships (a value set is ignored, with a "
                 "warning in the run's log)."),
    ),
    "Queues": (
        *_settings("REDIS_URL", "INGESTION_INTAKE_INTERVAL_SECONDS", "INGESTION_QUEUE_JOBS_PER_TICK",
                   "INGESTION_QUEUE_HEARTBEAT_SECONDS", "INGESTION_DEAD_LETTER_MAX_ENTRIES",
                   "INGESTION_DEAD_LETTER_MAX_AGE_DAYS", "INGESTION_DEAD_LETTER_MAX_BYTES", "INGESTION_SQS_QUEUE_URLS",
                   "INGESTION_SQS_MESSAGES_PER_TICK", "INGESTION_SQS_WAIT_SECONDS"),
    ),
    "Metric exports": (
        *_settings("INGESTION_METRICS_MAX_UPLOAD_BYTES", "INGESTION_METRICS_VALID_THRESHOLD",
                   "INGESTION_STAGING_RETENTION_DAYS"),
    ),
    "Reliability and retention": (
        *_settings("INGESTION_LEASE_SECONDS", "INGESTION_RETRY_BACKOFF", "INGESTION_JANITOR_INTERVAL_SECONDS",
                   "INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS", "INGESTION_FAILED_TTL_DAYS", "INGESTION_ORPHAN_TTL_HOURS",
                   "INGESTION_PARTITION_RETENTION_DAYS"),
        Variable("INGESTION_PROGRESS_SECONDS", "2", "How often long steps report progress."),
    ),
    "HTTP API": (
        *_settings("JWT_SECRET", "JWT_EXPIRY_HOURS", "AUTH_ENABLED", "INGESTION_API_MAX_INFLIGHT_UPLOADS",
                   "INGESTION_API_SEARCHES_PER_TENANT", "INGESTION_API_MAX_CONCURRENT_LOGINS",
                   "INGESTION_API_LOGIN_FAILURES_PER_ADDRESS", "INGESTION_API_LOGIN_FAILURES_PER_ACCOUNT",
                   "INGESTION_API_LOGIN_WINDOW_SECONDS", "INGESTION_API_TRUSTED_PROXIES",
                   "INGESTION_API_UPLOAD_IDLE_SECONDS", "INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND",
                   "INGESTION_API_HEADER_TIMEOUT_SECONDS", "INGESTION_UPLOAD_BUCKET", "INGESTION_UPLOAD_S3_ENDPOINT",
                   "INGESTION_ALLOWED_S3_ENDPOINTS"),
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
