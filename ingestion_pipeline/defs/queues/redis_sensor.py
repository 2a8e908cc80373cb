"""redis_queue_sensor: the Redis job queue's jobs become ledger rows (upload_sensor batches them), and their
status hashes follow the ledger; the tick says how deep the queues are."""

import dagster as dg

from ingestion_pipeline import services
from ingestion_pipeline.defs.queues.dead_letter_check import queue_check_job
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource, UploadStoreResource
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.queues.redis_intake import RedisUnavailable, open_queue, take_jobs


@dg.sensor(
    job=queue_check_job,
    minimum_interval_seconds=5,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Takes jobs off the Redis queue (rag:ingest:queue, :high, :low) into the ledger, at most "
    "INGESTION_QUEUE_JOBS_PER_TICK a tick, acknowledging each after its ledger row commits; writes job statuses "
    "as the ledger moves; runs queue_dead_letters_empty when the dead-letter count changes.",
)
def redis_queue_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    settings: SettingsResource,
    upload_store: UploadStoreResource,
    embedder: dg.ResourceParam[Embedder],
) -> dg.SensorResult:
    current = settings.get()
    try:
        client = open_queue(current)
    except RedisUnavailable as exc:
        return dg.SensorResult(skip_reason=str(exc))
    if client is None:
        return dg.SensorResult(skip_reason="no Redis queue (REDIS_URL unset and nothing at 127.0.0.1:6379, or none)")
    try:
        taken = take_jobs(client, postgres.db, upload_store.documents(), current,
                          fingerprint=services.fingerprint(current, embedder))
    finally:
        client.close()
    context.log.info(f"redis queue: {taken.summary()}")
    dead = str(taken.depths["dead_letter"])
    if dead != (context.cursor or "0"):  # the check tells the UI; once per change
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"redis-dead-letters-{dead}-{context.cursor}")],
                               cursor=dead)
    return dg.SensorResult(skip_reason=taken.summary(), cursor=dead)
