"""INGESTION_EXECUTOR=celery: the steps of `process`'s runs execute on two real `ingestion-pipeline worker`
processes (dagster-celery, a real redis-server as broker, the S3 upload store on moto), and a worker SIGKILLed
mid-step hands its step to the other one: the run continues as the same ledger owner. The embedding steps go
to their own queue, ``embedding`` (as GPU hosts' workers would take them): a third worker on the queue ``dagster``
only takes the other steps and never loads the model. (One test: each worker loads the
model, minutes of CPU on these machines.)"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest

from ingestion_pipeline.core.redis_server import RedisServer, free_port
from ingestion_pipeline.samples.metric_exports import daily_rows, write_export
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages
from ingestion_pipeline_tests.faults.harness import CLI, FaultHarness, invariant_violations, unfinished
from ingestion_pipeline_tests.helpers import needs_tesseract, table

pytestmark = pytest.mark.slow


class Workers:
    """Two worker processes, each in its own process group (a kill takes the worker and its pool's children)."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.procs = env, logs, {}

    def start(self, name: str, queues: tuple[str, ...] = ("dagster", "embedding"), **extra: str) -> subprocess.Popen:
        log = (self.logs / f"{name}.log").open("w")
        env = {k: v for k, v in {**self.env, **extra}.items() if k != "PYTEST_CURRENT_TEST"}
        proc = subprocess.Popen([CLI, "worker", "--name", f"{name}@%h", *(f"--queue={q}" for q in queues)], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def stop_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


@pytest.fixture
def celery_env(database_url, project_dagster_home, isolated_storage, bucket, s3_endpoint, tmp_path):
    redis = RedisServer(tmp_path / "redis", port=free_port()).start()
    _, name = bucket
    env = {**os.environ, "INGESTION_EXECUTOR": "celery", "REDIS_URL": redis.url, "DATABASE_URL": database_url,
           "INGESTION_UPLOAD_STORE": f"s3://{name}/store", "INGESTION_UPLOAD_STORE_ENDPOINT_URL": s3_endpoint,
           "INGESTION_WORKER_REDELIVER_SECONDS": "15", "INGESTION_LEASE_SECONDS": "60",
           "INGESTION_BATCH_MAX_FILES": "3"}
    workers = Workers(env, tmp_path)
    try:
        yield env, workers
    finally:
        workers.stop_all()
        redis.stop()


def _notes(tmp_path: Path, n: int) -> list[Path]:
    paths = []
    for i in range(n):
        path = tmp_path / f"note-{i}.md"
        body = " ".join(f"Sentence {j} of note {i} about the rollout of the Oslo office." for j in range(30 + 10 * i))
        path.write_text(f"# Note {i}\n\n{body}\n")
        paths.append(path)
    return paths


steps: list[tuple[str, str]] = []  # (step key, worker) of the last _step_events


def _step_events(run_ids: list[str]) -> tuple[list[str], list[dict]]:
    """Which workers executed steps (dagster-celery's engine events) and what each document step that used the
    model paid for it (its metadata)."""
    hosts, models = [], []
    steps.clear()
    with dg.DagsterInstance.get() as instance:
        for run_id in run_ids:
            for entry in instance.all_logs(run_id):
                event = entry.dagster_event
                if event is None:
                    continue
                metadata = event.engine_event_data.metadata if event.event_type_value == "ENGINE_EVENT" else {}
                if "Celery worker" in metadata:  # dagster-celery's "Executing steps … in celery worker"
                    hosts.append(str(metadata["Celery worker"].value))
                    steps.append((event.step_key, str(metadata["Celery worker"].value)))
                if event.event_type_value == "ASSET_MATERIALIZATION":
                    materialization = event.step_materialization_data.materialization
                    if "model_process" in materialization.metadata:  # a document step that used the model
                        meta = materialization.metadata
                        models.append({k: meta[k].value for k in ("model_process", "model_load_seconds")})
    return hosts, models


def _engine_messages(run_ids: list[str]) -> list[str]:
    with dg.DagsterInstance.get() as instance:
        return [e.dagster_event.message or "" for r in run_ids for e in instance.all_logs(r)
                if e.dagster_event and e.dagster_event.event_type_value == "ENGINE_EVENT"]


def test_steps_run_on_two_workers_a_killed_one_hands_its_step_over_and_the_model_loads_once_per_process(
        celery_env, database_url, db, tmp_path):
    env, workers = celery_env
    harness = FaultHarness(database_url, env, tmp_path / "faults")
    markers = tmp_path / "failpoints"
    markers.mkdir()
    # worker1 alone at first, so an embedding step is surely its own: it stops inside it and is SIGKILLed there;
    # worker2 starts then and takes over (with both from the start, worker2 could take every embedding step)
    workers.start("worker1", INGESTION_FAILPOINT="embed.unit", INGESTION_ALLOW_FAILPOINTS="1",
                  INGESTION_FAILPOINT_DIR=str(markers))
    files = _notes(tmp_path, 9)
    assert harness.cli("submit", *map(str, files), "--tenant", "acme").returncode == 0
    export = write_export(tmp_path / "export.csv", "meta", daily_rows(2, 2, 2, 5))  # and a metric export
    metrics = harness.cli("metrics", "submit", str(export), "--workspace", "acme", "--platform", "meta")
    assert metrics.returncode == 0, metrics.stderr
    with _processing_until(env, markers, "embed.unit", "worker1 never reached an embedding step") as process:
        workers.kill("worker1")  # the whole worker: its main process and its pool's process
        workers.start("worker2")
        workers.start("worker3", queues=("dagster",))  # not the embedding queue: never the model
        out, _ = process.communicate(timeout=900)
    assert process.returncode == 0, out[-3000:] + workers.log("worker2")[-3000:]
    rows = table(db, "SELECT status, raw_path, attempts, owner, dagster_run_id FROM ingestion_runs")
    assert [r["status"] for r in rows] == ["succeeded"] * 9
    assert {r["attempts"] for r in rows} == {1}  # none retried: the step worker1 held was finished by worker2
    assert all(r["raw_path"] is None or r["raw_path"].startswith("s3://") for r in rows)
    assert len(table(db, "SELECT 1 FROM document_versions WHERE is_active")) == 9
    [upload] = table(db, "SELECT status, promoted_rows, raw_path, dagster_run_id FROM data_uploads")
    assert (upload["status"], upload["promoted_rows"]) == ("completed", 40) and upload["raw_path"].startswith("s3://")
    run_ids = sorted({r["dagster_run_id"] for r in rows})
    assert len(run_ids) == 3  # three batches of three, each one run start to end
    hosts, models = _step_events(run_ids)
    document_steps = list(steps)
    submitted = [m for m in _engine_messages(run_ids) if m.startswith("Submitting celery task for step")]
    metric_hosts, _ = _step_events([upload["dagster_run_id"]])
    assert len(metric_hosts) >= 3  # the metric job's steps ran on the workers too
    # every step of every run was a task a worker executed (the step worker1 died in, twice)
    assert len(hosts) == len(submitted) + 1 and len(submitted) >= 3 * 5
    assert {h.split("@")[0] for h in hosts} == {"worker1", "worker2", "worker3"}
    embedding_on = {h.split("@")[0] for step, h in document_steps if step.startswith("document_embeddings")}
    assert embedding_on and embedding_on <= {"worker1", "worker2"}, document_steps
    assert "embedding model loaded in" not in workers.log("worker3")
    loads = {}
    for m in models:
        loads.setdefault(m["model_process"], []).append(m["model_load_seconds"])
    for process_name, seconds in loads.items():  # one load per worker process, then none
        assert sum(1 for s in seconds if s > 0) <= 1, (process_name, seconds)
    # worker2's one pool process loaded the model once, then kept it for every step it executed
    loaded = [line for line in workers.log("worker2").splitlines() if "embedding model loaded in" in line]
    embedded_on_worker2 = sum(1 for h in hosts if h.startswith("worker2"))
    assert len(loaded) == 1 and embedded_on_worker2 >= 3, (loaded, embedded_on_worker2)
    print("worker2:", loaded[0].strip(), f"- then {embedded_on_worker2} steps;",
          "model load per document step, by worker process:", loads)
    assert not unfinished(database_url) and not invariant_violations(database_url)


@needs_tesseract
def test_a_scanned_documents_units_are_steps_that_both_workers_take(celery_env, database_url, db, tmp_path):
    """A 6-page scan in units of one page under INGESTION_EXECUTOR=celery: each unit is a mapped step of its own,
    executed as a Celery task by whichever worker is free (both take some), assembled once; the version is the
    one the unsplit file makes (its chunks compared with the same scan ingested whole by another tenant)."""
    env, workers = celery_env
    env.update(INGESTION_UNIT_PAGES="1")
    harness = FaultHarness(database_url, env, tmp_path / "faults")
    lines = [[f"Harbour minutes, page {page}", f"The pilots of berth {page} report calm water in spring {page}."]
             for page in range(1, 7)]
    scan = write_scanned_pages(tmp_path / "minutes.pdf", lines)
    workers.start("worker1")
    workers.start("worker2")
    assert harness.cli("submit", str(scan), "--tenant", "acme").returncode == 0
    done = harness.cli("process", timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [row] = table(db, "SELECT status, error, stats, dagster_run_id FROM ingestion_runs")
    assert row["status"] == "succeeded", row["error"]
    assert (row["stats"]["units"], row["stats"]["ocr_pages_read"]) == (6, 6)
    _step_events([row["dagster_run_id"]])
    unit_steps = {step: host.split("@")[0] for step, host in steps if "_unit_" in (step or "")}
    assert len(unit_steps) == 6 and set(unit_steps.values()) == {"worker1", "worker2"}, steps

    split = table(db, "SELECT ordinal, text, page_start FROM chunks WHERE tenant_id = 'acme' ORDER BY ordinal")
    whole = harness.cli("ingest", "--tenant", "whole", str(scan), env={"INGESTION_UNIT_PAGES": "100",
                                                                        "INGESTION_EXECUTOR": "in_process"})
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert split == table(db, "SELECT ordinal, text, page_start FROM chunks WHERE tenant_id = 'whole' ORDER BY 1")
    assert not unfinished(database_url) and not invariant_violations(database_url)


def test_a_worker_that_cannot_embed_hands_the_files_back_and_process_exits_5_with_its_reason(
        celery_env, database_url, db, tmp_path):
    """A Celery worker set to embed on CUDA on a host without one: its embedding step fails for the host, not the
    files. `process` gives the batch's files back to the queue uncounted and exits 5 with the worker's reason and
    what to run, instead of retrying them into dead letters or ending as if nothing were wrong."""
    env, workers = celery_env
    harness = FaultHarness(database_url, env, tmp_path / "faults")
    workers.start("worker1", INGESTION_EMBEDDING_DEVICE="cuda")
    assert harness.cli("submit", str(_notes(tmp_path, 1)[0]), "--tenant", "acme").returncode == 0
    done = harness.cli("process", timeout=600)
    assert done.returncode == 5, done.stdout[-3000:] + done.stderr[-3000:] + workers.log("worker1")[-3000:]
    [said] = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert "cannot embed on CUDA" in said and "nothing was embedded" in said, done.stderr[-3000:]
    assert "back in the queue with no attempt counted" in done.stderr
    print(said)
    [row] = table(db, "SELECT status, attempts, owner FROM ingestion_runs")
    assert (row["status"], row["attempts"], row["owner"]) == ("queued", 0, None)


def test_a_worker_killed_after_keeping_its_chunk_part_costs_no_chunk_and_one_promotion(celery_env, database_url, db,
                                                                                     tmp_path):
    """A big document's sections chunked in parts, a step each: the worker that kept a part is SIGKILLed before
    Dagster hears of it, Celery delivers the part's step again to the other worker, which finds it kept. The file's
    chunks are the ones the document gives in one process, none twice; its version is promoted once."""
    from ingestion_pipeline_tests.defs.test_big_documents import _manual

    env, workers = celery_env
    env.update(INGESTION_UNIT_CHARACTERS="20000", INGESTION_CHUNK_PART_CHARACTERS="40000")
    harness = FaultHarness(database_url, env, tmp_path / "faults")
    markers = tmp_path / "failpoints"
    markers.mkdir()
    workers.start("worker1", INGESTION_FAILPOINT="chunk.part_done",
                  INGESTION_ALLOW_FAILPOINTS="1", INGESTION_FAILPOINT_DIR=str(markers))
    manual = _manual(tmp_path / "manual.md")
    assert harness.cli("submit", str(manual), "--tenant", "acme", "--key", "manual").returncode == 0
    with _processing_until(env, markers, "chunk.part_done", "worker1 never kept a part") as process:
        [kept] = table(db, "SELECT part_number FROM staging_chunk_parts WHERE state = 'done'")
        workers.kill("worker1")
        workers.start("worker2")
        out, _ = process.communicate(timeout=900)
    assert process.returncode == 0, out[-3000:] + workers.log("worker2")[-3000:]
    [row] = table(db, "SELECT file_id, status, attempts, stats, dagster_run_id FROM ingestion_runs")
    assert (row["status"], row["attempts"]) == ("succeeded", 1) and row["stats"]["chunk_parts"] >= 2
    _step_events([row["dagster_run_id"]])
    again = [host for step, host in steps if step == f"document_chunks.chunk_part[file_{row['file_id']}_part_"
                                                      f"{kept['part_number']}]"]
    assert [h.split("@")[0] for h in again] == ["worker1", "worker2"], steps  # the part's step, delivered twice
    with dg.DagsterInstance.get() as instance:
        said = [e.user_message for e in instance.all_logs(row["dagster_run_id"])]
    assert any(f"part {kept['part_number']} already chunked" in m for m in said)

    served = """SELECT c.ordinal, c.text, c.section_path, c.content_hash, c.section_key FROM chunks c
                  JOIN document_versions v USING (version_id) WHERE c.tenant_id = %s ORDER BY c.ordinal"""
    whole = harness.cli("ingest", "--tenant", "whole", "--key", "manual", str(manual),
                        env={"INGESTION_EXECUTOR": "in_process"})
    assert whole.returncode == 0, whole.stderr[-3000:]
    assert table(db, served, "acme") == table(db, served, "whole")
    assert len(table(db, "SELECT 1 FROM document_versions WHERE tenant_id = 'acme'")) == 1
    assert not unfinished(database_url) and not invariant_violations(database_url)


@contextmanager
def _processing_until(env: dict, markers: Path, failpoint: str, never: str) -> Iterator[subprocess.Popen]:
    """``ingestion-pipeline process`` started and waited for until a worker stopped at ``failpoint`` (its marker
    in ``markers``; ``never``: the failure if none did in 300 s); killed with its group if it still runs after."""
    process = subprocess.Popen([CLI, "process"], env={k: v for k, v in env.items() if k != "PYTEST_CURRENT_TEST"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list(markers.glob(f"*.{failpoint}")) and time.monotonic() < deadline:
            assert process.poll() is None, process.stdout.read()
            time.sleep(0.1)
        assert list(markers.glob(f"*.{failpoint}")), never
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
