"""Which runs the queued document files need now: one per batch with work due, with its run key and tags.

Plain data, no Dagster: the sensors and `process` turn each ``PlannedRun`` into a ``dg.RunRequest``
(``runtime/launching.py``); the fast lane (``runtime/fast_lane.py``) sends it to the webserver as it is, so that
`submit` never imports Dagster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.run_tags import (
    BATCH_TAG,
    BULK,
    BULK_TENANT_TAG,
    INTERACTIVE,
    INTERACTIVE_PRIORITY,
    LAUNCH_GEN_TAG,
    PRIORITY_TAG,
    RUN_CLASS_TAG,
    RUN_KEY_TAG,
    SOURCE_TAG,
    TENANT_TAG,
    run_key,
)
from ingestion_pipeline.core.settings import BatchSettings
from ingestion_pipeline.documents.batching import assign_queued_to_batches, due_batches, partition_sources


@dataclass(frozen=True)
class PlannedRun:
    """The run one batch needs: what a sensor's ``RunRequest`` and the fast lane's launch both carry."""

    run_key: str
    partition_key: str
    tags: dict[str, str]

    @property
    def interactive(self) -> bool:
        return self.tags.get(RUN_CLASS_TAG) == INTERACTIVE


@dataclass(frozen=True)
class BatchPlan:
    runs: list[PlannedRun]
    due_keys: list[str]  # every batch due now, requested or left to the fast lane: partitions to make known


def plan_batch_runs(db: Database, limits: BatchSettings, run_types: Sequence[str] | None = None, *,
                    leave_to_fast_lane_seconds: float = 0.0) -> BatchPlan:
    """Assign queued rows (of ``run_types``, or all) to batches; one run per batch with work due now.

    ``leave_to_fast_lane_seconds``: an interactive batch first launched whose newest file was queued less than
    this long ago is not planned: the fast lane launches it (``fast_lane.py``). A sensor that requested it
    too raced the fast lane (both looked for the run key before either run existed) and launched a second,
    empty run; past this time, a batch the fast lane did not launch is the sensor's again."""
    with db.connection() as conn:
        assign_queued_to_batches(conn, limits, run_types=run_types)
        due = due_batches(conn, run_types=run_types)
        keys = [b["partition_key"] for b in due]
        sources = partition_sources(conn, keys)
    runs = []
    for b in due:
        run_class = run_class_tags(b, from_source=b["partition_key"] in sources, limits=limits)
        if (run_class[RUN_CLASS_TAG] == INTERACTIVE and not b["launch_gen"]
                and float(b["newest_age"]) < leave_to_fast_lane_seconds):
            continue
        key = run_key(b["partition_key"], b["launch_gen"])
        runs.append(PlannedRun(
            run_key=key, partition_key=b["partition_key"],
            tags={BATCH_TAG: b["partition_key"], LAUNCH_GEN_TAG: str(b["launch_gen"]), TENANT_TAG: b["tenant_id"],
                  RUN_KEY_TAG: key,
                  **({SOURCE_TAG: sources[b["partition_key"]]} if b["partition_key"] in sources else {}),
                  **run_class}))
    return BatchPlan(runs, keys)


def run_class_tags(batch: Mapping[str, Any], *, from_source: bool, limits: BatchSettings) -> dict[str, str]:
    """The run's share of the run slots: ``interactive`` (queued first) for a small batch not from an S3
    source's listing — a person's upload, a queue job, objects just written that S3 told of by event — else
    ``bulk``, limited per tenant (dagster.yaml)."""
    if (not from_source or batch.get("from_events")) and batch["files"] <= limits.interactive_max_files:
        return {RUN_CLASS_TAG: INTERACTIVE, PRIORITY_TAG: INTERACTIVE_PRIORITY}
    return {RUN_CLASS_TAG: BULK, BULK_TENANT_TAG: batch["tenant_id"]}
