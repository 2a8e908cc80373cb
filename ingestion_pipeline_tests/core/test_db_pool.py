"""The pool checks a connection before handing it out, unless it came back moments ago."""

import time

from ingestion_pipeline.core import db as db_module
from ingestion_pipeline.core.db import Database


def _backend_pid(database: Database) -> int:
    with database.connection() as conn:
        return conn.execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]


def _terminate(url: str, pid: int) -> None:
    with db_module.connect(url, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(0.1)  # the backend is gone


def test_a_connection_that_died_while_idle_is_replaced_before_use(database_url):
    """The server ended the pool's only connection (a restart does that to every one): after the recheck
    window, the check finds it dead and the caller gets a new, working connection."""
    with Database(database_url, max_size=1) as database:
        before = _backend_pid(database)
        _terminate(database_url, before)
        time.sleep(db_module.RECHECK_AFTER_SECONDS)
        with database.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1
        assert _backend_pid(database) != before


def test_a_connection_back_moments_ago_is_handed_out_without_a_round_trip(database_url, monkeypatch):
    checks = []
    original = db_module.ConnectionPool.check_connection
    monkeypatch.setattr(db_module.ConnectionPool, "check_connection",
                        staticmethod(lambda conn: checks.append(conn) or original(conn)))
    with Database(database_url, max_size=1) as database:
        for _ in range(20):  # as a step's lanes do: one connection after another
            with database.connection() as conn:
                conn.execute("SELECT 1")
        assert len(checks) == 1  # the first: a connection never handed out before is checked
        time.sleep(db_module.RECHECK_AFTER_SECONDS + 0.05)
        with database.connection() as conn:
            conn.execute("SELECT 1")
        assert len(checks) == 2  # idle longer than the window: checked again
