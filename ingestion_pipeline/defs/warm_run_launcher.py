"""The run launcher of the project's instance: each run starts in a worker process that is already loaded.

Configured in ``dagster_home/dagster.yaml`` (``run_launcher``). It keeps ``spares`` processes of
``defs/run_worker.py`` started ahead of need — Dagster and the code location imported, waiting on standard
input — and hands each launched run to one of them, then starts the next spare in the background. A run's
worker start is so one pipe write instead of a new interpreter's imports (seconds of every small file's
submit-to-searchable). Everything else is Dagster's: the worker executes the run as ``dagster api
execute_run`` does (events, run status, the UI, re-execution), one run per process.

Where a spare cannot serve, the run goes Dagster's default way (the code server starts it): ``spares: 0``
(``INGESTION_WARM_RUN_WORKERS=0``), a run of another code location's Python, or a spare that has died.
A spare older than the newest ``.py`` file of the package is discarded, so an edited code location under
`make dev` runs its new code, as it does under the default launcher.

Termination (the UI's "Terminate", `ingestion-pipeline cancel`): the run is marked canceling and its worker
gets SIGTERM, which Dagster's interrupt handling in the worker turns into a canceled run.
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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dagster as dg

import ingestion_pipeline

WORKER_TAG = "ingestion/run_worker"  # {"host": …, "pid": …} of the process that runs the run
DEFAULT_PRELOAD = ("ingestion_pipeline.definitions:defs", "ingestion_pipeline.defs.run_worker:prepare_document_steps")
SPARES_VARIABLE = "INGESTION_WARM_RUN_WORKERS"


def _newest_source_mtime(package_dir: Path) -> float:
    return max((p.stat().st_mtime for p in package_dir.rglob("*.py")), default=0.0)


class _Spare:
    """One started run worker, not yet given a run."""

    def __init__(self, preload: Sequence[str]):
        self.started_at = time.time()
        # stdout goes where the launcher's goes (a run's compute logs are Dagster's own, per step)
        self.process = subprocess.Popen([sys.executable, "-m", "ingestion_pipeline.defs.run_worker", *preload],
                                        stdin=subprocess.PIPE, start_new_session=False)

    def give(self, request: Mapping[str, str]) -> bool:
        """Hand the run over; False when the process is gone (the run then goes another way)."""
        if self.process.poll() is not None:
            return False
        try:
            assert self.process.stdin is not None
            self.process.stdin.write((json.dumps(request) + "\n").encode())
            self.process.stdin.close()
        except (BrokenPipeError, OSError):
            return False
        threading.Thread(target=self.process.wait, daemon=True, name="run-worker-reaper").start()
        return True

    def discard(self) -> None:
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()  # an idle spare exits on end of input
            except OSError:
                pass
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


class WarmProcessRunLauncher(dg.DefaultRunLauncher):
    """Dagster's default launcher, with runs started in already-loaded worker processes (see the module)."""

    def __init__(self, inst_data: Any = None, spares: int = 1,
                 preload: Sequence[str] = DEFAULT_PRELOAD):
        super().__init__(inst_data=inst_data)
        if spares < 0:
            raise dg.DagsterInvalidConfigError(
                f"run_launcher spares must be 0 or more (got {spares})", [], spares)
        self._spares_wanted = spares
        self._preload = tuple(preload)
        self._spares: list[_Spare] = []
        self._lock = threading.Lock()
        self._package_dir = Path(ingestion_pipeline.__file__).parent

    @classmethod
    def config_type(cls) -> dict:
        return {
            "spares": dg.Field(dg.IntSource, is_required=False, default_value=1,
                               description="Run workers kept loaded ahead of need (0: Dagster's default launch)."),
            "preload": dg.Field([str], is_required=False, default_value=list(DEFAULT_PRELOAD),
                                description="What a spare loads before its run: `module` or `module:function`."),
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
        return cls(inst_data=inst_data, spares=spares, preload=config_value.get("preload", list(DEFAULT_PRELOAD)))

    # -- launching

    def _serves(self, run: dg.DagsterRun) -> bool:
        origin = run.job_code_origin
        if self._spares_wanted == 0 or origin is None:
            return False
        executable = origin.repository_origin.executable_path
        return not executable or os.path.realpath(executable) == os.path.realpath(sys.executable)

    def _take_spare(self) -> _Spare:
        """A loaded spare whose code is current, else a new one (it loads while the run waits, as by default)."""
        newest = _newest_source_mtime(self._package_dir)
        with self._lock:
            while self._spares:
                spare = self._spares.pop(0)
                if spare.process.poll() is None and spare.started_at >= newest:
                    return spare
                threading.Thread(target=spare.discard, daemon=True).start()
        return _Spare(self._preload)

    def _replenish(self) -> None:
        with self._lock:
            self._spares = [s for s in self._spares if s.process.poll() is None]
            while len(self._spares) < self._spares_wanted:
                self._spares.append(_Spare(self._preload))

    def launch_run(self, context: Any) -> None:  # Dagster's LaunchRunContext
        run = context.dagster_run
        if not self._serves(run):
            super().launch_run(context)
            return
        request = {"run_id": run.run_id, "instance_ref": dg.serialize_value(self._instance.get_ref())}
        for _ in range(2):  # a spare that died since it started: one fresh process more
            spare = self._take_spare()
            self._instance.add_run_tags(run.run_id, {WORKER_TAG: json.dumps(
                {"host": socket.gethostname(), "pid": spare.process.pid})})
            if spare.give({**request, "handed_at": str(time.time())}):
                self._run_ids.add(run.run_id)
                self._replenish()
                return
        super().launch_run(context)

    def warm_up(self) -> None:
        """Start the spares now (the daemon's first run then finds one loaded)."""
        if self._spares_wanted:
            self._replenish()

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
            spares, self._spares = self._spares, []
        for spare in spares:
            spare.discard()
        super().dispose()
