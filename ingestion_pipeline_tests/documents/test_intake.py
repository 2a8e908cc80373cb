"""Submitting uploads against the real database: reject, queue, duplicate, skip, concurrency."""

import threading

import pytest

from ingestion_pipeline_tests.helpers import batch_queued, materialize_batch, submit, table


def test_rejected_files_leave_no_rows_and_no_bytes(database, db, tmp_path, isolated_storage, monkeypatch):
    exe = tmp_path / "tool.exe"
    exe.write_bytes(b"MZ")
    [result] = submit(database, "acme", exe)
    assert result.status == "rejected"
    assert result.reason == ("file type .exe is not allowed; allowed: docx, eml, epub, htm, html, md, msg, odt, pdf, "
                             "pptx, rtf, txt, xlsx")

    monkeypatch.setenv("INGESTION_MAX_UPLOAD_BYTES", "100")
    big = tmp_path / "big.txt"
    big.write_text("x" * 101)
    from ingestion_pipeline_tests.helpers import pipeline_for

    pipeline = pipeline_for(database)
    assert pipeline.settings.upload.max_bytes == 100
    [result] = submit(database, "acme", big)
    assert result.status == "rejected" and "over the 100 byte limit" in result.reason
    assert table(db, "SELECT * FROM ingestion_runs") == []
    assert table(db, "SELECT * FROM documents") == []
    assert not isolated_storage.exists() or not any(p.is_file() for p in isolated_storage.rglob("*"))


def test_invalid_tenant_is_refused(database, corpus_dir):
    with pytest.raises(ValueError, match="invalid tenant id"):
        submit(database, "Acme Corp; DROP", corpus_dir / "documents" / "fake-memo.pdf")


def test_submit_queues_with_runtime_config(database, db, corpus_dir):
    [result] = submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf", title="Memo")
    assert result.status == "queued"
    assert result.source_uri == f"upload://sha256:{result.sha256}"
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert run["status"] == "queued" and run["started_at"] is None
    assert run["config"]["title"] == "Memo"
    assert run["config"]["filename"] == "fake-memo.pdf"
    assert run["config"]["content_type"] == "application/pdf"
    assert run["config"]["size_bytes"] == 13374 and run["config"]["sha256"] == result.sha256


def test_same_bytes_again_while_queued_is_a_duplicate(database, db, corpus_dir):
    path = corpus_dir / "documents" / "fake-memo.pdf"
    first, second = submit(database, "acme", path, path)
    assert (first.status, second.status) == ("queued", "duplicate")
    assert second.run_id == first.run_id
    assert len(table(db, "SELECT * FROM ingestion_runs")) == 1


def test_concurrent_identical_submits_create_one_document(database, db, corpus_dir):
    path = corpus_dir / "documents" / "fake-memo.pdf"
    results = []
    barrier = threading.Barrier(6)

    def worker():
        barrier.wait()
        results.extend(submit(database, "acme", path))

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.status for r in results) == ["duplicate"] * 5 + ["queued"]
    assert len(table(db, "SELECT * FROM documents")) == 1
    assert len(table(db, "SELECT * FROM ingestion_runs")) == 1


def test_identical_reupload_after_promotion_is_skipped_and_copy_removed(database, db, corpus_dir,
                                                                       isolated_storage):
    import dagster as dg

    path = corpus_dir / "documents" / "fake-memo.pdf"
    [first] = submit(database, "acme", path)
    with dg.instance_for_test() as instance:
        [key] = batch_queued(database)
        materialize_batch(instance, key)
    stored = isolated_storage / "acme" / first.sha256
    assert not stored.exists()  # removed after success
    [again] = submit(database, "acme", path)
    assert again.status == "skipped" and again.reason == "identical content is already the active version"
    assert not stored.exists()
    assert len(table(db, "SELECT * FROM ingestion_runs")) == 1
    assert len(table(db, "SELECT * FROM document_versions")) == 1
