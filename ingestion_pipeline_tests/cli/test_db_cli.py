"""`db url --dagster`: what a shell exports before calling `dg` against the project's instance."""

from __future__ import annotations

from ingestion_pipeline.cli import main


def test_db_url_for_dagster(database_url, monkeypatch, capsys):
    monkeypatch.delenv("DAGSTER_PG_URL", raising=False)
    assert main(["db", "url"]) == 0
    assert capsys.readouterr().out.strip() == database_url
    monkeypatch.delenv("DAGSTER_PG_URL", raising=False)
    assert main(["db", "url", "--dagster"]) == 0
    dagster_url = capsys.readouterr().out.strip()
    assert dagster_url.startswith("postgresql+psycopg2://")  # the driver dagster-postgres needs
