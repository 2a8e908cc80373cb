"""Run-status sensors: when a batch run fails or is canceled, its unfinished ledger rows say so."""


import dagster as dg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.defs.documents.assets import document_batch_job
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline.documents.runs import fail_unfinished_rows


def finalize_ledger_for_run(db: Database, run: dg.DagsterRun, reason: str) -> list[int]:
    """Mark the run's rows (and its partition's never-started rows) failed with ``reason``."""
    with db.transaction() as conn:
        return fail_unfinished_rows(conn, run.run_id, run.tags.get("dagster/partition"), reason)


@dg.run_failure_sensor(
    monitored_jobs=[document_batch_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks the failed run's unfinished files failed in the ledger.",
)
def ledger_on_run_failure(context: dg.RunFailureSensorContext, postgres: PostgresResource) -> None:
    message = context.failure_event.message if context.failure_event else "run failed"
    reason = f"Dagster run {context.dagster_run.run_id} failed before this file finished: {message}"
    failed = finalize_ledger_for_run(postgres.db, context.dagster_run, reason[:2000])
    context.log.info(f"marked {len(failed)} ledger row(s) failed for run {context.dagster_run.run_id}")


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    monitored_jobs=[document_batch_job],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Marks the canceled run's unfinished files failed in the ledger.",
)
def ledger_on_run_canceled(context: dg.RunStatusSensorContext, postgres: PostgresResource) -> None:
    reason = f"Dagster run {context.dagster_run.run_id} was canceled before this file finished"
    failed = finalize_ledger_for_run(postgres.db, context.dagster_run, reason)
    context.log.info(f"marked {len(failed)} ledger row(s) failed for canceled run {context.dagster_run.run_id}")


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(sensors=[ledger_on_run_failure, ledger_on_run_canceled])
