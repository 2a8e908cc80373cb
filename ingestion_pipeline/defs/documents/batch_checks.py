"""The checks of a promoted batch, one result per batch: each is evaluated on its own partition of
``document_batches`` (Dagster's partitioned asset checks), so a check's badge in the UI is that batch's, not
whichever batch ran last.

They run in every batch's run as a step after ``promoted_documents`` (its asset job selects them with it) and
look at the batch as it is then: every document it promoted has one active version, every promoted chunk one
vector of the model's dimension, no promoted version is empty, and no file of it failed (a warning naming the
reasons and what to run). A check with nothing to look at is a warning that says so, never a pass.

A person's run that found nothing to do in its batch fails here, last, with the reason (``promoted_documents``
records it in its materialisation; a re-execution from failure, which starts here, finds its run group's): the
run is red, never green on nothing, while every asset's partition stays materialised and the checks keep real
results.
"""

import warnings
from collections.abc import Iterator

import dagster as dg

from ingestion_pipeline.core.ledger import DOCUMENT_FILES, NothingToDo, partition_states
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline.documents import integrity
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.runtime.steps import failure_for

PROMOTED = dg.AssetKey("promoted_documents")
INTEGRITY_CHECKS = {
    "one_active_version_per_document": "every document promoted in this batch has exactly one active version",
    "embeddings_match_chunks": "every promoted chunk has one vector of the model's dimension",
    "no_version_without_chunks": "no promoted version is empty",
}
FAILED_FILES = "no_failed_files"
BATCH_CHECKS = (*INTEGRITY_CHECKS, FAILED_FILES)
# A check spec's partitions are a preview of Dagster 1.13 (it warns at every load of the code location): what
# this module relies on of it (one result per batch, from the batch's run) is tested by defs/test_batch_checks.py.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", dg.PreviewWarning)
    SPECS = [
        *(dg.AssetCheckSpec(name, asset=PROMOTED, description=text, partitions_def=document_batches)
          for name, text in INTEGRITY_CHECKS.items()),
        dg.AssetCheckSpec(FAILED_FILES, asset=PROMOTED, partitions_def=document_batches,
                          description="no file of this batch failed or was dead-lettered; a warning gives the "
                                      "reasons with their counts and what to run"),
    ]


def checks_follow(run: dg.DagsterRun) -> bool:
    """Whether ``run`` evaluates the batch checks after promoting (a person may launch the asset without them)."""
    selected = run.asset_check_selection
    return selected is None or any(key.asset_key == PROMOTED and key.name in BATCH_CHECKS for key in selected)


def _failed_files_check(failed: list[dict]) -> dg.AssetCheckResult:
    """WARN when files of the batch failed or were dead-lettered: the run stays green (the others were
    promoted), the check says how many, why, and what to run."""
    total = sum(st["n"] for st in failed)
    reasons = {f"{st['status']}: {code}": st["n"] for st in failed for code in (st["codes"] or ["unknown"])}
    return dg.AssetCheckResult(
        check_name=FAILED_FILES, asset_key=PROMOTED, passed=total == 0, severity=dg.AssetCheckSeverity.WARN,
        description=(f"files failed in this batch: {total} — " + ", ".join(f"{k} ({v})" for k, v in reasons.items())
                     if total else "no file of this batch failed"),
        metadata={"failed_files": total, "reasons": dg.MetadataValue.json(reasons),
                  **({"what_to_do": "`ingestion-pipeline files --status failed` shows each file's error and "
                                    "suggestion; fix the cause, then `ingestion-pipeline retry FILE_ID` (failed) or "
                                    "`ingestion-pipeline retry --dead-letter`"} if total else {})},
    )


def batch_results(postgres: PostgresResource, partition_key: str, dimension: int) -> dict[str, dg.AssetCheckResult]:
    """Every batch check's result for the batch ``partition_key`` as the database holds it now."""
    with postgres.db.connection() as conn:
        done = integrity.promoted_in_partition(conn, partition_key)
        doc_ids = [r["doc_id"] for r in done]
        version_ids = [r["version_id"] for r in done]
        multi = integrity.docs_without_exactly_one_active_version(conn, doc_ids)
        mismatched = integrity.versions_with_embedding_mismatch(conn, version_ids, dimension)
        empty = integrity.versions_without_chunks(conn, version_ids)
        failed = [st for st in partition_states(conn, DOCUMENT_FILES, partition_key)
                  if st["status"] in (DOCUMENT_FILES.failed, DOCUMENT_FILES.dead_letter)]
    results = {FAILED_FILES: _failed_files_check(failed)}
    if not doc_ids:  # a check with nothing to look at is a warning that says so, never Passed
        return results | {name: dg.AssetCheckResult(
            check_name=name, asset_key=PROMOTED, passed=False, severity=dg.AssetCheckSeverity.WARN,
            description="not checked: no file of this batch is promoted") for name in INTEGRITY_CHECKS}
    found = {"one_active_version_per_document": (multi, "documents_checked", doc_ids),
             "embeddings_match_chunks": (mismatched, "versions_checked", version_ids),
             "no_version_without_chunks": (empty, "versions_checked", version_ids)}
    return results | {name: dg.AssetCheckResult(
        check_name=name, asset_key=PROMOTED, passed=not violations,
        metadata={counted: len(checked), "violations": str(violations[:20])})
        for name, (violations, counted, checked) in found.items()}


def nothing_found_by(instance: dg.DagsterInstance, run: dg.DagsterRun, partition_key: str) -> str | None:
    """What ``promoted_documents`` recorded when ``run`` found nothing to do in the batch, or None: its newest
    materialisation of the batch, if this run or one of the run group it re-executes (a re-execution from failure
    starts at this step) made it. Read through the instance's public records."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=PROMOTED, asset_partitions=[partition_key]), limit=1).records
    for record in records:
        metadata = record.asset_materialization.metadata if record.asset_materialization else {}
        if "nothing_to_do" not in metadata:
            continue
        made_by = run if record.run_id == run.run_id else instance.get_run_by_id(record.run_id)
        if made_by is not None and (made_by.root_run_id or made_by.run_id) == (run.root_run_id or run.run_id):
            return str(metadata["nothing_to_do"].value)
    return None


@dg.multi_asset_check(specs=SPECS, can_subset=True, name="promoted_batch_checks",
                      description="The promoted batch's integrity and failed files, for its own partition.")
def promoted_batch_checks(context: dg.AssetCheckExecutionContext, postgres: PostgresResource,
                          embedder: dg.ResourceParam[Embedder]) -> Iterator[dg.AssetCheckResult]:
    partition_key = context.op_execution_context.partition_key
    results = batch_results(postgres, partition_key, embedder.info.dimension)
    for key in context.selected_asset_check_keys:
        yield results[key.name]
    nothing = nothing_found_by(context.instance, context.run, partition_key)
    if nothing:
        raise failure_for(NothingToDo(nothing))


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(asset_checks=[promoted_batch_checks])
