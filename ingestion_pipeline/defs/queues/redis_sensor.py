"""redis_queue_sensor: says how deep the Redis job queue is, and runs the dead-letter check when the count of
dead letters changes. It reads only: the intake service (`ingestion-pipeline intake`) takes the jobs."""

import dagster as dg

from ingestion_pipeline.defs.queues.dead_letter_check import queue_check_job
from ingestion_pipeline.defs.resources import SettingsResource
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.redis_consumer import RedisUnavailable, open_queue


@dg.sensor(
    job=queue_check_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Reads the Redis queue's depths (rag:ingest:queue, :high, :low, retrying, held, dead letters; "
    "the tick's message) and runs queue_dead_letters_empty when the dead-letter count changes. The intake "
    "service (`ingestion-pipeline intake`) takes the jobs into the ledger.",
)
def redis_queue_sensor(context: dg.SensorEvaluationContext, settings: SettingsResource) -> dg.SensorResult:
    try:
        client = open_queue(settings.get())
    except RedisUnavailable as exc:
        return dg.SensorResult(skip_reason=str(exc))
    if client is None:
        return dg.SensorResult(skip_reason="no Redis queue (REDIS_URL unset and nothing at 127.0.0.1:6379, or none)")
    try:
        depths = redis_contract.depths(client)
    finally:
        client.close()
    dead = str(depths["dead_letter"])
    if dead != (context.cursor or "0"):  # the check tells the UI; once per change
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"redis-dead-letters-{dead}-{context.cursor}")],
                               cursor=dead)
    return dg.SensorResult(skip_reason=redis_contract.depths_summary(depths), cursor=dead)
