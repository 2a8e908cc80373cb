"""The checks of a promoted batch, one result per batch: each is evaluated on its own partition of
``document_batches`` (Dagster's partitioned asset checks), so a check's badge in the UI is that batch's, not
whichever batch ran last.

They run in every batch's run as a step after ``promoted_documents`` (its asset job selects them with it) and
look at the batch as it is then: every document it promoted has one active version, every promoted chunk one
vector of the model's dimension, no promoted version is empty, and no file of it failed (a warning naming the
reasons and what to run). A check with nothing to look at is a warning that says so, never a pass.

A person's run that found nothing to do in its batch fails here, last, with the reason (``promoted_documents``
records it in its materialisation): the run is red, never green on nothing, while every asset's partition stays
materialised and the checks keep real results. A re-execution from failure, which starts here, says what the
batch holds now (``nothing_to_do``).
"""

import warnings
from collections.abc import Iterator

import dagster as dg

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
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
CHECKS_STEP = "promoted_batch_checks"  # the step that evaluates them
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
    """Whether ``run`` evaluates the batch checks after promoting (a person may launch the asset without them, or
    re-execute its step alone)."""
    selected = run.asset_check_selection
    chosen = selected is None or any(key.asset_key == PROMOTED and key.name in BATCH_CHECKS for key in selected)
    return chosen and (run.step_keys_to_execute is None or CHECKS_STEP in run.step_keys_to_execute)


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


def _promotion_by(instance: dg.DagsterInstance, run_id: str, partition_key: str) -> dict | None:
    """The metadata of ``promoted_documents``' materialisation of the batch in run ``run_id``, or None (the run's
    own event records, through the instance's public API)."""
    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records:
        materialization = record.asset_materialization
        if materialization is not None and materialization.asset_key == PROMOTED \
                and materialization.partition == partition_key:
            return {key: value.value for key, value in materialization.metadata.items()}
    return None


def nothing_to_do(instance: dg.DagsterInstance, db: Database, run: dg.DagsterRun,
                  partition_key: str) -> NothingToDo | None:
    """Why a person's run did nothing in the batch, or None.

    The run's own promotion says so in its materialisation (``nothing_to_do``). A re-execution from failure of a
    run that failed here starts here, with no promotion of its own: it does not repeat the finding of the run it
    re-executes (the newest promotion among its ancestors), which may be stale, but says what the batch holds
    now, and, where files are due again, that re-executing all steps (or materialising the batch) runs them: a
    re-execution of the checks alone never does a batch's work."""
    own = _promotion_by(instance, run.run_id, partition_key)
    if own is not None:
        return NothingToDo(str(own["nothing_to_do"])) if "nothing_to_do" in own else None
    parent, ancestor = None, run.parent_run_id
    while ancestor is not None and parent is None:  # the newest promotion among the runs it re-executes
        parent = _promotion_by(instance, ancestor, partition_key)
        found = instance.get_run_by_id(ancestor) if parent is None else None
        ancestor = found.parent_run_id if found is not None else None
    if parent is None or "nothing_to_do" not in parent:
        return None  # the checks alone (the UI's Execute), or a re-execution of checks that failed on their own
    with db.connection() as conn:
        now = ledger.nothing_to_do(conn, DOCUMENT_FILES, partition_key, noun="file",
                                   retry_hint="ingestion-pipeline retry FILE_ID")
        due = any(st["status"] == DOCUMENT_FILES.queued for st in partition_states(conn, DOCUMENT_FILES,
                                                                                   partition_key))
    if due:
        return NothingToDo(f"files are due again in partition {partition_key}: re-execute all steps (or materialise "
                           f"the batch) to run them; this re-execution ran only the checks. {now}")
    return now


@dg.multi_asset_check(specs=SPECS, can_subset=True, name=CHECKS_STEP,
                      description="The promoted batch's integrity and failed files, for its own partition.")
def promoted_batch_checks(context: dg.AssetCheckExecutionContext, postgres: PostgresResource,
                          embedder: dg.ResourceParam[Embedder]) -> Iterator[dg.AssetCheckResult]:
    partition_key = context.op_execution_context.partition_key
    results = batch_results(postgres, partition_key, embedder.info.dimension)
    for key in context.selected_asset_check_keys:
        yield results[key.name]
    nothing = nothing_to_do(context.instance, postgres.db, context.run, partition_key)
    if nothing is not None:
        raise failure_for(nothing)


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions(asset_checks=[promoted_batch_checks])
