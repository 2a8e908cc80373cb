"""Delivery guarantees of the Redis queue the way they break: a consumer SIGKILLed after taking a job and
after committing its row, redis-server SIGKILLed mid-stream and restarted from its AOF, and two consumers at
once on 1,000 jobs. A real redis-server every time."""

import os
import signal
import subprocess
import threading
import time

import pytest

from ingestion_pipeline.core.redis_server import RedisServer
from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import connect, push
from ingestion_pipeline.services import Services
from ingestion_pipeline_tests.cli.test_corpus_cli import CLI, run_cli
from ingestion_pipeline_tests.helpers import table


def _files(root, n: int, distinct: int | None = None, empty: int = 0) -> list:
    incoming = root / "incoming"
    incoming.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = incoming / f"doc-{i:04d}.txt"
        if i < empty:
            path.write_text("")
        else:
            path.write_text(f"Document {i % (distinct or n)} about the harbour's tides and the ferry timetable.\n")
        paths.append(path)
    return paths


def _push_all(redis, paths, rag_id: str = "kb1") -> list[str]:
    jobs = [new_job(rag_id, str(p)) for p in paths]
    for job in jobs:
        push(redis, job)
    return [j.job_id for j in jobs]


def _killed_at(point: str, markers, env: dict) -> None:
    """`process` until it reaches ``point``, then SIGKILL of its whole process group."""
    env = {**env, "INGESTION_FAILPOINT": point, "INGESTION_ALLOW_FAILPOINTS": "1",
           "INGESTION_FAILPOINT_DIR": str(markers), "INGESTION_FAILPOINT_SLEEP": "120"}
    proc = subprocess.Popen([*CLI, "process"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while not any(markers.glob(f"*.{point}")) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert any(markers.glob(f"*.{point}")), f"{point} was never reached"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_consumer_killed_after_taking_and_after_committing(redis_queue, database, project_dagster_home, db,
                                                           tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_QUEUE_HEARTBEAT_SECONDS", "2")
    root = tmp_path / "kb"
    job_ids = _push_all(redis_queue, _files(root, 8))
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root)
    markers = tmp_path / "markers"
    markers.mkdir()

    _killed_at("queue.accepted", markers, dict(os.environ))  # row committed, message still held
    [held] = table(db, "SELECT job_id FROM queue_jobs")
    assert held["job_id"] == job_ids[0]
    time.sleep(2.5)  # the dead consumer's heartbeat expires
    _killed_at("queue.taken", markers, dict(os.environ))  # the next consumer hands it back, takes it, then dies
    assert [r["job_id"] for r in table(db, "SELECT job_id FROM queue_jobs")] == [job_ids[0]]

    time.sleep(2.5)
    run_cli("process")
    jobs = table(db, "SELECT job_id, file_id, status FROM queue_jobs ORDER BY job_id")
    assert sorted(j["job_id"] for j in jobs) == sorted(job_ids)  # none lost
    assert len(table(db, "SELECT * FROM ingestion_runs")) == 8  # none submitted twice
    assert {j["status"] for j in jobs} == {"done"}
    for job_id in job_ids:
        assert redis_queue.hget(redis_contract.status(job_id), "status") == b"done"
    assert not redis_queue.keys("rag:ingest:processing:*") and redis_queue.llen(redis_contract.QUEUE) == 0


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_redis_killed_mid_stream_restarts_from_its_aof(database, db, tmp_path, monkeypatch):
    server = RedisServer(tmp_path / "redis", fsync="always").start()
    try:
        monkeypatch.setenv("REDIS_URL", server.url)
        root = tmp_path / "kb"
        paths = _files(root, 200)
        with database.transaction() as conn:
            add_rag(conn, "kb1", tenant_id="acme", root=root)
        producer = connect(server.url)
        job_ids = _push_all(producer, paths)
        producer.close()
        services = Services(load_settings())

        def consumer() -> RedisJobConsumer:
            return RedisJobConsumer(connect(server.url), database, services.document_store,
                                    fingerprint=services.fingerprint, max_bytes=10**7, heartbeat_seconds=1)

        failures: list[BaseException] = []

        def consume() -> None:
            try:
                consumer().consume(1000)
            except BaseException as exc:  # noqa: BLE001 - the consumer dies with its Redis: expected
                failures.append(exc)

        worker = threading.Thread(target=consume)
        worker.start()
        deadline = time.monotonic() + 60
        while len(table(db, "SELECT job_id FROM queue_jobs")) < 40 and time.monotonic() < deadline:
            time.sleep(0.01)
        server.kill()  # SIGKILL, mid-stream
        worker.join(60)
        assert failures, "the consumer outlived its Redis: this test proves nothing"
        accepted_before = len(table(db, "SELECT job_id FROM queue_jobs"))
        assert 40 <= accepted_before < 200

        server.start()  # same port, same folder: the AOF is replayed
        check = connect(server.url)
        waiting = check.llen(redis_contract.QUEUE)
        held = sum(check.llen(k) for k in check.keys("rag:ingest:processing:*"))
        # every job is on the queue, held by the dead consumer, or acknowledged after its row committed
        assert waiting + held + accepted_before >= 200 and held <= 1
        time.sleep(1.5)  # the dead consumer's heartbeat (restored from the AOF) expires
        report = consumer().consume(1000)
        assert report.returned == held  # what the dead consumer held came back
        jobs = table(db, "SELECT job_id FROM queue_jobs")
        assert sorted(j["job_id"] for j in jobs) == sorted(job_ids)  # nothing lost
        assert len(table(db, "SELECT * FROM ingestion_runs")) == 200  # nothing accepted twice
        assert check.llen(redis_contract.QUEUE) == 0 and not check.keys("rag:ingest:processing:*")
        assert {check.hget(redis_contract.status(j), "status") for j in job_ids} == {b"queued"}
        check.close()
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_thousand_jobs_two_consumers_at_once(redis_queue, database, project_dagster_home, db, tmp_path):
    root = tmp_path / "kb"
    # 1,000 jobs, 1,000 paths: 20 empty files (they fail), the rest 30 distinct texts (each text's first job
    # queues a file, the others follow it or find it already active)
    job_ids = _push_all(redis_queue, _files(root, 1000, distinct=30, empty=20))
    with database.transaction() as conn:
        add_rag(conn, "kb1", tenant_id="acme", root=root)
    services = Services(load_settings())
    in_process = RedisJobConsumer(connect(os.environ["REDIS_URL"]), database, services.document_store,
                                  fingerprint=services.fingerprint, max_bytes=10**7)
    thread = threading.Thread(target=in_process.consume, args=(1000,))
    other = subprocess.Popen([*CLI, "process"], env=dict(os.environ), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    thread.start()
    _, stderr = other.communicate(timeout=600)
    thread.join(120)
    assert other.returncode == 0, stderr[-3000:]
    run_cli("process")  # what the in-process consumer accepted after the other's runs started

    jobs = table(db, "SELECT job_id, file_id, status FROM queue_jobs")
    assert len(jobs) == 1000 and sorted(j["job_id"] for j in jobs) == sorted(job_ids)  # each exactly once
    files = table(db, "SELECT content_hash, count(*) AS n FROM ingestion_runs GROUP BY content_hash")
    assert all(f["n"] == 1 for f in files) and len(files) <= 31
    took = [int(line.split("took ")[1].split(" ")[0]) for line in stderr.splitlines() if "redis queue: took" in line]
    assert 0 < sum(took) < 1000, "one consumer took every job: they did not run at once"
    statuses = {}
    for job_id in job_ids:
        status = {k.decode(): v.decode() for k, v in redis_queue.hgetall(redis_contract.status(job_id)).items()}
        statuses[status["status"]] = statuses.get(status["status"], 0) + 1
        if status["status"] == "failed":
            assert status["error_code"] == "ERR_NO_TEXT" and status["error"], status
    assert statuses == {"done": 980, "failed": 20}
