"""Which ledger a Dagster run works on, told from the run's public fields (no execution-plan snapshot)."""

import dagster as dg

from ingestion_pipeline.core.ledger import DOCUMENT_FILES, METRIC_UPLOADS
from ingestion_pipeline.defs.partitions import document_batches, metric_uploads
from ingestion_pipeline.runtime.finalization import table_for_run

ASSET_JOB = "__ASSET_JOB"


def _run(job_name: str, partition: str | None = None, **fields) -> dg.DagsterRun:
    tags = {"dagster/partition": partition} if partition else {}
    return dg.DagsterRun(job_name=job_name, tags=tags, **fields)


def test_every_kind_of_run_is_mapped_to_its_ledger_or_to_none():
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(document_batches.name, ["acme-20261128t000000-1"])
        instance.add_dynamic_partitions(metric_uploads.name, ["acme-meta-7"])
        assert table_for_run(_run("document_batch_job", "acme-20261128t000000-1"), instance) is DOCUMENT_FILES
        assert table_for_run(_run("metric_upload_job", "acme-meta-7"), instance) is METRIC_UPLOADS
        # a person's materialisation of some assets of a partition
        selected = _run(ASSET_JOB, "acme-meta-7", asset_selection=frozenset({dg.AssetKey("promoted_metrics")}))
        assert table_for_run(selected, instance) is METRIC_UPLOADS
        # a re-execution from failure: only the steps left
        left = _run(ASSET_JOB, "acme-20261128t000000-1", step_keys_to_execute=[
            "document_embeddings.plan_shares", "document_embeddings.finish_embeddings"])
        assert table_for_run(left, instance) is DOCUMENT_FILES
        # nothing selected, nothing listed: the partition tells
        assert table_for_run(_run(ASSET_JOB, "acme-20261128t000000-1"), instance) is DOCUMENT_FILES
        assert table_for_run(_run(ASSET_JOB, "acme-meta-7"), instance) is METRIC_UPLOADS
        # runs that claim no ledger rows
        assert table_for_run(_run("ledger_janitor_job"), instance) is None
        assert table_for_run(_run(ASSET_JOB, "not-a-known-partition"), instance) is None
