"""Metric uploads: a sensor launches one run per pending upload; run-status sensors finalise the upload."""

import dagster as dg

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import METRIC_UPLOADS
from ingestion_pipeline.defs.launching import plan_metric_runs
from ingestion_pipeline.defs.metrics.assets import metric_upload_job
from ingestion_pipeline.defs.resources import PostgresResource


@dg.sensor(
    job=metric_upload_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One run per pending metric upload (run_key = partition key: a repeated tick launches nothing).",
)
def metric_upload_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource) -> dg.SensorResult:
    return plan_metric_runs(context.instance, postgres.db).sensor_result()


def finalize_upload_for_run(db: Database, run: dg.DagsterRun, reason: str) -> bool:
    """A run died before the upload reached a terminal state: it ends `failed` with the reason."""
    with db.transaction() as conn:
        failed = ledger.fail_unfinished(conn, METRIC_UPLOADS, dagster_run_id=run.run_id,
                                        partition_key=run.tags.get("dagster/partition"), reason=reason)
    return bool(failed)


@dg.run_failure_sensor(monitored_jobs=[metric_upload_job], default_status=dg.DefaultSensorStatus.RUNNING)
def metric_upload_on_run_failure(context: dg.RunFailureSensorContext, postgres: PostgresResource) -> None:
    message = context.failure_event.message if context.failure_event else "run failed"
    finalize_upload_for_run(postgres.db, context.dagster_run,
                            f"Dagster run {context.dagster_run.run_id} failed: {message}"[:2000])


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.CANCELED, monitored_jobs=[metric_upload_job],
                      default_status=dg.DefaultSensorStatus.RUNNING)
def metric_upload_on_run_canceled(context: dg.RunStatusSensorContext, postgres: PostgresResource) -> None:
    finalize_upload_for_run(postgres.db, context.dagster_run,
                            f"Dagster run {context.dagster_run.run_id} was canceled")


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[metric_upload_sensor, metric_upload_on_run_failure, metric_upload_on_run_canceled])
