"""A process's CPU priority, lowered for work that may wait: every thread and every child process.

On Linux a nice value belongs to a thread, not to a process: ``os.nice`` in one thread leaves the others (a
model runtime's pool, threads started before) where they were, and a child started before keeps its own. So
each of them is set here. Raising a nice value needs no privilege; lowering it back does, so a process lowered
once stays lowered (its owner keeps it for such work only: ``runtime/warm_run_launcher.py``).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

_log = logging.getLogger("ingestion_pipeline.cpu_priority")


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    """Child processes of ``pid``, read from ``/proc/*/stat`` (``/proc/<pid>/task/*/children`` is not on every
    kernel)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            after_name = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # ended meanwhile
        if int(after_name[1]) == pid:
            children.append(int(entry.name))
    return children


def lower_process_priority(nice: int, pid: int | None = None) -> int:
    """Every thread of process ``pid`` (this one by default) and of its descendants at nice ``nice`` at least
    (a higher value is kept); how many threads were changed. Where the OS refuses, logs and changes nothing more."""
    changed = 0
    pending = [pid or os.getpid()]
    while pending:
        process = pending.pop()
        for tid in _threads(process):
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
                    changed += 1
            except ProcessLookupError:
                continue  # the thread ended meanwhile
            except OSError as exc:
                _log.info("cannot lower the CPU priority of thread %s: %s", tid, exc)
                return changed
        pending += _children(process)
    return changed


def lower_local_backend(conn, nice: int) -> bool:
    """The database backend serving ``conn`` lowered to nice ``nice``, its scheduling group too (autogroup: each
    PostgreSQL backend is a session of its own, so its nice value alone weighs only against itself), when that
    backend is a process of this host this process may lower; whether it was.

    The backend is recognised by its pid and its working directory, which is its server's data directory, so a
    server elsewhere (a pid of another host, or of a container's namespace) is never taken for a local process.
    Where the server does not say its data directory (a role without ``pg_read_all_settings``) or the OS refuses,
    nothing is changed."""
    import psycopg

    pid = conn.info.backend_pid
    try:
        data_directory = conn.execute("SELECT current_setting('data_directory') AS d").fetchone()
    except psycopg.Error as exc:  # a role that may not read it
        _log.info("the database backend keeps its CPU priority: %s", exc)
        return False
    data_directory = data_directory["d"] if isinstance(data_directory, dict) else data_directory[0]
    try:
        if os.path.realpath(os.readlink(f"/proc/{pid}/cwd")) != os.path.realpath(data_directory):
            return False
        autogroup = Path(f"/proc/{pid}/autogroup")
        if autogroup.exists():
            autogroup.write_text(str(nice))
        return lower_process_priority(nice, pid) > 0 or os.getpriority(os.PRIO_PROCESS, pid) >= nice
    except OSError as exc:  # another host's pid, another user's process, or no /proc
        _log.info("the database backend %s keeps its CPU priority: %s", pid, exc)
        return False
