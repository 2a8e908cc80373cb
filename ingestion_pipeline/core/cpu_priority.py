"""A process's CPU priority, lowered for work that may wait: every thread and every child process.

On Linux a nice value belongs to a thread, not to a process: ``os.nice`` in one thread leaves the others (a
model runtime's pool, threads started before) where they were, and a child started before keeps its own. So
each of them is set here. Raising a nice value needs no privilege; lowering it back does, so a process lowered
once stays lowered (its owner keeps it for such work only: ``defs/warm_run_launcher.py``).
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
