"""Run-status sensors: when a document or metric run fails or is canceled, its unfinished work says so.

A failed run with a Dagster retry coming (``dagster/will_retry``) is left alone: the retry is the same
owner and continues the work from the staging tables. A document run that failed because its host cannot
embed hands its files back uncounted (the host is at fault, not the files). Otherwise the run's unfinished
files (or its upload) are a failed attempt — retried with backoff, or dead-lettered after the last attempt.
"""

import dagster as dg

from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.runtime.finalization import (
    LONGEST_HAND_BACK_HOLD_SECONDS,
    cancel_run_work,
    finalize_failed_run,
    hand_back_from_a_host_that_cannot_embed,
    retry_follows,
)


# No monitored_jobs: a materialisation or backfill from the UI runs under Dagster's implicit asset job;
# finalization.table_for_run tells which runs claim ledger rows.
@dg.run_failure_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A failed run with no retry coming: its unfinished work is retried with backoff or dead-lettered.",
)
def ledger_on_run_failure(context: dg.RunFailureSensorContext, postgres: PostgresResource,
                          settings: SettingsResource) -> None:
    run = context.dagster_run
    if retry_follows(run):
        context.log.info(f"run {run.run_id} failed; a Dagster retry follows and continues its work")
        return
    policy = settings.get().reliability
    hold = max(policy.retry_backoff_seconds, default=0.0)
    if hand_back_from_a_host_that_cannot_embed(context.instance, postgres.db, run, hold) is not None:
        context.log.warning(f"run {run.run_id}: its host cannot embed; its files are back in the queue with no "
                            f"attempt counted, launched again after {hold:g} s, twice as long at each hand-back of "
                            f"the day ({LONGEST_HAND_BACK_HOLD_SECONDS:g} s at most)")
        return
    rows = finalize_failed_run(context.instance, postgres.db, run, policy)
    context.log.info(f"run {run.run_id}: {len(rows)} unfinished file(s) or upload(s) retried later or dead-lettered")


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A canceled run: its unfinished work is canceled and its staged data removed.",
)
def ledger_on_run_canceled(context: dg.RunStatusSensorContext, postgres: PostgresResource) -> None:
    run = context.dagster_run
    rows = cancel_run_work(context.instance, postgres.db, run, actor=f"dagster (run {run.run_id} canceled)")
    context.log.info(f"run {run.run_id} canceled: {len(rows)} file(s) or upload(s) canceled")

