"""The Celery task that executes a run's steps on a worker: dagster-celery's own, with one instance per process.

dagster-celery's task (``dagster_celery.tasks.create_task``) builds a new instance from the run's ref for every
step, and Dagster's Postgres storages then open a connection for every event the step writes or reads: a fork
and a login of the server each time, hundreds for a small revision's eleven steps (``benchmarks/big_documents.py
--celery-polls``). This task has the same name and body, but takes the instance from the worker process's
``PooledInstances`` (``runtime/pooled_instance.py``): one per ref, its connections kept. Its body, on what
dagster-celery's task uses of Dagster beyond its documented API, is ``dagster_internals.celery_step_events``;
``faults/test_celery_workers.py`` runs every step of its runs through it, so an upgrade that changes them fails
there.
"""

from __future__ import annotations

from typing import Any

from ingestion_pipeline.runtime.dagster_internals import celery_step_events
from ingestion_pipeline.runtime.pooled_instance import PooledInstances

INSTANCES = PooledInstances()  # a worker's pool process's own: made after the fork, on its first step


def create_pooled_task(celery_app: Any, **task_kwargs: Any) -> Any:
    """Register the step task on ``celery_app`` under dagster-celery's name (what its executor sends). Only a
    worker imports what it needs: the code location loads this folder's modules."""
    from dagster_celery.config import TASK_EXECUTE_PLAN_NAME

    @celery_app.task(bind=True, name=TASK_EXECUTE_PLAN_NAME, **task_kwargs)
    def execute_plan(self, execute_step_args_packed: dict, executable_dict: dict) -> list[str]:
        return celery_step_events(execute_step_args_packed, executable_dict, INSTANCES.of, self.request.hostname)

    return execute_plan
