"""Failing work: a permanent failure ends it, a transient one is retried with backoff until its attempts are
spent (then dead_letter); work whose worker died or whose run ended is handed back the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.failures import FailureInfo
from ingestion_pipeline.core.ledger.claims import field_assignments, hold
from ingestion_pipeline.core.ledger.tables import LedgerTable, record, table_sql
from ingestion_pipeline.core.settings import ReliabilitySettings


def _fail_locked(conn: psycopg.Connection, t: LedgerTable, row: Mapping, failure: FailureInfo,
                 policy: ReliabilitySettings, *, stats: Mapping[str, Any] | None = None,
                 fields: Mapping[str, Any] | None = None, count_attempt: bool = False) -> dict:
    """Fail a locked row: permanent -> failed; transient -> queued after a backoff, or dead_letter."""
    attempts = row["attempts"] + (1 if count_attempt else 0)
    delay = policy.backoff_after(attempts - row["attempts_before_replay"]) if failure.transient else None
    suggestion = failure.suggestion
    if not failure.transient:
        status, event, finished = t.failed, "failed", True
    elif delay is not None:
        status, event, finished = t.queued, "retry_scheduled", False
    else:
        status, event, finished = t.dead_letter, "dead_letter", True
        suggestion = f"attempts spent: `ingestion-pipeline retry {row[t.key]}` once the cause is fixed"
    assignments = [
        sql.SQL("status = %(status)s"), sql.SQL("error = %(error)s"), sql.SQL("error_code = %(code)s"),
        sql.SQL("suggestion = %(suggestion)s"), sql.SQL("attempts = %(attempts)s"), sql.SQL("updated_at = now()"),
        sql.SQL("stats = stats || %(stats)s"), sql.SQL("lease_expires_at = NULL"),
        sql.SQL("started_at = coalesce(started_at, now())"),
        sql.SQL("finished_at = now()" if finished else "finished_at = NULL"),
    ]
    if status == t.queued:
        assignments += [sql.SQL("owner = NULL"), sql.SQL("launch_gen = launch_gen + 1"),
                        sql.SQL("next_attempt_at = now() + make_interval(secs => %(delay)s)")]
    assignments += [sql.SQL("{} = {}").format(sql.Identifier(k), sql.Placeholder(k))
                    for k in field_assignments(t, fields or {})]
    updated = conn.execute(
        sql.SQL("UPDATE {table} SET {sets} WHERE {key} = %(item)s RETURNING *").format(
            table=sql.Identifier(t.table), sets=sql.SQL(", ").join(assignments), key=sql.Identifier(t.key)),
        {"status": status, "error": failure.message[:4000], "code": failure.code, "suggestion": suggestion,
         "attempts": attempts, "stats": Jsonb(dict(stats or {})), "delay": delay or 0, "item": row[t.key],
         **(fields or {})},
    ).fetchone()
    record(conn, t, [updated], event)
    return updated


def fail(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, failure: FailureInfo,
         policy: ReliabilitySettings, stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """The held unit of work failed: permanent -> failed; transient -> retried with backoff or
    dead-lettered after the last attempt. Raises ``LeaseLost`` if this owner no longer holds it."""
    return _fail_locked(conn, t, hold(conn, t, item_id, owner), failure, policy, stats=stats, fields=fields)


def fail_unclaimed(conn: psycopg.Connection, t: LedgerTable, item_id: int, failure: FailureInfo,
                   policy: ReliabilitySettings, **fields: Any) -> dict | None:
    """A queued row that cannot even be claimed (its stored file is gone …): fail it, if still queued."""
    row = conn.execute(table_sql("SELECT * FROM {table} WHERE {key} = %s AND status = ANY(%s) FOR NO KEY UPDATE", t),
                       (item_id, list(t.unfinished))).fetchone()
    return _fail_locked(conn, t, row, failure, policy, fields=fields, count_attempt=True) if row else None


def release(conn: psycopg.Connection, t: LedgerTable, *, owner: str, reason: str, event: str = "released",
            item_ids: Sequence[int] | None = None, hold_seconds: float = 0.0) -> list[dict]:
    """Give held rows back to the queue (interrupted or paused): this attempt is not counted. ``hold_seconds``:
    not launched again before then (the host that failed them would fail them alike at once)."""
    rows = conn.execute(
        table_sql("""UPDATE {table}
                 SET status = %(queued)s, owner = NULL, lease_expires_at = NULL,
                     next_attempt_at = now() + make_interval(secs => %(hold)s),
                     attempts = greatest(attempts - 1, attempts_before_replay), launch_gen = launch_gen + 1,
                     updated_at = now()
               WHERE owner = %(owner)s AND status = ANY(%(working)s)
                 AND (%(ids)s::bigint[] IS NULL OR {key} = ANY(%(ids)s))
           RETURNING *""", t),
        {"queued": t.queued, "owner": owner, "working": list(t.working), "hold": hold_seconds,
         "ids": list(item_ids) if item_ids is not None else None},
    ).fetchall()
    record(conn, t, rows, event, message=reason)
    return rows


def hold_longer_each_time(conn: psycopg.Connection, t: LedgerTable, rows: Sequence[Mapping], *, event: str,
                          base_seconds: float, cap_seconds: float, window_seconds: float = 86_400.0) -> None:
    """Hold rows just released with ``event`` for ``base_seconds`` doubled for each earlier ``event`` of theirs in
    the last ``window_seconds``, at most ``cap_seconds``: a cause that persists relaunches them less and less
    often, not at every ``base_seconds``."""
    if not rows:
        return
    conn.execute(
        table_sql("""WITH times AS (
                     SELECT item_id, count(*) AS n FROM ledger_history
                      WHERE kind = %(kind)s AND item_id = ANY(%(ids)s) AND event = %(event)s
                        AND at > now() - make_interval(secs => %(window)s)
                      GROUP BY item_id)
                 UPDATE {table} r
                    SET next_attempt_at = now() + make_interval(
                            secs => least(%(cap)s, %(base)s * power(2, least(greatest(times.n - 1, 0), 30))))
                   FROM times
                  WHERE r.{key} = times.item_id""", t),
        {"kind": t.kind, "ids": [r[t.key] for r in rows], "event": event, "window": window_seconds,
         "cap": cap_seconds, "base": base_seconds},
    )


def expire_leases(conn: psycopg.Connection, t: LedgerTable, policy: ReliabilitySettings, *,
                  keep_owners: Iterable[str] = ()) -> list[dict]:
    """Rows whose owner stopped heartbeating go back to the queue as a failed attempt (or dead_letter).

    ``keep_owners``: owners whose rows a Dagster retry is about to continue.
    """
    expired = conn.execute(
        table_sql("""SELECT * FROM {table}
               WHERE status = ANY(%(working)s) AND lease_expires_at < now()
                 AND NOT (owner = ANY(%(keep)s))
               ORDER BY {key} FOR NO KEY UPDATE SKIP LOCKED""", t),
        {"working": list(t.working), "keep": list(keep_owners)},
    ).fetchall()
    return [
        _fail_locked(conn, t, row, FailureInfo(
            "lease_expired", f"the worker of run {row['dagster_run_id']} stopped (no heartbeat since its lease ran "
            f"out at {row['lease_expires_at']:%Y-%m-%d %H:%M:%S %Z}); retried from its staged work", True), policy)
        for row in expired
    ]


def finalize_run(conn: psycopg.Connection, t: LedgerTable, *, owner: str, partition_key: str | None,
                 launch_gen: int | None, failure: FailureInfo, policy: ReliabilitySettings) -> list[dict]:
    """A Dagster run ended without finishing its work and no retry follows.

    Rows it still holds are a failed attempt (retried with backoff or dead-lettered); rows of its
    partition that were due and that it never claimed count an attempt too, so a batch whose runs
    keep failing before they claim anything ends in dead_letter instead of relaunching forever.
    """
    held = conn.execute(
        table_sql("SELECT * FROM {table} WHERE owner = %s AND status = ANY(%s) ORDER BY {key} FOR NO KEY UPDATE", t),
        (owner, list(t.working)),
    ).fetchall()
    finalized = [_fail_locked(conn, t, row, failure, policy) for row in held]
    if partition_key is not None:
        waiting = conn.execute(
            table_sql("""SELECT * FROM {table}
                   WHERE partition_key = %(partition)s AND status = %(queued)s AND next_attempt_at <= now()
                     AND (%(gen)s::int IS NULL OR launch_gen <= %(gen)s)
                   ORDER BY {key} FOR NO KEY UPDATE SKIP LOCKED""", t),
            {"partition": partition_key, "queued": t.queued, "gen": launch_gen},
        ).fetchall()
        finalized += [_fail_locked(conn, t, row, failure, policy, count_attempt=True) for row in waiting]
    return finalized


def relaunch_stale_queued(conn: psycopg.Connection, t: LedgerTable, *, older_than_seconds: float,
                          keep_partitions: Iterable[str] = ()) -> list[str]:
    """Queued rows that no run picked up for a long time get a new launch generation (a new run key,
    so the sensors launch their batch again); returns the partitions relaunched."""
    rows = conn.execute(
        table_sql("""UPDATE {table} SET launch_gen = launch_gen + 1, updated_at = now()
               WHERE status = %(queued)s AND partition_key IS NOT NULL AND next_attempt_at <= now()
                 AND updated_at < now() - make_interval(secs => %(older)s)
                 AND NOT (partition_key = ANY(%(keep)s))
           RETURNING *""", t),
        {"queued": t.queued, "older": older_than_seconds, "keep": list(keep_partitions)},
    ).fetchall()
    record(conn, t, rows, "relaunched", message="no run picked it up; its batch is launched again")
    return sorted({r["partition_key"] for r in rows})
