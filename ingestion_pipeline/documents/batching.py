"""Grouping queued ledger rows into bounded batches: one batch = one `document_batches` partition.

Partition keys are readable and safe (``[a-z0-9_-]``): ``<tenant>-<utc timestamp>-<first run id>``.
Assignment is an UPDATE of rows whose ``partition_key`` is still NULL, under a lock, so a repeated
sensor tick or a concurrent ``process`` never puts one row into two batches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.identifiers import key_part
from ingestion_pipeline.core.settings import BatchSettings

_BATCHING_LOCK = 7_411_022
_LAUNCHING_LOCK = 7_411_023


@dataclass(frozen=True)
class Batch:
    partition_key: str
    tenant_id: str
    file_ids: tuple[int, ...]
    total_bytes: int


def plan_batches(rows: list[dict], limits: BatchSettings) -> list[list[dict]]:
    """Split rows (ordered) into groups of one tenant and source, at most max_files and max_bytes each.

    A single file larger than max_bytes gets a batch of its own.
    """
    groups: list[list[dict]] = []
    current: list[dict] = []
    current_bytes = 0
    for row in rows:
        same_tenant = not current or (
            (current[0]["tenant_id"], current[0].get("source_id")) == (row["tenant_id"], row.get("source_id"))
        )
        fits = len(current) < limits.max_files and current_bytes + row["size_bytes"] <= limits.max_bytes
        if current and not (same_tenant and fits):
            groups.append(current)
            current, current_bytes = [], 0
        current.append(row)
        current_bytes += row["size_bytes"]
    if current:
        groups.append(current)
    return groups


def partition_key_for(
    tenant_id: str, first_file_id: int, now: datetime | None = None, source_name: str | None = None
) -> str:
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dt%H%M%S")
    tenant = key_part(tenant_id)
    source = f"-{key_part(source_name)}" if source_name else ""
    return f"{tenant}{source}-{stamp}-{first_file_id}"


def assign_queued_to_batches(
    conn: psycopg.Connection, limits: BatchSettings, *, max_batches: int = 25,
    run_types: Sequence[str] | None = None
) -> list[Batch]:
    """Claim unbatched queued rows into new batches (at most ``max_batches`` per call)."""
    batches: list[Batch] = []
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_BATCHING_LOCK,))
        rows = conn.execute(
            """SELECT r.file_id, r.tenant_id, r.size_bytes, r.source_id, s.name AS source_name
                 FROM ingestion_runs r LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
                 JOIN tenants t ON t.tenant_id = r.tenant_id
                WHERE r.status = 'queued' AND r.partition_key IS NULL AND NOT t.paused
                  AND NOT coalesce(s.paused, false)
                  AND (%(run_types)s::text[] IS NULL OR r.run_type = ANY(%(run_types)s))
                ORDER BY r.tenant_id, r.source_id NULLS FIRST, r.file_id
                LIMIT %(limit)s""",
            {"run_types": _types(run_types), "limit": limits.max_files * max_batches},
        ).fetchall()
        for group in plan_batches(rows, limits)[:max_batches]:
            key = partition_key_for(group[0]["tenant_id"], group[0]["file_id"], source_name=group[0]["source_name"])
            file_ids = [r["file_id"] for r in group]
            conn.execute(
                "UPDATE ingestion_runs SET partition_key = %s, updated_at = now() WHERE file_id = ANY(%s)",
                (key, file_ids),
            )
            batches.append(
                Batch(key, group[0]["tenant_id"], tuple(file_ids), sum(r["size_bytes"] for r in group))
            )
    return batches


@contextlib.contextmanager
def one_launcher_at_a_time(db: Database) -> Iterator[None]:
    """Held while a launcher outside the sensors (runtime/fast_lane.py) checks that a batch has no run yet and
    launches one, across processes: two that checked at once would both launch it."""
    with db.transaction() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LAUNCHING_LOCK,))
        yield


def due_batches(conn: psycopg.Connection, run_types: Sequence[str] | None = None) -> list[dict]:
    """Batches with work due now: {partition_key, launch_gen, tenant_id, files, from_events, newest_age}, oldest
    first (a batch is one tenant's); ``from_events``: every file of it came by an S3 event notification
    (``sources/sync.py``); ``newest_age``: seconds since its newest file was queued.

    Rows waiting for a retry (``next_attempt_at`` in the future) and rows of a paused tenant or source
    are not due. ``launch_gen`` (the highest of the batch's due rows) goes up whenever a row needs a new
    run, so the run key of a relaunch differs from the run that came before.
    """
    return conn.execute(
        """SELECT r.partition_key, max(r.launch_gen) AS launch_gen, min(r.file_id) AS first_file,
                  min(r.tenant_id) AS tenant_id, count(*) AS files,
                  bool_and(coalesce(r.config->>'via', '') = 'event') AS from_events,
                  EXTRACT(EPOCH FROM now() - max(r.created_at)) AS newest_age
             FROM ingestion_runs r
             JOIN tenants t ON t.tenant_id = r.tenant_id
             LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
            WHERE r.status = 'queued' AND r.partition_key IS NOT NULL AND r.next_attempt_at <= now()
              AND NOT t.paused AND NOT coalesce(s.paused, false)
              AND (%(run_types)s::text[] IS NULL OR r.run_type = ANY(%(run_types)s))
            GROUP BY r.partition_key ORDER BY first_file""",
        {"run_types": _types(run_types)},
    ).fetchall()


def documents_due(conn: psycopg.Connection) -> bool:
    """Whether any document waits to run now (batched or not; not paused, not waiting for a retry)."""
    return conn.execute(
        """SELECT EXISTS (SELECT 1 FROM ingestion_runs r
                            JOIN tenants t ON t.tenant_id = r.tenant_id
                            LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
                           WHERE r.status = 'queued' AND r.next_attempt_at <= now()
                             AND NOT t.paused AND NOT coalesce(s.paused, false)) AS due""",
    ).fetchone()["due"]


def partitions_with_queued_rows(conn: psycopg.Connection, run_types: Sequence[str] | None = None) -> list[str]:
    """Batches that still have work waiting now (new ones, relaunched ones, retries that are due)."""
    return [r["partition_key"] for r in due_batches(conn, run_types)]


def next_due_at(conn: psycopg.Connection):
    """When the earliest queued row or pending upload that is waiting for a retry becomes due (or None)."""
    return conn.execute(
        """SELECT min(next_attempt_at) AS at FROM (
               SELECT r.next_attempt_at FROM ingestion_runs r JOIN tenants t ON t.tenant_id = r.tenant_id
                 LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
                WHERE r.status = 'queued' AND NOT t.paused AND NOT coalesce(s.paused, false)
               UNION ALL
               SELECT u.next_attempt_at FROM data_uploads u LEFT JOIN tenants t ON t.tenant_id = u.workspace_id
                WHERE u.status = 'pending' AND NOT coalesce(t.paused, false)) due"""
    ).fetchone()["at"]


def partition_sources(conn: psycopg.Connection, partition_keys: list[str]) -> dict[str, str]:
    """partition key -> source name, for batches that come from an S3 source."""
    rows = conn.execute(
        """SELECT DISTINCT r.partition_key, s.name FROM ingestion_runs r
             JOIN ingestion_sources s ON s.source_id = r.source_id
            WHERE r.partition_key = ANY(%s)""",
        (partition_keys,),
    ).fetchall()
    return {r["partition_key"]: r["name"] for r in rows}


def _types(run_types: Sequence[str] | None) -> list[str] | None:
    return None if run_types is None else list(run_types)
