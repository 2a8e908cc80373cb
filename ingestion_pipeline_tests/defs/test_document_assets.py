"""The document assets through Dagster's `materialize`, against the real database and model."""

import dagster as dg
import pytest

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.documents import promotion
from ingestion_pipeline_tests.helpers import batch_queued, ingest, materialize_batch, submit, table


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _metadata(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    [event] = result.asset_materializations_for_node(asset)
    return event.metadata


def test_batch_promotes_good_files_and_fails_only_the_bad_one(instance, database, db, corpus_dir):
    docs = corpus_dir / "documents"
    submit(database, "acme", docs / "fake-memo.pdf", docs / "simple.docx", corpus_dir / "broken" / "password.pdf",
           docs / "codeblock.md")
    [key] = batch_queued(database)
    result = materialize_batch(instance, key)
    assert result.success
    # each step reports its progress in the Dagster run log
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    for step, files in (("fetch", 4), ("extract", 4), ("chunk", 3), ("embed", 3), ("promote", 3)):
        assert any(m.startswith(f"{step}: {files}/{files} files") for m in messages), step  # password.pdf failed
    assert any(m.startswith("embed: 3/3 files") and " chunks (" in m and "ETA 0s" in m for m in messages)
    # what the batch was embedded with, and the decision that set it, on the embedding step's materialisation
    [embedded] = [e.step_materialization_data.materialization.metadata for e in result.all_events
                  if e.is_step_materialization and e.step_key.startswith("document_embeddings.")]
    assert "minilm" in embedded["model"].value.lower() and embedded["model_precision"].value == "f32"
    assert embedded["model_runtime"].value in ("torch", "onnx", "openvino")
    assert embedded["model_decision"].value.startswith(("default (f32/", "prepare (", "none recorded")), embedded

    runs = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert runs["password.pdf"]["status"] == "failed"
    assert runs["password.pdf"]["error"] == "PDF is password-protected; upload an unencrypted copy"
    for name in ("fake-memo.pdf", "simple.docx", "codeblock.md"):
        run = runs[name]
        assert run["status"] == "succeeded", run["error"]
        assert run["started_at"] <= run["finished_at"] and run["partition_key"] == key
        assert run["dagster_run_id"] == result.run_id
        assert set(run["stats"]["timings_ms"]) >= {"verify", "extract", "chunk", "embed", "promote"}
        assert run["stats"]["chunks"] > 0 and run["stats"]["tokens"] > 0

    metadata = _metadata(result, "promoted_documents")
    assert metadata["succeeded"].value == 3 and metadata["failed"].value == 1
    files = {r.data["file"]: r.data for r in metadata["files"].value.records}
    assert files["password.pdf"]["outcome"] == "failed"
    assert "password-protected" in files["password.pdf"]["detail"]

    checks = {c.check_name: c for c in result.get_asset_check_evaluations()}
    assert len(checks) == 5
    assert all(c.passed for name, c in checks.items() if name != "no_failed_files")  # nothing is stale either
    failed = checks["no_failed_files"]  # the failed file is visible at batch level: a warning with its reason
    assert not failed.passed and failed.severity == dg.AssetCheckSeverity.WARN
    assert failed.description == "files failed in this batch: 1 — failed: pdf_password_protected (1)"
    assert "ingestion-pipeline retry FILE_ID" in failed.metadata["what_to_do"].value

    # the failed file kept its raw upload, the promoted ones had theirs removed
    kept = [r["raw_path"] for r in runs.values() if r["status"] == "failed"]
    assert all(__import__("os").path.exists(p) for p in kept)
    assert not any(__import__("os").path.exists(r["raw_path"]) for r in runs.values() if r["status"] == "succeeded")
    # staging is scratch: nothing left for promoted files
    assert table(db, "SELECT * FROM staging_chunks") == []
    counts = table(db, """SELECT (SELECT count(*) FROM chunks) AS chunks, (SELECT count(*) FROM chunk_embeddings) AS e,
                                 (SELECT count(*) FROM chunk_fts) AS f""")[0]
    assert counts["chunks"] == counts["e"] == counts["f"] > 0


def test_rematerializing_a_batch_replays_failed_files_only_when_asked(instance, database, db, corpus_dir, tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("   \n\n  ")
    submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf", bad)
    [key] = batch_queued(database)
    materialize_batch(instance, key)
    before = table(db, "SELECT count(*) AS n FROM chunks")[0]["n"]
    failed = table(db, "SELECT file_id, attempts FROM ingestion_runs WHERE status = 'failed'")
    assert len(failed) == 1

    second = materialize_batch(instance, key, raise_on_error=False)  # a UI backfill of the same partition
    assert not second.success  # not green on nothing: the run says why and what to run instead
    [failure] = [e for e in second.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    message = failure.step_failure_data.user_failure_data.description
    assert "1 failed (file_whitespace_only" in message and "ingestion/replay_failed=true" in message, message
    assert table(db, "SELECT file_id, attempts FROM ingestion_runs WHERE status = 'failed'") == failed

    asked = materialize_batch(instance, key, tags={"ingestion/replay_failed": "true"})
    assert asked.success
    assert table(db, "SELECT count(*) AS n FROM chunks")[0]["n"] == before
    assert len(table(db, "SELECT * FROM document_versions")) == 1
    retried = table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s", failed[0]["file_id"])[0]
    assert retried["status"] == "failed" and retried["attempts"] == 2  # retried, failed again, explained
    assert "only whitespace" in retried["error"]


def test_pipeline_change_creates_new_version_and_reuses_embeddings(instance, database, db, corpus_dir,
                                                                   monkeypatch):
    path = corpus_dir / "documents" / "fake-memo-with-duplicate-page.pdf"
    ingest(instance, database, "acme", path)
    [v1] = table(db, "SELECT * FROM document_versions")

    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "250")  # a chunker setting: new fingerprint
    [again] = submit(database, "acme", path)
    assert again.status == "queued"
    [key] = batch_queued(database)
    materialize_batch(instance, key)

    versions = table(db, "SELECT * FROM document_versions ORDER BY version_number")
    assert [(v["version_number"], v["is_active"]) for v in versions] == [(1, False), (2, True)]
    assert versions[0]["version_id"] == v1["version_id"] and versions[0]["deactivated_at"] is not None
    assert versions[0]["pipeline_fingerprint"] != versions[1]["pipeline_fingerprint"]
    run = table(db, "SELECT stats FROM ingestion_runs ORDER BY file_id DESC LIMIT 1")[0]
    assert run["stats"]["embedded"] == 0 and run["stats"]["embeddings_reused"] == run["stats"]["chunks"]
    # old content rows are kept (deactivation, not deletion)
    assert table(db, "SELECT count(*) AS n FROM chunks WHERE version_id = %s", v1["version_id"])[0]["n"] > 0


@pytest.mark.integration  # a heavy end-to-end case: with make test, not test-fast
def test_failed_promotion_leaves_previous_version_served(instance, database, db, corpus_dir, monkeypatch):
    path = corpus_dir / "documents" / "fake-memo.pdf"
    ingest(instance, database, "acme", path)
    [v1] = table(db, "SELECT * FROM document_versions")
    chunks_before = table(db, "SELECT count(*) AS n FROM chunks")[0]["n"]

    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "150")
    submit(database, "acme", path)
    [key] = batch_queued(database)
    seen_mid_promotion = []
    original_discard = promotion.discard

    def crash_at_the_end(conn, file_id):
        # Everything is written inside the transaction; another session still sees the old state.
        with connect(database.url) as other:
            seen_mid_promotion.append(other.execute(
                "SELECT version_id FROM document_versions WHERE is_active").fetchall())
        raise RuntimeError("simulated crash during promotion")

    monkeypatch.setattr(promotion, "discard", crash_at_the_end)
    materialize_batch(instance, key)
    assert seen_mid_promotion == [[{"version_id": v1["version_id"]}]]
    assert [v["version_id"] for v in table(db, "SELECT * FROM document_versions")] == [v1["version_id"]]
    assert table(db, "SELECT count(*) AS n FROM chunks")[0]["n"] == chunks_before
    failed = table(db, "SELECT * FROM ingestion_runs WHERE partition_key = %s", key)[0]
    assert failed["status"] == "failed" and "simulated crash during promotion" in failed["error"]

    monkeypatch.setattr(promotion, "discard", original_discard)
    # the cause is fixed: a person replays the failed file; it resumes from staging (nothing re-extracted)
    materialize_batch(instance, key, tags={"ingestion/replay_failed": "true"})
    retried = table(db, "SELECT * FROM ingestion_runs WHERE partition_key = %s", key)[0]
    assert retried["status"] == "succeeded"
    active = table(db, "SELECT * FROM document_versions WHERE is_active")
    assert len(active) == 1 and active[0]["version_number"] == 2


@pytest.mark.integration
def test_two_versions_of_a_document_in_one_batch_end_with_the_later_one_active(instance, database, db, tmp_path):
    """The steps work on two files at once; a batch holding two versions of one document still ends with
    the later one active (the lanes' order itself is tested in documents/test_file_lanes.py)."""
    from ingestion_pipeline.documents.intake import submit_upload
    from ingestion_pipeline_tests.helpers import pipeline_for

    pipeline = pipeline_for(database)
    paths = []
    for i in range(6):  # other documents around the two versions, so both lanes have work
        paths.append(tmp_path / f"other-{i}.md")
        paths[-1].write_text(f"# Other {i}\n\n" + "Filler text of another document. " * 30 * (i + 1))
    for version in (1, 2):
        folder = tmp_path / f"v{version}"
        folder.mkdir()
        paths.insert(version * 3, folder / "policy.md")
        paths[version * 3].write_text(f"# Policy\n\nThe policy, version {version}. " + "Its long text. " * 400)
    for path in paths:
        key = "policy" if path.name == "policy.md" else None
        submit_upload(database, pipeline.store, tenant_id="acme", path=path, key=key,
                      fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
    [key] = batch_queued(database)
    assert materialize_batch(instance, key).success

    [active] = table(db, """SELECT v.version_number, v.chunk_count FROM document_versions v
                             JOIN documents d ON d.doc_id = v.doc_id
                            WHERE d.source_uri LIKE %s AND v.is_active""", "%policy")
    assert active["version_number"] == 2
    texts = table(db, """SELECT c.text FROM chunks c JOIN document_versions v ON v.version_id = c.version_id
                          JOIN documents d ON d.doc_id = v.doc_id
                         WHERE d.source_uri LIKE %s AND v.is_active""", "%policy")
    assert any("version 2" in t["text"] for t in texts) and not any("version 1" in t["text"] for t in texts)
    assert table(db, "SELECT count(*) AS n FROM document_versions WHERE is_active")[0]["n"] == 7


def test_a_batch_of_uploads_builds_no_s3_client(instance, database, corpus_dir, monkeypatch):
    """Dagster hands each step that requires ``s3`` what the resource puts on the context; ours builds no
    boto3 client there (S3 files get theirs from ``S3Clients`` when they are fetched)."""
    from ingestion_pipeline.defs.s3_resource import S3Resource

    built = []
    monkeypatch.setattr(S3Resource, "get_client", lambda self: built.append(self))
    submit(database, "acme", corpus_dir / "documents" / "codeblock.md")
    [key] = batch_queued(database)
    assert materialize_batch(instance, key).success
    assert built == []


def test_a_batch_leaves_every_vector_in_its_graph_with_those_a_run_before_it_left(instance, database, db,
                                                                                 corpus_dir, monkeypatch):
    """Promotion writes a version's vectors outside the HNSW graph (searchable at once, ranked exactly); the
    step takes the whole backlog before it ends, a killed run's leftovers included, and says so in the run log.
    A tenant the batch took past the exact-ranking size has its own graph when the step ends."""
    import numpy as np

    from ingestion_pipeline.documents import search, vector_backlog
    from ingestion_pipeline.documents.vector_index import graph_ready
    from ingestion_pipeline_tests.helpers import add_tenant_vectors

    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", 1)  # the batch's two chunks take acme past it

    left = add_tenant_vectors(db, "globex", np.random.default_rng(2).normal(size=(30, 384)), indexed=False)
    docs = corpus_dir / "documents"
    submit(database, "acme", docs / "fake-memo.pdf", docs / "simple.docx")
    [key] = batch_queued(database)
    result = materialize_batch(instance, key)
    assert result.success
    promoted = table(db, "SELECT count(*) AS n FROM chunk_embeddings WHERE tenant_id = 'acme'")[0]["n"]
    assert promoted > 0 and vector_backlog.pending(db) == 0
    assert table(db, "SELECT count(*) AS n FROM chunk_embeddings WHERE chunk_id = ANY(%s) AND indexed",
                 left)[0]["n"] == len(left)
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    total = promoted + len(left)
    assert any(m.startswith(f"index: {total:,}/{total:,} vectors") for m in messages), messages
    assert graph_ready(db, "acme", 384) and not graph_ready(db, "globex", 384)  # globex promoted nothing here
