"""Every environment variable the project reads, in one table: the source of ``docs/configuration.md``.

``python -m ingestion_pipeline.core.environment > docs/configuration.md`` writes the page; a test checks
that the page is current and that every variable the package's code reads is listed here (and nothing
else), so the docs cannot drift from the code.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Variable:
    name: str
    default: str
    meaning: str


AREAS: dict[str, tuple[Variable, ...]] = {
    "Databases and folders": (
        Variable("DATABASE_URL", "the embedded Postgres", "The application database (psycopg URL). Unset: the "
                 "embedded PostgreSQL 16 + pgvector under `.data/`, started on demand."),
        Variable("INGESTION_EMBEDDED_POSTGRES", "unset", "`1`: a process other than the CLI (your own `dagster "
                 "dev`, a notebook) may start the embedded Postgres when DATABASE_URL is unset."),
        Variable("DAGSTER_PG_URL", "derived from DATABASE_URL", "Dagster's own storage (`postgresql+psycopg2://`)."),
        Variable("DAGSTER_HOME", "`<home>/dagster_home`", "Where `dagster.yaml` (the instance) is read from."),
        Variable("INGESTION_HOME", "the checkout", "The project folder the default paths hang from."),
        Variable("INGESTION_DATA_DIR", "`<home>/.data`", "Embedded Postgres, upload stores and model cache."),
        Variable("INGESTION_UPLOAD_DIR", "`<data>/uploads`", "Where uploaded documents wait (content-addressed)."),
        Variable("INGESTION_METRICS_UPLOAD_DIR", "`<data>/metric_uploads`", "Where metric exports wait."),
        Variable("INGESTION_UPLOAD_STORE", "local (the two folders above)",
                 "`s3://bucket/prefix`: both upload stores in S3 (`<prefix>/documents/`, `<prefix>/metrics/`), so "
                 "hosts share no disk (docs/deployment.md)."),
        Variable("INGESTION_UPLOAD_STORE_ENDPOINT_URL", "the AWS environment's",
                 "The S3 endpoint of `INGESTION_UPLOAD_STORE` (MinIO, moto)."),
        Variable("INGESTION_MODEL_CACHE_DIR", "`<data>/models`", "The exported ONNX / OpenVINO models."),
    ),
    "Documents": (
        Variable("INGESTION_MAX_UPLOAD_BYTES", "52428800 (50 MB)", "Largest document accepted."),
        Variable("INGESTION_BATCH_MAX_FILES", "200", "Files in one batch (one partition, one run)."),
        Variable("INGESTION_BATCH_MAX_BYTES", "209715200 (200 MB)", "Bytes in one batch."),
        Variable("INGESTION_BATCH_LANES", "2", "Files a step works on at once (at most the run's 4 connections)."),
        Variable("INGESTION_CHUNK_TARGET_TOKENS", "200", "A chunk's target size, in the model's tokens."),
        Variable("INGESTION_CHUNK_MAX_TOKENS", "256", "A chunk's hard cap (further capped by the model's own)."),
        Variable("INGESTION_EMBEDDING_MODEL", "the packaged all-MiniLM-L6-v2", "A sentence-transformers model "
                 "folder."),
        Variable("INGESTION_EMBEDDING_BATCH_SIZE", "16", "Chunks per model call (at most 256)."),
        Variable("INGESTION_EMBEDDING_BACKEND", "auto", "`auto`, `openvino`, `onnx` or `torch`."),
        Variable("INGESTION_EMBEDDING_PRECISION", "auto", "`auto`, `int8`, `bf16` or `f32`: what `ingestion-pipeline "
                 "model prepare` asks for when it makes the deployment's model decision (a reduced precision only "
                 "if it passes the quality gate and this CPU can run it faster; `auto` takes the fastest that "
                 "does). Every process then embeds as recorded, whatever this says on its host "
                 "(docs/pipeline.md)."),
        Variable("INGESTION_EXTRACTION_TIMEOUT_SECONDS", "300", "A file's extraction is killed after this."),
        Variable("INGESTION_EXTRACTION_MEMORY_MB", "3072", "Address space of the extraction worker process."),
        Variable("INGESTION_MAX_TEXT_CHARS", "20000000", "Characters of text one file may hold, every format (beyond: "
                 "`file_too_much_text`; HTML, Markdown and text are refused before decoding: `text_too_large`)."),
        Variable("INGESTION_MAX_CHUNKS_PER_FILE", "50000", "Chunks one file may make (beyond: `file_too_much_text`)."),
        Variable("INGESTION_MAX_TOKENS_PER_FILE", "10000000", "Tokens of one file's chunks (beyond: "
                 "`file_too_much_text`)."),
        Variable("INGESTION_MAX_ZIP_MEMBER_BYTES", "209715200 (200 MB)", "One uncompressed part of an office file."),
        Variable("INGESTION_MAX_COMPRESSION_RATIO", "100", "Uncompressed / compressed, for parts over 1 MiB."),
        Variable("INGESTION_TESSERACT", "`tesseract` on the PATH", "The Tesseract executable for OCR."),
    ),
    "S3 sources": (
        Variable("INGESTION_S3_PAGE_SIZE", "1000", "Keys per listing page (at most 1000)."),
        Variable("INGESTION_S3_PAGES_PER_TICK", "5", "Listing pages per source per sensor tick."),
    ),
    "Workers (several hosts)": (
        Variable("INGESTION_EXECUTOR", "in_process", "`celery`: the jobs' steps run on Celery workers "
                 "(`ingestion-pipeline worker`, any host) through dagster-celery; `in_process`: in the run's process."),
        Variable("CELERY_BROKER_URL", "REDIS_URL", "The Celery broker (and result backend) of the workers."),
        Variable("INGESTION_WORKER_CONCURRENCY", "1", "Steps one `ingestion-pipeline worker` runs at once "
                 "(processes; each keeps its own model)."),
        Variable("INGESTION_WORKER_REDELIVER_SECONDS", "600", "A step taken by a worker that vanished (its host "
                 "died) goes to another worker after this long; keep it above the longest step and below "
                 "INGESTION_LEASE_SECONDS."),
    ),
    "Queues": (
        Variable("REDIS_URL", "redis://127.0.0.1:6379/0", "The Redis server of the job queue (`rag:ingest:*`). "
                 "Unset and nothing listening there, or `none`: no Redis queue; set and not answering: an error."),
        Variable("INGESTION_QUEUE_JOBS_PER_TICK", "100", "Redis jobs one sensor tick (or one `process` round) "
                 "takes."),
        Variable("INGESTION_QUEUE_HEARTBEAT_SECONDS", "30", "A Redis consumer silent this long is dead: the next "
                 "consumer hands the jobs it held back to their queues."),
        Variable("INGESTION_SQS_QUEUE_URLS", "none", "Comma-separated SQS queue URLs, polled in turn by `sqs_sensor` "
                 "(read at each tick). Endpoint and credentials: boto3's `AWS_*` variables "
                 "(`AWS_ENDPOINT_URL_SQS`)."),
        Variable("INGESTION_SQS_MESSAGES_PER_TICK", "100", "SQS messages one tick takes per queue."),
        Variable("INGESTION_SQS_WAIT_SECONDS", "1", "Long polling per receive, 0-20 s."),
    ),
    "Metric exports": (
        Variable("INGESTION_METRICS_MAX_UPLOAD_BYTES", "2147483648 (2 GiB)", "Largest export accepted."),
        Variable("INGESTION_METRICS_VALID_THRESHOLD", "0.9", "Share of valid rows an upload needs to be promoted."),
        Variable("INGESTION_STAGING_RETENTION_DAYS", "7", "Staged rows are deleted after this."),
    ),
    "Reliability and retention": (
        Variable("INGESTION_LEASE_SECONDS", "900", "A claim expires without a heartbeat for this long."),
        Variable("INGESTION_RETRY_BACKOFF", "5,10,30", "Seconds before attempts 2, 3, 4 of a transient failure."),
        Variable("INGESTION_RELAUNCH_QUEUED_AFTER_SECONDS", "3600", "Queued work no run picked up is relaunched."),
        Variable("INGESTION_FAILED_TTL_DAYS", "7", "Raw bytes of failed, dead-lettered, canceled work are kept."),
        Variable("INGESTION_ORPHAN_TTL_HOURS", "24", "Stored files no ledger row refers to are kept."),
        Variable("INGESTION_PARTITION_RETENTION_DAYS", "30", "A finished batch's (or upload's) Dagster partition "
                 "is deleted after this; its runs stay. Re-index older batches with `ingestion-pipeline reindex`."),
        Variable("INGESTION_PROGRESS_SECONDS", "2", "How often long steps report progress."),
    ),
    "HTTP API": (
        Variable("JWT_SECRET", "none (required)", "HS256 key, at least 32 bytes; the server refuses to start "
                 "without it."),
        Variable("JWT_EXPIRY_HOURS", "24", "Token lifetime, in hours: above 0, at most 8760; `serve` refuses others."),
        Variable("AUTH_ENABLED", "true", "`false`: development mode, tenant from `?tenant_id=`, loopback only."),
        Variable("INGESTION_API_MAX_INFLIGHT_UPLOADS", "8", "Concurrent streaming uploads; beyond: 503. A tenant "
                 "holds at most half, a user half of that; beyond: 429."),
        Variable("INGESTION_API_UPLOAD_IDLE_SECONDS", "10", "A request body (a streaming upload or a JSON body) that "
                 "sends nothing this long ends with 408 and its connection closed."),
        Variable("INGESTION_API_UPLOAD_MIN_BYTES_PER_SECOND", "16384", "After the idle time, an upload slower than "
                 "this on average ends with 408 (0: no minimum)."),
        Variable("INGESTION_API_HEADER_TIMEOUT_SECONDS", "10", "A connection whose request line and headers are not "
                 "complete this long after it opened (or after its previous response) gets 408 and is closed; "
                 "headers over 64 KiB get 431."),
        Variable("INGESTION_UPLOAD_BUCKET", "none", "Where presigned uploads land."),
        Variable("INGESTION_UPLOAD_S3_ENDPOINT", "AWS", "The presigned-upload bucket's endpoint, if not AWS."),
        Variable("INGESTION_ALLOWED_S3_ENDPOINTS", "none (AWS only)", "Comma-separated endpoints a tenant may give "
                 "a source."),
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
             "endpoints are boto3's standard `AWS_*` variables, or the `s3` resource's fields (dagster-aws's "
             "`S3Resource`).", ""]
    for area, variables in AREAS.items():
        lines += [f"## {area}", "", "| variable | default | |", "|---|---|---|"]
        lines += [f"| `{v.name}` | {v.default} | {v.meaning} |" for v in variables]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(), end="")
