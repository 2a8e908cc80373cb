"""Metric uploads: a sensor launches one run per pending upload; run-status sensors finalise the upload."""

import dagster as dg

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.defs.metrics.assets import metric_upload_job
from ingestion_pipeline.defs.partitions import WORKSPACE_TAG, metric_uploads
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline.metrics.uploads import pending_partitions, set_status, upload_for_partition


def plan_metric_runs(instance: dg.DagsterInstance, postgres: PostgresResource) -> tuple[list[dict], list[str]]:
    """(pending uploads as {partition_key, workspace_id}, partition keys new to the instance)."""
    with connect(postgres.url(), autocommit=True) as conn:
        pending = pending_partitions(conn)
    known = set(instance.get_dynamic_partitions(metric_uploads.name))
    return pending, [p["partition_key"] for p in pending if p["partition_key"] not in known]


@dg.sensor(
    job=metric_upload_job,
    minimum_interval_seconds=10,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="One run per pending metric upload (run_key = partition key: a repeated tick launches nothing).",
)
def metric_upload_sensor(context: dg.SensorEvaluationContext, postgres: PostgresResource) -> dg.SensorResult:
    pending, new_keys = plan_metric_runs(context.instance, postgres)
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=p["partition_key"], partition_key=p["partition_key"],
                                    tags={WORKSPACE_TAG: p["workspace_id"]}) for p in pending],
        dynamic_partitions_requests=[metric_uploads.build_add_request(new_keys)] if new_keys else [],
    )


def finalize_upload_for_run(database_url: str, run: dg.DagsterRun, reason: str) -> bool:
    """A run died before the upload reached a terminal state: it ends `failed` with the reason."""
    partition_key = run.tags.get("dagster/partition")
    if not partition_key:
        return False
    with connect(database_url) as conn, conn.transaction():
        upload = upload_for_partition(conn, partition_key)
        if upload["status"] in ("completed", "partial", "failed"):
            return False
        set_status(conn, upload["upload_id"], "failed", error=reason)
    return True


@dg.run_failure_sensor(monitored_jobs=[metric_upload_job], default_status=dg.DefaultSensorStatus.RUNNING)
def metric_upload_on_run_failure(context: dg.RunFailureSensorContext, postgres: PostgresResource) -> None:
    message = context.failure_event.message if context.failure_event else "run failed"
    finalize_upload_for_run(postgres.url(), context.dagster_run,
                            f"Dagster run {context.dagster_run.run_id} failed: {message}"[:2000])


@dg.run_status_sensor(run_status=dg.DagsterRunStatus.CANCELED, monitored_jobs=[metric_upload_job],
                      default_status=dg.DefaultSensorStatus.RUNNING)
def metric_upload_on_run_canceled(context: dg.RunStatusSensorContext, postgres: PostgresResource) -> None:
    finalize_upload_for_run(postgres.url(), context.dagster_run,
                            f"Dagster run {context.dagster_run.run_id} was canceled")


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[metric_upload_sensor, metric_upload_on_run_failure, metric_upload_on_run_canceled])
