"""The project's Dagster instance: storage connections pooled for the instance's life, checked on checkout.

It relies on Dagster beyond its documented API (``optimize_for_webserver`` is what dagster-webserver calls; it is
not documented for users) through ``dagster_internals.py``, because its cost was measured; ``runtime/
test_pooled_instance.py`` and ``runtime/test_dagster_internals.py`` fail when a Dagster upgrade changes it.

Dagster's Postgres storages open a new connection for every event they write unless told otherwise (a 1M-row metric
run opened over a hundred, each a fork and a login); the webserver tells them with ``optimize_for_webserver``.
Every other process of a deployment does the same through ``ProjectInstance``, the instance class
``dagster_home/dagster.yaml`` names (``instance_class``): the daemon above all, whose threads (the run queue every
second, the sensors, run monitoring) opened sessions every second idle and more during a bulk load, each a server
process forked and logged in (benchmarks/dagster_sessions.py counts them and, with ``--cost``, what one costs the
server); the code server's sensor ticks; ``process``; and a warm run worker (``run_worker.py``), which runs one run
after another with the same instance. A ``ProjectInstance`` closes its connections when it is disposed (Dagster's
storages leave theirs to the garbage collector), so an instance built for one sensor tick holds none after it.

A pooled connection outlives a database restart on the client side only: the first query on it fails
with "server closed the connection unexpectedly", and that query is a run's event write. Dagster does
not offer SQLAlchemy's ``pool_pre_ping`` here, so every pooled checkout in this process is pinged first
(SQLAlchemy's documented checkout event: raising ``DisconnectionError`` makes the pool discard the
connection and open a new one). A ping is one more round trip per checkout, on the local socket.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

import dagster as dg
from sqlalchemy import event, exc
from sqlalchemy.pool import QueuePool

from ingestion_pipeline.runtime.dagster_internals import (
    close_storage_connections,
    instance_config_defaults,
    pool_storage_connections,
)


def pooled_instance() -> dg.DagsterInstance:
    """The project's instance (``DAGSTER_HOME``), its storages each keeping open connections."""
    return pool_connections(dg.DagsterInstance.get())


def pool_connections(instance: dg.DagsterInstance) -> dg.DagsterInstance:
    """``instance`` with its storages keeping open connections, each pinged when checked out; returned. Once per
    instance: pooling again would leave the first pool's connections to the garbage collector."""
    if getattr(instance, "_ingestion_pooled", False):
        return instance
    if not event.contains(QueuePool, "checkout", _ping):
        event.listen(QueuePool, "checkout", _ping)
    pool_storage_connections(instance)
    instance._ingestion_pooled = True  # noqa: SLF001 - our own mark on the instance
    return instance


def close_connections(instance: dg.DagsterInstance) -> None:
    """Close the connections ``instance``'s Postgres storages hold (each engine's pool); a later call opens anew."""
    close_storage_connections(instance)


class ProjectInstance(dg.DagsterInstance):
    """The instance of every process that reads ``dagster_home/dagster.yaml``: Dagster's own, its storages pooled
    from the start (``pool_connections``) and their connections closed on ``dispose``. dagster-webserver pools them
    again with its own statement timeout, as it does any instance."""

    # Dagster asks a custom instance class for its own settings and for the defaults of the instance's parts: it has
    # no settings, and Dagster's defaults.
    @classmethod
    def config_schema(cls) -> dict:
        return {}

    @staticmethod
    def config_defaults(base_dir: str) -> Any:
        return instance_config_defaults(base_dir)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        pool_connections(self)
        _OPEN.add(self)

    def dispose(self) -> None:
        _OPEN.discard(self)
        super().dispose()
        close_connections(self)


# The project's instances of this process not yet disposed (held weakly: a collected one is gone from it).
_OPEN: weakref.WeakSet[ProjectInstance] = weakref.WeakSet()


def open_instances() -> weakref.WeakSet[ProjectInstance]:
    """The process's project instances not disposed yet (held weakly), to compare with later."""
    return weakref.WeakSet(list(_OPEN))


def dispose_instances_opened_since(before: weakref.WeakSet[ProjectInstance]) -> int:
    """Dispose the process's project instances that were not open at ``before`` (``open_instances``); how many.
    dagster-celery's task builds the run's instance for its step and drops it undisposed, and a dropped instance
    holds its pooled connections until the garbage collector finds its cycle of references: a Celery worker
    closes them when the step's task ends (``cli/worker.py``)."""
    opened = [instance for instance in list(_OPEN) if instance not in before]
    for instance in opened:
        instance.dispose()
    return len(opened)


def _ping(dbapi_connection, _record, _proxy) -> None:
    try:
        with dbapi_connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as error:  # the driver's own error type: psycopg2 or psycopg
        raise exc.DisconnectionError(f"pooled Dagster storage connection is gone: {error}") from error


class PooledInstances:
    """One process's instance of each ref it is handed, kept with its connections pooled: a warm run worker runs
    one run after another, each with the ref of the run's instance; building a new instance each time would log in
    anew for every event written."""

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
