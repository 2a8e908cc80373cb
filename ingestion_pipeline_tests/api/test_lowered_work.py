"""A flood's CPU-heavy work runs in lowered processes: a session of its own, its scheduling group and the process
at nice 19; on the calling thread until they have started, and again after one died."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from ingestion_pipeline.api.login_guard import LoginGuard
from ingestion_pipeline.api.lowered_work import LOWER_PRIORITY_NICE, LoweredProcess
from ingestion_pipeline.api.services import ApiServices
from ingestion_pipeline.core.settings import ApiSettings, load_settings


def where() -> dict:
    """Where a call ran (module level: a spawned child imports it by name)."""
    autogroup = Path("/proc/self/autogroup")
    return {"pid": os.getpid(), "nice": os.getpriority(os.PRIO_PROCESS, 0), "session": os.getsid(0),
            "group": autogroup.read_text() if autogroup.exists() else None}


def ready() -> None:
    pass


def not_ready() -> None:
    raise RuntimeError("this host cannot start it")


def wait_until_ready(process: LoweredProcess, first) -> None:
    """The first call starts the process (and runs on the calling thread); then wait until it has answered."""
    first()
    deadline = time.monotonic() + 120
    while not process.ready:
        assert time.monotonic() < deadline, "the lowered process never became ready"
        time.sleep(0.1)


def test_work_runs_here_until_the_process_is_ready_then_in_a_lowered_session_of_its_own():
    process = LoweredProcess(1, "test", warm=ready)
    here = {"pid": os.getpid()}
    try:
        assert process.call(where, here=lambda: here) is here  # started by this call, not yet ready
        wait_until_ready(process, lambda: None)
        child = process.call(where, here=lambda: here)
        assert child["pid"] != os.getpid() and child["nice"] == LOWER_PRIORITY_NICE
        assert child["session"] == child["pid"]  # a session leader: its own scheduling group where there are some
        if child["group"] is not None:
            assert child["group"].strip().endswith(f"nice {LOWER_PRIORITY_NICE}")
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # this process keeps its priority
    finally:
        process.shutdown()


def test_a_lowered_process_that_died_is_started_again_and_its_call_runs_here():
    process = LoweredProcess(1, "test", warm=ready)
    try:
        wait_until_ready(process, lambda: process.call(where, here=dict))
        first = process.call(where, here=dict)["pid"]
        os.kill(first, signal.SIGKILL)
        time.sleep(0.5)
        assert process.call(where, here=lambda: "here") == "here"  # the broken pool noticed; this call not lost
        wait_until_ready(process, lambda: process.call(where, here=dict))
        again = process.call(where, here=dict)["pid"]
        assert again not in (first, os.getpid())
    finally:
        process.shutdown()


def test_a_process_that_cannot_start_leaves_the_work_on_the_calling_thread():
    process = LoweredProcess(1, "test", warm=not_ready)
    try:
        process.call(where, here=dict)
        time.sleep(5)  # far longer than a spawn with nothing to load
        assert not process.ready and process.call(where, here=lambda: "here") == "here"
    finally:
        process.shutdown()


def test_password_checks_run_in_the_lowered_hashing_processes():
    guard = LoginGuard(concurrent=1)
    try:
        wait_until_ready(guard._hash_processes, lambda: guard.hash(where))
        child = guard.hash(where)
        assert child["pid"] != os.getpid() and child["nice"] == LOWER_PRIORITY_NICE
    finally:
        guard.close()


def test_a_login_limit_above_the_cores_starts_no_more_hashing_processes_than_cores():
    """bcrypt is CPU: the hashing processes are bounded by the cores, not by the limit on checks at once (a limit
    of 100,000 spawned processes until the OOM killer took the server)."""
    import multiprocessing

    cores = os.cpu_count() or 1
    before = {p.pid for p in multiprocessing.active_children()}
    guard = LoginGuard(concurrent=4 * cores)
    try:
        wait_until_ready(guard._hash_processes, lambda: guard.hash(where))
        assert guard.hash(where)["nice"] == LOWER_PRIORITY_NICE
        started = {p.pid for p in multiprocessing.active_children()} - before
        assert 0 < len(started) <= cores, started
    finally:
        guard.close()


@pytest.mark.integration
def test_a_query_embedded_in_the_lowered_process_has_this_processs_vector(database):
    services = ApiServices(database, load_settings(), ApiSettings())
    query = "what does the travel policy say about rail fares?"
    try:
        here = services.query_vector(query)
        wait_until_ready(services.lowered_embedding, lambda: services.query_vector(query, lowered=True))
        lowered = services.query_vector(query, lowered=True)
        assert np.array_equal(lowered, here)  # the same files, decision and threads: the same vector, bit for bit
    finally:
        services.close_lowered()


@pytest.mark.integration  # a heavy end-to-end case: with make test, not test-fast
def test_a_given_model_is_not_rebuilt_in_a_lowered_process(database):
    from ingestion_pipeline_tests.api.conftest import shared_embedder

    services = ApiServices(database, load_settings(), ApiSettings(), embedder=shared_embedder())
    assert services.lowered_embedding is None
    assert np.array_equal(services.query_vector("policy", lowered=True), services.query_vector("policy"))


PARENT = """
import time
from ingestion_pipeline.api.lowered_work import LoweredProcess
from ingestion_pipeline_tests.api.test_lowered_work import ready, wait_until_ready, where

if __name__ == "__main__":
    process = LoweredProcess(1, "test", warm=ready)
    wait_until_ready(process, lambda: process.call(where, here=dict))
    print(process.call(where, here=dict)["pid"], flush=True)
    time.sleep(300)
"""


def test_a_lowered_process_ends_when_its_server_is_killed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "server.py"
    script.write_text(PARENT)
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(root)})
    try:
        child = int(server.stdout.readline())
        os.kill(server.pid, signal.SIGKILL)
        server.wait(10)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{child}").exists() and "zombie" not in _state(child):
            assert time.monotonic() < deadline, "the lowered process outlived its server"
            time.sleep(0.1)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("State:")).lower()
    except (OSError, StopIteration):
        return "zombie"
