"""A run worker that is ready before its run exists: `python -m ingestion_pipeline.defs.run_worker`.

Dagster's default launcher starts every run in a fresh interpreter that imports Dagster, loads the code
location and only then begins the run: about 4 s of a small file's submit-to-searchable on 2 cores
(``benchmarks/dev_latency.py``: "worker start"). This process does that part first, while no run waits: it
imports Dagster, loads the code location once (``preload``: modules, and ``module:function`` calls) and the
embedding runtimes' libraries (imports only: no model, no database, no network), then blocks on standard
input for one request — ``{"run_id": …, "instance_ref": …}`` as one JSON line from
``WarmProcessRunLauncher`` — and executes that run exactly as ``dagster api execute_run`` does. One process
runs one run and exits, as under the default launcher, so a run's memory never outlives it.

End of input before a request (the launcher discarded this spare, or its process ended) exits 0 at once.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback

# Libraries the steps import when they first need them (the model's runtime), imported here ahead of a run.
# A missing one is skipped: the steps import what the deployment really uses and report what is missing.
_STEP_LIBRARIES = ("openvino", "onnxruntime", "tokenizers")


def _preload(targets: list[str]) -> list[str]:
    """Import each ``module`` or call each ``module:function``; what failed, as text for the run's log."""
    problems = []
    for target in targets:
        module_name, _, function = target.partition(":")
        try:
            module = importlib.import_module(module_name)
            if function:
                getattr(module, function)()
        except Exception:  # the run reconstructs the code itself and fails with Dagster's own error
            problems.append(f"preloading {target} failed:\n{traceback.format_exc()}")
    for name in _STEP_LIBRARIES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: S112 - optional: only the deployment's own runtime must import
            continue
    return problems


def prepare_document_steps() -> None:
    """Start the extraction worker that the run's first extraction takes (a fresh interpreter, ~0.45 s, a
    third of a small file's steps), unless the steps run on Celery workers. Unused, it ends with this process."""
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.documents.extraction.isolation import start_spare_worker

    settings = load_settings()
    if settings.executor.executor != "celery":
        start_spare_worker(settings.limits)


def main(argv: list[str]) -> int:
    started = time.monotonic()
    # Dagster's own body of `dagster api execute_run`, and its signal handling (a SIGTERM becomes a canceled
    # run): not public API, so only here (ARCHITECTURE.md: Dagster beyond its documented API)
    from dagster import DagsterInstance, deserialize_value
    from dagster._cli.api import _execute_run_command_body
    from dagster._utils.interrupts import capture_interrupts

    problems = _preload(argv)
    ready_after, ready_at = time.monotonic() - started, time.time()
    line = sys.stdin.readline()
    if not line.strip():
        return 0
    request = json.loads(line)
    run_id = request["run_id"]
    with capture_interrupts(), DagsterInstance.from_ref(deserialize_value(request["instance_ref"])) as instance:
        run = instance.get_run_by_id(run_id)
        if run is None:
            print(f"run worker: run {run_id} not found", file=sys.stderr)
            return 1
        handed_at = float(request.get("handed_at", ready_at))
        if handed_at >= ready_at:
            readiness = f"was loaded {handed_at - ready_at:.1f} s before the run was handed to it"
        else:
            readiness = f"was handed the run while loading, and ready {ready_at - handed_at:.1f} s later"
        instance.report_engine_event(
            f"Run worker (pid {os.getpid()}) {readiness} (Dagster, the code location and the step libraries: "
            f"{ready_after:.1f} s).", run)
        for problem in problems:
            instance.report_engine_event(problem, run)
        return _execute_run_command_body(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
