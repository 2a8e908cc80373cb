"""Failure paths in one process, through Dagster's real machinery: re-execution from failure, the
run-failure sensor with and without a retry coming, transient and permanent errors, dead letters and
replay, cancel, pause and resume, bounded extraction. (Killed processes: ingestion_pipeline_tests/faults.)"""

import threading
import zipfile

import dagster as dg
import pytest

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.core.ledger import DOCUMENT_FILES, Worker
from ingestion_pipeline.core.settings import ReliabilitySettings, load_settings
from ingestion_pipeline.core.tenants import set_paused
from ingestion_pipeline.defs.ledger import operations
from ingestion_pipeline.defs.ledger.run_status_sensors import ledger_on_run_failure
from ingestion_pipeline.defs.partitions import document_batches
from ingestion_pipeline.defs.resources import PostgresResource, SettingsResource
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.extraction.isolation import IsolatedExtractor
from ingestion_pipeline.documents.pipeline import DocumentPipeline
from ingestion_pipeline.runtime.launching import plan_document_runs
from ingestion_pipeline_tests.helpers import (
    batch_queued,
    document_batch_job,
    history,
    materialize_batch,
    process_in_process,
    shared_embedder,
    submit,
    table,
)


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def three_notes(tmp_path):
    paths = []
    for i in range(3):
        path = tmp_path / f"note-{i}.md"
        path.write_text(f"# Note {i}\n\nNote {i} says the launch moves to week {i + 10}.\n\n## Detail\n\nMore {i}.\n")
        paths.append(path)
    return paths


def _run_failure_sensor(instance, run_id: str) -> None:
    run = instance.get_run_by_id(run_id)
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    with dg.build_run_status_sensor_context(
        sensor_name="ledger_on_run_failure", dagster_event=records[-1].event_log_entry.dagster_event,
        dagster_instance=instance, dagster_run=run,
        resources={"postgres": PostgresResource(), "settings": SettingsResource()},
    ) as context:
        ledger_on_run_failure(context.for_run_failure())


def test_reexecution_from_failure_continues_the_batch_and_the_sensor_waits_for_it(
        instance, database, db, three_notes, monkeypatch):
    """A step fails; the run-failure sensor leaves the files alone while dagster/will_retry is set; Dagster's
    re-execution from failure (a new run id, the same root) continues them from staging and finishes."""
    submit(database, "acme", *three_notes)
    [key] = batch_queued(database)
    instance.add_dynamic_partitions(document_batches.name, [key])
    embed_batch = DocumentPipeline.embed_batch
    calls = {"extract": 0}
    extract_batch = DocumentPipeline.extract_batch

    def counting_extract(self, partition_key):
        calls["extract"] += 1
        return extract_batch(self, partition_key)

    def crash(self, partition_key):
        raise RuntimeError("the embedding host went away")

    monkeypatch.setattr(DocumentPipeline, "extract_batch", counting_extract)
    monkeypatch.setattr(DocumentPipeline, "embed_batch", crash)
    job = dg.reconstructable(document_batch_job)
    first = dg.execute_job(job, instance=instance, tags={"dagster/partition": key})
    assert not first.success
    held = table(db, "SELECT status, owner FROM ingestion_runs")
    assert {(r["status"], r["owner"]) for r in held} == {("running", first.run_id)}
    assert table(db, "SELECT count(*) AS n FROM staging_documents WHERE elements_done AND chunks_done")[0]["n"] == 3

    instance.add_run_tags(first.run_id, {"dagster/will_retry": "true"})  # as the instance sets it for a retry
    _run_failure_sensor(instance, first.run_id)
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"running"}  # left alone

    monkeypatch.setattr(DocumentPipeline, "embed_batch", embed_batch)
    retry = dg.execute_job(job, instance=instance, tags={"dagster/partition": key},  # as the UI keeps them
                           reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance))
    assert retry.success
    retry_run = instance.get_run_by_id(retry.run_id)
    assert retry_run.root_run_id == first.run_id
    steps = {e.step_key for e in retry.all_events if e.event_type == dg.DagsterEventType.STEP_START}
    assert steps == {"document_embeddings.plan_shares", "document_embeddings.finish_embeddings",
                     "promoted_documents", "promoted_batch_checks", "promoted_documents_fingerprints_current"}
    rows = table(db, "SELECT * FROM ingestion_runs ORDER BY file_id")
    assert {r["status"] for r in rows} == {"succeeded"} and {r["attempts"] for r in rows} == {1}
    assert {r["dagster_run_id"] for r in rows} == {retry.run_id}
    assert calls["extract"] == 1  # nothing extracted again
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == 3
    assert history(db, rows[0]["file_id"]) == ["claimed", "succeeded"]


