"""Where the CPU of a cold 300-file document load goes, and what that allows on this machine's cores.

The target: the 300-file cold run takes at most 1.15× the pure encode time of its chunks, and at most
15 ms per file beyond it. Wall time can never be less than the CPU the run needs divided by the cores, and
the model alone keeps every core busy while it encodes. This benchmark measures, for the same run that
``compare_peers.py`` times (submit, then ``process`` through the Dagster job, in one fresh process):

- the CPU of the model's native threads (OpenVINO's), of the main thread (imports, Dagster, submitting,
  feeding the model), of the file lanes (extraction, chunking, promotion), of the extraction worker
  (a child process), and of the Postgres server (every backend, the background processes included);
- the pure encode of the same chunks on the same backend, alone: its wall time E and its CPU;
- the bounds that follow: wall >= total CPU / cores, so a goal needs the run's CPU beyond the pure
  encode's (the same chunks on the same backend) to be at most cores x goal - the pure encode's CPU.

    .venv/bin/python benchmarks/cpu_budget.py [--rounds 2] [--small-files 300]

Linux only (reads /proc).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compare_peers  # noqa: E402 - the same files, the same run

ROOT = compare_peers.ROOT
TICK = os.sysconf("SC_CLK_TCK")
MODEL_THREADS = "model (native threads)"


def _cpu(stat_line: str, *, children: bool = False) -> float:
    fields = stat_line.rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICK


def server_cpu(pgdata: Path) -> float:
    """CPU seconds of the server under ``pgdata`` so far: the postmaster (with the backends it reaped) and
    every process it runs now."""
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])
    total = _cpu(Path(f"/proc/{postmaster}/stat").read_text(), children=True)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            line = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(line.rsplit(")", 1)[1].split()[1]) == postmaster:
            total += _cpu(line)
    return total


class ThreadCpu:
    """Samples this process's threads every 0.2 s: CPU by Python thread name; threads Python does not know
    (OpenVINO's workers) are the model's."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def __enter__(self) -> ThreadCpu:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            self._sample()

    def _sample(self) -> None:
        names = {t.native_id: t.name for t in threading.enumerate()}
        for tid in os.listdir("/proc/self/task"):
            try:
                line = Path(f"/proc/self/task/{tid}/stat").read_text()
            except OSError:
                continue
            tid_n = int(tid)
            known = self.seen.get(tid_n)
            if tid_n == os.getpid():
                name = "main thread"
            elif tid_n in names:
                # file-lane_0 and file-lane_1 are one part, and so are every run's lease keepers
                name = re.sub(r"-[0-9a-f]{8}(?=-)|[_-]\d+$", "", names[tid_n])
            else:
                name = known[0] if known else MODEL_THREADS
            self.seen[tid_n] = (name, _cpu(line))

    def by_name(self) -> Counter:
        parts: Counter = Counter()
        for name, cpu in self.seen.values():
            parts[name] += cpu
        return parts


def measured_run(namespace: str, files: list[str]) -> dict:
    """The run compare_peers times, in this process, with its CPU by part."""
    before = os.times()
    start = time.perf_counter()
    with ThreadCpu() as threads:
        outcome = compare_peers.run_ours(namespace, files)
    wall = time.perf_counter() - start
    after = os.times()
    parts = threads.by_name()
    parts.pop("cpu-sampler", None)
    parts["extraction worker (child process)"] = (after.children_user + after.children_system
                                                  - before.children_user - before.children_system)
    return {"wall": wall, "parts": dict(parts), **outcome}


def pure_encode(url: str, namespace: str) -> dict:
    """Our chunks of ``namespace`` encoded alone by our backend (as compare_peers' baseline): wall and CPU."""
    import psycopg

    from ingestion_pipeline.documents.embedding import build_embedder

    with psycopg.connect(url) as conn:
        texts = [r[0] for r in conn.execute(
            """SELECT c.text FROM chunks c JOIN document_versions v ON v.version_id = c.version_id
                WHERE v.tenant_id = %s AND v.is_active""", (namespace,))]
    embedder = build_embedder()
    embedder.embed(["warm up"])
    before, start = os.times(), time.perf_counter()
    embedder.embed(sorted(texts, key=len))
    wall, after = time.perf_counter() - start, os.times()
    return {"wall": wall, "cpu": after.user + after.system - before.user - before.system, "chunks": len(texts),
            "backend": embedder.backend_in_use}


def _child(args: list[str], env: dict) -> dict:
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_run":
        print(json.dumps(measured_run(sys.argv[2], sys.argv[3:])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "_encode":
        print(json.dumps(pure_encode(sys.argv[2], sys.argv[3])))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", default=str(ROOT.parent / "shared" / "corpus" / "documents"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--small-files", type=int, default=300)
    args = parser.parse_args()

    work, env = compare_peers.scratch_environment("ip-cpu-")
    from ingestion_pipeline.cli.bootstrap import bootstrap
    from ingestion_pipeline.core.embedded_postgres import stop_embedded_postgres

    pgdata = work / "data" / "pgdata"
    cores = os.cpu_count() or 1
    rows = []
    try:
        with bootstrap() as ctx:
            env["DATABASE_URL"] = ctx.url
        compare_peers.prepare_model(env)
        for r in range(args.rounds):
            files = compare_peers.small_files(Path(args.corpus), work / f"small-{r}", args.small_files)
            server_before = server_cpu(pgdata)
            run = _child(["_run", f"cpu{r}", *map(str, files)], env)
            run["parts"]["Postgres server"] = server_cpu(pgdata) - server_before
            encode = _child(["_encode", env["DATABASE_URL"], f"cpu{r}"], env)
            rows.append((run, encode))
            print(f"round {r + 1}: run {run['wall']:.1f} s wall, {sum(run['parts'].values()):.1f} CPU-s; pure encode "
                  f"{encode['wall']:.1f} s wall, {encode['cpu']:.1f} CPU-s ({encode['backend']}, {encode['chunks']} "
                  "chunks)", flush=True)
        _report(rows, cores, args.small_files)
    finally:
        stop_embedded_postgres(pgdata)
        shutil.rmtree(work, ignore_errors=True)


def _report(rows: list[tuple[dict, dict]], cores: int, n_files: int) -> None:
    names = sorted({name for run, _ in rows for name in run["parts"]},
                   key=lambda n: -statistics.median(run["parts"].get(n, 0.0) for run, _ in rows))
    print(f"\nCPU seconds by part (median of {len(rows)} rounds; {cores} cores):")
    for name in names:
        print(f"  {statistics.median(run['parts'].get(name, 0.0) for run, _ in rows):6.1f}  {name}")
    wall = statistics.median(run["wall"] for run, _ in rows)
    total = statistics.median(sum(run["parts"].values()) for run, _ in rows)
    encode = statistics.median(e["wall"] for _, e in rows)
    model = statistics.median(e["cpu"] for _, e in rows)  # the same chunks on the same backend
    outside = total - model
    print(f"\nrun: {wall:.1f} s wall, {total:.1f} CPU-s ({total / wall:.2f} of {cores} cores busy on average)")
    print(f"pure encode alone: {encode:.1f} s wall, {statistics.median(e['cpu'] for _, e in rows):.1f} CPU-s")
    print(f"now: {wall / encode:.2f}x the pure encode, {(wall - encode) * 1000 / n_files:.0f} ms per file beyond it")
    print(f"lower bound of the wall time with this CPU (all {cores} cores busy throughout): {total / cores:.1f} s = "
          f"{total / cores / encode:.2f}x the pure encode, {(total / cores - encode) * 1000 / n_files:.0f} ms per file")
    for label, goal in (("1.15x the pure encode", 1.15 * encode), ("15 ms per file", encode + 0.015 * n_files)):
        budget = cores * goal - model
        print(f"goal {label} ({goal:.1f} s): the CPU beyond the pure encode's must be <= {budget:.1f} CPU-s; "
              f"it is {outside:.1f} ({outside * 1000 / n_files:.0f} ms of CPU per file)")


if __name__ == "__main__":
    main()
