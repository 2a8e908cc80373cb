"""How long a small file takes to become searchable with `make dev` running (webserver + daemon).

Starts ``ingestion-pipeline dev`` on a fresh data folder (``dev_session.py``; no Redis: this path does not
use one), ingests one file to warm up (the model's one-time export, the code server), then submits small
files one at a time with ``ingestion-pipeline submit`` and times each from the submit command's start until
its version is active (what search serves). The path measured is the real one: upload_sensor's tick, the
run queue, a run worker process, the five steps. Prints each time and the median.

    .venv/bin/python benchmarks/dev_latency.py [--files 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dev_session import CLI, dev_session  # noqa: E402


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
    with dev_session("ip-dev-latency-") as dev:
        def ingest(name: str, text: str, timeout: float = 300) -> float:
            path = dev.work / name
            path.write_text(text)
            start = time.perf_counter()
            subprocess.run([CLI, "submit", "--tenant", "dev", str(path)], env=dev.env, check=True,
                           capture_output=True)
            while time.perf_counter() - start < timeout:
                dev.check_alive()
                if _active(dev.url, "dev", name):
                    return time.perf_counter() - start
                time.sleep(0.25)
            raise SystemExit(f"{name} not searchable after {timeout} s:\n{dev.log_tail()}")

        warm_up = ingest("warm-up.md", "# Warm up\n\nThe first file.\n", 600)
        print(f"warm-up file (the daemon starting, the model's one-time export): {warm_up:.1f} s", flush=True)
        times = []
        for i in range(args.files):
            seconds = ingest(f"note-{i}.md", f"# Note {i}\n\nNote {i}: the ferry leaves at {i + 7} o'clock.\n")
            times.append(seconds)
            print(f"note-{i}.md searchable after {seconds:.1f} s", flush=True)
        print(f"\nsubmit to searchable with `make dev` running: median {statistics.median(times):.1f} s, "
              f"max {max(times):.1f} s ({args.files} files, one at a time)")


if __name__ == "__main__":
    main()
