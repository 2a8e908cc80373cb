"""upload_sensor: queued uploads become bounded batches, one dynamic partition and one run each."""

import dagster as dg

from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.launching import plan_document_runs
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.documents.reindex import REINDEX


@dg.sensor(
    job=document_batch_job,
    minimum_interval_seconds=5,  # a submitted file waits at most this long for its run (a cheap query)
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Groups queued uploads and re-indexes into batches and launches one run per batch.",
)
def upload_sensor(
    context: dg.SensorEvaluationContext,
    postgres: PostgresResource,
    settings: SettingsResource,
) -> dg.SensorResult:
    plan = plan_document_runs(context.instance, postgres.db, settings.get().batch,
                              run_types=("upload", REINDEX))
    return plan.sensor_result()

