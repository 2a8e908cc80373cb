"""The application database: where its URL comes from, and one connection pool per process.

Every module reaches Postgres through a ``Database`` handed to it (psycopg 3 + psycopg_pool): pooled
connections are in autocommit mode with dict rows and pgvector's adapter registered once per
connection; ``transaction()`` wraps a block in one transaction. A connection is checked before it is
handed out, so a database restart costs one failed check, not a failed step; except one returned to the
pool within the last ``RECHECK_AFTER_SECONDS``: it worked a moment ago, and a batch's lanes take
connections thousands of times a second (the check was a round trip each: 3,400 in a 300-file load).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ingestion_pipeline.core.cpu_priority import lower_local_backend

EMBEDDED_ALLOWED_ENV = "INGESTION_EMBEDDED_POSTGRES"


class DatabaseNotConfigured(RuntimeError):
    """No DATABASE_URL in a process that may not start the embedded server (a deployed service)."""


NO_DATABASE_MESSAGE = (
    "DATABASE_URL is not set. The embedded Postgres starts only for the `ingestion-pipeline` command (and the "
    "`dagster dev` of `make dev`, which inherits its URL); a code server, daemon or run worker needs "
    "DATABASE_URL and DAGSTER_PG_URL (or INGESTION_EMBEDDED_POSTGRES=1 on a development machine)."
)


def check_reachable(url: str, *, timeout_seconds: int = 10) -> None:
    """Raise ``psycopg.OperationalError`` unless the server at ``url`` answers a query within the timeout (a
    process that depends on it checks this before it starts working)."""
    with psycopg.connect(url, connect_timeout=timeout_seconds) as conn:
        conn.execute("SELECT 1")


def embedded_allowed() -> bool:
    return os.environ.get(EMBEDDED_ALLOWED_ENV) == "1"


def resolve_database_url(*, allow_embedded: bool | None = None) -> str:
    """``DATABASE_URL`` when set, otherwise the embedded server (started on demand) where that is allowed:
    ``allow_embedded`` (the CLI, the read API) or ``INGESTION_EMBEDDED_POSTGRES=1``; else ``DatabaseNotConfigured``."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    if not (allow_embedded or embedded_allowed()):
        raise DatabaseNotConfigured(NO_DATABASE_MESSAGE)
    from ingestion_pipeline.core.embedded_postgres import ensure_embedded_postgres

    url = ensure_embedded_postgres()
    os.environ["DATABASE_URL"] = url  # child processes (dagster dev, code servers) share it
    return url


def resolve_dagster_storage_url(*, allow_embedded: bool | None = None) -> str:
    """URL for Dagster's own storage: ``DAGSTER_PG_URL``, else derived from the application database.

    dagster-postgres must be given the psycopg2 driver explicitly: with SQLAlchemy 2.1 a plain
    ``postgresql://`` URL picks psycopg 3, which dagster-postgres does not work with.
    """
    url = os.environ.get("DAGSTER_PG_URL")
    if url:
        return url
    app_url = resolve_database_url(allow_embedded=allow_embedded)
    if "?host=" in app_url and "@/" in app_url:  # the embedded server's socket URL
        from ingestion_pipeline.core.embedded_postgres import embedded_dagster_url

        url = embedded_dagster_url(app_url)
    else:
        url = app_url.replace("postgresql://", "postgresql+psycopg2://", 1).replace(
            "postgres://", "postgresql+psycopg2://", 1
        )
    os.environ["DAGSTER_PG_URL"] = url
    return url


RECHECK_AFTER_SECONDS = 0.25  # far shorter than a server takes to stop and start again


def _configure(conn: psycopg.Connection) -> None:
    conn.autocommit = True
    register_vector(conn)


def _configure_lowered(conn: psycopg.Connection, *, nice: int) -> None:
    _configure(conn)
    lower_local_backend(conn, nice)


def _returned(conn: psycopg.Connection) -> None:
    """The pool's ``reset``: when the connection came back, working."""
    conn._returned_at = time.monotonic()


def _check(conn: psycopg.Connection) -> None:
    """The pool's ``check``: a round trip, unless the connection came back within RECHECK_AFTER_SECONDS."""
    returned_at = getattr(conn, "_returned_at", None)
    if returned_at is not None and time.monotonic() - returned_at < RECHECK_AFTER_SECONDS:
        return
    ConnectionPool.check_connection(conn)


class Database:
    """A pool of connections to the application database (migrations must be applied first)."""

    def __init__(self, url: str, *, max_size: int = 4, name: str = "ingestion", timeout: float = 30.0,
                 backend_nice: int | None = None) -> None:
        """``timeout``: how long to wait for a connection before ``PoolTimeout`` (a worker can wait; an
        HTTP request should answer 503 soon). ``backend_nice``: each connection's backend lowered to that CPU
        priority where it runs on this host (``cpu_priority.lower_local_backend``), for work that may wait."""
        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            timeout=timeout,
            kwargs={"row_factory": dict_row, "autocommit": True},
            configure=_configure if backend_nice is None else partial(_configure_lowered, nice=backend_nice),
            check=_check,
            reset=_returned,
            name=name,
            open=True,
        )
        self._in_use: set[psycopg.Connection] = set()  # lent out now: their statements can be cancelled
        self._in_use_lock = threading.Lock()

    @property
    def max_size(self) -> int:
        """The most connections the pool opens."""
        return self._pool.max_size

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A pooled connection in autocommit mode (each statement commits on its own)."""
        with self._pool.connection() as conn, self._lent(conn):
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection]:
        """One transaction on a pooled connection: committed at the end, rolled back if the block raises."""
        with self._pool.connection() as conn, conn.transaction(), self._lent(conn):
            yield conn

    @contextmanager
    def _lent(self, conn: psycopg.Connection) -> Iterator[None]:
        """``conn`` counted as lent while the block runs; left by an interruption (Dagster's, which psycopg does
        not take for one) in the middle of a statement, the statement is cancelled before the transaction ends:
        otherwise the server ran it on, holding its locks, after the process had gone."""
        with self._in_use_lock:
            self._in_use.add(conn)
        try:
            yield
        except BaseException as exc:
            if not isinstance(exc, Exception):
                self._cancel(conn)
            raise
        finally:
            with self._in_use_lock:
                self._in_use.discard(conn)

    @staticmethod
    def _cancel(conn: psycopg.Connection) -> bool:
        if conn.pgconn.transaction_status != psycopg.pq.TransactionStatus.ACTIVE:  # no statement in flight
            return False
        try:
            conn.cancel_safe(timeout=5.0)
            return True
        except psycopg.Error:  # the connection broke meanwhile: whoever uses it meets that
            return False

    def cancel_statements(self) -> int:
        """Ask the server to cancel the statement each lent-out connection is running now; how many were.

        For an interrupted process: its lanes' threads get no ``KeyboardInterrupt`` (psycopg cancels a statement
        itself only on the thread that gets one), so a lane in the middle of a long statement held the process's
        exit — and the release of its files — until the statement ended. Cancelled, the statement raises
        ``QueryCanceled`` in its lane and its transaction rolls back."""
        with self._in_use_lock:
            lent = list(self._in_use)
        return sum(self._cancel(conn) for conn in lent)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Database:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


def connect(url: str, *, autocommit: bool = False) -> psycopg.Connection:
    """One unpooled connection, for tools and tests that inspect the database from outside."""
    conn = psycopg.connect(url, row_factory=dict_row, autocommit=autocommit)
    register_vector(conn)
    return conn
