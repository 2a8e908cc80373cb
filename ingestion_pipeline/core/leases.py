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

import psycopg

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.beats import Beat
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
    """Beats (``core/beats.py``) every ``lease_seconds / 3`` until ``stop()``; a failed beat is logged and retried
    at the next (a database restart costs a few beats, not the claims)."""

    def __init__(self, url: str, *, dagster_run_id: str, owner: str, lease_seconds: float,
                 db: Database | None = None) -> None:
        """``db``: a pool of its own for the beats (not the work's, which may be busy), kept open by the caller
        for the next keeper (a process that executes step after step); by default one opened here and closed
        at ``stop``."""
        self.dagster_run_id = dagster_run_id
        self.owner = owner
        self.lease_seconds = lease_seconds
        self._own_db = db is None
        self._db = db if db is not None else Database(url, max_size=1, name=f"lease-keeper-{dagster_run_id[:8]}")
        self._beat = Beat(self._beat_once, max(0.2, lease_seconds / 3), name="lease-keeper",
                          what=f"heartbeat of run {dagster_run_id}")

    def _beat_once(self) -> None:
        with self._db.transaction() as conn:
            beat(conn, dagster_run_id=self.dagster_run_id, owner=self.owner, lease_seconds=self.lease_seconds)

    def start(self) -> LeaseKeeper:
        self._beat_once()
        self._beat.start()
        return self

    def stop(self) -> None:
        self._beat.stop()
        try:
            with self._db.connection() as conn:
                forget(conn, self.dagster_run_id)
        except Exception as exc:
            _log.warning("could not clear the heartbeat of run %s: %s", self.dagster_run_id, exc)
        if self._own_db:
            self._db.close()

    def __enter__(self) -> LeaseKeeper:
        return self.start()

    def __exit__(self, *_exc) -> None:
        self.stop()
