"""The one executor definition: what a run executes with is read when the run starts (``INGESTION_EXECUTOR``)."""

import dagster as dg
import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.runtime.executor import ingestion_executor


@dg.op
def _noop() -> None:
    pass


def toy_job() -> dg.JobDefinition:
    @dg.job(executor_def=ingestion_executor)
    def toy() -> None:
        _noop()

    return toy


def _built(retries: dict | None = None) -> dg.Executor:
    config = {} if retries is None else {"retries": retries}
    with dg.DagsterInstance.ephemeral() as instance:
        return ingestion_executor.executor_creation_fn(dg.InitExecutorContext(
            job=dg.reconstructable(toy_job), executor_def=ingestion_executor,
            executor_config=config, instance=instance))


def test_a_run_executes_in_process_by_default_and_on_celery_when_set(monkeypatch):
    monkeypatch.delenv("INGESTION_EXECUTOR", raising=False)
    in_process = _built()
    assert type(in_process).__name__ == "InProcessExecutor" and in_process.retries.enabled
    assert ingestion_executor.get_requirements({}) == []
    assert not _built({"disabled": {}}).retries.enabled

    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    celery = _built()
    assert type(celery.celery).__name__ == "CeleryExecutor"  # dagster-celery's own, paced
    assert celery.app_args()["broker"] == load_settings().executor.broker_url
    assert dg.ExecutorRequirement.RECONSTRUCTABLE_JOB in ingestion_executor.get_requirements({})


def test_the_celery_run_looks_for_finished_steps_as_often_as_set(monkeypatch):
    from dagster_celery import core_execution_loop

    monkeypatch.setattr(core_execution_loop, "TICK_SECONDS", core_execution_loop.TICK_SECONDS)  # restored after
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    _built()
    assert core_execution_loop.TICK_SECONDS == 0.2  # the default: dagster-celery's own is 1 s

    monkeypatch.setenv("INGESTION_CELERY_POLL_SECONDS", "0.05")
    _built()
    assert core_execution_loop.TICK_SECONDS == 0.05


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "0.001"])
def test_a_poll_interval_under_a_hundredth_of_a_second_is_refused_by_name(monkeypatch, raw):
    """0.001 s would be a busy loop reading the result backend once per step in flight, 1,000 times a second."""
    monkeypatch.setenv("INGESTION_CELERY_POLL_SECONDS", raw)
    with pytest.raises(ValueError, match="INGESTION_CELERY_POLL_SECONDS.*at least 0.01"):
        load_settings()
