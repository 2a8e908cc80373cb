"""Turning queued ledger rows into batch partitions and run requests (shared by sensors and the CLI)."""

from dataclasses import dataclass

import dagster as dg

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.defs.partitions import BATCH_TAG, SOURCE_TAG, document_batches
from ingestion_pipeline.defs.resources import DocumentPipelineResource, PostgresResource
from ingestion_pipeline.documents.batching import (
    assign_queued_to_batches,
    partition_sources,
    partitions_with_queued_rows,
)


@dataclass(frozen=True)
class BatchRuns:
    partition_keys: list[str]  # batches with queued work, oldest first
    new_partition_keys: list[str]  # not yet known to the instance
    tags: dict[str, dict[str, str]]  # run tags per partition key

    def run_requests(self) -> list[dg.RunRequest]:
        # run_key = partition key: a repeated tick (or a batch whose run is still queued) launches nothing twice.
        return [dg.RunRequest(run_key=k, partition_key=k, tags=self.tags[k]) for k in self.partition_keys]

    def partition_requests(self) -> list:
        return [document_batches.build_add_request(self.new_partition_keys)] if self.new_partition_keys else []

    def sensor_result(self) -> dg.SensorResult:
        return dg.SensorResult(run_requests=self.run_requests(), dynamic_partitions_requests=self.partition_requests())


def plan_batch_runs(
    instance: dg.DagsterInstance,
    postgres: PostgresResource,
    document_pipeline: DocumentPipelineResource,
    run_type: str | None = None,
) -> BatchRuns:
    """Assign queued rows (of ``run_type``, or all) to batches; describe the runs that should exist."""
    with connect(postgres.url()) as conn:
        assign_queued_to_batches(conn, document_pipeline.settings().batch, run_type=run_type)
        keys = partitions_with_queued_rows(conn, run_type=run_type)
        sources = partition_sources(conn, keys)
    known = set(instance.get_dynamic_partitions(document_batches.name))
    tags = {k: {BATCH_TAG: k, **({SOURCE_TAG: sources[k]} if k in sources else {})} for k in keys}
    return BatchRuns(keys, [k for k in keys if k not in known], tags)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions()
