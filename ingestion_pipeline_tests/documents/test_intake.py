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
    assert second.file_id == first.file_id
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


@pytest.mark.parametrize("precheck", [True, False], ids=["unchanged-answered-together", "each-file-alone"])
def test_a_submit_of_many_files_answers_each_as_submitting_it_alone_would(database, db, tmp_path, corpus_dir,
                                                                         isolated_storage, monkeypatch, precheck):
    """``submit_uploads`` (the CLI's submit and ingest) answers the files whose content is already active
    with one query and stores nothing for them; with that turned off every file goes through ``submit_upload``.
    Both give every file the same outcome."""
    import dagster as dg

    from ingestion_pipeline.documents import intake
    from ingestion_pipeline.documents.intake import submit_upload
    from ingestion_pipeline_tests.helpers import pipeline_for

    folder = tmp_path / "folder"
    folder.mkdir()
    for name, source in (("a.md", "codeblock.md"), ("b.md", "eng_spa_mult.md")):
        (folder / name).write_bytes((corpus_dir / "documents" / source).read_bytes())
    pipeline = pipeline_for(database)

    def submit_folder(*names: str) -> list[intake.SubmitResult]:
        return intake.submit_uploads(database, pipeline.store, tenant_id="acme", paths=[folder / n for n in names],
                                     keys=[n for n in names], fingerprint=pipeline.fingerprint,
                                     max_bytes=pipeline.settings.upload.max_bytes)

    assert [r.status for r in submit_folder("a.md", "b.md")] == ["queued", "queued"]
    with dg.instance_for_test() as instance:
        [key] = batch_queued(database)
        materialize_batch(instance, key)
    touched_before = {r["source_uri"]: r["updated_at"] for r in table(db, "SELECT * FROM documents")}

    if not precheck:
        monkeypatch.setattr(intake, "PRECHECK_MAX_BYTES", 0)
    one_by_one = []
    monkeypatch.setattr(intake, "submit_upload", lambda *a, **k: one_by_one.append(k["path"].name) or
                        submit_upload(*a, **k))
    with (folder / "b.md").open("a") as f:
        f.write("\nOne more line.\n")
    (folder / "c.txt").write_text("A new file.\n")
    (folder / "tool.exe").write_bytes(b"MZ")
    results = submit_folder("a.md", "b.md", "c.txt", "tool.exe", "a.md")

    assert [r.status for r in results] == ["skipped", "queued", "queued", "rejected", "skipped"]
    assert one_by_one == (["b.md", "c.txt", "tool.exe"] if precheck else ["a.md", "b.md", "c.txt", "tool.exe", "a.md"])
    first = results[0]
    assert first.reason == "identical content is already the active version"
    assert (first.source_uri, first.size_bytes) == ("upload-key://acme/a.md", (folder / "a.md").stat().st_size)
    [active_a] = table(db, """SELECT d.doc_id, v.content_hash FROM documents d JOIN document_versions v
                               ON v.doc_id = d.doc_id AND v.is_active WHERE d.source_uri = %s""", first.source_uri)
    assert (first.doc_id, first.sha256) == (active_a["doc_id"], active_a["content_hash"])
    assert results[3].reason.startswith("file type .exe is not allowed")
    # no stored copy of the skipped file, one new ledger row per queued file, and a's document was touched
    assert not (isolated_storage / "acme" / first.sha256).exists()
    assert len(table(db, "SELECT * FROM ingestion_runs WHERE status = 'queued'")) == 2
    touched = {r["source_uri"]: r["updated_at"] for r in table(db, "SELECT * FROM documents")}
    assert touched[first.source_uri] > touched_before[first.source_uri]


def test_a_submit_of_many_files_skips_nothing_the_pipeline_would_now_index_differently(database, db, tmp_path,
                                                                                       corpus_dir, isolated_storage):
    """The same bytes under another pipeline fingerprint (another model or chunk size) are queued again."""
    import dagster as dg

    from ingestion_pipeline.documents.intake import submit_uploads
    from ingestion_pipeline_tests.helpers import pipeline_for

    path = corpus_dir / "documents" / "codeblock.md"
    pipeline = pipeline_for(database)
    [first] = submit(database, "acme", path)
    with dg.instance_for_test() as instance:
        [key] = batch_queued(database)
        materialize_batch(instance, key)
    [same] = submit_uploads(database, pipeline.store, tenant_id="acme", paths=[path],
                            fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
    [other] = submit_uploads(database, pipeline.store, tenant_id="acme", paths=[path],
                             fingerprint="another-fingerprint", max_bytes=pipeline.settings.upload.max_bytes)
    assert (same.status, same.doc_id) == ("skipped", first.doc_id)
    assert (other.status, other.doc_id) == ("queued", first.doc_id)
    with pytest.raises(ValueError, match="2 document keys for 1 files"):
        submit_uploads(database, pipeline.store, tenant_id="acme", paths=[path], keys=["a", "b"],
                       fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
