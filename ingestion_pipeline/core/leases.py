"""The heartbeat of a run worker: it keeps the worker's claims alive and says the worker is alive.

While a run works, a ``LeaseKeeper`` thread extends the lease of every ledger row its owner holds and
stamps ``run_heartbeats`` every third of a lease. A worker that dies (SIGKILL, out of memory, the
machine gone) stops beating: its leases run out and the janitor hands its rows back to the queue,
and fails its Dagster run. A worker that is alive keeps its rows however long a step takes.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

import psycopg

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database

_log = logging.getLogger("ingestion_pipeline.leases")


def beat(conn: psycopg.Connection, *, dagster_run_id: str, owner: str, lease_seconds: float) -> int:
    """One heartbeat: extend the owner's leases and stamp this worker as alive."""
    extended = ledger.extend_leases(conn, owner, lease_seconds, dagster_run_id)
    conn.execute(
        """INSERT INTO run_heartbeats (dagster_run_id, owner, pid, hostname) VALUES (%s, %s, %s, %s)
           ON CONFLICT (dagster_run_id) DO UPDATE SET beat_at = now(), pid = EXCLUDED.pid""",
        (dagster_run_id, owner, os.getpid(), socket.gethostname()),
    )
    return extended


def last_beats(conn: psycopg.Connection, dagster_run_ids: list[str]) -> dict[str, dict]:
    """dagster run id -> {beat_at, seconds_since} for the workers that ever beat."""
    rows = conn.execute(
        """SELECT dagster_run_id, beat_at, extract(epoch FROM now() - beat_at) AS seconds_since
             FROM run_heartbeats WHERE dagster_run_id = ANY(%s)""",
        (dagster_run_ids,),
    ).fetchall()
    return {r["dagster_run_id"]: r for r in rows}


def forget(conn: psycopg.Connection, dagster_run_id: str) -> None:
    conn.execute("DELETE FROM run_heartbeats WHERE dagster_run_id = %s", (dagster_run_id,))


def forget_older_than(conn: psycopg.Connection, seconds: float) -> int:
    """Drop the beats of runs silent for ``seconds`` (long finished or dead): the janitor's housekeeping."""
    return conn.execute("DELETE FROM run_heartbeats WHERE beat_at < now() - make_interval(secs => %s)",
                        (seconds,)).rowcount


class LeaseKeeper:
    """A daemon thread that beats every ``lease_seconds / 3`` until ``stop()``; errors are logged and
    retried at the next beat (a database restart costs a few beats, not the claims)."""

    def __init__(self, url: str, *, dagster_run_id: str, owner: str, lease_seconds: float) -> None:
        self.dagster_run_id = dagster_run_id
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._db = Database(url, max_size=1, name=f"lease-keeper-{dagster_run_id[:8]}")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lease-keeper", daemon=True)

    def _beat_once(self) -> None:
        with self._db.transaction() as conn:
            beat(conn, dagster_run_id=self.dagster_run_id, owner=self.owner, lease_seconds=self.lease_seconds)

    def _run(self) -> None:
        interval = max(0.2, self.lease_seconds / 3)
        while not self._stop.wait(interval):
            try:
                self._beat_once()
            except Exception as exc:  # keep beating: the next beat may reach the database again
                _log.warning("heartbeat of run %s failed: %s", self.dagster_run_id, exc)

    def start(self) -> LeaseKeeper:
        self._beat_once()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        try:
            with self._db.connection() as conn:
                forget(conn, self.dagster_run_id)
        except Exception as exc:
            _log.warning("could not clear the heartbeat of run %s: %s", self.dagster_run_id, exc)
        self._db.close()

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()
