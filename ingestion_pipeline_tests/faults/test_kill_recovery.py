"""SIGKILL the real `ingestion-pipeline process` at every failpoint and at random moments, at least 20
times, while new versions of documents are processed; then recover (janitor + relaunch) and check that
every file ended succeeded, failed with a reason or dead-lettered, that each document has exactly one
active version (and had one at every sampled moment: the previous version kept serving), that chunks,
embeddings and text vectors match, and that nothing was promoted twice. Metric uploads likewise,
killed mid-staging and mid-promotion: no partial promotion, exactly one completion event."""

import json
import os
import random

import pytest

from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.samples.platform_exports import meta_ads_manager_csv
from ingestion_pipeline_tests.faults.harness import (
    METRIC_POINTS,
    ActiveVersionWatcher,
    FaultHarness,
    invariant_violations,
    kill_points,
    unfinished,
)
from ingestion_pipeline_tests.helpers import table

pytestmark = pytest.mark.slow

KILLS = int(os.environ.get("INGESTION_FAULT_KILLS", "20"))


@pytest.fixture
def harness(database_url, project_dagster_home, isolated_storage, tmp_path):
    env = {**os.environ,
           "INGESTION_LEASE_SECONDS": "2",  # a dead worker's files are taken over after 2 s
           "INGESTION_RETRY_BACKOFF": ",".join(["0.2"] * 15),  # room for many kills before a dead letter
           "INGESTION_BATCH_MAX_FILES": "4"}
    return FaultHarness(database_url, env, tmp_path / "faults")


def _files(corpus_dir, tmp_path):
    docs = corpus_dir / "documents"
    notes = []
    for i in range(5):
        note = tmp_path / f"note-{i}.md"
        body = " ".join(f"Sentence {j} of note {i} about the rollout." for j in range(40 * i + 5))
        note.write_text(f"# Note {i}\n\n{body}\n")
        notes.append(note)
    return [docs / "fake-memo.pdf", docs / "simple.docx", docs / "ideas-page.html", docs / "a1977-backus-p21.pdf",
            docs / "norwich-city.txt", corpus_dir / "broken" / "password.pdf", *notes]


@pytest.mark.timeout(1500)
def test_twenty_kills_of_process_converge(harness, database_url, db, corpus_dir, tmp_path):
    files = [str(p) for p in _files(corpus_dir, tmp_path)]
    assert harness.cli("submit", *files, "--tenant", "acme").returncode == 0
    harness.converge()  # version 1 of everything, undisturbed
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == len(files) - 1

    watcher = ActiveVersionWatcher(database_url)
    watcher.start()
    kills, phase = [], 0
    schedule = kill_points(KILLS * 3, random.Random(20261126))
    try:
        while len([k for k in kills if k.reached]) < KILLS and schedule:
            if not unfinished(database_url):  # everything settled: new versions of every document
                phase += 1
                harness.env["INGESTION_CHUNK_TARGET_TOKENS"] = str(200 - 10 * phase)
                assert harness.cli("submit", *files, "--tenant", "acme").returncode == 0
            kills.append(harness.kill_process(**schedule.pop(0)))
        recovery = harness.converge()
    finally:
        watcher.stop()

    reached = [k for k in kills if k.reached]
    assert len(reached) >= KILLS, [k.point for k in kills]
    assert {k.point for k in reached} >= {"model.load", "extract.file", "embed.unit", "promote.transaction"}
    assert watcher.violations == [] and watcher.samples > 100
    assert invariant_violations(database_url) == []
    states = {r["status"]: r["n"] for r in table(db, "SELECT status, count(*) AS n FROM ingestion_runs GROUP BY 1")}
    assert states.get("failed", 0) == phase + 1  # password.pdf, once a phase: a permanent failure, never retried
    assert states["succeeded"] >= (len(files) - 1) * (phase + 1) - states.get("dead_letter", 0)
    versions = table(db, "SELECT doc_id, count(*) AS n FROM document_versions GROUP BY doc_id")
    assert all(v["n"] <= phase + 1 for v in versions)
    taken_over = table(db, "SELECT count(*) AS n FROM ledger_history WHERE event IN ('taken_over', 'retry_scheduled')")
    assert taken_over[0]["n"] > 0  # killed work was recovered, not redone from nothing
    print(f"{len(reached)} kills over {phase} phase(s); final states {states}; recovery took {recovery:.1f} s")


