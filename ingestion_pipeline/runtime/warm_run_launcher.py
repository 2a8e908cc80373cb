"""The run launcher of the project's instance: each run starts in a worker process that is already loaded.

Configured in ``dagster_home/dagster.yaml`` (``run_launcher``). It keeps ``spares`` worker processes
(``runtime/run_worker.py``) idle ahead of need — Dagster imported, the code location and the embedding model
loaded, the extraction worker started — and hands each launched run to an idle one, then starts another in
the background if none is left. A worker whose run succeeded is idle again, the model still loaded: one run
after another costs a pipe write each, not a new interpreter's imports and a model load (seconds of a small
file's submit-to-searchable, and CPU taken from every other run on the host). Everything else is Dagster's:
the worker executes the run as ``dagster api execute_run`` does (events, run status, the UI, re-execution).

Where no worker can serve, the run goes Dagster's default way (the code server starts it): ``spares: 0``
(``INGESTION_WARM_RUN_WORKERS=0``), a run of another code location's Python, or a worker that has died. A
worker older than the newest ``.py`` file of the package is ended, so an edited code location under `make dev`
runs its new code, as it does under the default launcher.

A bulk run (``ingestion/run_class: bulk``) runs at a lower CPU priority (``bulk_nice``, 10): on a host whose
cores a bulk load keeps busy, a person's single upload (an interactive run) gets the CPU first, and the bulk run
takes every cycle it leaves. A worker lowered for a bulk run cannot be raised again without privilege, so it
serves bulk runs from then on; the spares kept for interactive runs are never lowered.

Termination (the UI's "Terminate", `ingestion-pipeline cancel`): the run is marked canceling and its worker
gets SIGTERM, which Dagster's interrupt handling in the worker turns into a canceled run; the worker then exits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

import ingestion_pipeline
from ingestion_pipeline.core.run_tags import BULK, RUN_CLASS_TAG

WORKER_TAG = "ingestion/run_worker"  # {"host": …, "pid": …} of the process that runs the run
DEFAULT_PRELOAD = ("ingestion_pipeline.definitions:defs",)
SPARES_VARIABLE = "INGESTION_WARM_RUN_WORKERS"
BULK_NICE = 10  # the default ``bulk_nice``: contending for a core, a bulk run gets ~1/10 of an interactive one's share


def _newest_source_mtime(package_dir: Path) -> float:
    return max((p.stat().st_mtime for p in package_dir.rglob("*.py")), default=0.0)


class _Worker:
    """One run worker process: loading, idle or busy with a run. It says ``ready`` on its status pipe each time
    it is about to read a request, so it is idle exactly while it said so more often than it was given runs
    (a run given while it loads is the one it reads first)."""

    def __init__(self, preload: Sequence[str], on_ready: Callable[[], None]):
        self.started_at = time.time()
        self.readies = 0  # "ready" lines read from its status pipe
        self.given = 0  # runs handed to it (counted when it is chosen, under the launcher's lock)
        self.nice = 0  # the CPU priority it was lowered to for a bulk run (never raised again)
        self._on_ready = on_ready
        # its standard output is the status pipe; what a run prints goes to stderr, where the launcher's goes
        self.process = subprocess.Popen([sys.executable, "-m", "ingestion_pipeline.runtime.run_worker", *preload],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        threading.Thread(target=self._follow, daemon=True, name="run-worker-status").start()

    def _follow(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.strip() == b"ready":
                self.readies += 1
                self._on_ready()
        self.process.wait()  # end of the pipe: the process ended (reaped here, never a zombie)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def idle(self) -> bool:
        return self.readies > self.given and self.alive

    @property
    def loading(self) -> bool:
        return self.readies == 0 and self.given == 0 and self.alive

    @property
    def busy(self) -> bool:
        return self.given >= self.readies and self.given > 0

    def give(self, request: Mapping[str, str]) -> bool:
        """Hand a run over; False when the process is gone (the run then goes another way)."""
        if not self.alive:
            return False
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return False
        return True

    def end_input(self) -> None:
        """No more runs: an idle or loading worker exits now, a busy one after its run."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.close()
        except OSError:
            pass


class WarmProcessRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default launcher, with runs started in already-loaded worker processes (see the module)."""

    def __init__(self, inst_data: Any = None, spares: int = 1,
                 preload: Sequence[str] = DEFAULT_PRELOAD, bulk_nice: int = BULK_NICE):
        super().__init__(inst_data=inst_data)
        if spares < 0:
            raise dg.DagsterInvalidConfigError(
                f"run_launcher spares must be 0 or more (got {spares})", [], spares)
        if not 0 <= bulk_nice <= 19:
            raise dg.DagsterInvalidConfigError(
                f"run_launcher bulk_nice must be from 0 to 19 (got {bulk_nice})", [], bulk_nice)
        self._spares_wanted = spares
        self._bulk_nice = bulk_nice
        self._preload = tuple(preload)
        self._workers: list[_Worker] = []  # every worker this launcher started that is still alive
        self._lock = threading.Lock()
        self._package_dir = Path(ingestion_pipeline.__file__).parent

    @classmethod
    def config_type(cls) -> dict:
        return {
            "spares": dg.Field(dg.IntSource, is_required=False, default_value=1,
                               description="Run workers kept loaded ahead of need (0: Dagster's default launch)."),
            "preload": dg.Field([str], is_required=False, default_value=list(DEFAULT_PRELOAD),
                                description="What a spare loads before its run: `module` or `module:function`."),
            "bulk_nice": dg.Field(dg.IntSource, is_required=False, default_value=BULK_NICE,
                                  description="The nice value bulk runs' workers run at (0: the same priority as "
                                              "interactive runs)."),
        }

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]):
        spares = config_value.get("spares", 1)
        raw = os.environ.get(SPARES_VARIABLE, "").strip()
        if raw:  # the host's own choice over the instance file's
            if not raw.isdigit():
                raise dg.DagsterInvalidConfigError(
                    f"{SPARES_VARIABLE} must be a whole number of 0 or more (got {raw!r})", [], raw)
            spares = int(raw)
        return cls(inst_data=inst_data, spares=spares, preload=config_value.get("preload", list(DEFAULT_PRELOAD)),
                   bulk_nice=config_value.get("bulk_nice", BULK_NICE))

    # -- launching

    def _serves(self, run: dg.DagsterRun) -> bool:
        origin = run.job_code_origin
        if self._spares_wanted == 0 or origin is None:
            return False
        executable = origin.repository_origin.executable_path
        return not executable or os.path.realpath(executable) == os.path.realpath(sys.executable)

    def _take_worker(self, nice: int = 0) -> _Worker:
        """An idle worker whose code is current and whose priority is ``nice`` (for a bulk run, one not lowered
        yet if none is), else a new one (it loads while the run waits, as by default). A worker older than the
        newest source file is ended, so an edited code location runs its new code."""
        newest = _newest_source_mtime(self._package_dir)
        with self._lock:
            self._workers = [w for w in self._workers if w.alive]
            for stale in [w for w in self._workers if w.started_at < newest and not w.busy]:
                stale.end_input()
                self._workers.remove(stale)
            idle = [w for w in self._workers if w.idle]
            chosen = (next((w for w in idle if w.nice == nice), None)
                      or next((w for w in idle if w.nice < nice), None) or self._start())
            chosen.given += 1  # taken: not chosen again by a launch on another thread
            chosen.nice = max(chosen.nice, nice)
            return chosen

    def _start(self) -> _Worker:
        worker = _Worker(self._preload, on_ready=self._trim)
        self._workers.append(worker)
        return worker

    def _replenish(self) -> None:
        """Keep ``spares`` workers idle or loading, ahead of the next launch."""
        with self._lock:
            self._workers = [w for w in self._workers if w.alive]
            ready = sum(1 for w in self._workers if (w.idle or w.loading) and w.nice == 0)  # for any run
            for _ in range(self._spares_wanted - ready):
                self._start()

    def _trim(self) -> None:
        """A worker became idle: keep at most ``spares`` + 1 idle (each holds the model; the one back from a run
        and the spare started meanwhile both serve the next runs, so one run after another starts no process);
        the others exit; as many again lowered for bulk runs)."""
        with self._lock:
            extra = [w for w in self._workers if w.idle and w.nice == 0][self._spares_wanted + 1:] + \
                [w for w in self._workers if w.idle and w.nice > 0][self._spares_wanted + 1:]
            for worker in extra:
                worker.end_input()
                self._workers.remove(worker)

    def launch_run(self, context: Any) -> None:  # Dagster's LaunchRunContext
        run = context.dagster_run
        if not self._serves(run):
            super().launch_run(context)
            return
        nice = self._bulk_nice if run.tags.get(RUN_CLASS_TAG) == BULK else 0
        request = {"run_id": run.run_id, "instance_ref": dg.serialize_value(self._instance.get_ref()), "nice": nice}
        for _ in range(2):  # a worker that died since it said ready: one fresh process more
            worker = self._take_worker(nice)
            self._instance.add_run_tags(run.run_id, {WORKER_TAG: json.dumps(
                {"host": socket.gethostname(), "pid": worker.process.pid})})
            if worker.give({**request, "handed_at": str(time.time())}):
                self._run_ids.add(run.run_id)
                self._replenish()
                return
        super().launch_run(context)

    # -- termination and shutdown

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        worker = run.tags.get(WORKER_TAG)
        if worker is None:
            return super().terminate(run_id)
        where = json.loads(worker)
        if where.get("host") != socket.gethostname():
            self._instance.report_engine_event(
                f"Cannot terminate run {run_id}: its worker runs on host {where.get('host')}, not on this one.",
                run, cls=self.__class__)
            return False
        self._instance.report_run_canceling(run)
        try:
            os.kill(int(where["pid"]), signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def dispose(self) -> None:
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.end_input()
        super().dispose()
