"""The Redis job queue: how fast jobs become ledger rows, and how long a pushed job takes to be searchable.

1. Intake: N jobs for small files pushed to a real redis-server (the project starts one in a temporary folder),
   then taken into a throwaway database by one consumer, and again (a fresh set) by two consumers at once.
   Prints the push rate and push -> ledger row (jobs per second), exactly as the intake service and `process`
   take them.
2. ``--dev``: ``ingestion-pipeline dev`` (webserver + daemon, sensors on, the intake service) on a fresh data
   folder with the project's Redis; jobs pushed one at a time, each timed from its push until its status hash
   says ``done`` (its version is active: what search serves). Prints p50 / p95.

    .venv/bin/python benchmarks/queue_intake.py [--jobs 2000] [--dev --dev-jobs 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dev_session import CLI, dev_session  # noqa: E402
from throwaway_database import throwaway_database  # noqa: E402

from ingestion_pipeline.core.db import Database  # noqa: E402
from ingestion_pipeline.core.redis_server import RedisServer  # noqa: E402
from ingestion_pipeline.core.upload_store import LocalUploadStore  # noqa: E402
from ingestion_pipeline.queues import redis_contract
from ingestion_pipeline.queues.jobs import new_job
from ingestion_pipeline.queues.rag_registry import add_rag
from ingestion_pipeline.queues.redis_consumer import RedisJobConsumer
from ingestion_pipeline.queues.redis_contract import connect, push


def _files(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True)
    paths = []
    for i in range(n):
        path = folder / f"note-{i:05d}.txt"
        path.write_text(f"Note {i}: the ferry to the island leaves at {7 + i % 12} o'clock from pier {i % 9}.\n")
        paths.append(path)
    return paths


def _push(client, paths: list[Path], rag_id: str) -> float:
    start = time.perf_counter()
    for path in paths:
        push(client, new_job(rag_id, str(path)))
    return time.perf_counter() - start


def _consume(url: str, db: Database, store: LocalUploadStore, jobs: int, taken: list[int], i: int) -> None:
    taken[i] = RedisJobConsumer(connect(url), db, store, fingerprint="bench", max_bytes=10**7).consume(jobs).taken


def intake(jobs: int) -> None:
    work = Path(tempfile.mkdtemp(prefix="ip-queue-bench-"))
    server = RedisServer(work / "redis")
    try:
        server.start()
        with throwaway_database("bench_queue") as url, Database(url, max_size=4) as db:
            store = LocalUploadStore(work / "uploads")
            for consumers in (1, 2):
                rag = f"kb{consumers}"
                paths = _files(work / rag / "incoming", jobs)
                with db.transaction() as conn:
                    add_rag(conn, rag, tenant_id="bench", root=work / rag)
                client = connect(server.url)
                pushed = _push(client, paths, rag)
                print(f"push: {jobs} jobs in {pushed:.2f} s = {jobs / pushed:,.0f} jobs/s (status hash + LPUSH, "
                      "one MULTI each)", flush=True)
                taken = [0] * consumers

                start = time.perf_counter()
                threads = [threading.Thread(target=_consume, args=(server.url, db, store, jobs, taken, i))
                           for i in range(consumers)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                seconds = time.perf_counter() - start
                with db.connection() as conn:
                    rows = conn.execute("SELECT count(*) AS n FROM queue_jobs WHERE rag_id = %s", (rag,)).fetchone()
                assert rows["n"] == jobs and client.llen(redis_contract.QUEUE) == 0
                print(f"push -> ledger row, {consumers} consumer(s) at once {taken}: {jobs} jobs in {seconds:.2f} s = "
                      f"{jobs / seconds:,.0f} jobs/s ({seconds / jobs * 1000:.2f} ms a job: read + SHA-256 + store "
                      "+ one transaction + status)", flush=True)
                client.close()
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _active(url: str, job_id: str) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        return conn.execute(
            """SELECT 1 FROM queue_jobs j JOIN ingestion_runs r ON r.file_id = j.file_id
                WHERE j.job_id = %s AND r.status = 'succeeded'""", (job_id,)).fetchone() is not None


def dev_latency(n: int) -> None:
    def register_rag(env: dict[str, str], work: Path) -> None:
        (work / "kb").mkdir()
        subprocess.run([CLI, "queue", "rag", "add", "kb", "--tenant", "dev", "--root", str(work / "kb")], env=env,
                       check=True, capture_output=True)

    with dev_session("ip-queue-dev-", redis=True, api=False, before_dev=register_rag) as dev:
        client = connect(dev.env["REDIS_URL"])

        def one(name: str, text: str, timeout: float = 600) -> tuple[float, float]:
            """(push -> its version active, push -> its status hash says done), in seconds."""
            path = dev.work / "kb" / "incoming" / name
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
            job = new_job("kb", str(path))
            start = time.perf_counter()
            push(client, job)
            searchable = None
            while time.perf_counter() - start < timeout:
                dev.check_alive()
                if searchable is None and _active(dev.url, job.job_id):
                    searchable = time.perf_counter() - start
                status = client.hget(redis_contract.status(job.job_id), "status")
                if status == b"failed":
                    raise SystemExit(f"{name} failed: {client.hgetall(redis_contract.status(job.job_id))}")
                if status == b"done":
                    done = time.perf_counter() - start
                    return (searchable if searchable is not None else done), done
                time.sleep(0.1)
            raise SystemExit(f"{name} not done after {timeout} s:\n{dev.log_tail()}")

        try:
            warm_up, _ = one("warm-up.md", "# Warm up\n\nThe first job.\n")
            print(f"warm-up job (the daemon starting, the model's export): {warm_up:.1f} s", flush=True)
            times, statuses = [], []
            for i in range(n):
                searchable, done = one(f"note-{i}.md", f"# Note {i}\n\nThe ferry leaves at {i + 7} o'clock.\n")
                times.append(searchable)
                statuses.append(done)
                print(f"note-{i}.md searchable after {searchable:.1f} s, status done after {done:.1f} s", flush=True)
            print(f"\nunder `make dev` ({n} jobs, one at a time; the intake service, its fast-lane launch, a run):\n"
                  f"  push -> searchable:  p50 {statistics.median(times):.1f} s, p95 {_p95(times):.1f} s\n"
                  f"  push -> status done: p50 {statistics.median(statuses):.1f} s, p95 {_p95(statuses):.1f} s "
                  "(written by the run as it promotes the file)")
        finally:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--dev", action="store_true", help="also push -> searchable under `ingestion-pipeline dev`")
    parser.add_argument("--dev-jobs", type=int, default=20)
    args = parser.parse_args()
    intake(args.jobs)
    if args.dev:
        dev_latency(args.dev_jobs)


if __name__ == "__main__":
    main()
