"""A run worker that is ready before its run exists: `python -m ingestion_pipeline.runtime.run_worker`.

Dagster's default launcher starts every run in a fresh interpreter that imports Dagster, loads the code
location and only then begins the run, and the run then loads the embedding model: seconds of a small file's
submit-to-searchable, and CPU taken from every other run on the host for each small one. This process does
that part once, while no run waits: it imports Dagster and loads the code location (``preload``: modules,
and ``module:function`` calls); before each run (``prepare_document_steps``) it loads the embedding model as a
Celery worker does (once, kept across runs: the deployment's one recorded decision,
``documents/model_decision.py``) and starts the extraction worker. Then it
says ``ready`` on its status pipe (the launcher's ``WarmProcessRunLauncher``), takes one request from standard
input — ``{"run_id": …, "instance_ref": …}``, a JSON line — and executes that run exactly as ``dagster api
execute_run`` does. A request for a bulk run carries ``nice``: the process and its children are lowered
to it first (``core/cpu_priority.py``).

After a run that succeeded it is ready again (the model still loaded), up to ``MAX_RUNS`` runs and while its
peak memory stays under ``MAX_RSS_MB``; after any other outcome (a failure, a cancel, a signal) it exits, so a
run's trouble never reaches the next one. End of input (the launcher discarded it, or its process ended) exits 0.
"""

from __future__ import annotations

import importlib
import json
import os
import resource
import sys
import time
import traceback

from ingestion_pipeline.core.cpu_priority import lower_process_priority

# Libraries the steps import when they first need them (the model's runtime), imported here ahead of a run.
# A missing one is skipped: the steps import what the deployment really uses and report what is missing.
_STEP_LIBRARIES = ("openvino", "onnxruntime", "tokenizers")
MAX_RUNS = 100  # then a fresh process: whatever one run left behind is bounded
MAX_RSS_MB = 3072  # a peak above this (a 600-page PDF's run) is not carried into the next run


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
    """What a document run's steps would start first, started now, unless the steps run on Celery workers: the
    extraction worker (a fresh interpreter, a large part of a small file's steps: benchmarks/dev_latency.py) and the
    embedding model, loading in the background and kept for every run of this process
    (``kept_across_steps.py``, as in a Celery worker). Unused, both end with this process."""
    from ingestion_pipeline.core.settings import load_settings
    from ingestion_pipeline.documents import languages
    from ingestion_pipeline.documents.extraction.isolation import start_spare_worker
    from ingestion_pipeline.runtime.kept_across_steps import keep_across_steps, process_embedder

    settings = load_settings()
    if settings.executor.executor == "celery":
        return
    start_spare_worker(settings.limits)
    keep_across_steps()
    process_embedder(settings.embedding).warm_up()
    languages.warm_up()  # the chunk step's language identifier (slow to load), kept for every run


def _prepare() -> list[str]:
    try:
        prepare_document_steps()
    except Exception:  # a bad setting or no database: the run meets it and says so
        return [f"preparing the document steps failed:\n{traceback.format_exc()}"]
    return []


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def main(argv: list[str]) -> int:
    started = time.monotonic()
    # the launcher reads "ready" lines from what was standard output; the run's own output goes to stderr
    status = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    from ingestion_pipeline.runtime.pooled_instance import PooledInstances

    problems = _preload(argv) + _prepare()
    instances = PooledInstances()
    try:
        return _serve(status, instances, problems, started)
    finally:
        instances.close()


def _serve(status, instances, problems: list[str], started: float) -> int:
    """Run one request after another until the input ends or a run did not succeed."""
    from dagster import DagsterRunStatus, deserialize_value

    from ingestion_pipeline.runtime.dagster_internals import execute_run  # as `dagster api execute_run` does

    runs = 0
    while True:
        ready_after, ready_at = time.monotonic() - started, time.time()
        status.write("ready\n")
        line = sys.stdin.readline()
        if not line.strip():
            return 0
        request = json.loads(line)
        run_id = request["run_id"]
        nice = int(request.get("nice", 0))
        if nice:  # a bulk run: this process and its extraction worker yield the CPU to interactive runs
            lower_process_priority(nice)
        # the same instance from one run to the next, its storage connections pooled: Dagster's Postgres storages
        # otherwise log in anew for every event a run writes (a 200-file run writes hundreds)
        instance = instances.of(deserialize_value(request["instance_ref"]))
        run = instance.get_run_by_id(run_id)
        if run is None:
            print(f"run worker: run {run_id} not found", file=sys.stderr)
            return 1
        handed_at = float(request.get("handed_at", ready_at))
        if handed_at >= ready_at:
            readiness = f"was loaded {handed_at - ready_at:.1f} s before the run was handed to it"
        else:
            readiness = f"was handed the run while loading, and ready {ready_at - handed_at:.1f} s later"
        priority = f" It runs at nice {nice}: a bulk run, interactive runs go first." if nice else ""
        instance.report_engine_event(
            f"Run worker (pid {os.getpid()}, run {runs + 1} of this process) {readiness} (Dagster, the code "
            f"location, the model and the step libraries: {ready_after:.1f} s).{priority}", run)
        for problem in problems:
            instance.report_engine_event(problem, run)
        problems = []
        execute_run(run_id, instance)
        ended = instance.get_run_by_id(run_id)
        runs += 1
        if ended is None or ended.status != DagsterRunStatus.SUCCESS or runs >= MAX_RUNS \
                or _peak_rss_mb() > MAX_RSS_MB:
            return 0
        started = time.monotonic()
        problems = _prepare()  # the code location and the model are loaded; the next extraction worker is not


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
