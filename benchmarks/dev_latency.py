"""How long a small file takes to become searchable with `make dev` running (webserver + daemon).

Starts ``ingestion-pipeline dev`` on a fresh data folder (``dev_session.py``; no Redis: this path does not
use one), ingests one file to warm up (the model's one-time export, the code server), then submits small
files one at a time with ``ingestion-pipeline submit`` and times each from the submit command's start until
its version is active (what search serves). The path measured is the real one: upload_sensor's tick, the
run queue, a run worker process, the five steps. Prints each time, the median, and where each file's seconds
went, from the ledger's and Dagster's own records of the run: the submit command, the wait for the sensor's
run, the run queue, the run worker's start, the resources before the first step, each step.

    .venv/bin/python benchmarks/dev_latency.py [--files 5]
"""

from __future__ import annotations

import argparse
import os
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


def breakdown(instance, url: str, tenant: str, filename: str, submit_start: float, submit_end: float,
              seen: float) -> dict[str, float]:
    """Seconds of each stage for one file, from the ledger's row and its Dagster run's records (wall clock)."""
    from dagster import DagsterEventType, RunsFilter

    with psycopg.connect(url) as conn:
        pk, activated = conn.execute(
            """SELECT r.partition_key, extract(epoch FROM v.activated_at) FROM ingestion_runs r
                 JOIN document_versions v ON v.ingestion_run_id = r.run_id
                WHERE r.tenant_id = %s AND r.config->>'filename' = %s AND v.is_active""",
            (tenant, filename)).fetchone()
    record = instance.get_run_records(RunsFilter(tags={"dagster/partition": pk}), limit=1)[0]
    run_id = record.dagster_run.run_id
    launched = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_STARTING).records
    launched_at = launched[0].event_log_entry.timestamp if launched else record.create_timestamp.timestamp()
    steps = sorted((s for s in instance.get_run_step_stats(run_id) if s.start_time), key=lambda s: s.start_time)
    step_seconds = {s.step_key: (s.end_time or s.start_time) - s.start_time for s in steps}
    first, last = steps[0].start_time, steps[-1].end_time or steps[-1].start_time
    out = {
        "submit command": submit_end - submit_start,
        "sensor -> run": record.create_timestamp.timestamp() - submit_end,
        "run queue": launched_at - record.create_timestamp.timestamp(),
        "worker start": record.start_time - launched_at,
        "before 1st step": first - record.start_time,
        "steps": sum(step_seconds.values()),
        "between steps": (last - first) - sum(step_seconds.values()),
        "promoted -> seen": seen - float(activated),
    }
    out.update({f"  {k}": v for k, v in step_seconds.items()})
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=5)
    args = parser.parse_args()
    with dev_session("ip-dev-latency-") as dev:
        os.environ.update(DAGSTER_HOME=dev.env["DAGSTER_HOME"], DAGSTER_PG_URL=subprocess.run(
            [CLI, "db", "url", "--dagster"], env=dev.env, check=True, capture_output=True, text=True).stdout.strip())
        from dagster import DagsterInstance

        instance = DagsterInstance.get()
        stages: list[dict[str, float]] = []

        def ingest(name: str, text: str, timeout: float = 300) -> float:
            path = dev.work / name
            path.write_text(text)
            start, wall = time.perf_counter(), time.time()
            subprocess.run([CLI, "submit", "--tenant", "dev", str(path)], env=dev.env, check=True,
                           capture_output=True)
            submitted = time.time()
            while time.perf_counter() - start < timeout:
                dev.check_alive()
                if _active(dev.url, "dev", name):
                    seconds = time.perf_counter() - start
                    stages.append(breakdown(instance, dev.url, "dev", name, wall, submitted, time.time()))
                    return seconds
                time.sleep(0.1)
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
        measured = stages[1:]  # the warm-up's first run also pays the daemon's and the code server's start
        print("\nwhere the seconds go (median over the files after the warm-up):")
        for name in measured[0] if measured else ():
            values = [s.get(name, 0.0) for s in measured]
            print(f"  {name:<40} {statistics.median(values):6.2f} s")


if __name__ == "__main__":
    main()
