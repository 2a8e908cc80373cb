"""What every document and metric step shares: who it works for, and how a step-level error is retried.

A step-level error is one no single file or upload caused (the database went away, a deadlock): the
step asks Dagster to run it again after the configured backoff (``RetryRequested``; 5 s, 10 s, 30 s by
default), keeping its claims, so it resumes from the staging tables. Other errors fail the step (a
permanent one with ``Failure(allow_retries=False)`` raised by the step itself).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import dagster as dg

from ingestion_pipeline.core.failures import classify
from ingestion_pipeline.core.ledger import REPLAY_FAILED_TAG, NothingToDo

T = TypeVar("T")

# Runs launched by automation; a person's materialisation, backfill or re-execution re-drives a partition's work.
AUTOMATION_TAGS = ("dagster/sensor_name", "dagster/schedule_name", "ingestion/launched_by")
# Set by Dagster's run-retry daemon on the retry it launches; Dagster never copies it to a re-execution.
AUTOMATIC_RETRY_TAG = "dagster/retry_number"


def launched_by_a_person(run: dg.DagsterRun) -> bool:
    """Whether a person launched ``run``: a materialisation or backfill (UI, GraphQL), or a re-execution.

    Dagster copies a run's tags to its re-executions, so a re-execution of a sensor's run still carries
    ``dagster/sensor_name``: the tags cannot tell. What a re-execution has that a sensor's run does not is a
    parent run; among re-executions, those of Dagster's run-retry daemon carry ``dagster/retry_number``.
    """
    if run.parent_run_id is not None:
        return AUTOMATIC_RETRY_TAG not in run.tags
    return not any(tag in run.tags for tag in AUTOMATION_TAGS)


def replays_failed(run: dg.DagsterRun) -> bool:
    """A person asked for permanently failed work to run again (the launch's tag ``ingestion/replay_failed``)."""
    return run.tags.get(REPLAY_FAILED_TAG, "").strip().lower() == "true"


def first_step_run(run: dg.DagsterRun, chain: Sequence[str]) -> str | None:
    """The earliest of ``chain`` (asset names, in order) that ``run`` executes: a re-execution from failure, or
    a materialisation of some of the assets, starts after the first."""
    for name in chain:
        # a graph-backed asset's steps are ``name.op`` (``name.op[mapping key]`` when mapped)
        if run.step_keys_to_execute is not None and not any(
                key == name or key.startswith(f"{name}.") for key in run.step_keys_to_execute):
            continue
        if run.asset_selection is not None and dg.AssetKey(name) not in run.asset_selection:
            continue
        return name
    return None


def failure_for(exc: NothingToDo) -> dg.Failure:
    """The step's failure when a person's run has nothing to do: red, with the reason, never retried."""
    return dg.Failure(description=str(exc), allow_retries=False)


def retrying_transient_errors(context: dg.AssetExecutionContext, step: Callable[[], T],
                              backoff: tuple[float, ...]) -> T:
    """Run ``step``; on a transient error, ask Dagster to retry the step after the next of ``backoff``'s waits
    (``ReliabilitySettings.retry_backoff_seconds``)."""
    try:
        return step()
    except Exception as exc:
        failure = classify(exc)
        if not failure.transient or context.retry_number >= len(backoff):
            raise
        wait = backoff[context.retry_number]
        context.log.warning(f"{failure.code}: {failure.message}; the step is retried in {wait:g} s "
                            f"(retry {context.retry_number + 1} of {len(backoff)})")
        raise dg.RetryRequested(max_retries=len(backoff), seconds_to_wait=wait) from exc
