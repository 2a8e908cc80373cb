"""s3_sensor: the S3 sources' queued changes become batches (the intake service lists the sources)."""

import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.runtime.fast_lane import sensor_grace
from ingestion_pipeline.runtime.launching import plan_document_runs


@dg.sensor(
    job=document_batch_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Groups the changed keys of S3 sources (listed by the intake service, `ingestion-pipeline "
    "intake`, or by `sync`) into batches and launches one run per batch; metrics sources' objects become "
    "uploads, launched by metric_upload_sensor.",
)
def s3_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource,
              settings: SettingsResource) -> dg.SensorResult:
    current = settings.get()
    plan = plan_document_runs(context.instance, postgres.db, current.batch, run_types=("s3_sync",),
                              leave_to_fast_lane_seconds=sensor_grace(current), skip_fast_lane_runs=True)
    return plan.sensor_result()