@pytest.mark.timeout(900)
def test_metric_uploads_killed_mid_staging_and_mid_promotion(harness, database_url, db, tmp_path):
    # 25,000 rows each: the generic layout is staged row by row (3 chunks), the Ads Manager export as Arrow
    # batches (5 of them, written on the COPY thread): each is killed after its first committed piece
    exports = [write_export(tmp_path / "older.csv", "meta", daily_rows(10, 10, 10, 25)),
               meta_ads_manager_csv(tmp_path / "newer.csv", daily_rows(10, 10, 10, 25, seed=3))]  # new figures
    for export in exports:
        result = harness.cli("metrics", "submit", str(export), "--workspace", "acme", "--platform", "meta")
        assert result.returncode == 0, result.stderr
        for point in METRIC_POINTS:  # killed after its first staged chunk, then inside the promotion
            assert harness.kill_process(point=point).reached, point
        harness.converge()
    assert invariant_violations(database_url) == []
    uploads = table(db, "SELECT * FROM data_uploads ORDER BY upload_id")
    assert [(u["status"], u["promoted_rows"]) for u in uploads] == [("completed", 25_000)] * 2
    assert all(u["stats"].get("resumed_after_row") for u in uploads)  # staging resumed after the last staged row
    assert [u["stats"]["reader"] for u in uploads] == ["rows", "arrow"]
    assert table(db, "SELECT count(*) AS n FROM daily_metrics")[0]["n"] == 25_000
    assert table(db, "SELECT count(*) AS n FROM ingestion_events")[0]["n"] == 2
    newest = table(db, "SELECT count(*) AS n FROM daily_metrics WHERE last_upload_id = %s", uploads[1]["upload_id"])
    assert newest[0]["n"] == 25_000  # the newer upload's figures, all of them, and nothing half-promoted


