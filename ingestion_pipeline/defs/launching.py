"""How queued work becomes Dagster runs: one planner for the sensors and for `ingestion-pipeline process`.

``plan_document_runs`` assigns queued ledger rows to batch partitions and describes one run per batch;
``plan_metric_runs`` one run per pending metric upload. Each plan carries the run requests (partition
key, run key, tags) and the dynamic partitions to add. The sensors return a plan as their
``SensorResult``; ``run_plan_in_process`` executes the same requests in this process, through the
same jobs and the project's instance, so `process` runs show in the UI exactly like sensor runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import dagster as dg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.settings import BatchSettings
from ingestion_pipeline.defs.partitions import BATCH_TAG, SOURCE_TAG, WORKSPACE_TAG, document_batches, metric_uploads
from ingestion_pipeline.documents.batching import (
    assign_queued_to_batches,
    partition_sources,
    partitions_with_queued_rows,
)
from ingestion_pipeline.metrics.uploads import pending_partitions

DOCUMENT_JOB = "document_batch_job"
METRIC_JOB = "metric_upload_job"


@dataclass(frozen=True)
class RunPlan:
    job_name: str
    run_requests: list[dg.RunRequest]
    partitions_def: dg.DynamicPartitionsDefinition
    new_partition_keys: list[str] = field(default_factory=list)  # not yet known to the instance

    def partition_requests(self) -> list:
        return [self.partitions_def.build_add_request(self.new_partition_keys)] if self.new_partition_keys else []

    def sensor_result(self) -> dg.SensorResult:
        return dg.SensorResult(run_requests=self.run_requests, dynamic_partitions_requests=self.partition_requests())


def _unknown(instance: dg.DagsterInstance, partitions_def: dg.DynamicPartitionsDefinition, keys: list[str]):
    known = set(instance.get_dynamic_partitions(partitions_def.name))
    return [k for k in keys if k not in known]


def plan_document_runs(
    instance: dg.DagsterInstance, db: Database, limits: BatchSettings, run_type: str | None = None
) -> RunPlan:
    """Assign queued rows (of ``run_type``, or all) to batches; one run per batch with queued work.

    run_key = partition key: a repeated tick (or a batch whose run is still queued) launches nothing twice.
    """
    with db.connection() as conn:
        assign_queued_to_batches(conn, limits, run_type=run_type)
        keys = partitions_with_queued_rows(conn, run_type=run_type)
        sources = partition_sources(conn, keys)
    requests = [
        dg.RunRequest(run_key=key, partition_key=key,
                      tags={BATCH_TAG: key, **({SOURCE_TAG: sources[key]} if key in sources else {})})
        for key in keys
    ]
    return RunPlan(DOCUMENT_JOB, requests, document_batches, _unknown(instance, document_batches, keys))


def plan_metric_runs(instance: dg.DagsterInstance, db: Database) -> RunPlan:
    """One run per pending metric upload (run_key = partition key)."""
    with db.connection() as conn:
        pending = pending_partitions(conn)
    requests = [dg.RunRequest(run_key=p["partition_key"], partition_key=p["partition_key"],
                              tags={WORKSPACE_TAG: p["workspace_id"]}) for p in pending]
    keys = [p["partition_key"] for p in pending]
    return RunPlan(METRIC_JOB, requests, metric_uploads, _unknown(instance, metric_uploads, keys))


def run_plan_in_process(
    instance: dg.DagsterInstance, definitions: dg.Definitions, plan: RunPlan, resources: Mapping[str, object],
    *, skip: set[str], log_level: str = "WARNING",
) -> list[tuple[dg.RunRequest, dg.ExecuteInProcessResult]]:
    """Execute the plan's runs one after the other in this process (partition keys in ``skip`` are not run)."""
    if plan.new_partition_keys:
        instance.add_dynamic_partitions(plan.partitions_def.name, plan.new_partition_keys)
    job = definitions.resolve_job_def(plan.job_name)
    results = []
    for request in plan.run_requests:
        if request.partition_key in skip:
            continue
        skip.add(request.partition_key)
        result = job.execute_in_process(
            instance=instance, partition_key=request.partition_key, tags=request.tags, resources=resources,
            raise_on_error=False, run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        )
        results.append((request, result))
    return results


@dataclass(frozen=True)
class ProcessedRun:
    """One run `process` executed: its partition, Dagster run id, and whether the run itself succeeded."""

    job_name: str
    partition_key: str
    dagster_run_id: str
    success: bool


def run_queued_in_process(
    instance: dg.DagsterInstance, definitions: dg.Definitions, db: Database, limits: BatchSettings,
    resources: Mapping[str, object], on_run: Callable[[ProcessedRun], None] | None = None,
) -> list[ProcessedRun]:
    """Run every pending metric upload and every queued batch now, in this process, until none is left.

    A run that fails has its unfinished ledger rows (or its upload) finalised exactly as the run-status
    sensors would, since no daemon may be watching.
    """
    from ingestion_pipeline.defs.ledger.run_status_sensors import finalize_ledger_for_run
    from ingestion_pipeline.defs.metrics.sensors import finalize_upload_for_run

    processed: list[ProcessedRun] = []
    done: set[str] = set()
    while True:
        ran = 0
        for plan in (plan_metric_runs(instance, db), plan_document_runs(instance, db, limits)):
            for request, result in run_plan_in_process(instance, definitions, plan, resources, skip=done):
                ran += 1
                if not result.success:
                    run = instance.get_run_by_id(result.run_id)
                    if plan.job_name == METRIC_JOB:
                        finalize_upload_for_run(db, run, f"Dagster run {result.run_id} failed")
                    else:
                        finalize_ledger_for_run(db, run, f"Dagster run {result.run_id} failed before this file "
                                                         "finished")
                outcome = ProcessedRun(plan.job_name, request.partition_key, result.run_id, result.success)
                processed.append(outcome)
                if on_run is not None:
                    on_run(outcome)
        if not ran:
            return processed


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions()
