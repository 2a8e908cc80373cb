"""What happens to a run's unfinished work when the run ends without finishing it.

One place for the run-status sensors, the janitor and `process`: a failed run whose Dagster retry
follows (``dagster/will_retry``) keeps its rows (the retry is the same owner and continues them); a
failed run with no retry hands its rows back as a failed attempt (retried with backoff, or dead-lettered
after the last attempt); a canceled run's rows are canceled and their staged work removed.
"""

from __future__ import annotations

from collections.abc import Iterator

import dagster as dg

from ingestion_pipeline.core import ledger, run_tags
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failures import FailureInfo
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS, LedgerTable
from ingestion_pipeline.core.run_tags import DOCUMENT_JOB, LAUNCH_GEN_TAG, METRIC_JOB
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.documents import file_ledger, staging
from ingestion_pipeline.metrics import staging as metric_staging

WILL_RETRY_TAG = "dagster/will_retry"
TABLE_OF_JOB = {DOCUMENT_JOB: DOCUMENT_FILES, METRIC_JOB: METRIC_UPLOADS}
# A materialisation, backfill or re-execution from the UI runs the assets under Dagster's implicit asset job:
# the assets it selects, or the steps it executes, tell which ledger the run works on; failing both, the
# partition it runs (a document batch or a metric upload).
TABLE_OF_ASSET = {
    **dict.fromkeys(("raw_documents", "document_elements", "document_chunks", "document_embeddings",
                     "promoted_documents"), DOCUMENT_FILES),
    **dict.fromkeys(("raw_metric_files", "staged_metric_rows", "promoted_metrics"), METRIC_UPLOADS),
}


def _checks_only(run: dg.DagsterRun) -> bool:
    """A run that executes asset checks and no asset step (the UI's Execute on checks, a re-execution of a failed
    check step): it claims no file, so its failure hands none back and counts no attempt."""
    if run.step_keys_to_execute is not None:
        return not any(step.split(".")[0] in TABLE_OF_ASSET for step in run.step_keys_to_execute)
    return run.asset_selection is not None and not run.asset_selection and bool(run.asset_check_selection)


def table_for_run(run: dg.DagsterRun, instance: dg.DagsterInstance) -> LedgerTable | None:
    """The ledger a run works on, or None for runs that claim no ledger rows."""
    if _checks_only(run):
        return None
    if run.job_name in TABLE_OF_JOB:
        return TABLE_OF_JOB[run.job_name]
    partition = run.tags.get("dagster/partition")
    if not partition:
        return None
    # a graph-backed asset's steps are named ``asset.op``
    steps = ({key.to_user_string() for key in run.asset_selection or ()}
             | {step.split(".")[0] for step in run.step_keys_to_execute or ()})
    found = next((TABLE_OF_ASSET[s] for s in sorted(steps) if s in TABLE_OF_ASSET), None)
    if found is not None:
        return found
    for partitions, t in ((run_tags.DOCUMENT_BATCHES, DOCUMENT_FILES), (run_tags.METRIC_UPLOADS, METRIC_UPLOADS)):
        if instance.has_dynamic_partition(partitions, partition):
            return t
    return None


def owner_of(run: dg.DagsterRun) -> str:
    """Claims belong to the root run: a re-execution continues its parent's work."""
    return run.root_run_id or run.run_id


def retry_follows(run: dg.DagsterRun) -> bool:
    return run.tags.get(WILL_RETRY_TAG) == "true"


def _launch_gen(run: dg.DagsterRun) -> int | None:
    raw = run.tags.get(LAUNCH_GEN_TAG)
    return int(raw) if raw and raw.isdigit() else None


def discard_staged_work(conn, t: LedgerTable, rows: list[dict]) -> None:
    """Canceled work leaves nothing staged behind (nothing of it can ever be promoted)."""
    ids = [r[t.key] for r in rows]
    if not ids:
        return
    if t is DOCUMENT_FILES:
        for file_id in ids:
            staging.discard(conn, file_id)
        file_ledger.report(conn, rows)
    else:
        metric_staging.discard(conn, ids)


