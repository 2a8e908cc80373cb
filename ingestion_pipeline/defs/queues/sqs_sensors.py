"""sqs_sensor: says how deep each SQS queue of INGESTION_SQS_QUEUE_URLS is (read at each tick, so every host
defines the same sensor whatever its environment), and runs the dead-letter check when a queue's count of dead
letters changes. It reads only: the intake service (`ingestion-pipeline intake`) receives the messages."""

import json

import dagster as dg

from ingestion_pipeline.core.identifiers import key_part
from ingestion_pipeline.defs.queues.dead_letter_check import queue_check_job
from ingestion_pipeline.defs.resources import SettingsResource
from ingestion_pipeline.queues.sqs import dead_letter_depth, depth, queue_name, sqs_client


@dg.sensor(
    job=queue_check_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Reads the depth and the dead-letter count of each SQS queue of INGESTION_SQS_QUEUE_URLS (the "
    "tick's message) and runs the dead-letter check when a count changes. The intake service "
    "(`ingestion-pipeline intake`) receives the messages into the ledger.",
)
def sqs_sensor(context: dg.SensorEvaluationContext, settings: SettingsResource) -> dg.SensorResult:
    urls = settings.get().queues.sqs_queue_urls
    if not urls:
        return dg.SensorResult(skip_reason="no SQS queue is configured (INGESTION_SQS_QUEUE_URLS)")
    sqs = sqs_client()
    seen = json.loads(context.cursor) if context.cursor and context.cursor.startswith("{") else {}
    dead_letters, summaries, requests = {}, [], []
    for url in urls:
        name = queue_name(url)
        dead = dead_letter_depth(sqs, url)[1]
        summaries.append(f"sqs {name}: {depth(sqs, url)} waiting, {dead} dead letters")
        dead_letters[name] = dead
        if dead != seen.get(name, 0):  # the dead-letter check runs when a queue's count changes
            requests.append(dg.RunRequest(run_key=f"sqs-{key_part(name, 50)}-dead-letters-{dead}-"
                                                  f"{seen.get(name, 0)}"))
    cursor = json.dumps(dead_letters, sort_keys=True)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    return dg.SensorResult(skip_reason="; ".join(summaries), cursor=cursor)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[sqs_sensor])
