"""`db url --dagster`: what a shell exports before calling `dg` against the project's instance; `db check`."""

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


def test_db_check_answers_0_3_or_4(database_url, dagster_pg_url, pg_server_url, monkeypatch, capsys):
    """`db check` (an init container's command): both databases answer and the schema is current, or why not."""
    import uuid

    from ingestion_pipeline.core.redis_server import free_port
    from ingestion_pipeline_tests.conftest import _create_database

    assert main(["db", "check"]) == 0
    assert capsys.readouterr().out.strip() == "both databases answer; the schema is current"
    monkeypatch.setenv("DAGSTER_PG_URL", f"postgresql+psycopg2://x:y@127.0.0.1:{free_port()}/dagster")
    assert main(["db", "check"]) == 3
    assert "the database is unavailable (Dagster's storage (DAGSTER_PG_URL) does not answer" in capsys.readouterr().err
    monkeypatch.setenv("DAGSTER_PG_URL", dagster_pg_url)
    monkeypatch.setenv("DATABASE_URL", _create_database(pg_server_url, f"t_{uuid.uuid4().hex[:12]}"))  # not migrated
    assert main(["db", "check"]) == 4
    assert "run `ingestion-pipeline db migrate`" in capsys.readouterr().err