@pytest.mark.timeout(300)
def test_sigterm_on_process_gives_its_files_back(harness, database_url, db, corpus_dir):
    """SIGTERM (or Ctrl-C) on `process`: the current run's files go back to the queue, not counted as an
    attempt, before it exits; the next `process` finishes them from their staged data."""
    import signal
    import subprocess
    import time

    from ingestion_pipeline_tests.faults.harness import CLI

    assert harness.cli("submit", str(corpus_dir / "documents" / "norwich-city.txt"), "--tenant", "acme").returncode == 0
    env = {**harness.env, "INGESTION_FAILPOINT": "embed.unit", "INGESTION_ALLOW_FAILPOINTS": "1",
           "INGESTION_FAILPOINT_DIR": str(harness.markers),
           "INGESTION_FAILPOINT_SLEEP": "30"}
    proc = subprocess.Popen([CLI, "process"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(harness.markers.glob("*.embed.unit")) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in stderr, stderr[-3000:]
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["owner"], row["attempts"]) == ("queued", None, 0)
    assert table(db, "SELECT embeddings_done FROM staging_documents") == [{"embeddings_done": False}]
    harness.converge()
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    events = [r["event"] for r in table(db, "SELECT event FROM ledger_history ORDER BY history_id")]
    assert events == ["claimed", "released", "claimed", "succeeded"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lanes", ["2", "1"])
def test_sigterm_cancels_a_lanes_statement_in_flight(harness, database_url, db, corpus_dir, lanes):
    """SIGTERM while a lane (not the thread the signal interrupts) waits on a long statement inside a promotion
    transaction: the statement is cancelled, `process` exits at once rather than when the statement would
    end, and the files go back to the queue; the next `process` promotes each once."""
    import signal
    import subprocess
    import time

    from ingestion_pipeline_tests.faults.harness import CLI

    files = [corpus_dir / "documents" / name for name in ("norwich-city.txt", "example-10k-1p.html")]
    assert harness.cli("submit", *map(str, files), "--tenant", "acme").returncode == 0
    env = {**harness.env, "INGESTION_BATCH_LANES": lanes, "INGESTION_FAILPOINT": "promote.statement",
           "INGESTION_ALLOW_FAILPOINTS": "1", "INGESTION_FAILPOINT_DIR": str(harness.markers),
           "INGESTION_FAILPOINT_SLEEP": "600"}
    proc = subprocess.Popen([CLI, "process"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not any(harness.markers.glob("*.promote.statement")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert table(db, "SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%%' "
                         "AND state = 'active' AND datname = current_database()")[0]["n"] == 1
        signalled = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)  # the statement would run 600 s
    finally:
        if proc.poll() is None:  # it did not end: the test fails, and leaves no process behind
            proc.kill()
            proc.wait(30)
    assert proc.returncode == 130 and "interrupted" in stderr, stderr[-3000:]
    assert time.monotonic() - signalled < 60
    assert table(db, "SELECT count(*) AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%%' "
                     "AND state = 'active' AND datname = current_database()")[0]["n"] == 0
    runs = table(db, "SELECT status, owner FROM ingestion_runs ORDER BY file_id")
    assert ("queued", None) in [(r["status"], r["owner"]) for r in runs], runs  # the interrupted file is back
    assert all(r["status"] == "succeeded" or (r["status"], r["owner"]) == ("queued", None) for r in runs), runs
    harness.converge()
    assert [r["status"] for r in table(db, "SELECT status FROM ingestion_runs")] == ["succeeded"] * 2
    assert table(db, "SELECT count(*) AS n FROM document_versions WHERE is_active")[0]["n"] == 2
    assert invariant_violations(database_url) == []


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_document_costs_the_units_it_had_not_kept(harness, database_url, db, corpus_dir):
    """SIGKILL `process` right after it kept the first unit of a 12-page PDF read in units of 3: the next
    `process` reads the other three units only, and the file becomes one version with every chunk once."""
    harness.env.update(INGESTION_UNIT_PAGES="3", INGESTION_UNIT_TEXT_PAGES="1", INGESTION_BATCH_LANES="1")
    olap = corpus_dir / "documents" / "fr_olap.pdf"
    assert harness.cli("submit", str(olap), "--tenant", "acme").returncode == 0
    assert harness.kill_process(point="extract.unit_done").reached
    kept = table(db, "SELECT unit_number, done_by FROM staging_units WHERE state = 'done'")
    assert [u["unit_number"] for u in kept] == [0]
    harness.converge()
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert run["status"] == "succeeded" and (run["stats"]["units"], run["stats"]["units_reused"]) == (4, 1)
    [version] = table(db, "SELECT * FROM document_versions")
    ordinals = [c["ordinal"] for c in table(db, "SELECT ordinal FROM chunks ORDER BY ordinal")]
    assert ordinals == list(range(version["chunk_count"])) and version["chunk_count"] > 5
    assert invariant_violations(database_url) == []


@pytest.mark.timeout(300)
def test_a_process_killed_while_indexing_leaves_its_versions_served_and_the_next_process_indexes_them(
        harness, database_url, db, corpus_dir):
    """SIGKILL inside the sweep's first transaction (vector_backlog.py): the versions were promoted and committed
    before it, so they are served and searchable; their vectors wait outside the graph, and a `process` with
    nothing queued puts them in."""
    import numpy as np

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.documents import search, vector_backlog

    harness.env["INGESTION_INDEX_SWEEP_NICE"] = str(vector_backlog.SWEEP_NICE)  # the sweep's own lowered pool
    docs = corpus_dir / "documents"
    assert harness.cli("submit", str(docs / "norwich-city.txt"), str(docs / "fake-memo.pdf"),
                       "--tenant", "acme").returncode == 0
    assert harness.kill_process(point="index.batch").reached
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"succeeded"}
    chunks = table(db, "SELECT count(*) AS n FROM chunk_embeddings")[0]["n"]
    left = vector_backlog.pending(db)  # the killed transaction's batch (the other lane may have committed one)
    assert 0 < left <= chunks
    assert invariant_violations(database_url) == []
    # searchable as they are: a stored vector as the query finds its own chunk, through the backlog's ranking
    stored = table(db, "SELECT chunk_id, embedding FROM chunk_embeddings WHERE NOT indexed "
                       "ORDER BY chunk_id LIMIT 1")[0]
    with connect(database_url, autocommit=True) as conn:
        found = search._vector_candidates(conn, "acme", stored["embedding"].to_numpy().astype(np.float32),
                                          table(db, "SELECT model FROM chunk_embeddings LIMIT 1")[0]["model"],
                                          10, 5, exact=False)
    assert found[0] == stored["chunk_id"]

    result = harness.cli("process")
    assert result.returncode == 0, result.stderr[-3000:]
    assert vector_backlog.pending(db) == 0
    # not a terminal: the progress comes as one JSON object a report

    reports = [json.loads(line) for line in result.stderr.splitlines() if line.startswith('{"event": "progress"')]
    expected = {"step": "index", "done": left, "total": left, "unit": "vectors", "final": True}
    assert expected.items() <= reports[-1].items()


@pytest.mark.timeout(300)
def test_a_sweep_killed_with_no_batch_after_it_is_finished_by_the_intake_services_janitor(
        harness, database_url, db, corpus_dir, tmp_path):
    """SIGKILL inside the sweep, then no upload and no `process`: the running `ingestion-pipeline intake`
    service's janitor marks the killed run failed (its worker stopped beating), and with no run in progress it
    puts the vectors into their graph, a bounded share a round."""
    from ingestion_pipeline.documents import vector_backlog
    from ingestion_pipeline_tests.helpers import intake_service_until

    harness.env["INGESTION_INDEX_SWEEP_NICE"] = str(vector_backlog.SWEEP_NICE)  # the sweep's own lowered pool
    docs = corpus_dir / "documents"
    assert harness.cli("submit", str(docs / "norwich-city.txt"), str(docs / "fake-memo.pdf"),
                       "--tenant", "acme").returncode == 0
    assert harness.kill_process(point="index.batch").reached
    left = vector_backlog.pending(db)
    assert left > 0

    text = intake_service_until(lambda: vector_backlog.pending(db) == 0, tmp_path / "intake.log",
                                {**harness.env, "INGESTION_JANITOR_INTERVAL_SECONDS": "1"}, "--only", "janitor")
    assert vector_backlog.pending(db) == 0, text
    assert "janitor: 1 run(s) with a dead worker marked failed" in text
    assert f"{left:,} promoted vector(s) put into their HNSW graph (0 still waiting)" in text
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"succeeded"}
    assert invariant_violations(database_url) == []


def test_a_process_killed_mid_embedding_leaves_its_pool_slot_to_the_janitor_of_the_next_process(
        harness, database_url, db, corpus_dir):
    """SIGKILL between two committed units of the embedding step: the dead run still holds its slot of the
    `embedding` pool (dagster.yaml's limit), and no daemon runs beside `process` to free it. The next `process`'s
    janitor marks the run failed and gives the slot back before it runs anything, and the file is finished."""
    import dagster as dg

    docs = corpus_dir / "documents"
    assert harness.cli("submit", str(docs / "norwich-city.txt"), "--tenant", "acme").returncode == 0
    assert harness.kill_process(point="embed.unit").reached
    with dg.DagsterInstance.get() as instance:
        held = instance.event_log_storage.get_concurrency_info("embedding").claimed_slots
        [killed] = [r for r in instance.get_runs() if r.status == dg.DagsterRunStatus.STARTED]
    assert [slot.run_id for slot in held] == [killed.run_id], held

    result = harness.cli("process")
    assert result.returncode == 0, result.stderr[-3000:]
    with dg.DagsterInstance.get() as instance:
        assert instance.event_log_storage.get_concurrency_info("embedding").claimed_slots == []
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
    assert {r["status"] for r in table(db, "SELECT status FROM ingestion_runs")} == {"succeeded"}
    assert invariant_violations(database_url) == []
