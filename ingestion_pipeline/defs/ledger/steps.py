"""What every document and metric step shares: who it works for, and how a step-level error is retried.

A step-level error is one no single file or upload caused (the database went away, a deadlock): the
step asks Dagster to run it again after the configured backoff (``RetryRequested``; 5 s, 10 s, 30 s by
default), keeping its claims, so it resumes from the staging tables. Other errors fail the step (a
permanent one with ``Failure(allow_retries=False)`` raised by the step itself).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import dagster as dg

from ingestion_pipeline.core.failures import classify

T = TypeVar("T")

# Runs launched by automation; a person's materialisation or backfill also replays failed work.
AUTOMATION_TAGS = ("dagster/sensor_name", "dagster/schedule_name", "ingestion/launched_by")


def launched_by_a_person(run: dg.DagsterRun) -> bool:
    return not any(tag in run.tags for tag in AUTOMATION_TAGS)


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
