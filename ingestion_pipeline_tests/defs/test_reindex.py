"""Re-indexing after a pipeline change, from the elements kept with each version (the raw files are gone),
through the real assets: queued like uploads, and by a person's re-materialisation (a UI backfill) of a batch."""

from pathlib import Path

import dagster as dg
import pytest

from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.documents import reindex
from ingestion_pipeline.documents.promotion import deactivate_document
from ingestion_pipeline.documents.vector_index import graph_ready
from ingestion_pipeline_tests.helpers import (
    DOCUMENT_ASSETS,
    batch_queued,
    ingest,
    materialize_batch,
    pipeline_for,
    table,
    tiny_model,
)
from ingestion_pipeline_tests.helpers import test_resources as resources_for_a_run

FILES = ("fake-memo.pdf", "simple.docx", "codeblock.md")


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _files(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, list[dict]]:
    [event] = result.asset_materializations_for_node(asset)
    files: dict[str, list[dict]] = {}
    for record in event.metadata["files"].value.records:
        files.setdefault(record.data["file"], []).append(record.data)
    return files


def _check(result: dg.ExecuteInProcessResult, name: str):
    [check] = [c for c in result.get_asset_check_evaluations() if c.check_name == name]
    return check


def _plan(database, **kwargs) -> reindex.ReindexPlan:
    with database.transaction() as conn:
        return reindex.find_versions(conn, pipeline_for(database).fingerprint_for, **kwargs)


@pytest.mark.integration  # a heavy end-to-end case: with make test, not test-fast
def test_chunker_change_reindexes_every_version_from_stored_elements(instance, database, db, corpus_dir, monkeypatch):
    docs = corpus_dir / "documents"
    ingest(instance, database, "acme", *(docs / f for f in FILES))
    ingest(instance, database, "beta", docs / "simple.docx")
    v1 = {v["doc_id"]: v for v in table(db, "SELECT * FROM document_versions")}
    assert len(v1) == 4 and all(v["extractor_version"] for v in v1.values())
    stored = table(db, "SELECT version_id, count(*) AS n FROM version_elements GROUP BY version_id")
    assert {r["version_id"] for r in stored} == {v["version_id"] for v in v1.values()}
    # the raw uploads were deleted after promotion: re-indexing cannot rely on them
    assert not any(Path(r["raw_path"]).exists() for r in table(db, "SELECT raw_path FROM ingestion_runs"))
    assert _plan(database).stale == 0

    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "60")  # a chunker setting: a new fingerprint
    plan = _plan(database, tenant_id="acme")
    assert (plan.active, plan.current, len(plan.reindexable), plan.needs_file) == (3, 0, 3, [])
    with database.transaction() as conn:
        reindex.queue(conn, plan)
        again = reindex.queue(conn, _plan(database, tenant_id="acme"))  # a second `reindex` queues nothing
    assert len(plan.queued_file_ids) == 3 and again.queued_file_ids == [] and len(again.already_queued) == 3
    [key] = batch_queued(database)
    result = materialize_batch(instance, key)
    assert result.success

    fingerprint = pipeline_for(database).fingerprint
    active = {v["doc_id"]: v for v in table(db, "SELECT * FROM document_versions WHERE is_active")}
    for doc_id, old in v1.items():
        if old["tenant_id"] == "beta":  # another tenant: not asked, untouched
            assert active[doc_id]["version_id"] == old["version_id"]
            continue
        new = active[doc_id]
        assert new["version_number"] == 2 and new["pipeline_fingerprint"] == fingerprint
        assert new["content_hash"] == old["content_hash"] and new["extractor_version"] == old["extractor_version"]
        assert table(db, "SELECT is_active FROM document_versions WHERE version_id = %s",
                     old["version_id"])[0]["is_active"] is False
    for run in table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex'"):
        assert run["status"] == "succeeded", run["error"]
        version = run["reindex_of_version_id"]
        old_hashes = {r["content_hash"] for r in table(db, "SELECT content_hash FROM chunks WHERE version_id = %s",
                                                       version)}
        new_hashes = [r["content_hash"] for r in table(
            db, "SELECT content_hash FROM chunks WHERE version_id = %s", run["stats"]["version_id"])]
        unchanged = sum(h in old_hashes for h in new_hashes)
        # chunk texts that did not change reuse their vectors; only the others are embedded
        assert run["stats"]["embeddings_reused"] == unchanged
        assert run["stats"]["embedded"] == len(new_hashes) - unchanged
    assert sum(r["stats"]["embedded"] for r in table(db, "SELECT stats FROM ingestion_runs WHERE run_type = "
                                                         "'reindex'")) > 0  # the budgets really changed chunks
    assert _check(result, "fingerprints_current").metadata["stale"].value == 1  # beta's version

    # nothing changed since: a re-index of acme is a no-op that says so
    assert (lambda p: (p.current, p.reindexable))(_plan(database, tenant_id="acme")) == (3, [])


