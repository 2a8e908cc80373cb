"""upload_sensor: queued uploads become bounded batches, one dynamic partition and one run each."""

import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource
from ingestion_pipeline.defs.sources.batch_runs import plan_batch_runs


@dg.sensor(
    job=document_batch_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Groups queued uploads into batches and launches one run per batch.",
)
def upload_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    document_pipeline: DocumentPipelineResource,
) -> dg.SensorResult:
    batches = plan_batch_runs(context.instance, postgres, document_pipeline, run_type="upload")
    return batches.sensor_result()


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[upload_sensor])
