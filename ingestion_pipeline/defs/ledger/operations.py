"""What an operator does to work in flight: cancel it (and stop its Dagster run), replay it, pause it.

Canceling ends the ledger rows ``canceled`` with who and when and removes their staged data, so
nothing of them can be promoted (the previous version keeps serving); a worker still holding one
loses it at its next write. The Dagster run is terminated when no other work of it remains (a
`process` run, which has no code server to receive the termination, simply drops the canceled file).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dagster as dg

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS, LedgerTable
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.runtime.finalization import discard_staged_work

IN_PROGRESS = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED]


@dataclass
class CancelReport:
    canceled: list[dict] = field(default_factory=list)
    not_cancelable: list[dict] = field(default_factory=list)  # already finished: {id, status}
    terminated_runs: list[str] = field(default_factory=list)


def _terminate_idle_runs(instance: dg.DagsterInstance, db: Database, t: LedgerTable, run_ids: set[str],
                         report: CancelReport) -> None:
    """Terminate the Dagster runs whose work is all canceled or finished now."""
    for run_id in sorted(run_ids):
        run = instance.get_run_by_id(run_id)
        if run is None or run.status not in IN_PROGRESS:
            continue
        with db.connection() as conn:
            remaining = ledger.held_by(conn, t, run.root_run_id or run.run_id)
        if remaining:
            continue
        if instance.run_coordinator.cancel_run(run_id):
            report.terminated_runs.append(run_id)


def cancel(instance: dg.DagsterInstance, db: Database, t: LedgerTable, ids: list[int], actor: str) -> CancelReport:
    report = CancelReport()
    with db.transaction() as conn:
        before = ledger.states(conn, t, ids)
        report.canceled = ledger.cancel(conn, t, ids, actor=actor)
        discard_staged_work(conn, t, report.canceled)
    canceled_ids = {r[t.key] for r in report.canceled}
    report.not_cancelable = [{"id": i, "status": before[i]["status"] if i in before else "unknown"}
                             for i in ids if i not in canceled_ids]
    runs_touched = {before[i]["dagster_run_id"] for i in canceled_ids if before[i]["dagster_run_id"]}
    _terminate_idle_runs(instance, db, t, runs_touched, report)
    return report


def cancel_files(instance: dg.DagsterInstance, db: Database, file_ids: list[int], actor: str) -> CancelReport:
    return cancel(instance, db, DOCUMENT_FILES, file_ids, actor)


def cancel_batch(instance: dg.DagsterInstance, db: Database, partition_key: str, actor: str) -> CancelReport:
    with db.connection() as conn:
        ids = [r["file_id"] for r in file_ledger.partition_rows(conn, partition_key)]
    if not ids:
        raise ValueError(f"no batch {partition_key!r}")
    report = cancel(instance, db, DOCUMENT_FILES, ids, actor)
    for record in instance.get_run_records(filters=dg.RunsFilter(
            statuses=IN_PROGRESS, tags={"dagster/partition": partition_key})):
        if record.dagster_run.run_id not in report.terminated_runs and \
                instance.run_coordinator.cancel_run(record.dagster_run.run_id):
            report.terminated_runs.append(record.dagster_run.run_id)
    return report


def cancel_upload(instance: dg.DagsterInstance, db: Database, upload_id: int, actor: str) -> CancelReport:
    return cancel(instance, db, METRIC_UPLOADS, [upload_id], actor)