@pytest.mark.integration
def test_backfill_of_a_batch_reindexes_its_stale_versions_and_then_reports_them_current(
        instance, database, db, corpus_dir, monkeypatch):
    docs = corpus_dir / "documents"
    [key] = ingest(instance, database, "acme", docs / "fake-memo.pdf", docs / "codeblock.md")
    runs_before = len(table(db, "SELECT file_id FROM ingestion_runs"))

    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "200")
    stale = materialize_batch(instance, key)  # what a UI backfill or re-materialisation of the partition runs
    assert stale.success
    check = _check(stale, "fingerprints_current")
    assert check.passed and check.severity == dg.AssetCheckSeverity.WARN and check.metadata["stale"].value == 0
    reindexed = table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex' ORDER BY file_id")
    assert len(reindexed) == 2 and all(r["partition_key"] == key and r["status"] == "succeeded" for r in reindexed)
    versions = table(db, "SELECT doc_id, version_number, is_active FROM document_versions ORDER BY doc_id, "
                         "version_number")
    assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, False), (2, True)] * 2
    files = _files(stale, "raw_documents")
    assert {f["outcome"] for f in files["codeblock.md"]} == {"succeeded", "running"}  # the upload, its re-index

    current = materialize_batch(instance, key, raise_on_error=False)  # again, nothing changed: it says so
    assert not current.success  # never green on nothing
    [failure] = [e for e in current.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    message = failure.step_failure_data.user_failure_data.description
    assert message.startswith(f"nothing to do in partition {key}: 4 succeeded") and "no version is stale" in message
    assert len(table(db, "SELECT file_id FROM ingestion_runs")) == runs_before + 2
    assert len(table(db, "SELECT * FROM document_versions")) == 4

    # an automatic run of the batch (`process`, a sensor's relaunch) does not re-index; a person's backfill does
    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "180")
    automatic = dg.materialize(DOCUMENT_ASSETS, partition_key=key, instance=instance, resources=resources_for_a_run(),
                               tags={"ingestion/launched_by": "process"})
    files = _files(automatic, "raw_documents")
    assert {f["detail"] for rows in files.values() for f in rows} == {"already done"}
    assert len(table(db, "SELECT file_id FROM ingestion_runs")) == runs_before + 2
    assert _check(automatic, "fingerprints_current").passed is False
    assert _check(automatic, "fingerprints_current").metadata["stale"].value == 2


def test_a_reindex_never_replaces_a_newer_version(instance, database, db, corpus_dir, monkeypatch):
    docs = corpus_dir / "documents"
    ingest(instance, database, "acme", docs / "codeblock.md", docs / "simple.docx")
    [memo, docx] = table(db, "SELECT * FROM document_versions ORDER BY doc_id")
    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "80")
    with database.transaction() as conn:
        reindex.queue(conn, _plan(database))
    [key] = batch_queued(database)

    # one document is deactivated before its re-index is claimed, the other after it is embedded
    with database.connection() as conn:
        deactivate_document(conn, "acme", memo["doc_id"])
    pipeline = pipeline_for(database)
    pipeline.worker = Worker("run-x", "run-x", 600)
    claimed = {o.filename: o for o in pipeline.claim_batch(key)}
    assert claimed["codeblock.md"].status == "skipped"
    assert claimed["codeblock.md"].detail == "version 1 is no longer active (the document was deactivated)"
    assert claimed["simple.docx"].status == "running"
    pipeline.extract_batch(key)
    pipeline.chunk_batch(key)
    pipeline.embed_batch(key)
    with database.connection() as conn:
        deactivate_document(conn, "acme", docx["doc_id"])
    [promoted] = pipeline.promote_batch(key)
    assert promoted.status == "skipped" and "no longer active" in promoted.detail
    assert table(db, "SELECT * FROM document_versions WHERE is_active") == []
    assert len(table(db, "SELECT * FROM document_versions")) == 2
    assert table(db, "SELECT * FROM staging_documents") == []
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs WHERE run_type = 'reindex'")} == {
        "succeeded"}


