"""The embedded PostgreSQL 16 + pgvector server (pgserver) used when no DATABASE_URL is given.

pgserver keeps one server per data folder and lets every process attach to it; with
``cleanup_mode=None`` the server outlives the command that started it, so the CLI, `dagster dev` and
the code server all share it. ``stop_embedded_postgres`` ends it (by the PID in its postmaster.pid).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from pathlib import Path

import psycopg
from psycopg import sql

from ingestion_pipeline.core.settings import data_dir

APP_DATABASE = "ingestion"
DAGSTER_DATABASE = "dagster"

logging.getLogger("pgserver").setLevel(logging.WARNING)


def default_pgdata() -> Path:
    return data_dir() / "pgdata"


def ensure_embedded_postgres(pgdata: Path | None = None, *, cleanup_mode: str | None = None) -> str:
    """Start (or attach to) the embedded server and return the URL of its application database.

    Both the application database and the Dagster storage database are created on first use.
    """
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells)
        warnings.simplefilter("ignore")
        import pgserver  # imported lazily: only needed without DATABASE_URL

    pgdata = (pgdata or default_pgdata()).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    server = pgserver.get_server(pgdata, cleanup_mode=cleanup_mode)
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in (APP_DATABASE, DAGSTER_DATABASE):
            if name not in existing:
                # another process may create it a moment earlier
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.get_uri(database=APP_DATABASE)


def embedded_dagster_url(app_url: str) -> str:
    """The Dagster storage URL (psycopg2 driver, see DESIGN.md) on the same embedded server."""
    base, _, query = app_url.partition("?")
    base = base.rsplit("/", 1)[0] + "/" + DAGSTER_DATABASE
    base = base.replace("postgresql://", "postgresql+psycopg2://", 1)
    return f"{base}?{query}" if query else base


def embedded_postgres_pid(pgdata: Path | None = None) -> int | None:
    pidfile = (pgdata or default_pgdata()) / "postmaster.pid"
    if not pidfile.exists():
        return None
    first = pidfile.read_text().splitlines()[:1]
    return int(first[0]) if first and first[0].strip().isdigit() else None


def stop_embedded_postgres(pgdata: Path | None = None) -> bool:
    """Stop the embedded server with a fast shutdown; True when one was running."""
    import os
    import signal
    import time

    pid = embedded_postgres_pid(pgdata)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGINT)  # postgres: SIGINT is "fast shutdown"
    except ProcessLookupError:
        return False
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return True
