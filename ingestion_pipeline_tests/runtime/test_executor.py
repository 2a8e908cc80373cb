"""The Celery executor as the run's process builds it: how often it looks for finished steps."""

import pytest

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.runtime.executor import executor_for


def test_the_celery_run_looks_for_finished_steps_as_often_as_set(monkeypatch):
    from dagster_celery import core_execution_loop

    monkeypatch.setattr(core_execution_loop, "TICK_SECONDS", core_execution_loop.TICK_SECONDS)  # restored after
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")
    executor = executor_for(load_settings().executor)
    assert executor.name == "celery"
    assert core_execution_loop.TICK_SECONDS == 0.2  # the default: dagster-celery's own is 1 s

    monkeypatch.setenv("INGESTION_CELERY_POLL_SECONDS", "0.05")
    executor_for(load_settings().executor)
    assert core_execution_loop.TICK_SECONDS == 0.05


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "0.001"])
def test_a_poll_interval_under_a_hundredth_of_a_second_is_refused_by_name(monkeypatch, raw):
    """0.001 s would be a busy loop reading the result backend once per step in flight, 1,000 times a second."""
    monkeypatch.setenv("INGESTION_CELERY_POLL_SECONDS", raw)
    with pytest.raises(ValueError, match="INGESTION_CELERY_POLL_SECONDS.*at least 0.01"):
        load_settings()
