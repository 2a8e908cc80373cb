"""The executor every job, materialisation and backfill runs with (``INGESTION_EXECUTOR``).

- ``in_process`` (the default): every step in the run's process; the model loads once per run.
- ``celery``: Dagster's ``dagster-celery`` executor. The run's process only orchestrates; each step is a Celery
  task that an ``ingestion-pipeline worker`` on any host executes (broker and result backend:
  ``CELERY_BROKER_URL``, else ``REDIS_URL``). Tasks are acknowledged after the step, and a task whose worker
  vanished is handed to another one (immediately when only the worker process died, after
  ``INGESTION_WORKER_REDELIVER_SECONDS`` when its whole host did); the step runs again under the same run, so
  it continues as the same ledger owner. ``INGESTION_EMBEDDING_QUEUE`` sends the embedding steps to a queue of
  their own (the GPU hosts' workers: ``ingestion-pipeline worker --queue gpu``), the others stay on ``dagster``.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from ingestion_pipeline.core.settings import ExecutorSettings, load_settings
from ingestion_pipeline.runtime.dagster_internals import set_celery_tick


def celery_config(settings: ExecutorSettings) -> dict[str, Any]:
    """The ``celery_executor`` config; ``ingestion-pipeline worker`` starts its workers with the same."""
    return {
        "broker": settings.broker_url,
        "backend": settings.broker_url,
        "config_source": {
            "task_acks_late": True,  # a step's task is acknowledged once the step ended, not when it was taken
            "task_reject_on_worker_lost": True,  # a killed worker process: its task back to the queue at once
            "broker_transport_options": {"visibility_timeout": settings.redeliver_seconds},
            "result_backend_transport_options": {"visibility_timeout": settings.redeliver_seconds},
            "worker_prefetch_multiplier": 1,  # a worker holds only the step it runs
            "broker_connection_retry_on_startup": True,
        },
    }


DEFAULT_QUEUE = "dagster"  # dagster-celery's default queue: every step without a queue tag
# dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG, spelt here: importing dagster_celery imports Celery, a cost of
# every load of the code location (docs/benchmarks.md, "What loading the code location costs")
CELERY_QUEUE_TAG = "dagster-celery/queue"


def embedding_step_tags(settings: ExecutorSettings | None = None) -> dict[str, str]:
    """The embedding step's op tags: its Celery queue when one is set (read when the code location loads, as
    the executor is; a step tag is how dagster-celery routes one step)."""
    queue = (settings or load_settings().executor).embedding_queue
    return {CELERY_QUEUE_TAG: queue} if queue else {}


def executor_for(settings: ExecutorSettings) -> dg.ExecutorDefinition:
    if settings.executor == "celery":
        # How often the run's process looks for finished steps: soon after a step was sent or ended, at most every
        # INGESTION_CELERY_POLL_SECONDS while steps run (runtime/celery_pace.py). dagster-celery's loop sleeps a fixed
        # 1 s (its module's TICK_SECONDS, read at every pass and set here too), so each step of a run waited half a
        # second on average after its task ended, and a fanned-out document run is a chain of about ten steps.
        set_celery_tick(settings.poll_seconds)
        return _paced_celery_executor(settings.poll_seconds).configured(celery_config(settings), name="celery")
    return dg.in_process_executor


def _paced_celery_executor(longest_pause: float) -> dg.ExecutorDefinition:
    """dagster-celery's ``celery_executor``, with the same config, whose run loop is paced by its events."""
    from dagster_celery import celery_executor
    from dagster_celery.executor import CELERY_CONFIG

    from ingestion_pipeline.runtime.dagster_internals import celery_step_sent_or_ended, pace_celery_loop

    pace = pace_celery_loop(longest_pause)

    class PacedCeleryExecutor(dg.Executor):
        """dagster-celery's executor as built from the config; its run loop's events tell the pace."""

        def __init__(self, celery: dg.Executor) -> None:
            self.celery = celery

        @property
        def retries(self):
            return self.celery.retries

        def __getattr__(self, name: str):  # app_args() and the rest: the loop reads them on its executor
            return getattr(self.celery, name)

        def execute(self, plan_context, execution_plan):
            for event in self.celery.execute(plan_context, execution_plan):
                happened = celery_step_sent_or_ended(event)
                if happened == "sent":
                    pace.sent()
                elif happened == "ended":
                    pace.ended()
                yield event

    @dg.executor(name="celery", config_schema=CELERY_CONFIG, requirements=dg.multiple_process_executor_requirements())
    def paced_celery_executor(init_context):
        return PacedCeleryExecutor(celery_executor.executor_creation_fn(init_context))

    return paced_celery_executor


def job_executor_name() -> str:
    """``in_process`` or ``celery``: this process's settings (read when the code location loads)."""
    return load_settings().executor.executor


def job_executor() -> dg.ExecutorDefinition:
    """The executor of this process's settings (read when the code location loads)."""
    return executor_for(load_settings().executor)
