"""upload_sensor: queued uploads become bounded batches, one dynamic partition and one run each."""

import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.documents.reindex import REINDEX
from ingestion_pipeline.runtime.fast_lane import sensor_grace
from ingestion_pipeline.runtime.launching import plan_document_runs


@dg.sensor(
    job=document_batch_job,
    # every sensor-daemon loop (Dagster evaluates sensors at most every 5 s; 5 here skipped alternate loops,
    # so a submitted file waited up to 10 s for its run): the query is cheap when nothing is queued
    minimum_interval_seconds=1,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Groups queued uploads and re-indexes into batches and launches one run per batch.",
)
def upload_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    settings: SettingsResource,
) -> dg.SensorResult:
    current = settings.get()
    plan = plan_document_runs(context.instance, postgres.db, current.batch, run_types=("upload", REINDEX),
                              leave_to_fast_lane_seconds=sensor_grace(current), skip_fast_lane_runs=True)
    return plan.sensor_result()

