"""One sensor for the SQS queues of INGESTION_SQS_QUEUE_URLS (read at each tick, so every host defines the same
sensor whatever its environment): S3 event notifications and job messages become ledger rows (s3_sensor and
upload_sensor batch them); each message is deleted only after its row commits."""

import json

import dagster as dg

from ingestion_pipeline import services
from ingestion_pipeline.core.identifiers import key_part
from ingestion_pipeline.defs.queues.dead_letter_check import queue_check_job
from ingestion_pipeline.defs.resources import PostgresResource, S3Clients, SettingsResource, UploadStoreResource
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.queues.sqs_intake import SqsIntake
from ingestion_pipeline.queues.sqs_queues import queue_name, sqs_client


@dg.sensor(
    job=queue_check_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Receives from each SQS queue of INGESTION_SQS_QUEUE_URLS (read at each tick; long polling, "
    "INGESTION_SQS_MESSAGES_PER_TICK a queue and tick): S3 event notifications of registered sources and job "
    "messages into the ledger, each message deleted after its row commits; failures wait out the backoff and "
    "reach the dead-letter queue after the redrive policy's receives.",
)
def sqs_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource, settings: SettingsResource,
               upload_store: UploadStoreResource, s3: S3Resource,
               embedder: dg.ResourceParam[Embedder]) -> dg.SensorResult:
    current = settings.get()
    urls = current.queues.sqs_queue_urls
    if not urls:
        return dg.SensorResult(skip_reason="no SQS queue is configured (INGESTION_SQS_QUEUE_URLS)")
    intake = SqsIntake(sqs_client(), postgres.db, current, document_store=upload_store.documents(),
                       metric_store=upload_store.metrics(), s3_client_for=S3Clients(s3),
                       fingerprint=services.fingerprint(current, embedder))
    seen = json.loads(context.cursor) if context.cursor and context.cursor.startswith("{") else {}
    dead_letters, summaries, requests = {}, [], []
    for url in urls:
        name = queue_name(url)
        polled = intake.poll(url)
        context.log.info(polled.summary())
        summaries.append(polled.summary())
        dead_letters[name] = polled.dead_letters
        if polled.dead_letters != seen.get(name, 0):  # the dead-letter check runs when a queue's count changes
            requests.append(dg.RunRequest(run_key=f"sqs-{key_part(name, 50)}-dead-letters-{polled.dead_letters}-"
                                                  f"{seen.get(name, 0)}"))
    cursor = json.dumps(dead_letters, sort_keys=True)
    if requests:
        return dg.SensorResult(run_requests=requests, cursor=cursor)
    return dg.SensorResult(skip_reason="; ".join(summaries), cursor=cursor)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[sqs_sensor])
