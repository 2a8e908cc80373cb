"""How long a small file takes to become searchable with `make dev` running (webserver + daemon).

Starts ``ingestion-pipeline dev`` on a fresh data folder, ingests one file to warm up (the model's
one-time export, the code server), then submits small files one at a time with ``ingestion-pipeline
submit`` and times each from the submit command's start until its version is active (what search
serves). The path measured is the real one: upload_sensor's tick, the run queue, a run worker process,
the five steps. Prints each time and the median.

    .venv/bin/python benchmarks/dev_latency.py [--files 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "ingestion-pipeline")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _active(url: str, tenant: str, filename: str) -> bool:
    with psycopg.connect(url) as conn:
        return conn.execute(
            """SELECT 1 FROM ingestion_runs r JOIN document_versions v ON v.doc_id = r.doc_id AND v.is_active
                WHERE r.tenant_id = %s AND r.config->>'filename' = %s AND r.status = 'succeeded'""",
            (tenant, filename)).fetchone() is not None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ip-dev-latency-"))
    (work / "dagster_home").mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", work / "dagster_home" / "dagster.yaml")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL")}
    env.update(INGESTION_DATA_DIR=str(work / "data"), DAGSTER_HOME=str(work / "dagster_home"))
    url = subprocess.run([CLI, "db", "url"], env=env, check=True, capture_output=True, text=True).stdout.strip()
    subprocess.run([CLI, "db", "migrate"], env=env, check=True, capture_output=True)
    env["DATABASE_URL"] = url
    log = (work / "dev.log").open("w")
    dev = subprocess.Popen([CLI, "dev", "--port", str(_port()), "--api-port", str(_port())], cwd=ROOT, env=env,
                           stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def ingest(name: str, text: str, timeout: float = 300) -> float:
            path = work / name
            path.write_text(text)
            start = time.perf_counter()
            subprocess.run([CLI, "submit", "--tenant", "dev", str(path)], env=env, check=True, capture_output=True)
            while time.perf_counter() - start < timeout:
                if dev.poll() is not None:
                    raise SystemExit(f"dev stopped:\n{(work / 'dev.log').read_text()[-3000:]}")
                if _active(url, "dev", name):
                    return time.perf_counter() - start
                time.sleep(0.25)
            raise SystemExit(f"{name} not searchable after {timeout} s:\n{(work / 'dev.log').read_text()[-3000:]}")

        warm_up = ingest("warm-up.md", "# Warm up\n\nThe first file.\n", 600)
        print(f"warm-up file (the daemon starting, the model's one-time export): {warm_up:.1f} s", flush=True)
        times = []
        for i in range(args.files):
            seconds = ingest(f"note-{i}.md", f"# Note {i}\n\nNote {i}: the ferry leaves at {i + 7} o'clock.\n")
            times.append(seconds)
            print(f"note-{i}.md searchable after {seconds:.1f} s", flush=True)
        print(f"\nsubmit to searchable with `make dev` running: median {statistics.median(times):.1f} s, "
              f"max {max(times):.1f} s ({args.files} files, one at a time)")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            dev.wait(30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGKILL)
        log.close()
        subprocess.run([CLI, "db", "stop"], env=env, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
