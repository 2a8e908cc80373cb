"""Migrating is an explicit step; every other process checks the schema's version and says what to run."""

from __future__ import annotations

import json
import shutil
import uuid

import dagster as dg
import psycopg
import pytest

from ingestion_pipeline.cli import main
from ingestion_pipeline.core.migrations import (
    SchemaOutOfDate,
    apply_migrations,
    check_schema,
    migration_files,
    required_version,
)
from ingestion_pipeline.defs.resources import PostgresResource
from ingestion_pipeline_tests.conftest import _create_database


@pytest.fixture
def older_schema(pg_server_url, tmp_path, monkeypatch) -> tuple[str, str]:
    """A database migrated by an earlier release: every migration but the last two."""
    url = _create_database(pg_server_url, f"old_{uuid.uuid4().hex[:12]}")
    earlier = tmp_path / "sql"
    earlier.mkdir()
    for path in migration_files()[:-2]:
        shutil.copy(path, earlier / path.name)
    apply_migrations(url, earlier)
    monkeypatch.setenv("DATABASE_URL", url)
    return url, migration_files()[-3].stem


def test_a_resource_on_an_older_schema_fails_with_what_to_run(older_schema):
    url, at = older_schema
    expected = (f"the database schema is at {at}, this code needs {required_version()}: "
                "run `ingestion-pipeline db migrate`")
    with pytest.raises(Exception) as failure, dg.build_resources({"postgres": PostgresResource(database_url=url)}):
        pass
    chain, error = [], failure.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    assert any(expected in message for message in chain), chain
    with psycopg.connect(url) as conn:  # nothing was migrated behind the operator's back
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] == at


def test_the_cli_refuses_an_older_schema_until_db_migrate(older_schema, capsys):
    url, at = older_schema
    assert main(["runs"]) == 4
    assert f"schema is at {at}" in capsys.readouterr().err
    assert main(["db", "migrate", "--json"]) == 0
    assert [m.stem for m in migration_files()[-2:]] == json.loads(capsys.readouterr().out)["applied"]
    assert main(["runs"]) == 0
    with psycopg.connect(url) as conn:
        assert check_schema(conn) == required_version()


def test_an_empty_database_is_reported_as_empty(pg_server_url):
    url = _create_database(pg_server_url, f"empty_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(url) as conn, pytest.raises(SchemaOutOfDate, match=r"is empty \(no migration applied\)"):
        check_schema(conn)


def test_migrations_read_as_utf8_whatever_the_processs_locale(database_url):
    """A library that sets the C locale in-process (seen once in a test worker) made the default text encoding
    ASCII, and a migration's em dash stopped every database copy: the project's own files are read as UTF-8."""
    import locale

    assert any(b"\xe2" in path.read_bytes() for path in migration_files())  # some hold more than ASCII
    before = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, "C")
        assert locale.getpreferredencoding(False).lower() not in ("utf-8", "utf8")
        assert apply_migrations(database_url) == []  # every file read again and its checksum matched
    finally:
        locale.setlocale(locale.LC_CTYPE, before)