def test_failure_without_retry_hands_files_back(instance, database, db, three_notes, monkeypatch):
    submit(database, "acme", *three_notes)
    [key] = batch_queued(database)
    monkeypatch.setattr(DocumentPipeline, "chunk_batch", lambda self, key: 1 / 0)
    result = materialize_batch(instance, key, raise_on_error=False)
    assert not result.success
    _run_failure_sensor(instance, result.run_id)  # no will_retry tag: no Dagster retry follows
    rows = table(db, "SELECT * FROM ingestion_runs")
    assert {(r["status"], r["error_code"], r["attempts"]) for r in rows} == {("queued", "run_failed", 1)}
    assert all(r["owner"] is None and r["launch_gen"] == 1 for r in rows)
    assert all("ZeroDivisionError" in r["error"] for r in rows)


@pytest.mark.integration
def test_transient_error_is_retried_with_backoff_and_succeeds(instance, database, db, three_notes, monkeypatch):
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0.5,0.5,0.5")
    monkeypatch.setenv("INGESTION_BATCH_LANES", "1")  # files in the batch's order: the second call is note-1's
    submit(database, "acme", *three_notes)
    original = IsolatedExtractor.__call__
    calls = []

    def flaky(self, path, extension, reusable_ocr=()):
        calls.append(path)
        if len(calls) == 2:  # the second file of the batch (note-1), its first attempt only
            raise TransientError("s3_unavailable", "S3 is throttling (SlowDown)")
        return original(self, path, extension, reusable_ocr)

    monkeypatch.setattr(IsolatedExtractor, "__call__", flaky)
    processed = process_in_process(instance, database)
    assert len(processed) == 2  # the batch, then its relaunch for the retried file (a new run key)
    rows = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert {r["status"] for r in rows.values()} == {"succeeded"}
    flaky_row = rows["note-1.md"]
    assert flaky_row["attempts"] == 2 and flaky_row["launch_gen"] == 1
    assert history(db, flaky_row["file_id"]) == ["claimed", "retry_scheduled", "claimed", "succeeded"]
    assert history(db, rows["note-0.md"]["file_id"]) == ["claimed", "succeeded"]
    assert len(table(db, "SELECT * FROM document_versions")) == 3


def test_permanent_error_fails_once(instance, database, db, corpus_dir):
    submit(database, "acme", corpus_dir / "broken" / "password.pdf")
    process_in_process(instance, database)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["error_code"], row["attempts"]) == ("failed", "pdf_password_protected", 1)
    assert history(db, row["file_id"]) == ["claimed", "failed"]


@pytest.mark.integration
def test_dead_letter_after_the_last_attempt_then_replay(instance, database, db, three_notes, monkeypatch):
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0,0")
    submit(database, "acme", three_notes[0])
    original = IsolatedExtractor.__call__

    def always_throttled(self, path, extension, reusable_ocr=()):
        raise TransientError("s3_unavailable", "S3 is throttling (SlowDown)")

    monkeypatch.setattr(IsolatedExtractor, "__call__", always_throttled)
    process_in_process(instance, database)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["attempts"], row["error_code"]) == ("dead_letter", 3, "s3_unavailable")
    assert f"retry {row['file_id']}" in row["suggestion"]

    monkeypatch.setattr(IsolatedExtractor, "__call__", original)  # the cause is fixed
    with database.transaction() as conn:
        [replayed] = ledger.requeue(conn, DOCUMENT_FILES, [row["file_id"]], actor="tester")
    assert replayed["status"] == "queued" and replayed["attempts_before_replay"] == 3
    process_in_process(instance, database)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["attempts"]) == ("succeeded", 4)
    assert history(db, row["file_id"])[-4:] == ["dead_letter", "requeued", "claimed", "succeeded"]


def _batch_held_in_its_first_encode(instance, database, monkeypatch) -> tuple[threading.Event, threading.Thread]:
    """Materialise the queued batch on a thread, held inside the model's first ``embed_with_tokens`` call until
    the returned event is set."""
    embedder = shared_embedder()
    original = type(embedder).embed_with_tokens
    inside, release = threading.Event(), threading.Event()

    def blocking_embed(self, texts):
        inside.set()
        release.wait(30)
        return original(self, texts)

    monkeypatch.setattr(type(embedder), "embed_with_tokens", blocking_embed)
    [key] = batch_queued(database)
    worker = threading.Thread(target=lambda: materialize_batch(instance, key))
    worker.start()
    assert inside.wait(60)
    return release, worker


