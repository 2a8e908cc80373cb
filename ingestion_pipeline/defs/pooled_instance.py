"""The Dagster instance `process` runs its jobs with: storage connections pooled, and checked on checkout.

The one place the project relies on Dagster beyond its documented API (``optimize_for_webserver`` is what
dagster-webserver calls; it is not documented for users), kept here alone because its cost was measured,
and tested by ``defs/test_pooled_instance.py`` so that a Dagster upgrade that changes it fails a test.

Dagster's Postgres storages open a new connection for every event they write unless told otherwise (a
1M-row metric run opened ~170, about 1.5 s of forks and logins); the webserver tells them with
``optimize_for_webserver``, and so do ``process``, which runs whole jobs in this one process, and a warm run
worker (``run_worker.py``), which runs one run after another with the same instance.

A pooled connection outlives a database restart on the client side only: the first query on it fails
with "server closed the connection unexpectedly", and that query is a run's event write. Dagster does
not offer SQLAlchemy's ``pool_pre_ping`` here, so every pooled checkout in this process is pinged first
(SQLAlchemy's documented checkout event: raising ``DisconnectionError`` makes the pool discard the
connection and open a new one). A ping is one more round trip per checkout, on the local socket.
"""

from __future__ import annotations

import gc
from typing import Any

import dagster as dg
from sqlalchemy import event, exc
from sqlalchemy.pool import QueuePool


def pooled_instance() -> dg.DagsterInstance:
    """The project's instance (``DAGSTER_HOME``), its storages each keeping open connections."""
    return pool_connections(dg.DagsterInstance.get())


def pool_connections(instance: dg.DagsterInstance) -> dg.DagsterInstance:
    """``instance`` with its storages keeping open connections, each pinged when checked out; returned."""
    if not event.contains(QueuePool, "checkout", _ping):
        event.listen(QueuePool, "checkout", _ping)
    instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=4)
    return instance


def _ping(dbapi_connection, _record, _proxy) -> None:
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # the driver's own error type: psycopg2 or psycopg
        raise exc.DisconnectionError(f"pooled Dagster storage connection is gone: {error}") from error


class PooledInstances:
    """One process's instance of each ref it is handed, kept with its connections pooled: a warm run worker runs
    one run after another, a Celery worker's process one step after another, each with the ref of the run's
    instance; building a new instance each time would log in anew for every event written."""

    def __init__(self) -> None:
        self._key: str | None = None
        self._instance: dg.DagsterInstance | None = None

    def of(self, ref: Any) -> dg.DagsterInstance:  # an InstanceRef (not exported by Dagster)
        key = dg.serialize_value(ref)
        if key != self._key or self._instance is None:
            self.close()
            self._instance = pool_connections(dg.DagsterInstance.from_ref(ref))
            self._key = key
        return self._instance

    def close(self) -> None:
        if self._instance is None:
            return
        self._instance.dispose()
        self._instance, self._key = None, None
        # Dagster's Postgres storages leave their engines open on dispose: the pooled connections close when the
        # instance (a web of references) is collected
        gc.collect()
