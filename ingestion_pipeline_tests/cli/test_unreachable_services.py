"""A Postgres or a broker that is not there when a command starts: a clear error and exit code 3 (nothing was
taken, nothing lost; run it again once the server is back), for every long-running command too."""

from __future__ import annotations

import os
import subprocess

import pytest

from ingestion_pipeline.core.redis_server import free_port
from ingestion_pipeline_tests.cli.test_corpus_cli import CLI

# a closed port on this host, and an address of another host that nothing answers (TEST-NET-1, RFC 5737)
UNREACHABLE = {
    "closed port": f"postgresql://ingestion:secret@127.0.0.1:{free_port()}/ingestion?connect_timeout=3",
    "another host": "postgresql://ingestion:secret@192.0.2.1:5432/ingestion?connect_timeout=3",
}


def _run(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=120,
                          env={**os.environ, "INGESTION_EMBEDDED_POSTGRES": "0", **env})


@pytest.mark.parametrize("where", UNREACHABLE)
@pytest.mark.parametrize("command", [["db", "migrate"], ["process"], ["serve", "--port", "0"], ["worker"],
                                     ["code-server", "--port", "0"], ["daemon"], ["webserver", "--port", "0"]],
                         ids=" ".join)
@pytest.mark.integration
def test_a_database_that_is_not_there_is_exit_code_3(command, where, isolated_storage):
    url = UNREACHABLE[where]
    result = _run(*command, DATABASE_URL=url, DAGSTER_PG_URL=url.replace("postgresql://", "postgresql+psycopg2://"),
                  JWT_SECRET="x" * 40)
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])
    assert "the database is unavailable" in result.stderr and "Traceback" not in result.stderr


def test_a_worker_whose_broker_is_not_there_is_exit_code_3(database_url, isolated_storage):
    broker = f"redis://127.0.0.1:{free_port()}/1"
    result = _run("worker", DATABASE_URL=database_url, CELERY_BROKER_URL=broker)
    assert result.returncode == 3, (result.returncode, result.stderr[-2000:])
    assert f"the broker {broker} does not answer" in result.stderr and "Traceback" not in result.stderr
