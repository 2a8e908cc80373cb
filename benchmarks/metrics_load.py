"""Metrics load: 1,000,000-row exports as the platforms write them, submitted and processed by the CLI.

For each export (a Meta Ads Manager CSV and a Google Ads UI report CSV by default) this runs what a user
runs — ``ingestion-pipeline metrics submit FILE`` then ``ingestion-pipeline process`` (the Dagster run of
the upload's partition: staging, the threshold check, promotion) — each as its own process against an
embedded Postgres in a temporary folder, and prints submit-to-completed time, the staging and
promotion times the upload recorded, staging rows/s and the peak resident memory of the ``process``
process. Not part of the tests; ``compare_dlt.py`` runs dlt on the same files in the same run.

    .venv/bin/python benchmarks/metrics_load.py [--rows 1000000] [--layouts meta.ads_manager_csv ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BIN = Path(sys.executable).parent
DEFAULT_LAYOUTS = ("meta.ads_manager_csv", "google.ui_report_csv")


@dataclass
class Result:
    layout: str
    rows: int
    submit_s: float
    process_s: float
    staging_s: float
    promotion_s: float
    peak_rss_mb: float
    status: str
    skipped: int

    @property
    def total_s(self) -> float:
        return self.submit_s + self.process_s

    def describe(self) -> str:
        return (f"{self.layout}: {self.rows:,} rows, {self.status}; submit-to-completed {self.total_s:.1f} s "
                f"(submit {self.submit_s:.1f} s, process {self.process_s:.1f} s: staging {self.staging_s:.1f} s = "
                f"{self.rows / self.staging_s:,.0f} rows/s, promotion {self.promotion_s:.1f} s); "
                f"summary rows skipped {self.skipped}; peak RSS of `process` {self.peak_rss_mb:.0f} MB")


def environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL", "DAGSTER_HOME")}
    env["INGESTION_DATA_DIR"] = str(work)
    return env


def generate(work: Path, rows: int, layouts: tuple[str, ...]) -> dict[str, Path]:
    """The exports, written by a child process (its memory is not this benchmark's)."""
    files = {layout: work / f"{layout}.csv" for layout in layouts}
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from ingestion_pipeline.samples.metric_exports import daily_rows\n"
        "from ingestion_pipeline.samples.platform_exports import WRITERS\n"
        "rows = int(sys.argv[1])\n"
        "for layout, path in zip(sys.argv[2::2], sys.argv[3::2]):\n"
        "    WRITERS[layout][0](Path(path), daily_rows(max(1, rows // 1000), 10, 10, 10))\n"
    )
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(rows), *[x for item in files.items() for x in map(str, item)]],
                   check=True)
    sizes = ", ".join(f"{p.name} {p.stat().st_size / 1e6:.0f} MB" for p in files.values())
    print(f"generated {len(files)} exports of {rows:,} rows in {time.perf_counter() - start:.0f} s: {sizes}",
          flush=True)
    return files


def cli(work: Path, *args: str) -> tuple[float, float, str]:
    """Run ``ingestion-pipeline ARGS``; (wall seconds, peak RSS MB of that process, stdout)."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(BIN / "ingestion-pipeline"), *args], env=environment(work), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ingestion-pipeline {' '.join(args)} exited {proc.returncode}:\n{out}")
    return elapsed, usage.ru_maxrss / 1024, out


def database_url(work: Path) -> str:
    return cli(work, "db", "url")[2].strip()


def settle(work: Path) -> float:
    """Let the server finish what the previous run left it before the next timed run starts: a 1M-row load
    leaves autovacuum work and ~1 GB of dirty pages, and whichever run comes next paid for them (the
    second export of a round took 12.3 s first and 15.2 s second, staging slow while the kernel wrote
    back a gigabyte). VACUUM (ANALYZE) does now what autovacuum would start within a minute, CHECKPOINT
    and sync write everything out. Seconds taken (outside every timing)."""
    import psycopg

    start = time.perf_counter()
    with psycopg.connect(database_url(work), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
    os.sync()
    return time.perf_counter() - start


def run_ours(work: Path, files: dict[str, Path], round_no: int = 1, *, settled: bool = False) -> list[Result]:
    """Submit and process each export into a workspace of its own (a new one each round: a round promotes
    into empty tables, as the first did); with ``settled``, each after ``settle``."""
    import psycopg
    from psycopg.rows import dict_row

    cli(work, "db", "migrate")  # the embedded server starts here, not inside the timed commands
    results = []
    for layout, path in files.items():
        if settled:
            settle(work)
        workspace = "bench-" + layout.split(".")[0] + (f"-{round_no}" if round_no > 1 else "")
        submit_s, _, _ = cli(work, "metrics", "submit", str(path), "--workspace", workspace)
        process_s, rss, _ = cli(work, "process")
        with psycopg.connect(database_url(work), row_factory=dict_row) as conn:
            upload = conn.execute("SELECT * FROM data_uploads WHERE workspace_id = %s ORDER BY upload_id DESC LIMIT 1",
                                  (workspace,)).fetchone()
        stats = upload["stats"]
        results.append(Result(layout, upload["total_rows"] or 0, submit_s, process_s,
                              stats.get("staging_ms", 0) / 1000, stats.get("promotion_ms", 0) / 1000, rss,
                              upload["status"], upload["skipped_rows"] or 0))
        print(results[-1].describe(), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--layouts", nargs="+", default=list(DEFAULT_LAYOUTS))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ip-metrics-bench-"))
    try:
        files = generate(work, args.rows, tuple(args.layouts))
        results = run_ours(work, files)
        print(json.dumps([r.__dict__ | {"total_s": round(r.total_s, 2)} for r in results]))
    finally:
        cli(work, "db", "stop")
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
