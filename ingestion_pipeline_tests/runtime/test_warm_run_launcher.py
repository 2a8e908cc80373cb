"""Which loaded worker a run is handed to: bulk runs go to workers lowered for them (or lower one), interactive
runs only to workers at the normal priority, and the spares kept ready are normal ones. (The workers here are
plain sleeping processes; the handing-over itself is exercised under `make dev` in cli/test_dagster_dev.py.)"""

import subprocess
import time

import pytest

from ingestion_pipeline.runtime.warm_run_launcher import BULK_NICE, WarmProcessRunLauncher, _Worker


def _worker(*, idle: bool, nice: int = 0) -> _Worker:
    worker = _Worker.__new__(_Worker)
    worker.started_at = time.time() + 3600  # newer than every source file: not ended as stale
    worker.readies, worker.given, worker.nice = (1 if idle else 0), 0, nice
    worker.process = subprocess.Popen(["sleep", "60"], stdin=subprocess.PIPE)
    return worker


@pytest.fixture
def launcher(monkeypatch):
    started: list[_Worker] = []
    launcher = WarmProcessRunLauncher(spares=1)
    monkeypatch.setattr(launcher, "_start", lambda: started.append(_worker(idle=False)) or
                        launcher._workers.append(started[-1]) or started[-1])
    yield launcher, started
    for worker in launcher._workers + started:
        worker.process.kill()
        worker.process.wait()


def test_a_bulk_run_takes_a_lowered_worker_first_then_lowers_a_normal_one(launcher):
    launcher, started = launcher
    normal, lowered = _worker(idle=True), _worker(idle=True, nice=BULK_NICE)
    launcher._workers += [normal, lowered]
    assert launcher._take_worker(BULK_NICE) is lowered
    assert launcher._take_worker(BULK_NICE) is normal and normal.nice == BULK_NICE  # none lowered is idle
    assert launcher._take_worker(BULK_NICE) is started[0] and started[0].nice == BULK_NICE  # none idle: a new one


def test_an_interactive_run_never_takes_a_lowered_worker_and_spares_are_normal(launcher):
    launcher, started = launcher
    lowered = _worker(idle=True, nice=BULK_NICE)
    launcher._workers.append(lowered)
    chosen = launcher._take_worker(0)
    assert chosen is not lowered and chosen is started[0] and chosen.nice == 0
    launcher._replenish()  # the lowered idle worker does not count as a spare: a normal one is started
    assert len(started) == 2 and started[1].nice == 0


def test_bulk_nice_is_validated():
    with pytest.raises(Exception, match="bulk_nice must be from 0 to 19"):
        WarmProcessRunLauncher(bulk_nice=25)
