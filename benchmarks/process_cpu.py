"""Where a `make dev` session's CPU goes, by role: the daemon, the code servers, the run workers, Postgres...

A sampler thread reads every process of the session (the ``dev`` process group and the embedded Postgres
server) every ``interval`` seconds and keeps each one's own CPU (utime + stime, never its reaped children's:
a run worker's seconds stay the run worker's, not its launcher's). A phase's CPU of a role is the sum over its
processes of the last reading minus the first in the phase (zero for a process born in it), so a process that
ends loses at most its last ``interval``. The benchmark's own CPU and its children's (the ``submit`` commands)
come from ``getrusage``. Linux only (reads /proc through psutil).
"""

from __future__ import annotations

import os
import resource
import threading
from pathlib import Path

import psutil

# cmdline fragments, first match wins
ROLES = (
    ("run workers", ("ingestion_pipeline.runtime.run_worker", "execute_run", "execute_step")),
    ("dagster daemon", ("dagster-daemon", "daemon run")),
    ("code server", ("api grpc", "code-server")),
    ("webserver", ("dagster-webserver", "webserver")),
    ("intake service", ("ingestion-pipeline intake",)),
    ("HTTP API", ("ingestion-pipeline serve",)),
    ("extraction workers", ("ingestion_pipeline.documents.extraction",)),
    ("compute log capture", ("watch_orphans.py", "tail -F")),  # Dagster's, per run: its stdout and stderr
    ("dagster dev", ("bin/dagster dev",)),
)


def role_of(process: psutil.Process) -> str:
    if process.name().startswith("postgres"):
        return "postgres"
    cmdline = " ".join(process.cmdline())
    for role, fragments in ROLES:
        if any(f in cmdline for f in fragments):
            return role
    return "other"


def _own_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


HOST = "(the whole host, /proc/stat)"
SESSIONS = "(Postgres sessions opened)"


def _host_busy() -> float:
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class SessionCpu(threading.Thread):
    """Samples the session's processes; ``mark()`` starts a phase and returns the previous one's CPU by role."""

    def __init__(self, dev_pid: int, data_dir: Path, interval: float = 0.5, database_url: str | None = None) -> None:
        super().__init__(daemon=True)
        self.dev_pid, self.data_dir, self.interval, self.database_url = dev_pid, data_dir, interval, database_url
        self._sessions = self._sessions_opened()
        self._seen: dict[int, tuple[str, float]] = {}  # pid -> (role, CPU at the last reading)
        self._at_mark: dict[int, float] = {}
        self._marks = (_self(), _own_children(), _host_busy())
        self._lock, self._stop = threading.Lock(), threading.Event()

    def _processes(self) -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["pid"]):
            try:
                if process.pid == self.dev_pid or _in_group(process, self.dev_pid) or self._is_postgres(process):
                    found.append(process)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        return found

    def _is_postgres(self, process: psutil.Process) -> bool:
        return process.name().startswith("postgres") and any(str(self.data_dir) in part
                                                             for part in _postmaster_cmdline(process))

    def sample(self) -> None:
        readings = {}
        for process in self._processes():
            try:
                times = process.cpu_times()
                readings[process.pid] = (self._seen.get(process.pid, (None,))[0] or role_of(process),
                                         times.user + times.system)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        with self._lock:
            self._seen.update(readings)

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()

    def mark(self) -> dict[str, float]:
        """The CPU seconds of each role since the last mark (the first mark: since the sampler was made)."""
        self.sample()
        with self._lock:
            by_role: dict[str, float] = {}
            for pid, (role, cpu) in self._seen.items():
                by_role[role] = by_role.get(role, 0.0) + cpu - self._at_mark.get(pid, 0.0)
            self._at_mark = {pid: cpu for pid, (_, cpu) in self._seen.items()}
        me, children, host = _self(), _own_children(), _host_busy()
        by_role["benchmark (probes)"] = me - self._marks[0]
        by_role["submit commands"] = children - self._marks[1]
        by_role[HOST] = host - self._marks[2]
        self._marks = (me, children, host)
        sessions = self._sessions_opened()
        by_role.update({f"{SESSIONS} {name}": n - self._sessions.get(name, 0) for name, n in sessions.items()})
        self._sessions = sessions
        return by_role

    def _sessions_opened(self) -> dict[str, int]:
        return sessions_by_database(self.database_url) if self.database_url else {}


def sessions_by_database(database_url: str) -> dict[str, int]:
    """Sessions the server has opened so far, by database (PostgreSQL 14+): a process that connects for each
    write makes the server fork and log in a backend each time, CPU a sampler of live processes cannot see."""
    import psycopg

    with psycopg.connect(database_url) as conn:
        return dict(conn.execute("SELECT datname, sessions FROM pg_stat_database WHERE sessions > 0").fetchall())


def _in_group(process: psutil.Process, pgid: int) -> bool:
    try:
        return os.getpgid(process.pid) == pgid
    except ProcessLookupError:
        return False


_POSTMASTER_ARGS: dict[int, list[str]] = {}


def _postmaster_cmdline(process: psutil.Process) -> list[str]:
    """A backend's command line names no data folder: its postmaster's does (``-D``)."""
    root = process
    while root.parent() is not None and root.parent().name().startswith("postgres"):
        root = root.parent()
    if root.pid not in _POSTMASTER_ARGS:
        _POSTMASTER_ARGS[root.pid] = root.cmdline()
    return _POSTMASTER_ARGS[root.pid]


def show(label: str, by_role: dict[str, float], seconds: float, files: dict[str, int]) -> None:
    """One phase's CPU by role: seconds, share of the cores' capacity, and per file of each kind."""
    cores = psutil.cpu_count() or 1
    by_role = dict(by_role)
    host = by_role.pop(HOST, 0.0)
    sessions = {k.removeprefix(SESSIONS).strip(): by_role.pop(k) for k in list(by_role) if k.startswith(SESSIONS)}
    total = sum(by_role.values())
    per = ", ".join(f"{n} {k}" for k, n in files.items())
    print(f"{label}: {total:.1f} CPU-s in {seconds:.1f} s wall ({100 * total / (cores * seconds):.0f} % of "
          f"{cores} cores; {per}); the whole host was busy {host:.1f} CPU-s ({100 * host / (cores * seconds):.0f} %); "
          f"Postgres sessions opened: " + ", ".join(f"{n} in {db}" for db, n in sessions.items()))
    for role, cpu in sorted(by_role.items(), key=lambda kv: -kv[1]):
        print(f"  {role:<24} {cpu:8.1f} CPU-s")