def failure_reason(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    """Why a run failed, in a person's terms: the first failed step's error, else the run's message."""
    for record in instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records:
        event = record.event_log_entry.dagster_event
        error = event.step_failure_data.error if event and event.step_failure_data else None
        while error is not None and error.cause is not None and "DagsterExecutionStepExecutionError" in error.cls_name:
            error = error.cause  # the user's exception, not Dagster's wrapper
        if error is not None:
            return f"step {event.step_key} failed: {error.cls_name}: {error.message.strip()}"
    records = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    event = records[-1].event_log_entry.dagster_event if records else None
    return event.message if event is not None and event.message else "the run failed"


def _step_errors(instance: dg.DagsterInstance, run_id: str) -> Iterator:
    """Every failed step's error of the run, and each error's causes (Dagster wraps the step's exception)."""
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records:
        event = record.event_log_entry.dagster_event
        error = event.step_failure_data.error if event and event.step_failure_data else None
        while error is not None:
            yield error
            error = error.cause


def interrupted_by_a_signal(instance: dg.DagsterInstance, run_id: str) -> bool:
    """Did the run stop because its process got SIGINT/SIGTERM? (Dagster turns the signal into an error.)"""
    return any("DagsterExecutionInterruptedError" in e.cls_name or "KeyboardInterrupt" in e.cls_name
               for e in _step_errors(instance, run_id))


# The exceptions that say the host, not the file, is at fault: it cannot embed as the deployment decided
# (documents/model_decision.py) or as it is set (documents/devices.py). Every document run on it fails alike.
HOST_CANNOT_EMBED_ERRORS = ("HostCannotEmbed", "CudaUnavailable")


def host_cannot_embed(instance: dg.DagsterInstance, run_id: str) -> str | None:
    """Why the run failed, if a step failed because this host cannot embed (else None)."""
    return next((e.message.strip() for e in _step_errors(instance, run_id) if e.cls_name in HOST_CANNOT_EMBED_ERRORS),
                None)


# The ledger's history event of a file handed back by a host that cannot embed (`files show` lists it), and the
# longest it is then held: its hold doubles with each hand-back of the day, from the longest retry backoff, so
# that a deployment with no host able to embed relaunches it a few times an hour, not every 30 s, and a host
# fixed or added takes it within 15 minutes.
HANDED_BACK = "host_cannot_embed"
LONGEST_HAND_BACK_HOLD_SECONDS = 900.0


def hand_back_from_a_host_that_cannot_embed(instance: dg.DagsterInstance, db: Database, run: dg.DagsterRun,
                                            hold_seconds: float) -> str | None:
    """A document run failed because its host cannot embed (``host_cannot_embed``): its files go back to the
    queue with no attempt counted, not launched again for ``hold_seconds`` (the run-failure sensor's next launch
    would meet the same host), doubled for each earlier hand-back of the day up to 15 minutes, the reason in the
    ledger's history; the files never dead-letter for a host's fault and run once a host that can embed takes
    them. The reason, or None when the run failed otherwise."""
    reason = host_cannot_embed(instance, run.run_id)
    if reason is None or table_for_run(run, instance) is not DOCUMENT_FILES:
        return None
    with db.transaction() as conn:
        rows = ledger.release(conn, DOCUMENT_FILES, owner=owner_of(run), hold_seconds=hold_seconds,
                              reason=reason[:2000], event=HANDED_BACK)
        if hold_seconds > 0:  # while no host can embed, each relaunch meets the same fault
            ledger.hold_longer_each_time(conn, DOCUMENT_FILES, rows, event=HANDED_BACK, base_seconds=hold_seconds,
                                         cap_seconds=max(hold_seconds, LONGEST_HAND_BACK_HOLD_SECONDS))
    return reason


def finalize_failed_run(instance: dg.DagsterInstance, db: Database, run: dg.DagsterRun,
                        policy: ReliabilitySettings) -> list[dict]:
    """The run failed and no Dagster retry follows: its unfinished work is a failed attempt."""
    t = table_for_run(run, instance)
    if t is None or retry_follows(run):
        return []
    message = f"Dagster run {run.run_id} failed before this work finished: {failure_reason(instance, run)}"
    failure = FailureInfo("run_failed", message[:2000], transient=True,
                          suggestion="retried with backoff; see the Dagster run's logs for the cause")
    with db.transaction() as conn:
        rows = ledger.finalize_run(conn, t, owner=owner_of(run), partition_key=run.tags.get("dagster/partition"),
                                   launch_gen=_launch_gen(run), failure=failure, policy=policy)
        if t is DOCUMENT_FILES:
            file_ledger.report(conn, rows)
    return rows


def cancel_run_work(instance: dg.DagsterInstance, db: Database, run: dg.DagsterRun, actor: str) -> list[dict]:
    """The run was canceled (terminated from the UI, or by `ingestion-pipeline cancel`)."""
    t = table_for_run(run, instance)
    if t is None:
        return []
    with db.transaction() as conn:
        rows = ledger.cancel(conn, t, ledger.held_by(conn, t, owner_of(run)), actor=actor)
        discard_staged_work(conn, t, rows)
    return rows
