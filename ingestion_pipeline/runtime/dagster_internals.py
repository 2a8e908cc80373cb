"""Every use the project makes of Dagster and dagster-celery beyond their documented API, in this one module.

Each saves a cost measured in docs/benchmarks.md, and none has a public equivalent in Dagster 1.13:

- ``execute_run``: a launched run executed by a run worker loaded ahead of need (``warm_run_launcher.py``), exactly
  as `dagster api execute_run` does: Dagster's own body of that command and its signal handling.
- ``celery_step_events``: dagster-celery's step task, with the instance taken from the worker process's pool
  (``celery_steps.py``) and the plan built with the job's repository load data, on Dagster's execution-plan API.
- ``pool_storage_connections``, ``close_storage_connections``, ``instance_config_defaults``: the storages'
  connections kept open for an instance's life (``pooled_instance.py``), as dagster-webserver asks for them.
- ``LocalComputeLogManager`` and what capturing a step's output yields (``compute_logs.py``).
- ``mark_run_failed``: a run whose worker's heartbeats stopped marked failed by the janitor (``janitor.py``).
- ``pace_celery_loop``, ``set_celery_tick``, ``celery_step_sent_or_ended``: dagster-celery's run loop, whose sleep
  has no parameter, paced by the steps' events (``celery_pace.py`` holds the policy).

Nothing else in the package imports ``dagster._…``, calls these methods or touches dagster-celery's module state
(``defs/test_code_location.py`` checks). ``runtime/test_dagster_internals.py`` exercises each of them with Dagster
alone, on toy jobs; ``make test-dagster-next`` runs it against the newest Dagster 1.13 on the package index, so a
release that moves one fails there, by name, before it fails ingestion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import dagster as dg
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager

__all__ = ["CapturedLogContext", "LocalComputeLogManager", "STDERR_EXTENSION", "STDOUT_EXTENSION"]

# The files a step's captured output is kept in, as Dagster's local manager names them (the UI reads them).
STDOUT_EXTENSION = IO_TYPE_EXTENSION[ComputeIOType.STDOUT]
STDERR_EXTENSION = IO_TYPE_EXTENSION[ComputeIOType.STDERR]


def execute_run(run_id: str, instance: dg.DagsterInstance) -> None:
    """Execute the launched run ``run_id`` in this process as `dagster api execute_run` would; a SIGTERM or SIGINT
    meanwhile becomes the run's cancellation, as there."""
    from dagster._cli.api import _execute_run_command_body
    from dagster._utils.interrupts import capture_interrupts

    with capture_interrupts():
        _execute_run_command_body(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


def celery_step_plan(recon_job: Any, run_config: dict, step_keys: list[str] | None, known_state: Any) -> Any:
    """A step's execution plan, built with the repository load data the run's job carries (as Dagster's own
    ``execute_step`` does). dagster-celery's task builds it without: Dagster then executes the plan with a copy of
    the job whose load data is the plan's (none), and a job that carried some (every run a code server launches)
    no longer matches the one Dagster keeps loaded, so each step loaded the whole code location twice."""
    from dagster._core.execution.api import create_execution_plan

    return create_execution_plan(recon_job, run_config, step_keys_to_execute=step_keys, known_state=known_state,
                                 repository_load_data=recon_job.repository.repository_load_data)


def celery_step_events(packed_args: dict, executable: dict, instance_of: Callable[[Any], dg.DagsterInstance],
                       worker: str) -> list[str]:
    """The body of dagster-celery's step task: execute the steps ``packed_args`` names of the job ``executable``
    describes, with the instance ``instance_of`` gives for the run's instance ref; the events, serialised, as the
    run's process expects them back."""
    import json

    from dagster._core.definitions.reconstruct import ReconstructableJob
    from dagster._core.events import EngineEventData
    from dagster._core.execution.api import execute_plan_iterator
    from dagster._grpc.types import ExecuteStepArgs
    from dagster_celery.core_execution_loop import DELEGATE_MARKER
    from dagster_celery.executor import CeleryExecutor

    args = dg.deserialize_value(json.dumps(packed_args), ExecuteStepArgs)
    instance = instance_of(args.instance_ref)
    recon_job = ReconstructableJob.from_dict(executable)
    run = instance.get_run_by_id(args.run_id)
    if run is None:
        raise ValueError(f"could not load run {args.run_id}")
    plan = celery_step_plan(recon_job, run.run_config, args.step_keys_to_execute, args.known_state)
    step_keys = ", ".join(args.step_keys_to_execute or [])
    engine_event = instance.report_engine_event(
        f"Executing steps {step_keys} in celery worker", run,
        EngineEventData({"step_keys": step_keys, "Celery worker": worker}, marker_end=DELEGATE_MARKER),
        CeleryExecutor, step_key=plan.step_handle_for_single_step_plans().to_key())
    events = [engine_event, *execute_plan_iterator(execution_plan=plan, job=recon_job, dagster_run=run,
                                                   instance=instance, retry_mode=args.retry_mode,
                                                   run_config=run.run_config)]
    return [dg.serialize_value(event) for event in events]


def pool_storage_connections(instance: dg.DagsterInstance) -> None:
    """What dagster-webserver asks of its instance: storages that keep their connections open in a pool."""
    instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)


