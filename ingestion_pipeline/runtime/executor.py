"""The executor every job, materialisation and backfill runs with (``INGESTION_EXECUTOR``).

- ``in_process`` (the default): every step in the run's process; the model loads once per run.
- ``celery``: Dagster's ``dagster-celery`` executor. The run's process only orchestrates; each step is a Celery
  task that an ``ingestion-pipeline worker`` on any host executes (broker and result backend:
  ``CELERY_BROKER_URL``, else ``REDIS_URL``). Tasks are acknowledged after the step, and a task whose worker
  vanished is handed to another one (immediately when only the worker process died, after
  ``INGESTION_WORKER_REDELIVER_SECONDS`` when its whole host did); the step runs again under the same run, so
  it continues as the same ledger owner. The embedding steps always go to the Celery queue ``embedding``, every
  other step to dagster-celery's default ``dagster``: which hosts embed is the workers' choice of queues
  (``ingestion-pipeline worker --queue embedding`` on GPU hosts), never the definitions'.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import dagster as dg

from ingestion_pipeline.core.settings import ExecutorSettings, load_settings


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


log = logging.getLogger("ingestion_pipeline.executor")
# Once the run's longest pause between looks for finished Celery steps, which the project paced by patching
# dagster-celery's loop; still accepted so that a deployment that sets it keeps starting.
RETIRED_POLL_VARIABLE = "INGESTION_CELERY_POLL_SECONDS"

DEFAULT_QUEUE = "dagster"  # dagster-celery's default queue: every step without a queue tag
# dagster_celery.tags.DAGSTER_CELERY_QUEUE_TAG, spelt here: importing dagster_celery imports Celery, a cost of
# every load of the code location (docs/benchmarks.md, "What loading the code location costs")
CELERY_QUEUE_TAG = "dagster-celery/queue"


# The queue of the embedding steps, a constant of the definitions: a step tag is how dagster-celery routes one step,
# and a tag read from the environment would make every host's definitions differ with it.
EMBEDDING_QUEUE = "embedding"
EMBEDDING_STEP_TAGS = {CELERY_QUEUE_TAG: EMBEDDING_QUEUE}
# Once the name of that queue, read by every host when the code location loaded; a worker still maps it to
# EMBEDDING_QUEUE (``cli/worker.py``), so a deployment that sets it keeps routing its embedding steps.
RETIRED_QUEUE_VARIABLE = "INGESTION_EMBEDDING_QUEUE"


RETRIES = dg.Field(dg.Selector({"enabled": {}, "disabled": {}}), default_value={"enabled": {}}, is_required=False,
                   description="Whether a step that asks to be retried (RetryRequested) is retried; as Dagster's own "
                               "executors.")


def _requirements(config: dict) -> list:
    """Celery's steps run in other processes: the job must be reconstructable and the instance persistent."""
    return dg.multiple_process_executor_requirements() if job_executor_name() == "celery" else []


@dg.executor(name="ingestion_executor", config_schema={"retries": RETRIES}, requirements=_requirements)
def ingestion_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """Dagster's in-process executor, or dagster-celery's (``INGESTION_EXECUTOR``), chosen when a run starts.

    One executor definition whatever the environment, so every host defines the same code location (the UI, the
    daemon and a run's process read the same job); what it executes with is the run process's configuration, as
    its database URL is."""
    settings = load_settings().executor
    retries = {"retries": init_context.executor_config.get("retries", {"enabled": {}})}
    if settings.executor == "celery":
        from dagster_celery import celery_executor

        if os.environ.get(RETIRED_QUEUE_VARIABLE, "").strip():
            log.warning("%s is deprecated and no longer read by a run: its embedding steps go to the Celery queue "
                        "'%s'; the workers that embed take it with --queue %s; unset it",
                        RETIRED_QUEUE_VARIABLE, EMBEDDING_QUEUE, EMBEDDING_QUEUE)
        if RETIRED_POLL_VARIABLE in os.environ:
            log.warning("%s is deprecated and no longer read: a Celery run looks for its finished steps once a "
                        "second, as dagster-celery's loop ships; unset it", RETIRED_POLL_VARIABLE)

        # dagster-celery's executor as it ships: its run loop looks for finished steps once a second (it has no
        # setting for that), so each step of a run's chain waits half a second on average before the next is
        # sent (benchmarks/big_documents.py --dev --dev-celery-workers measures what a revision pays for it).
        return celery_executor.executor_creation_fn(dg.InitExecutorContext(
            job=init_context.job, executor_def=celery_executor, instance=init_context.instance,
            executor_config={**celery_config(settings), **retries}))
    return dg.in_process_executor.executor_creation_fn(dg.InitExecutorContext(
        job=init_context.job, executor_def=dg.in_process_executor, instance=init_context.instance,
        executor_config=retries))


def job_executor_name() -> str:
    """``in_process`` or ``celery``: what this process's runs execute with (``INGESTION_EXECUTOR``)."""
    return load_settings().executor.executor
