"""Every use the project makes of Dagster beyond its documented API, in this one module.

Each saves a cost measured in docs/benchmarks.md, and none has a public equivalent in Dagster 1.13:

- ``execute_run``: a launched run executed by a run worker loaded ahead of need (``warm_run_launcher.py``), exactly
  as `dagster api execute_run` does: Dagster's own body of that command and its signal handling.
- ``pool_storage_connections``, ``close_storage_connections``, ``instance_config_defaults``: the storages'
  connections kept open for an instance's life (``pooled_instance.py``), as dagster-webserver asks for them; the
  defaults Dagster asks a custom instance class for are Dagster's own.
- ``mark_run_failed``, ``free_pool_slots``: a run whose worker's heartbeats stopped marked failed by the janitor
  (``janitor.py``), and its steps' pool slots given back.

Everything else is Dagster's and dagster-celery's public API or a documented extension point (the run launcher and
the instance class that ``dagster_home/dagster.yaml`` names; dagster-celery's executor, task and loop as they ship).
Nothing else in the package imports ``dagster._…``, calls these methods or touches dagster-celery's module state,
and this module imports only the three private names it needs (``runtime/test_dagster_internals.py`` checks both).
That test module exercises each use with Dagster alone, on toy jobs; ``make test-dagster-next`` runs it against the
newest Dagster 1.13 on the package index, so a release that moves one fails there, by name, before it fails
ingestion.
"""

from __future__ import annotations

from typing import Any

import dagster as dg


def execute_run(run_id: str, instance: dg.DagsterInstance) -> None:
    """Execute the launched run ``run_id`` in this process as `dagster api execute_run` would; a SIGTERM or SIGINT
    meanwhile becomes the run's cancellation, as there."""
    from dagster._cli.api import _execute_run_command_body
    from dagster._utils.interrupts import capture_interrupts

    with capture_interrupts():
        _execute_run_command_body(run_id, instance, lambda _event: None, set_exit_code_on_failure=False)


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


def free_pool_slots(instance: dg.DagsterInstance, run_id: str) -> None:
    """Give back the pool slots the steps of the dead run ``run_id`` still hold, as the daemon's run monitoring does
    after ``free_slots_after_run_end_seconds`` (the event log storage's own method; the UI's "free slots")."""
    instance.event_log_storage.free_concurrency_slots_for_run(run_id)
