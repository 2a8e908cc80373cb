"""A process lowered for work that may wait: every thread (Linux keeps a nice value per thread) and its children,
the real kernel's values read back."""

import json
import subprocess
import sys

_CHILD = """
import json, os, subprocess, sys, threading, time
from ingestion_pipeline.core.cpu_priority import lower_process_priority
stop = threading.Event()
already_lower = threading.Thread(target=lambda: (os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 15),
                                                 stop.wait()))
started_before = threading.Thread(target=stop.wait)
already_lower.start(); started_before.start()
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
time.sleep(0.3)
changed = lower_process_priority(7)
tasks = {int(t): os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")}
print(json.dumps({"changed": changed, "threads": sorted(tasks.values()), "main": os.getpriority(os.PRIO_PROCESS, 0),
                  "grandchild": os.getpriority(os.PRIO_PROCESS, grandchild.pid),
                  "later": os.getpriority(os.PRIO_PROCESS, subprocess.Popen(
                      [sys.executable, "-c", "pass"]).pid)}))
grandchild.kill(); stop.set()
"""


def test_every_thread_and_child_is_lowered_and_a_lower_one_is_kept():
    done = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60)
    figures = json.loads(done.stdout)
    assert figures["threads"] == [7, 7, 15]  # main, the thread started before, the one already at 15
    assert figures["main"] == 7 and figures["grandchild"] == 7 and figures["later"] == 7
    assert figures["changed"] == 3  # main, started_before, the grandchild's thread


def _nice_of_backend(conn) -> tuple[int, str]:
    import os
    from pathlib import Path

    pid = conn.info.backend_pid
    autogroup = Path(f"/proc/{pid}/autogroup")
    return os.getpriority(os.PRIO_PROCESS, pid), autogroup.read_text().split()[-1] if autogroup.exists() else "19"


def test_a_lowered_pools_backends_run_at_the_lowest_priority_and_another_pools_do_not(database_url):
    """The embedded server runs on this host: each backend of a pool given ``backend_nice`` is lowered (its nice
    and its scheduling group's), the backends of a pool without it keep the normal priority."""
    from ingestion_pipeline.core.db import Database

    with (Database(database_url, max_size=2, name="lowered", backend_nice=19) as lowered,
          Database(database_url, max_size=2, name="normal") as normal,
          lowered.connection() as one, lowered.connection() as two, normal.connection() as other):
        assert _nice_of_backend(one) == (19, "19") and _nice_of_backend(two) == (19, "19")
        assert _nice_of_backend(other) == (0, "0")


def test_a_backend_that_is_not_a_process_of_this_hosts_server_is_left_alone(database_url, monkeypatch):
    """A pid is lowered only when its working directory is the server's data directory: a server elsewhere has
    pids of its own, which on this host are other processes."""
    from ingestion_pipeline.core import cpu_priority
    from ingestion_pipeline.core.db import connect

    monkeypatch.setattr(cpu_priority.os, "readlink", lambda path: "/somewhere/else")
    with connect(database_url, autocommit=True) as conn:
        assert cpu_priority.lower_local_backend(conn, 19) is False
        assert _nice_of_backend(conn) == (0, "0")