def test_versions_without_stored_elements_are_reported_not_queued(instance, database, db, corpus_dir, monkeypatch):
    ingest(instance, database, "acme", corpus_dir / "documents" / "codeblock.md")
    [version] = table(db, "SELECT * FROM document_versions")
    # as a version promoted before elements were kept looks
    db.execute("DELETE FROM version_elements WHERE version_id = %s", (version["version_id"],))
    db.execute("UPDATE document_versions SET extractor_version = NULL WHERE version_id = %s", (version["version_id"],))
    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "80")
    plan = _plan(database)
    assert plan.reindexable == [] and [v.version_id for v in plan.needs_file] == [version["version_id"]]
    assert "submit the file again" in plan.needs_file[0].reason

    # an extractor change cannot be re-done from stored elements: the file is needed too
    ingest(instance, database, "beta", corpus_dir / "documents" / "simple.docx")
    monkeypatch.setattr(reindex, "EXTRACTOR_VERSION", "direct-3")
    plan = _plan(database, tenant_id="beta")
    assert len(plan.needs_file) == 1 and "extracted by direct-2 (now direct-3)" in plan.needs_file[0].reason


def test_a_model_of_another_dimension_reindexes_and_searches(instance, database, db, corpus_dir, tmp_path):
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.core.upload_store import LocalUploadStore
    from ingestion_pipeline.documents.embedding import Embedder
    from ingestion_pipeline.documents.pipeline import DocumentPipeline
    from ingestion_pipeline.documents.search import hybrid_search

    docs = corpus_dir / "documents"
    ingest(instance, database, "acme", docs / "codeblock.md", docs / "fake-memo.pdf")
    old_model = pipeline_for(database).model

    tiny = Embedder(str(tiny_model(tmp_path)))
    assert tiny.info.dimension == 32
    settings = load_settings()
    switched = DocumentPipeline(database, LocalUploadStore(settings.upload.upload_dir), tiny, settings)
    with database.transaction() as conn:
        plan = reindex.queue(conn, reindex.find_versions(conn, switched.fingerprint_for))
    assert len(plan.queued_file_ids) == 2
    [key] = batch_queued(database)
    result = materialize_batch(instance, key, resources={"embedder": tiny})
    assert result.success and _check(result, "embeddings_match_chunks").passed
    assert _check(result, "fingerprints_current").metadata["stale"].value == 0

    active_vectors = table(db, """SELECT DISTINCT vector_dims(e.embedding) AS dim, e.model FROM chunk_embeddings e
                                    JOIN chunks c ON c.chunk_id = e.chunk_id
                                    JOIN document_versions v ON v.version_id = c.version_id AND v.is_active""")
    assert active_vectors == [{"dim": 32, "model": "tiny-32"}]
    for run in table(db, "SELECT stats FROM ingestion_runs WHERE run_type = 'reindex'"):
        assert run["stats"]["embeddings_reused"] == 0 and run["stats"]["embedded"] == run["stats"]["chunks"]
    # a tenant this small is ranked exactly in the new dimension too: no graph of its own (documents/vector_index.py)
    assert not graph_ready(db, "acme", 32)

    query = "fenced code block"
    hits = hybrid_search(db, tenant_id="acme", query=query, query_vector=tiny.embed([query])[0], model="tiny-32")
    assert hits and all(h.version_number == 2 for h in hits) and any(h.vector_rank for h in hits)
    # the previous model's vectors are no longer searched: its versions are inactive
    old = hybrid_search(db, tenant_id="acme", query=query, model=old_model.name,
                        query_vector=pipeline_for(database).embedder.embed([query])[0])
    assert all(h.vector_rank is None for h in old)