@pytest.mark.integration
def test_cancel_mid_embedding_promotes_nothing_and_the_old_version_keeps_serving(
        instance, database, db, corpus_dir, monkeypatch):
    note = corpus_dir / "documents" / "norwich-city.txt"  # long enough that a new budget makes new chunks
    submit(database, "acme", note)
    process_in_process(instance, database)
    [v1] = table(db, "SELECT * FROM document_versions")
    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "120")  # a new fingerprint: version 2 is queued
    [queued] = submit(database, "acme", note)
    release, worker = _batch_held_in_its_first_encode(instance, database, monkeypatch)
    report = operations.cancel_files(instance, database, [queued.file_id], "tester")
    release.set()
    worker.join(60)
    assert [r["file_id"] for r in report.canceled] == [queued.file_id]
    row = table(db, "SELECT * FROM ingestion_runs WHERE file_id = %s", queued.file_id)[0]
    assert (row["status"], row["canceled_by"], row["error_code"]) == ("canceled", "tester", "canceled")
    assert table(db, "SELECT * FROM staging_documents") == [] and table(db, "SELECT * FROM staging_chunks") == []
    assert [v["version_id"] for v in table(db, "SELECT * FROM document_versions WHERE is_active")] == [v1["version_id"]]
    assert len(table(db, "SELECT * FROM document_versions")) == 1


