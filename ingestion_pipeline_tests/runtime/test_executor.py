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
    assert type(celery).__name__ == "CeleryExecutor"  # dagster-celery's own
    assert celery.app_args()["broker"] == load_settings().executor.broker_url
    assert dg.ExecutorRequirement.RECONSTRUCTABLE_JOB in ingestion_executor.get_requirements({})


def test_a_celery_run_uses_dagster_celerys_loop_as_it_ships(monkeypatch):
    """No module state of dagster-celery is touched: its loop keeps its own tick."""
    from dagster_celery import core_execution_loop

    tick, clock = core_execution_loop.TICK_SECONDS, core_execution_loop.time
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    assert type(_built()).__name__ == "CeleryExecutor"
    assert (core_execution_loop.TICK_SECONDS, core_execution_loop.time) == (tick, clock)


@pytest.mark.parametrize("raw", ["0.05", "soon"])
def test_the_retired_poll_setting_is_ignored_with_a_deprecation_message(monkeypatch, caplog, raw):
    """A deployment that still sets INGESTION_CELERY_POLL_SECONDS keeps starting, and is told to unset it."""
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    monkeypatch.setenv("INGESTION_CELERY_POLL_SECONDS", raw)
    load_settings()
    with caplog.at_level("WARNING", logger="ingestion_pipeline.executor"):
        _built()
    assert "INGESTION_CELERY_POLL_SECONDS is deprecated and no longer read" in caplog.text


@pytest.mark.parametrize("raw", ["gpu", "not a queue!"])
def test_the_retired_embedding_queue_setting_is_not_read_by_a_run_and_says_so(monkeypatch, caplog, raw):
    """A run's process that still has INGESTION_EMBEDDING_QUEUE starts (its value is never parsed: the embedding
    steps' queue is the definitions' constant) and is told what replaced it."""
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    monkeypatch.setenv("INGESTION_EMBEDDING_QUEUE", raw)
    load_settings()
    with caplog.at_level("WARNING", logger="ingestion_pipeline.executor"):
        assert type(_built()).__name__ == "CeleryExecutor"
    assert "INGESTION_EMBEDDING_QUEUE is deprecated and no longer read by a run" in caplog.text
    assert "--queue embedding" in caplog.text
