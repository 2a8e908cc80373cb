"""Finished partitions leave Dagster's partition lists: hourly, ``partition_pruning_job`` deletes the dynamic
partitions of batches and metric uploads whose work is finished and past ``INGESTION_PARTITION_RETENTION_DAYS``
(``core/partition_retention.py``). Their runs and materialisations stay in Dagster's history."""

import dagster as dg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS
from ingestion_pipeline.core.partition_retention import finished_partitions, record_pruned
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.defs.partitions import document_batches, metric_uploads
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource

PRUNE_AT_ONCE = 1000  # partitions deleted per statement round; a pass goes on until none is left


def prune_finished_partitions(instance: dg.DagsterInstance, db: Database, policy: ReliabilitySettings,
                              log=None) -> dict[str, int]:
    """Delete the finished, expired partitions of both partition sets; how many of each."""
    pruned = {}
    for t, partitions in ((DOCUMENT_FILES, document_batches), (METRIC_UPLOADS, metric_uploads)):
        pruned[partitions.name] = 0
        while True:
            with db.connection() as conn:
                keys = finished_partitions(conn, t, partitions.name, older_than_days=policy.partition_retention_days,
                                           limit=PRUNE_AT_ONCE)
            if not keys:
                break
            for key in keys:
                instance.delete_dynamic_partition(partitions.name, key)
            with db.connection() as conn:
                record_pruned(conn, partitions.name, keys)
            pruned[partitions.name] += len(keys)
            if log is not None:
                log(f"{partitions.name}: {pruned[partitions.name]} finished partition(s) pruned so far")
    return pruned


@dg.op(description="Delete the Dagster partitions of batches and uploads finished longer ago than "
                   "INGESTION_PARTITION_RETENTION_DAYS (their runs stay).")
def prune_partitions(context: dg.OpExecutionContext, postgres: PostgresResource,
                     settings: SettingsResource) -> dg.Output[int]:
    pruned = prune_finished_partitions(context.instance, postgres.db, settings.get().reliability,
                                       log=context.log.info)
    context.log.info(", ".join(f"{name}: {n} pruned" for name, n in pruned.items()))
    return dg.Output(sum(pruned.values()), metadata={name: n for name, n in pruned.items()})


@dg.job(description="Delete the partitions of finished batches and uploads past retention; their runs stay.")
def partition_pruning_job():
    prune_partitions()


partition_pruning_schedule = dg.ScheduleDefinition(
    job=partition_pruning_job, cron_schedule="20 * * * *", default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Hourly: keep the partition lists to the batches and uploads still worth re-running.",
)

