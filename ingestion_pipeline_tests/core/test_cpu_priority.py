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
