"""The janitor as a job, for a person to run from the UI (the work is ``runtime/janitor.py``'s)."""

import dagster as dg

from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.runtime.janitor import run_janitor


@dg.op(description="Recover work left behind by dead workers and lost launches (the janitor).")
def recover_stalled_work(context: dg.OpExecutionContext, postgres: PostgresResource,
                         settings: SettingsResource) -> None:
    values = settings.get()
    context.log.info(run_janitor(context.instance, postgres.db, values.reliability,
                                 index_nice=values.batch.index_nice).describe())


@dg.job(description="The janitor, on demand: what the intake service (`ingestion-pipeline intake`) does "
                    "every minute.")
def ledger_janitor_job():
    recover_stalled_work()