def close_storage_connections(instance: dg.DagsterInstance) -> None:
    """Close the connections ``instance``'s SQL storages hold (each engine's pool; Dagster's dispose leaves them to
    the garbage collector); a later query opens anew."""
    for storage in (instance._run_storage, instance._event_storage, instance._schedule_storage):  # noqa: SLF001
        engine = getattr(storage, "_engine", None)
        if engine is not None:
            engine.dispose()


def instance_config_defaults(base_dir: str) -> Any:
    """The defaults of an instance's parts, which Dagster asks a custom instance class for."""
    from dagster._core.instance.ref import InstanceRef

    return InstanceRef.config_defaults(base_dir)


def mark_run_failed(instance: dg.DagsterInstance, run: dg.DagsterRun, message: str) -> None:
    """Mark a started run failed, with ``message`` in its log (the run's worker is gone, so no one else will)."""
    instance.report_run_failed(run, message)


def set_celery_tick(seconds: float) -> None:
    """dagster-celery's run loop's fixed sleep (its module's ``TICK_SECONDS``, read at every pass)."""
    from dagster_celery import core_execution_loop

    core_execution_loop.TICK_SECONDS = seconds


def pace_celery_loop(longest: float) -> Any:
    """dagster-celery's run loop paced (``celery_pace.Pace``): the loop has no parameter for its sleep, so the
    ``time`` its module sleeps on becomes a ``PacedClock`` (once per process; a later call sets the longest pause).
    The pace, which ``celery_step_sent_or_ended`` tells of the loop's events."""
    from dagster_celery import core_execution_loop

    from ingestion_pipeline.runtime.celery_pace import Pace, PacedClock

    clock = core_execution_loop.time
    if isinstance(clock, PacedClock):
        clock.pace.longest = max(longest, clock.pace.quick)
        return clock.pace
    pace = Pace(longest)
    core_execution_loop.time = PacedClock(pace)
    return pace


def celery_step_sent_or_ended(event: Any) -> str | None:
    """``"sent"`` for an event of dagster-celery's loop that sent a step to a worker, ``"ended"`` for one whose step
    ended (succeeded, failed, skipped, up for retry, or its task revoked), else None. The loop says what it sent
    and revoked only in its engine events' messages."""
    if any(getattr(event, kind, False) for kind in ("is_step_success", "is_step_failure", "is_step_skipped",
                                                    "is_step_up_for_retry")):  # a retried step is sent again
        return "ended"
    message = getattr(event, "message", None) or ""
    if getattr(event, "is_engine_event", False):
        if message.startswith("Submitting celery task"):
            return "sent"
        if message.startswith("celery task for running step") and message.endswith("was revoked."):
            return "ended"
    return None
