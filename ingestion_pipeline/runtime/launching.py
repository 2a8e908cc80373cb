"""How queued work becomes Dagster runs: one planner for the sensors and for `ingestion-pipeline process`.

``plan_document_runs`` assigns queued ledger rows to batch partitions and describes one run per batch;
``plan_metric_runs`` one run per pending metric upload. Each plan carries the run requests (partition
key, run key, tags) and the dynamic partitions to add. The sensors return a plan as their
``SensorResult``; ``run_queued_in_process`` executes the same requests in this process, through the
same jobs and the project's instance, so `process` runs show in the UI exactly like sensor runs.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from ingestion_pipeline.core import ledger, run_tags
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS
from ingestion_pipeline.core.run_tags import (
    DOCUMENT_BATCHES,
    DOCUMENT_JOB,
    FAST_LANE,
    LAUNCH_GEN_TAG,
    LAUNCHED_BY_TAG,
    MAX_RETRIES_TAG,
    METRIC_JOB,
    RUN_KEY_TAG,
    USER_TAG,
    WORKSPACE_TAG,
    run_key,
)
from ingestion_pipeline.core.settings import BatchSettings, Settings
from ingestion_pipeline.documents.batching import next_due_at
from ingestion_pipeline.documents.model_decision import RunHostCannotEmbed
from ingestion_pipeline.documents.run_plan import plan_batch_runs
from ingestion_pipeline.metrics.uploads import pending_partitions
from ingestion_pipeline.runtime.finalization import (
    finalize_failed_run,
    hand_back_from_a_host_that_cannot_embed,
    interrupted_by_a_signal,
)
from ingestion_pipeline.runtime.janitor import run_janitor


@dataclass(frozen=True)
class RunPlan:
    job_name: str
    run_requests: list[dg.RunRequest]
    partitions_name: str  # the job's dynamic partitions
    new_partition_keys: list[str] = field(default_factory=list)  # not yet known to the instance

    def partition_requests(self) -> list[dg.AddDynamicPartitionsRequest]:
        return ([dg.AddDynamicPartitionsRequest(partitions_def_name=self.partitions_name,
                                                partition_keys=self.new_partition_keys)]
                if self.new_partition_keys else [])

    def sensor_result(self) -> dg.SensorResult:
        return dg.SensorResult(run_requests=self.run_requests, dynamic_partitions_requests=self.partition_requests())


def _unknown(instance: dg.DagsterInstance | None, partitions_name: str, keys: list[str]) -> list[str]:
    """The keys the instance does not know: one lookup per key due now (a tick's few), not a read of every
    partition the instance holds (which grew with every batch ever run); many keys at once are read in one.
    Without an instance (the fast lane asks the webserver), every key."""
    if instance is None:
        return list(keys)
    if len(keys) > 50:
        known = set(instance.get_dynamic_partitions(partitions_name))
        return [k for k in keys if k not in known]
    return [k for k in keys if not instance.has_dynamic_partition(partitions_name, k)]


def plan_document_runs(
    instance: dg.DagsterInstance | None, db: Database, limits: BatchSettings,
    run_types: Sequence[str] | None = None, *, leave_to_fast_lane_seconds: float = 0.0,
    skip_fast_lane_runs: bool = False,
) -> RunPlan:
    """``run_plan.plan_batch_runs`` as run requests (see there for ``leave_to_fast_lane_seconds``).

    ``skip_fast_lane_runs`` (the sensors): a batch whose run key the fast lane already launched is not requested.
    Dagster skips a key only for the sensor that launched it, and the fast lane's runs are its own, not a sensor's.
    """
    plan = plan_batch_runs(db, limits, run_types, leave_to_fast_lane_seconds=leave_to_fast_lane_seconds)
    runs = plan.runs
    if skip_fast_lane_runs and instance is not None and runs:
        launched = _launched_by_the_fast_lane(instance, [r.run_key for r in runs])
        runs = [r for r in runs if r.run_key not in launched]
    requests = [dg.RunRequest(run_key=r.run_key, partition_key=r.partition_key, tags=r.tags) for r in runs]
    return RunPlan(DOCUMENT_JOB, requests, DOCUMENT_BATCHES, _unknown(instance, DOCUMENT_BATCHES, plan.due_keys))


# A run the webserver created but never submitted (it stopped between the two) stays NOT_STARTED: past this age it
# no longer hides its batch from the sensors.
UNSUBMITTED_AFTER_SECONDS = 60.0


def _launched_by_the_fast_lane(instance: dg.DagsterInstance, keys: list[str]) -> set[str]:
    """Those of ``keys`` that a run of the fast lane carries (one query for a tick's keys)."""
    records = instance.get_run_records(dg.RunsFilter(tags={LAUNCHED_BY_TAG: FAST_LANE, RUN_KEY_TAG: keys}))
    now = time.time()
    return {r.dagster_run.tags[RUN_KEY_TAG] for r in records
            if r.dagster_run.status != dg.DagsterRunStatus.NOT_STARTED
            or now - r.create_timestamp.timestamp() < UNSUBMITTED_AFTER_SECONDS}


def plan_metric_runs(instance: dg.DagsterInstance, db: Database) -> RunPlan:
    """One run per metric upload due now."""
    with db.connection() as conn:
        pending = pending_partitions(conn)
    requests = []
    for p in pending:
        key = run_key(p["partition_key"], p["launch_gen"])
        requests.append(dg.RunRequest(run_key=key, partition_key=p["partition_key"], tags={
            WORKSPACE_TAG: p["workspace_id"], LAUNCH_GEN_TAG: str(p["launch_gen"]), RUN_KEY_TAG: key}))
    keys = [p["partition_key"] for p in pending]
    return RunPlan(METRIC_JOB, requests, run_tags.METRIC_UPLOADS, _unknown(instance, run_tags.METRIC_UPLOADS, keys))


@dataclass(frozen=True)
class ProcessedRun:
    """One run `process` executed: its partition, Dagster run id, and whether the run itself succeeded."""

    job_name: str
    partition_key: str
    dagster_run_id: str
    success: bool


class Interrupted(Exception):
    """`process` was interrupted (Ctrl-C, SIGTERM); the claims of its run were released."""


def run_queued_in_process(
    instance: dg.DagsterInstance, definitions: dg.Definitions, db: Database, settings: Settings,
    resources: Mapping[str, object], on_run: Callable[[ProcessedRun], None] | None = None,
    interrupted: Callable[[], bool] = lambda: False, log_level: str = "WARNING",
    reconstructable_jobs: Mapping[str, Any] | None = None,
) -> list[ProcessedRun]:
    """Run everything due now in this process, through the jobs and the project's instance, until nothing
    is left; wait for retries that fall due within the longest backoff.

    The janitor runs first (work a dead worker left behind is handed back). Runs are tagged as
    launched by `process`, so Dagster does not retry them (no daemon may be watching) and they never
    replay failed files; a failed run's unfinished work is finalised here as the run-status sensor
    would. If ``interrupted()`` turns true, the current run's claims go back to the queue and
    ``Interrupted`` is raised. A run that failed because its host cannot embed (``host_cannot_embed``) hands
    its files back uncounted and raises ``RunHostCannotEmbed``: the runs after it would fail alike. With
    ``INGESTION_EXECUTOR=celery`` the runs go through ``reconstructable_jobs``
    (``definitions.reconstructable_jobs()``): their steps execute on the workers, this process waits.
    """
    policy = settings.reliability
    run_janitor(instance, db, policy, backlog_per_round=0)  # the runs it launches sweep the whole backlog
    processed: list[ProcessedRun] = []
    launched: set[str] = set()  # run keys: a relaunch (new launch generation) runs again
    while True:
        ran = False
        for plan in (plan_metric_runs(instance, db), plan_document_runs(instance, db, settings.batch)):
            if plan.new_partition_keys:
                instance.add_dynamic_partitions(plan.partitions_name, plan.new_partition_keys)
            job = definitions.resolve_job_def(plan.job_name)
            for request in plan.run_requests:
                if request.run_key in launched:
                    continue
                launched.add(request.run_key)
                tags = {**request.tags, LAUNCHED_BY_TAG: "process", USER_TAG: "ingestion-pipeline process",
                        MAX_RETRIES_TAG: "0"}
                run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
                if settings.executor.executor == "celery":  # the steps run on the workers; this process waits
                    if reconstructable_jobs is None:
                        raise ValueError("INGESTION_EXECUTOR=celery needs the jobs as reconstructable jobs")
                    result = dg.execute_job(reconstructable_jobs[plan.job_name], instance=instance,
                                            tags={**tags, "dagster/partition": request.partition_key},
                                            run_config=run_config, raise_on_error=False)
                    run_id, success = result.run_id, result.success
                else:
                    run_id = str(uuid.uuid4())  # known before the run starts: its claims are ours to release
                    success = job.execute_in_process(
                        instance=instance, partition_key=request.partition_key, run_id=run_id, resources=resources,
                        tags=tags, raise_on_error=False, run_config=run_config).success
                if interrupted() or (not success and interrupted_by_a_signal(instance, run_id)):
                    # Dagster took the signal inside the run (it raises it in the step): give the files back
                    with db.transaction() as conn:
                        for t in (DOCUMENT_FILES, METRIC_UPLOADS):
                            ledger.release(conn, t, owner=run_id, reason="`process` was interrupted")
                    raise Interrupted(f"interrupted during run {run_id}; its claims are back in the queue")
                ran = True
                cannot_embed = None
                if not success:
                    # The host, not the files, at fault: every document run here would fail alike, so the files
                    # go back to the queue for a host that can, no attempt spent, and this process stops (the
                    # command exits 5 saying what to run) rather than retrying them into dead letters.
                    run = instance.get_run_by_id(run_id)
                    cannot_embed = hand_back_from_a_host_that_cannot_embed(instance, db, run, hold_seconds=0.0)
                    if cannot_embed is None:
                        finalize_failed_run(instance, db, run, policy)
                outcome = ProcessedRun(plan.job_name, request.partition_key, run_id, success)
                processed.append(outcome)
                if on_run is not None:
                    on_run(outcome)
                if cannot_embed:
                    raise RunHostCannotEmbed(run_id, cannot_embed.splitlines()[0][:1000])
        if ran:
            continue
        with db.connection() as conn:
            due_at = next_due_at(conn)
        wait = (due_at.timestamp() - time.time()) if due_at is not None else None
        longest = max(policy.retry_backoff_seconds, default=0.0)
        if wait is None or wait > longest + 1:
            return processed
        time.sleep(max(0.0, wait) + 0.05)
