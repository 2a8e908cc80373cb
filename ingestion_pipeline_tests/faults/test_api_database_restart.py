"""The API server while its Postgres stops and starts again (a real `pg_ctl stop`, a real server): it
says 503 with Retry-After — never a 500, never a hang — nothing half-written is left, and it serves
again once the database is back, without a restart of its own."""

from __future__ import annotations

import time

import httpx
import psycopg
import pytest

from ingestion_pipeline_tests.api.conftest import start_server
from ingestion_pipeline_tests.faults.test_postgres_restart import private_postgres, start_postgres, stop_postgres

pytestmark = pytest.mark.slow
__all__ = ["private_postgres"]  # the fixture, imported for this module


def test_api_answers_503_while_postgres_is_down_and_recovers(private_postgres, tmp_path):
    url, pgdata = private_postgres
    with start_server(url, tmp_path) as server:
        def ingest(name: str) -> httpx.Response:
            return httpx.post(f"{server.url}/v1/ingest", headers=server.headers, timeout=60,
                              files={"file": (name, f"{name}: the database went away and came back.\n".encode(),
                                              "text/plain")})

        assert ingest("before.txt").status_code == 202
        stop_postgres(pgdata)
        try:
            started = time.monotonic()
            ready = httpx.get(f"{server.url}/readyz", timeout=60)
            print(f"readyz answered in {time.monotonic() - started:.1f} s")
            assert time.monotonic() - started < 20  # an answer, not a wait for the pool's 30 s
            assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
            assert httpx.get(f"{server.url}/healthz", timeout=60).status_code == 200  # the process is up
            started = time.monotonic()
            responses = (httpx.get(f"{server.url}/v1/documents", headers=server.headers, timeout=60),
                         ingest("during.txt"))
            print(f"two requests answered in {time.monotonic() - started:.1f} s")
            assert time.monotonic() - started < 40
            for response in responses:
                assert response.status_code == 503, response.text
                assert response.json()["error"]["code"] == "database_unavailable"
                assert response.headers["retry-after"]
        finally:
            start_postgres(pgdata)
        deadline = time.monotonic() + 60
        while httpx.get(f"{server.url}/readyz", timeout=60).status_code != 200:
            assert time.monotonic() < deadline, "the API did not see the database come back"
            time.sleep(0.5)
        assert ingest("after.txt").status_code == 202
        runs = httpx.get(f"{server.url}/v1/ingestion-runs", headers=server.headers, timeout=60).json()
        assert sorted(r["config"]["filename"] for r in runs["items"]) == ["after.txt", "before.txt"]
    # the refused upload left no stored bytes behind either
    stored = sorted(p.name for p in (tmp_path / "server_uploads" / "acme").iterdir() if p.is_file())
    with psycopg.connect(url) as conn:
        hashes = sorted(r[0] for r in conn.execute("SELECT content_hash FROM ingestion_runs"))
    assert stored == hashes
