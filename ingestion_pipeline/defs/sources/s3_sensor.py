"""s3_sensor: every active document source is listed (bounded work per tick) and its changes batched."""

import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.launching import plan_document_runs
from ingestion_pipeline.defs.resources import PostgresResource, S3Clients, SettingsResource, UploadStoreResource
from ingestion_pipeline.defs.s3_resource import S3Resource
from ingestion_pipeline.sources.sync_pass import sync_sources


@dg.sensor(
    job=document_batch_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Lists each active S3 source with a cursor and a page budget; changed keys become batches "
    "(documents) or metric uploads (metrics sources, launched by metric_upload_sensor).",
)
def s3_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    settings: SettingsResource,
    upload_store: UploadStoreResource,
    s3: S3Resource,
) -> dg.SensorResult:
    current = settings.get()
    for report in sync_sources(postgres.db, current, S3Clients(s3), upload_store.metrics()):
        context.log.info(f"source {report.source}: {report.as_dict()}")
    return plan_document_runs(context.instance, postgres.db, current.batch, run_types=("s3_sync",)).sensor_result()

