"""metric_upload_sensor: one run per metric upload that is due (failed and canceled runs: defs/ledger)."""

import dagster as dg

from ingestion_pipeline.defs.metrics.assets import metric_upload_job
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline.runtime.launching import plan_metric_runs


@dg.sensor(
    job=metric_upload_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One run per metric upload that is due (the run key changes only for a relaunch: a repeated "
    "tick launches nothing).",
)
def metric_upload_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource) -> dg.SensorResult:
    return plan_metric_runs(context.instance, postgres.db).sensor_result()

