"""A failpoint stops a process only where it is meant to: in a test, or with INGESTION_ALLOW_FAILPOINTS=1."""

from __future__ import annotations

import logging

import pytest

from ingestion_pipeline.core import failpoints


@pytest.fixture
def failpoint_env(tmp_path, monkeypatch):
    monkeypatch.setattr(failpoints, "_reached", set())
    monkeypatch.setenv("INGESTION_FAILPOINT", "embed.unit")
    monkeypatch.setenv("INGESTION_FAILPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("INGESTION_FAILPOINT_SLEEP", "0")
    monkeypatch.delenv("INGESTION_ALLOW_FAILPOINTS", raising=False)
    return tmp_path


def test_a_stray_failpoint_outside_tests_is_reported_and_never_arms(failpoint_env, monkeypatch, caplog):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # as a production process sees its environment
    monkeypatch.setenv("INGESTION_FAILPOINT_SLEEP", "600")  # were it armed, the test would hang here
    with caplog.at_level(logging.WARNING):
        failpoints.failpoint("embed.unit")
    assert list(failpoint_env.iterdir()) == []
    assert "INGESTION_ALLOW_FAILPOINTS=1" in caplog.text


def test_an_explicitly_allowed_failpoint_arms_outside_tests(failpoint_env, monkeypatch):
    monkeypatch.delenv("PYTEST_CURRENT_TEST")
    monkeypatch.setenv("INGESTION_ALLOW_FAILPOINTS", "1")
    failpoints.failpoint("embed.unit")
    assert [p.suffix for p in failpoint_env.iterdir()] == [".unit"]


def test_inside_a_test_a_failpoint_arms_and_other_names_pass(failpoint_env):
    failpoints.failpoint("promote.transaction")
    assert list(failpoint_env.iterdir()) == []
    failpoints.failpoint("embed.unit")
    assert len(list(failpoint_env.iterdir())) == 1


def test_two_lanes_at_the_same_failpoint_stop_one_of_them(failpoint_env, monkeypatch):
    """Two file lanes (threads of one process) that reach a failpoint together: one stops, the other runs through.
    The set's lookup yields to the other thread here, as a busy machine's thread switch may: checked and marked
    apart, both lanes passed the check and both stopped."""
    import threading
    import time

    class Yielding(set):
        def __contains__(self, item) -> bool:
            found = super().__contains__(item)
            time.sleep(0.05)  # the other lane runs meanwhile
            return found

    monkeypatch.setattr(failpoints, "_reached", Yielding())
    # without a marker folder the process's own record is the only guard (with one, the marker narrows the race
    # to the moment between looking for it and writing it: the likely cause of a SIGTERM test that hung in CI)
    monkeypatch.delenv("INGESTION_FAILPOINT_DIR")
    start = threading.Barrier(2)
    stopped: list[bool] = []

    def lane() -> None:
        start.wait()
        stopped.append(failpoints._reached_first("embed.unit"))

    lanes = [threading.Thread(target=lane) for _ in range(2)]
    for t in lanes:
        t.start()
    for t in lanes:
        t.join()
    assert sorted(stopped) == [False, True]
