"""Which process of a `make dev` deployment opens Postgres sessions, and how many: idle, during a bulk load, and
for single small files.

Every session a client opens costs the server a forked process and a login (~3 ms of its CPU here, measured by
this script's ``--cost``), on the cores the pipeline needs. Postgres cannot say which client process opened a
session that has since closed, so this names them: every Python process of the session is started with a
``sitecustomize`` (on ``PYTHONPATH``, written to the session's folder) that sets ``PGAPPNAME`` to its command line,
and the server logs each session's authorization with that name (``log_connections``). Printed per phase: the
sessions by database and process.

``ingestion-pipeline dev`` on a throwaway data folder (``dev_session.py``): one file to warm up, ``--idle`` seconds
of nothing, a bulk load of ``--load`` small Markdown files of tenant ``bulk`` submitted at once, then ``--files``
small files one at a time.

    .venv/bin/python benchmarks/dagster_sessions.py [--idle 20] [--load 300] [--files 3] [--cost]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dev_session import CLI, dev_session  # noqa: E402

NAMING = '''import os, sys
os.environ["PGAPPNAME"] = " ".join(os.path.basename(a) for a in sys.orig_argv[:4])[:60]
'''
AUTHORIZED = re.compile(r"^(\S+ \S+) UTC \[\d+\] LOG:  connection authorized: user=\S+ database=(\S+)"
                        r"(?: application_name=(.*))?$")


def _succeeded(url: str, tenant: str) -> int:
    with psycopg.connect(url, autocommit=True, application_name="this benchmark's probe") as conn:
        return conn.execute("SELECT count(*) FROM ingestion_runs WHERE tenant_id = %s AND status = 'succeeded'",
                            (tenant,)).fetchone()[0]


def _wait(dev, tenant: str, count: int, timeout: float = 900) -> None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        dev.check_alive()
        if _succeeded(dev.url, tenant) >= count:
            return
        time.sleep(0.5)
    raise SystemExit(f"{tenant}: {count} files not done after {timeout} s:\n{dev.log_tail()}")


def _submit(dev, tenant: str, paths: list[Path]) -> None:
    subprocess.run([CLI, "submit", "--tenant", tenant, *map(str, paths)], env=dev.env, check=True,
                   capture_output=True)


def session_cost(url: str, sessions: int = 300) -> tuple[float, float]:
    """Server CPU seconds and wall seconds per session: ``sessions`` opened, queried once and closed."""
    pgdata = Path(psycopg.conninfo.conninfo_to_dict(url)["host"])
    postmaster = int((pgdata / "postmaster.pid").read_text().split()[0])

    def server_cpu() -> float:  # the postmaster and its children, the exited ones included (cutime, cstime)
        ticks = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                fields = (Path("/proc") / entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(entry) == postmaster or int(fields[1]) == postmaster:
                ticks += sum(int(f) for f in fields[11:15])
        return ticks / os.sysconf("SC_CLK_TCK")

    before, start = server_cpu(), time.perf_counter()
    for _ in range(sessions):
        with psycopg.connect(url) as conn:
            conn.execute("SELECT 1")
    wall = time.perf_counter() - start
    time.sleep(0.5)  # the last backends' exit
    return (server_cpu() - before) / sessions, wall / sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds of nothing after the warm-up")
    parser.add_argument("--load", type=int, default=300, help="small files of tenant bulk, submitted at once")
    parser.add_argument("--files", type=int, default=3, help="small files submitted one at a time afterwards")
    parser.add_argument("--cost", action="store_true", help="also measure what one session costs the server")
    args = parser.parse_args()

    phases: list[tuple[str, float, float]] = []
    with dev_session("ip-dagster-sessions-", api=False,
                     before_dev=lambda env, work: _name_processes(env, work)) as dev:
        with psycopg.connect(dev.url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET log_connections = 'authorization'")
            conn.execute("SELECT pg_reload_conf()")
        warm = dev.work / "warm-up.md"
        warm.write_text("# Warm-up\n\nThe code server, the run worker and the model, loaded once.\n")
        _submit(dev, "warm", [warm])
        _wait(dev, "warm", 1)
        start = time.time()
        time.sleep(args.idle)
        phases.append((f"idle, {args.idle:.0f} s", start, time.time()))
        bulk = dev.work / "bulk"
        bulk.mkdir()
        paths = []
        for i in range(args.load):
            paths.append(bulk / f"bulk-{i}.md")
            paths[-1].write_text(f"# Bulk {i}\n\nBulk note {i}: berth {i % 40} is dredged in week {i % 52}.\n")
        start = time.time()
        _submit(dev, "bulk", paths)
        _wait(dev, "bulk", args.load)
        phases.append((f"bulk load of {args.load} files", start, time.time()))
        start = time.time()
        for i in range(args.files):
            path = dev.work / f"note-{i}.md"
            path.write_text(f"# Note {i}\n\nNote {i}: the ferry leaves pier {i} at {i % 24} o'clock.\n")
            _submit(dev, "small", [path])
            _wait(dev, "small", i + 1)
        phases.append((f"{args.files} small files, one at a time", start, time.time()))
        time.sleep(1)  # the last sessions' log lines
        log = (dev.work / "data" / "pgdata" / "log").read_text()
        cost = session_cost(dev.url) if args.cost else None

    counts = {name: collections.Counter() for name, _, _ in phases}
    for line in log.splitlines():
        if (match := AUTHORIZED.match(line)) is None:
            continue
        when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC).timestamp()
        for name, start, end in phases:
            if start <= when < end:
                counts[name][(match.group(2), match.group(3) or "(no name)")] += 1
    for name, start, end in phases:
        total = sum(counts[name].values())
        print(f"\n{name}: {total} sessions in {end - start:.1f} s ({total / (end - start):.1f} a second)")
        for (database, process), n in counts[name].most_common():
            print(f"  {n:6}  {database:10} {process}")
    if cost is not None:
        print(f"\none session opened, queried once and closed: {cost[0] * 1000:.1f} ms of the server's CPU, "
              f"{cost[1] * 1000:.1f} ms wall")


def _name_processes(env: dict[str, str], work: Path) -> None:
    """Every Python process of the session names its sessions by its command line (see the module's docstring)."""
    folder = work / "naming"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(NAMING)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH", "")) if p)


if __name__ == "__main__":
    main()
