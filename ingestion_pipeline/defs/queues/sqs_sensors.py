"""One sensor per SQS queue of INGESTION_SQS_QUEUE_URLS (read when the code location loads): S3 event
notifications and job messages become ledger rows (s3_sensor and upload_sensor batch them); each message is
deleted only after its row commits."""

import dagster as dg

from ingestion_pipeline import services
from ingestion_pipeline.core.identifiers import key_part
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.defs.queues.dead_letter_check import queue_check_job
from ingestion_pipeline.defs.resources import PostgresResource, S3Clients, SettingsResource, UploadStoreResource
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.queues.sqs_intake import SqsIntake
from ingestion_pipeline.queues.sqs_queues import queue_name, sqs_client


def sqs_sensor(url: str) -> dg.SensorDefinition:
    name = queue_name(url)

    @dg.sensor(
        name=f"sqs_{key_part(name, 50).replace('-', '_')}_sensor",
        job=queue_check_job,
        minimum_interval_seconds=10,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Receives from SQS queue {name} (long polling, INGESTION_SQS_MESSAGES_PER_TICK a tick): S3 "
        "event notifications of registered sources and job messages into the ledger, each message deleted after "
        "its row commits; failures wait out the backoff and reach the dead-letter queue after the redrive "
        "policy's receives.",
    )
    def _sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource, settings: SettingsResource,
                upload_store: UploadStoreResource, s3: S3Resource,
                embedder: dg.ResourceParam[Embedder]) -> dg.SensorResult:
        current = settings.get()
        intake = SqsIntake(sqs_client(), postgres.db, current, document_store=upload_store.documents(),
                           metric_store=upload_store.metrics(), s3_client_for=S3Clients(s3),
                           fingerprint=services.fingerprint(current, embedder))
        polled = intake.poll(url)
        context.log.info(polled.summary())
        dead = str(polled.dead_letters)
        if dead != (context.cursor or "0"):
            return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"sqs-{name}-dead-letters-{dead}-"
                                                                       f"{context.cursor}")], cursor=dead)
        return dg.SensorResult(skip_reason=polled.summary(), cursor=dead)

    return _sensor


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[sqs_sensor(url) for url in load_settings().queues.sqs_queue_urls])
