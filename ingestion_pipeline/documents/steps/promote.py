"""Step 5, ``promoted_documents``: each file's version promoted in one transaction, the old one deactivated; then
the vectors promoted (by this run or one before it) put into their HNSW graphs (``vector_backlog.py``), and a
tenant grown past the exact-ranking size given its graph (``vector_index.py``)."""

from __future__ import annotations

import functools

from ingestion_pipeline.core.failpoints import failpoint_statement
from ingestion_pipeline.documents import file_ledger, search, serving_models, staging, vector_backlog
from ingestion_pipeline.documents.promotion import PromotionError, Superseded, promote_document_version
from ingestion_pipeline.documents.steps.runner import SKIPPED, FileOutcome, StepRunner
from ingestion_pipeline.documents.vector_index import ensure_graphs


def promote_batch(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    with run.db.connection() as conn:
        # where this model's files are: a search host loads it from there while its versions still serve
        serving_models.register(conn, run.embedder.file_info, run.embedder.model_path)
    outcomes = run.for_each(partition_key, functools.partial(_promote_one, run), "promote", lanes=run.lanes)
    # every version is searchable already (its vectors ranked exactly until indexed); the graphs take them now,
    # on as many connections as files are promoted at once
    vector_backlog.index_backlog(run.db, connections=run.lanes, sinks=run.progress_sinks,
                                 nice=run.settings.batch.index_nice)
    # a tenant these promotions took past the exact-ranking size gets its own graph (until then: ranked exactly)
    with run.db.connection() as conn:
        tenants = [r["tenant_id"] for r in conn.execute(
            "SELECT DISTINCT tenant_id FROM ingestion_runs WHERE file_id = ANY(%s)", ([o.file_id for o in outcomes],))]
    ensure_graphs(run.db, search.EXACT_SEARCH_MAX_CHUNKS, tenants)
    return outcomes


def vectors_left_to_index(run: StepRunner) -> bool:
    """Whether the sweep has work: promoted vectors not in their HNSW graph yet (any run's)."""
    with run.db.connection() as conn:
        return vector_backlog.pending(conn) > 0


def _promote_one(run: StepRunner, row: dict) -> FileOutcome:
    # a re-index keeps the extractor that made the stored elements
    extractor = (row["config"] or {}).get("extractor_version") if row["reindex_of_version_id"] else None
    extractor = extractor or run.extractor_version
    try:
        with run.db.transaction() as conn:
            state = staging.staging_state(conn, row["file_id"])
            failpoint_statement("promote.statement", conn)
            if state is None or not state["embeddings_done"]:
                raise PromotionError("embedding did not complete for this file", code="step_out_of_order")
            version = promote_document_version(
                conn, row, owner=run.owner, fingerprint=run.fingerprint_for(extractor), model=run.model.name,
                model_digest=run.model.vectors_digest,
                extractor_version=extractor, timings_ms=dict((row["stats"] or {}).get("timings_ms") or {}),
            )
    except Superseded as exc:  # a newer version (or a deletion) came first: nothing to promote
        with run.db.transaction() as conn:
            file_ledger.mark_succeeded(conn, row["file_id"], run.owner, {"skipped": str(exc)})
            staging.discard(conn, row["file_id"])
        return FileOutcome.of(row, SKIPPED, str(exc))
    run.release_raw(row)
    return FileOutcome.of(
        row, file_ledger.SUCCEEDED, f"version {version.version_number}: {version.chunk_count} chunks",
        {"version_id": version.version_id, "chunks": version.chunk_count, "tokens": version.token_count},
    )