@pytest.mark.integration
def test_new_weights_under_the_same_model_name_reuse_no_vector(instance, database, db, corpus_dir, tmp_path):
    """Vectors are reused for unchanged chunk text only under the same model *digest*: a model retrained in
    place (same folder name, new weights) re-embeds every chunk when re-indexed."""
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.core.upload_store import LocalUploadStore
    from ingestion_pipeline.documents.embedding import Embedder
    from ingestion_pipeline.documents.pipeline import DocumentPipeline

    settings = load_settings()
    first = Embedder(str(tiny_model(tmp_path)))
    ingest_with = {"embedder": first}
    from ingestion_pipeline_tests.helpers import submit

    submit(database, "acme", corpus_dir / "documents" / "codeblock.md")
    [key] = batch_queued(database)
    assert materialize_batch(instance, key, resources=ingest_with).success

    retrained = Embedder(str(tiny_model(tmp_path, seed=1)))  # the same folder, other weights
    assert retrained.info.name == first.info.name and retrained.info.digest != first.info.digest
    pipeline = DocumentPipeline(database, LocalUploadStore(settings.upload.upload_dir), retrained, settings)
    with database.transaction() as conn:
        plan = reindex.queue(conn, reindex.find_versions(conn, pipeline.fingerprint_for))
    assert len(plan.queued_file_ids) == 1
    [key] = batch_queued(database)
    assert materialize_batch(instance, key, resources={"embedder": retrained}).success
    [run] = table(db, "SELECT stats FROM ingestion_runs WHERE run_type = 'reindex'")
    assert run["stats"]["embeddings_reused"] == 0 and run["stats"]["embedded"] == run["stats"]["chunks"] > 0
    digests = table(db, """SELECT DISTINCT e.model_digest FROM chunk_embeddings e JOIN chunks c USING (chunk_id)
                            JOIN document_versions v ON v.version_id = c.version_id WHERE v.is_active""")
    assert digests == [{"model_digest": retrained.info.digest}]


@pytest.mark.integration
def test_versions_promoted_before_token_vectors_were_kept_get_them_by_a_reindex(instance, database, db, corpus_dir):
    """A version of an earlier release has no token vectors and that release's fingerprint: `reindex` finds it
    stale, and its chunks are embedded again (a stored vector without its token vectors is not reused), so every
    chunk of the new version has both; search then ranks them by late interaction."""
    ingest(instance, database, "acme", corpus_dir / "documents" / "simple.docx")
    with database.transaction() as conn:  # as the earlier release left it
        conn.execute("DELETE FROM chunk_token_vectors WHERE tenant_id = 'acme'")
        conn.execute("UPDATE document_versions SET pipeline_fingerprint = 'fp2-earlier' WHERE tenant_id = 'acme'")
    plan = _plan(database, tenant_id="acme")
    assert (plan.active, plan.current, len(plan.reindexable)) == (1, 0, 1)
    with database.transaction() as conn:
        reindex.queue(conn, plan)
    [key] = batch_queued(database)
    assert materialize_batch(instance, key).success

    [run] = table(db, "SELECT * FROM ingestion_runs WHERE run_type = 'reindex'")
    assert run["status"] == "succeeded", run["error"]
    chunks = table(db, """SELECT c.chunk_id, t.chunk_id IS NOT NULL AS kept FROM chunks c
                            JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
                            LEFT JOIN chunk_token_vectors t ON t.chunk_id = c.chunk_id AND t.tenant_id = c.tenant_id""")
    assert chunks and all(c["kept"] for c in chunks)
    assert run["stats"]["embedded"] == len(chunks) and run["stats"]["embeddings_reused"] == 0
    assert _plan(database, tenant_id="acme").stale == 0
