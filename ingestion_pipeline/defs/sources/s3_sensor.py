"""s3_sensor: every active document source is listed (bounded work per tick) and its changes batched."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.launching import plan_document_runs
from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource, S3Clients, UploadStoreResource
from ingestion_pipeline.metrics.s3_intake import s3_metric_intake
from ingestion_pipeline.sources.registry import list_sources
from ingestion_pipeline.sources.sync import SyncReport, sync_source


def sync_active_sources(
    db: Database, settings: Settings, s3_client_for: S3Clients, metric_store: LocalUploadStore,
    *, names: list[str] | None = None, max_pages: int | None = -1,
) -> list[SyncReport]:
    """One bounded listing step for each active source (``max_pages=-1``: the per-tick budget).

    Documents sources queue batch work; metrics sources turn changed objects into metric uploads.
    """
    with db.connection() as conn:
        sources = [s for s in list_sources(conn, active_only=True) if not names or s.name in names]
    reports = []
    for source in sources:
        client = s3_client_for(source.endpoint_url)
        intake = None
        max_bytes = settings.upload.max_bytes
        if source.kind == "metrics":
            max_bytes = settings.metrics.max_bytes
            intake = s3_metric_intake(db, metric_store, client, max_bytes=max_bytes,
                                      valid_threshold=settings.metrics.valid_threshold)
        reports.append(
            sync_source(
                db, source, client, max_bytes=max_bytes, page_size=settings.s3.page_size,
                max_pages=settings.s3.pages_per_tick if max_pages == -1 else max_pages, metric_intake=intake,
            )
        )
    return reports


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
    document_pipeline: DocumentPipelineResource,
    upload_store: UploadStoreResource,
    s3: S3Resource,
) -> dg.SensorResult:
    settings = document_pipeline.settings()
    for report in sync_active_sources(postgres.db, settings, S3Clients(s3), upload_store.metrics()):
        context.log.info(f"source {report.source}: {report.as_dict()}")
    return plan_document_runs(context.instance, postgres.db, settings.batch, run_type="s3_sync").sensor_result()


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[s3_sensor])
