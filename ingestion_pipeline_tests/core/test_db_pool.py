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


def test_cancel_statements_ends_the_statements_running_on_lent_connections(database_url):
    """Another thread's statement in flight is cancelled (QueryCanceled there, its transaction rolled back);
    a lent connection with no statement running is left alone, and one given back is no longer lent."""
    import threading

    import psycopg

    with Database(database_url, max_size=3) as database:
        outcome: list[BaseException] = []
        started = threading.Event()

        def long_statement() -> None:
            try:
                with database.transaction() as conn:
                    conn.execute("CREATE TABLE cancel_probe (x int)")
                    started.set()
                    conn.execute("SELECT pg_sleep(60)")
            except BaseException as exc:  # noqa: BLE001 - what the lane would meet
                outcome.append(exc)

        lane = threading.Thread(target=long_statement)
        lane.start()
        assert started.wait(10)
        with database.connection() as idle:
            time.sleep(0.3)  # the other statement is in flight
            began = time.monotonic()
            assert database.cancel_statements() == 1
            lane.join(10)
            assert not lane.is_alive() and time.monotonic() - began < 10
            assert idle.execute("SELECT 1 AS one").fetchone()["one"] == 1
        assert len(outcome) == 1 and isinstance(outcome[0], psycopg.errors.QueryCanceled)
        assert database.cancel_statements() == 0
        with database.connection() as conn:  # the transaction was rolled back
            assert conn.execute("SELECT to_regclass('cancel_probe') AS t").fetchone()["t"] is None
