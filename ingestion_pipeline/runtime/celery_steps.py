"""The Celery task that executes a run's steps on a worker: dagster-celery's own, with one instance per process.

dagster-celery's task (``dagster_celery.tasks.create_task``) builds a new instance from the run's ref for every
step, and Dagster's Postgres storages then open a connection for every event the step writes or reads: a fork
and a login of the server each time, hundreds for a small revision's eleven steps (``benchmarks/big_documents.py
--celery-polls``). This task has the same name and body, but takes the instance from the worker process's
``PooledInstances`` (``runtime/pooled_instance.py``): one per ref, its connections kept. It uses what dagster-celery's
task uses of Dagster beyond its documented API (ARCHITECTURE.md); ``faults/test_celery_workers.py`` runs every
step of its runs through it, so an upgrade that changes them fails there.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from ingestion_pipeline.runtime.pooled_instance import PooledInstances

INSTANCES = PooledInstances()  # a worker's pool process's own: made after the fork, on its first step


def step_plan(recon_job: Any, run_config: dict, step_keys: list[str] | None, known_state: Any) -> Any:
    """The step's execution plan, built with the repository load data the run's job carries (as Dagster's own
    ``execute_step`` does). dagster-celery's task builds it without: Dagster then executes the plan with a copy of
    the job whose load data is the plan's (none), and a job that carried some (every run a code server launches:
    `make dev`, the daemon) no longer matches the one Dagster keeps loaded, so each step loaded the whole code
    location twice (most of every Celery step's set-up, profiled with py-spy: benchmarks/big_documents.py --dev
    --dev-celery-workers 2 measures it)."""
    from dagster._core.execution.api import create_execution_plan

    return create_execution_plan(recon_job, run_config, step_keys_to_execute=step_keys, known_state=known_state,
                                 repository_load_data=recon_job.repository.repository_load_data)


def create_pooled_task(celery_app: Any, **task_kwargs: Any) -> Any:
    """Register the step task on ``celery_app`` under dagster-celery's name (what its executor sends). Only a
    worker imports what it needs: the code location loads this folder's modules."""
    from dagster._core.definitions.reconstruct import ReconstructableJob
    from dagster._core.events import EngineEventData
    from dagster._core.execution.api import execute_plan_iterator
    from dagster._grpc.types import ExecuteStepArgs
    from dagster_celery.config import TASK_EXECUTE_PLAN_NAME
    from dagster_celery.core_execution_loop import DELEGATE_MARKER
    from dagster_celery.executor import CeleryExecutor

    @celery_app.task(bind=True, name=TASK_EXECUTE_PLAN_NAME, **task_kwargs)
    def execute_plan(self, execute_step_args_packed: dict, executable_dict: dict) -> list[str]:
        args = dg.deserialize_value(json.dumps(execute_step_args_packed), ExecuteStepArgs)
        instance = INSTANCES.of(args.instance_ref)
        recon_job = ReconstructableJob.from_dict(executable_dict)
        run = instance.get_run_by_id(args.run_id)
        if run is None:
            raise ValueError(f"could not load run {args.run_id}")
        plan = step_plan(recon_job, run.run_config, args.step_keys_to_execute, args.known_state)
        step_keys = ", ".join(args.step_keys_to_execute or [])
        engine_event = instance.report_engine_event(
            f"Executing steps {step_keys} in celery worker", run,
            EngineEventData({"step_keys": step_keys, "Celery worker": self.request.hostname},
                            marker_end=DELEGATE_MARKER),
            CeleryExecutor, step_key=plan.step_handle_for_single_step_plans().to_key())
        events = [engine_event, *execute_plan_iterator(execution_plan=plan, job=recon_job, dagster_run=run,
                                                       instance=instance, retry_mode=args.retry_mode,
                                                       run_config=run.run_config)]
        return [dg.serialize_value(event) for event in events]

    return execute_plan
