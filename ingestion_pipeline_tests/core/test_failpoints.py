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
