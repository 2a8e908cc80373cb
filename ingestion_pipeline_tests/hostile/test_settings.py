"""Settings a hostile or careless environment gives are refused at start, with the reason and exit code 2,
before the server opens anything. Before, ``JWT_EXPIRY_HOURS=nan`` or ``inf`` made every login a 500, and
``-1`` or ``0`` issued tokens that were already expired."""

import os
import subprocess

import pytest

from ingestion_pipeline_tests.cli.test_corpus_cli import CLI

SECRET = "s" * 40


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "0", "1e308", "9000", "hours"])
def test_a_token_lifetime_that_is_not_a_sane_number_of_hours_stops_serve(value, tmp_path):
    env = {**os.environ, "JWT_SECRET": SECRET, "JWT_EXPIRY_HOURS": value, "DATABASE_URL": "postgresql://nobody@/x"}
    result = subprocess.run(CLI + ["serve", "--port", "1"], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: JWT_EXPIRY_HOURS must be a number of hours above 0 and at most 8760 "
                                    f"(a year), got '{value}'")


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_no_number_setting_takes_nan_or_infinity(value, monkeypatch):
    from ingestion_pipeline.core.settings import load_settings

    monkeypatch.setenv("INGESTION_LEASE_SECONDS", value)
    with pytest.raises(ValueError, match=f"INGESTION_LEASE_SECONDS must be a finite number, got '{value}'"):
        load_settings()


def test_a_sane_lifetime_is_taken(monkeypatch):
    from ingestion_pipeline.core.settings import load_api_settings

    monkeypatch.setenv("JWT_EXPIRY_HOURS", "0.5")
    assert load_api_settings().jwt_expiry_seconds == 1800


@pytest.mark.parametrize("value", ["n", "t", "y", "2", "disabled", ""])
def test_a_switch_takes_only_its_words(value, monkeypatch):
    """AUTH_ENABLED=n must not turn logins off as a word pydantic alone would take; an empty one is the default."""
    from ingestion_pipeline.core.settings import load_api_settings

    monkeypatch.setenv("AUTH_ENABLED", value)
    if value == "":
        assert load_api_settings().auth_enabled is True
        return
    with pytest.raises(ValueError, match=f"AUTH_ENABLED must be true or false .*, got '{value}'"):
        load_api_settings()
    for word, meant in (("off", False), (" Yes ", True), ("0", False), ("TRUE", True)):
        monkeypatch.setenv("AUTH_ENABLED", word)
        assert load_api_settings().auth_enabled is meant