@pytest.mark.integration
def test_a_file_canceled_mid_embedding_leaves_its_unit_to_the_other_files(instance, database, db, three_notes,
                                                                          monkeypatch):
    """The three notes' chunks are encoded in one unit; one note is canceled while it is encoded. Its
    vectors are not written; the other two get theirs and are promoted."""
    submissions = submit(database, "acme", *three_notes)
    release, worker = _batch_held_in_its_first_encode(instance, database, monkeypatch)
    canceled = submissions[1].file_id
    operations.cancel_files(instance, database, [canceled], "tester")
    release.set()
    worker.join(60)
    rows = {r["file_id"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert rows[canceled]["status"] == "canceled"
    for kept in (submissions[0].file_id, submissions[2].file_id):
        assert rows[kept]["status"] == "succeeded", rows[kept]["error"]
        assert rows[kept]["stats"]["embedded"] == rows[kept]["stats"]["chunks"] > 0
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == 2
    assert table(db, "SELECT * FROM staging_chunks") == []


@pytest.mark.integration
def test_pause_parks_in_flight_files_and_resume_continues_them(instance, database, db, three_notes, monkeypatch):
    submit(database, "acme", *three_notes)
    [key] = batch_queued(database)
    extract_batch = DocumentPipeline.extract_batch

    def pause_then_extract(self, partition_key):
        with database.connection() as conn:  # the operator pauses while the run is between two steps
            set_paused(conn, "acme", True)
        return extract_batch(self, partition_key)

    monkeypatch.setattr(DocumentPipeline, "extract_batch", pause_then_extract)
    materialize_batch(instance, key)
    rows = table(db, "SELECT * FROM ingestion_runs")
    assert {(r["status"], r["owner"], r["attempts"]) for r in rows} == {("queued", None, 0)}
    assert table(db, "SELECT count(*) AS n FROM staging_documents")[0]["n"] == 3  # staging kept
    assert plan_document_runs(instance, database, load_settings().batch).run_requests == []  # paused: nothing

    monkeypatch.setattr(DocumentPipeline, "extract_batch", extract_batch)
    with database.connection() as conn:
        set_paused(conn, "acme", False)
    [request] = plan_document_runs(instance, database, load_settings().batch).run_requests
    assert request.run_key == f"{key}:r1"
    process_in_process(instance, database)
    rows = table(db, "SELECT * FROM ingestion_runs")
    assert {r["status"] for r in rows} == {"succeeded"}
    assert history(db, rows[0]["file_id"]) == ["claimed", "paused", "claimed", "succeeded"]


def test_exclusive_claims(database, db, three_notes):
    """Two workers claim the same batch: each file goes to exactly one of them; the loser's writes fail."""
    submit(database, "acme", *three_notes)
    [key] = batch_queued(database)
    a, b = Worker("run-a", "run-a", 60), Worker("run-b", "run-b", 60)
    with database.transaction() as conn:
        claimed_a = ledger.claim(conn, DOCUMENT_FILES, a, partition_key=key)
    with database.transaction() as conn:
        claimed_b = ledger.claim(conn, DOCUMENT_FILES, b, partition_key=key)
    assert len(claimed_a) == 3 and claimed_b == []
    file_id = claimed_a[0]["file_id"]
    with database.transaction() as conn:  # run-a's lease runs out; run-b takes the file over
        conn.execute("UPDATE ingestion_runs SET lease_expires_at = now() - interval '1 s' WHERE file_id = %s",
                     (file_id,))
    with database.transaction() as conn:
        [taken] = ledger.claim(conn, DOCUMENT_FILES, b, partition_key=key)
    assert (taken["file_id"], taken["claim_event"], taken["attempts"]) == (file_id, "taken_over", 2)
    with pytest.raises(ledger.LeaseLost, match="held by run run-b"), database.transaction() as conn:
        ledger.heartbeat(conn, DOCUMENT_FILES, file_id, "run-a")  # the old owner stops touching it
    others = [r["file_id"] for r in claimed_a[1:]]
    with database.transaction() as conn:  # the same answer for many files in one statement (embedding units)
        before = {r["file_id"]: r["updated_at"] for r in table(db, "SELECT file_id, updated_at FROM ingestion_runs")}
        lost = ledger.hold_many(conn, DOCUMENT_FILES, [file_id, *others], "run-a")
    assert lost == {file_id: f"document {file_id} is no longer this run's (held by run run-b)"}
    after = {r["file_id"]: r["updated_at"] for r in table(db, "SELECT file_id, updated_at FROM ingestion_runs")}
    assert all(after[i] > before[i] for i in others) and after[file_id] == before[file_id]  # touched: held only

    # a file whose attempts are spent (it keeps killing its workers) is not taken over again: the
    # janitor's lease expiry dead-letters it
    c = Worker("run-c", "run-c", 60, max_attempts=2)
    with database.transaction() as conn:
        conn.execute("UPDATE ingestion_runs SET lease_expires_at = now() - interval '1 s' WHERE file_id = %s",
                     (file_id,))
    with database.transaction() as conn:
        assert ledger.claim(conn, DOCUMENT_FILES, c, partition_key=key) == []
    with database.transaction() as conn:
        [dead] = ledger.expire_leases(conn, DOCUMENT_FILES, ReliabilitySettings(retry_backoff_seconds=(1.0,)))
    assert (dead["file_id"], dead["status"], dead["error_code"]) == (file_id, "dead_letter", "lease_expired")


def test_bounded_extraction_fails_the_file_and_not_the_batch(instance, database, db, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_MAX_TEXT_CHARS", "100000")
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as package:
        package.writestr("[Content_Types].xml", "<Types/>")
        with package.open("word/document.xml", "w", force_zip64=True) as member:
            for _ in range(300):  # 300 MB of zeros in ~300 KB
                member.write(bytes(1 << 20))
    big = tmp_path / "big.html"
    big.write_text("<html><body>" + "<div><p>word</p></div>" * 20_000 + "</body></html>")
    deep = tmp_path / "deep.html"
    deep.write_text("<html><body>" + "<div>x " * 5000 + "</div>" * 5000 + "</body></html>")
    good = tmp_path / "good.md"
    good.write_text("# Fine\n\nThis one is fine.\n")
    submit(database, "acme", bomb, big, deep, good)
    process_in_process(instance, database)
    rows = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert (rows["bomb.docx"]["error_code"], rows["bomb.docx"]["status"]) == ("docx_too_large", "failed")
    assert rows["bomb.docx"]["error"] == "word/document.xml expands to 300 MB (limit 200 MB)"
    assert rows["big.html"]["error_code"] == "text_too_large"
    assert "(limit 100,000 characters)" in rows["big.html"]["error"]
    assert rows["deep.html"]["error_code"] == "html_too_deep"
    assert rows["good.md"]["status"] == "succeeded"


def test_extraction_time_and_memory_limits(tmp_path, monkeypatch, corpus_dir):
    """A worker past its time limit is killed; one past its memory limit fails the file; the next file
    gets a fresh worker."""
    handbook = corpus_dir / "documents" / "handbook-872p.docx"
    monkeypatch.setenv("INGESTION_EXTRACTION_TIMEOUT_SECONDS", "0.05")
    with IsolatedExtractor(load_settings().limits) as extractor, \
            pytest.raises(ExtractionError, match="took longer than 0.05 s") as timed_out:
        extractor(handbook, ".docx")
    assert timed_out.value.code == "extraction_timeout"
    monkeypatch.setenv("INGESTION_EXTRACTION_TIMEOUT_SECONDS", "60")
    monkeypatch.setenv("INGESTION_EXTRACTION_MEMORY_MB", "110")  # the worker idles at ~55 MB
    wide = tmp_path / "wide.html"  # 6 MB of markup: libxml2's tree alone needs ~140 MB
    wide.write_text("<html><body>" + "<div><p>x</p></div>" * 300_000 + "</body></html>")
    with IsolatedExtractor(load_settings().limits) as extractor:
        with pytest.raises(ExtractionError, match="more than 110 MB") as too_big:
            extractor(wide, ".html")
        assert too_big.value.code == "extraction_memory_exceeded"
        assert extractor(corpus_dir / "documents" / "fake-memo.pdf", ".pdf").elements


@pytest.mark.integration
def test_a_spare_extraction_worker_serves_the_first_file_under_its_own_limits_only(tmp_path, monkeypatch,
                                                                                      corpus_dir):
    """`process` starts a worker while Dagster sets up; the first extractor takes it. A spare started
    under another memory limit is not used (it is killed), and an unused one ends with its parent."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    from ingestion_pipeline.documents.extraction import isolation

    memo = corpus_dir / "documents" / "fake-memo.pdf"
    isolation._take_spare(0)  # a spare an earlier test of this process left is killed, not reused here
    isolation.start_spare_worker(load_settings().limits)
    spare = isolation._spare[0]
    with IsolatedExtractor(load_settings().limits) as extractor:
        assert extractor(memo, ".pdf").elements
        assert extractor._process is spare and isolation._spare is None
    assert spare.poll() == 0  # closed with the extractor, as a worker it started itself would be

    isolation.start_spare_worker(load_settings().limits)
    other_limits = isolation._spare[0]
    monkeypatch.setenv("INGESTION_EXTRACTION_MEMORY_MB", "2048")
    with IsolatedExtractor(load_settings().limits) as extractor:
        assert extractor(memo, ".pdf").elements
        assert extractor._process is not other_limits
    assert other_limits.poll() is not None and isolation._spare is None

    # a process that exits, or is SIGKILLed, without using its spare leaves no worker behind
    def gone(pid: int) -> bool:
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        return not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]

    script = ("import sys, time\n"
              "from ingestion_pipeline.core.settings import load_settings\n"
              "from ingestion_pipeline.documents.extraction import isolation\n"
              "isolation.start_spare_worker(load_settings().limits)\n"
              "print(isolation._spare[0].pid, flush=True)\n"
              "if sys.argv[1] == 'wait':\n"
              "    time.sleep(300)\n")
    pid = int(subprocess.run([sys.executable, "-c", script, "exit"], capture_output=True, text=True,
                             check=True).stdout)
    assert gone(pid)
    parent = subprocess.Popen([sys.executable, "-c", script, "wait"], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    assert Path(f"/proc/{pid}").exists()
    parent.kill()  # SIGKILL: no Python code of the parent runs; the kernel closes its end of the socket
    parent.wait(30)
    assert gone(pid)


def test_cancel_a_batch_and_a_metric_upload(instance, database, db, three_notes, tmp_path):
    from ingestion_pipeline.core.upload_store import LocalUploadStore
    from ingestion_pipeline.metrics.uploads import submit_metric_file
    from ingestion_pipeline.samples.metric_exports import daily_rows, write_export

    submit(database, "acme", *three_notes)
    [key] = batch_queued(database)
    report = operations.cancel_batch(instance, database, key, "ops")
    assert len(report.canceled) == 3
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"canceled"}
    assert plan_document_runs(instance, database, load_settings().batch).run_requests == []

    export = write_export(tmp_path / "e.csv", "meta", daily_rows(1, 1, 2, 3))
    with export.open("rb") as stream:
        upload = submit_metric_file(database, LocalUploadStore(tmp_path / "metrics"), workspace_id="acme",
                                    platform="meta", filename=export.name, stream=stream, max_bytes=10**7)
    report = operations.cancel_upload(instance, database, upload.upload_id, "ops")
    assert [r["upload_id"] for r in report.canceled] == [upload.upload_id]
    row = table(db, "SELECT * FROM data_uploads")[0]
    assert (row["status"], row["canceled_by"]) == ("canceled", "ops")
    again = operations.cancel_upload(instance, database, upload.upload_id, "ops")
    assert again.canceled == [] and again.not_cancelable == [{"id": upload.upload_id, "status": "canceled"}]
