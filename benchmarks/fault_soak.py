"""Fault soak: SIGKILL the real `ingestion-pipeline process` many times and measure recovery.

Each cycle submits new versions of a set of documents (new note text and a chunk budget no cycle used
before), starts `process`, kills it at the next point of the schedule (each failpoint in turn: while
the model loads, mid-extraction, between two committed embedding units, inside the promotion
transaction; and after a random delay), then lets `process` recover: one kill per cycle, about 20 s
each on 2 cores. A watcher samples the active versions throughout. Prints the kills, the recoveries,
the files by final state, the invariant violations (must be 0) and the mean time to recover (from the
SIGKILL to every unit of work settled). Not part of the tests.

    .venv/bin/python benchmarks/fault_soak.py --kills 100
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the harness lives with the tests


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--lease", type=float, default=2.0, help="INGESTION_LEASE_SECONDS for the soak")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus"))
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ip-soak-"))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    for var in ("DATABASE_URL", "DAGSTER_PG_URL"):
        os.environ.pop(var, None)
    os.environ.update(INGESTION_DATA_DIR=str(work / "data"), DAGSTER_HOME=str(home))

    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres
    from ingestion_pipeline_tests.faults.harness import (
        ActiveVersionWatcher,
        FaultHarness,
        SoakReport,
        invariant_violations,
        kill_points,
        unfinished,
    )

    corpus = Path(args.corpus)
    docs = corpus / "documents"
    files = [docs / "fake-memo.pdf", docs / "simple.docx", docs / "ideas-page.html", docs / "codeblock.md",
             docs / "norwich-city.txt", corpus / "broken" / "password.pdf"]
    notes = [work / f"note-{i}.md" for i in range(4)]
    files += notes

    def write_notes(phase: int) -> None:  # new text each phase: new chunks, so the model must load and embed
        for i, note in enumerate(notes):
            note.write_text(f"# Note {i}, phase {phase}\n\n"
                            + " ".join(f"Sentence {j} of note {i} in phase {phase}." for j in range(30 * i + 5)))

    write_notes(0)
    ctx = bootstrap()  # the embedded Postgres under the soak's own data folder; DATABASE_URL set

    def submit_all() -> None:  # in this process: a cycle should spend its time in `process`, not in start-up
        from ingestion_pipeline.core.settings import load_settings
        from ingestion_pipeline.documents.embedding import build_embedder
        from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint
        from ingestion_pipeline.documents.intake import submit_upload

        settings = load_settings()
        fingerprint = pipeline_fingerprint(build_embedder().info, settings.chunk.target_tokens,
                                           settings.chunk.max_tokens)
        for path in files:
            submit_upload(ctx.db, ctx.document_store, tenant_id="soak", path=path, fingerprint=fingerprint,
                          max_bytes=settings.upload.max_bytes)

    env = {**os.environ, "INGESTION_LEASE_SECONDS": str(args.lease),
           "INGESTION_RETRY_BACKOFF": ",".join(["0.2"] * 15), "INGESTION_BATCH_MAX_FILES": "4"}
    harness = FaultHarness(ctx.url, env, work / "faults")
    report = SoakReport()
    watcher = ActiveVersionWatcher(ctx.url)
    schedule = kill_points(args.kills * 3, random.Random(args.seed))
    started = time.monotonic()
    try:
        submit_all()
        harness.converge()
        watcher.start()
        phase = 0
        while len([k for k in report.kills if k.reached]) < args.kills and schedule:
            if not unfinished(ctx.url):
                phase += 1
                # a chunk budget no earlier phase used: every document gets a new version (a budget seen
                # before would rightly make a second version of the same content and fingerprint)
                budget = {"INGESTION_CHUNK_TARGET_TOKENS": str(60 + phase % 140),
                          "INGESTION_CHUNK_MAX_TOKENS": str(256 - phase // 140)}
                harness.env.update(budget)
                os.environ.update(budget)
                write_notes(phase)
                submit_all()
            kill = harness.kill_process(**schedule.pop(0))
            report.kills.append(kill)
            if kill.reached:
                recovery_start = time.monotonic() - args.lease - 0.3  # the kill came before the harness's lease wait
                harness.converge()
                report.recoveries.append(time.monotonic() - recovery_start)
                done = len([k for k in report.kills if k.reached])
                print(f"  kill {done}/{args.kills} at {kill.point}: recovered in {report.recoveries[-1]:.1f} s",
                      flush=True)
        harness.converge()
    finally:
        watcher.stop()
    report.violations = invariant_violations(ctx.url) + watcher.violations
    import psycopg

    with psycopg.connect(ctx.url) as conn:
        report.final_states = dict(conn.execute("SELECT status, count(*) FROM ingestion_runs GROUP BY 1").fetchall())
    reached = [k for k in report.kills if k.reached]
    print(f"\nfault soak: {len(reached)} kills in {time.monotonic() - started:.0f} s "
          f"({len(report.kills) - len(reached)} process runs finished before their kill point)")
    points = Counter("random delay" if k.point.startswith("after") else k.point for k in reached)
    print(f"kills by point: {dict(points)}")
    print(f"recoveries: {len(report.recoveries)}; mean time to recover {statistics.mean(report.recoveries):.1f} s, "
          f"max {max(report.recoveries):.1f} s (lease {args.lease:g} s)")
    print(f"files by final state: {report.final_states}")
    print(f"invariant violations: {len(report.violations)} (active-version samples: {watcher.samples})")
    for violation in report.violations[:20]:
        print(f"  {violation}")
    ctx.db.close()
    stop_embedded_postgres(work / "data" / "pgdata")
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if report.violations else 0)


if __name__ == "__main__":
    main()
