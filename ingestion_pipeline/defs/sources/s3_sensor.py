"""s3_sensor: every active document source is listed (bounded work per tick) and its changes batched."""

import dagster as dg
from dagster_aws.s3 import S3Resource

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource, s3_client_factory
from ingestion_pipeline.defs.sources.batch_runs import plan_batch_runs
from ingestion_pipeline.metrics.s3_intake import s3_metric_intake
from ingestion_pipeline.sources.registry import list_sources
from ingestion_pipeline.sources.sync import SyncReport, sync_source


def sync_active_sources(
    postgres: PostgresResource, document_pipeline: DocumentPipelineResource, s3: S3Resource,
    *, names: list[str] | None = None, max_pages: int | None = -1,
) -> list[SyncReport]:
    """One bounded listing step for each active source (``max_pages=-1``: the per-tick budget).

    Documents sources queue batch work; metrics sources turn changed objects into metric uploads.
    """
    url = postgres.url()
    settings = document_pipeline.settings()
    clients = s3_client_factory(s3)
    with connect(url, autocommit=True) as conn:
        sources = [s for s in list_sources(conn, active_only=True) if not names or s.name in names]
    reports = []
    for source in sources:
        client = clients(source.endpoint_url)
        intake = None
        max_bytes = settings.upload.max_bytes
        if source.kind == "metrics":
            max_bytes = settings.metrics.max_bytes
            intake = s3_metric_intake(url, LocalUploadStore(settings.metrics.upload_dir), client,
                                      max_bytes=max_bytes, valid_threshold=settings.metrics.valid_threshold)
        reports.append(
            sync_source(
                url, source, client, max_bytes=max_bytes, page_size=settings.s3.page_size,
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
    s3: S3Resource,
) -> dg.SensorResult:
    for report in sync_active_sources(postgres, document_pipeline, s3):
        context.log.info(f"source {report.source}: {report.as_dict()}")
    batches = plan_batch_runs(context.instance, postgres, document_pipeline, run_type="s3_sync")
    return batches.sensor_result()


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[s3_sensor])
