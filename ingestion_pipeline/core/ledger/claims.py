"""Claiming work and keeping it: a claim, the hold every write of a step takes first, heartbeats, and the
transitions of a held row to a later stage or to success."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.ledger.tables import TABLES, LeaseLost, LedgerTable, Worker, record, table_sql


def claim(conn: psycopg.Connection, t: LedgerTable, worker: Worker, *, partition_key: str,
          replay_finished: bool = False, replay_failed: bool = False) -> list[dict]:
    """Claim the partition's rows this worker may work on; return them (with ``claim_event``).

    Claimable: queued and due; held by this owner already (a re-execution); held by another owner
    whose lease expired, unless its attempts are spent (a file that keeps killing its workers ends in
    dead_letter through ``expire_leases`` instead of killing the next one). With ``replay_finished`` (a
    person launched the partition's run) also queued rows still waiting for their backoff, and dead-lettered
    rows with a fresh retry budget; with ``replay_failed`` as well, permanently failed rows (only when asked:
    they failed for a reason a new attempt does not change). Rows of a paused tenant or source are left.
    """
    replayable = [t.dead_letter, *([t.failed] if replay_failed else [])] if replay_finished else []
    rows = conn.execute(
        table_sql("""
        WITH candidate AS (
            SELECT w.{key} AS id, w.status AS previous_status, w.owner AS previous_owner
              FROM {table} w
              LEFT JOIN tenants tn ON tn.tenant_id = w.{tenant}
              LEFT JOIN ingestion_sources src ON src.source_id = w.source_id
             WHERE w.partition_key = %(partition)s
               AND NOT coalesce(tn.paused, false) AND NOT coalesce(src.paused, false)
               AND (   (w.status = %(queued)s AND (w.next_attempt_at <= now() OR %(replay)s))
                    OR (w.status = ANY(%(working)s)
                        AND (w.owner = %(owner)s OR w.owner IS NULL
                             OR (w.lease_expires_at < now()
                                 AND w.attempts - w.attempts_before_replay < %(max_attempts)s)))
                    OR (%(replay)s AND w.status = ANY(%(replayable)s)))
             ORDER BY w.{key}
               FOR NO KEY UPDATE OF w SKIP LOCKED)
        UPDATE {table} w
           SET status = %(claimed)s, owner = %(owner)s, dagster_run_id = %(run)s,
               lease_expires_at = now() + make_interval(secs => %(lease)s),
               attempts = w.attempts + CASE WHEN c.previous_status = ANY(%(working)s)
                                             AND c.previous_owner = %(owner)s THEN 0 ELSE 1 END,
               attempts_before_replay = CASE WHEN c.previous_status = ANY(%(replayable)s) THEN w.attempts
                                             ELSE w.attempts_before_replay END,
               started_at = coalesce(w.started_at, now()), updated_at = now(), finished_at = NULL,
               error = NULL, error_code = NULL, suggestion = NULL, canceled_at = NULL, canceled_by = NULL
          FROM candidate c
         WHERE w.{key} = c.id
        RETURNING w.*, CASE WHEN c.previous_status = ANY(%(replayable)s) THEN 'replayed'
                            WHEN c.previous_status = %(queued)s THEN 'claimed'
                            WHEN c.previous_owner = %(owner)s THEN 'adopted'
                            ELSE 'taken_over' END AS claim_event""", t),
        {"partition": partition_key, "queued": t.queued, "working": list(t.working), "owner": worker.owner,
         "replay": replay_finished, "replayable": replayable, "claimed": t.working[0],
         "run": worker.dagster_run_id, "lease": worker.lease_seconds, "max_attempts": worker.max_attempts},
    ).fetchall()
    for event in ("claimed", "adopted", "taken_over", "replayed"):
        record(conn, t, [r for r in rows if r["claim_event"] == event], event, message="")
    return sorted(rows, key=lambda r: r[t.key])


def any_unfinished(conn: psycopg.Connection) -> bool:
    """Whether any unit of work, of any kind, is queued or claimed: all that `process` runs and the janitor
    hands back. Each table's status index answers it."""
    query = sql.SQL("SELECT {} AS unfinished").format(sql.SQL(" OR ").join(
        table_sql("EXISTS (SELECT 1 FROM {table} WHERE status = ANY(%s))", t) for t in TABLES))
    return conn.execute(query, [list(t.unfinished) for t in TABLES]).fetchone()["unfinished"]


def states(conn: psycopg.Connection, t: LedgerTable, item_ids: Sequence[int]) -> dict[int, dict]:
    """id -> {status, dagster_run_id, owner} for the given rows."""
    rows = conn.execute(
        table_sql("SELECT {key} AS id, status, dagster_run_id, owner FROM {table} WHERE {key} = ANY(%s)", t),
        (list(item_ids),),
    ).fetchall()
    return {r["id"]: r for r in rows}


def select_replayable(conn: psycopg.Connection, t: LedgerTable, *, status: str, tenant_id: str | None = None,
                      since_seconds: float | None = None, limit: int = 10_000) -> list[int]:
    """Ids of rows in ``status`` (failed or dead_letter), of one tenant, finished within ``since_seconds``."""
    if status not in t.replayable:
        raise ValueError(f"only {', '.join(t.replayable)} work can be replayed, not {status!r}")
    rows = conn.execute(
        table_sql("""SELECT {key} AS id FROM {table}
               WHERE status = %(status)s AND (%(tenant)s::text IS NULL OR {tenant} = %(tenant)s)
                 AND (%(since)s::float8 IS NULL OR finished_at >= now() - make_interval(secs => %(since)s))
               ORDER BY {key} LIMIT %(limit)s""", t),
        {"status": status, "tenant": tenant_id, "since": since_seconds, "limit": limit},
    ).fetchall()
    return [r["id"] for r in rows]


def held_by(conn: psycopg.Connection, t: LedgerTable, owner: str) -> list[int]:
    """The ids of the rows ``owner`` works on."""
    return [r["id"] for r in conn.execute(
        table_sql("SELECT {key} AS id FROM {table} WHERE owner = %s AND status = ANY(%s) ORDER BY {key}", t),
        (owner, list(t.working))).fetchall()]


def hold(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str) -> dict:
    """Lock the row for this transaction if ``owner`` still works on it; else raise ``LeaseLost``."""
    row = conn.execute(table_sql("SELECT * FROM {table} WHERE {key} = %s FOR NO KEY UPDATE", t), (item_id,)).fetchone()
    if row is None:
        raise LeaseLost(f"{t.kind} {item_id} does not exist")
    if row["owner"] != owner or row["status"] not in t.working:
        holder = f"held by run {row['owner']}" if row["status"] in t.working else f"now {row['status']}"
        raise LeaseLost(f"{t.kind} {item_id} is no longer this run's ({holder})")
    return row


def hold_many(conn: psycopg.Connection, t: LedgerTable, item_ids: Sequence[int], owner: str) -> dict[int, str]:
    """``hold`` and ``heartbeat`` for several rows in one statement: the rows ``owner`` still works on are
    locked for this transaction and touched. Returns the others, each with why it is not held."""
    held = {r["id"] for r in conn.execute(
        table_sql("""UPDATE {table} SET updated_at = now()
                      WHERE {key} IN (SELECT {key} FROM {table} WHERE {key} = ANY(%(ids)s) ORDER BY {key}
                                         FOR NO KEY UPDATE)
                        AND owner = %(owner)s AND status = ANY(%(working)s)
                  RETURNING {key} AS id""", t),
        {"ids": list(item_ids), "owner": owner, "working": list(t.working)}).fetchall()}
    return _not_held(conn, t, item_ids, held, owner)


def _not_held(conn: psycopg.Connection, t: LedgerTable, item_ids: Sequence[int], held: set[int],
              owner: str) -> dict[int, str]:
    """Those of ``item_ids`` a set-based statement did not hold, each with why (``hold`` says it)."""
    lost = {}
    for item_id in item_ids:
        if item_id not in held:
            try:
                hold(conn, t, item_id, owner)
            except LeaseLost as exc:
                lost[item_id] = str(exc)
    return lost


def heartbeat(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str,
              stats: Mapping[str, Any] | None = None) -> dict:
    """Progress of a held row: merge ``stats`` and touch ``updated_at`` (``LeaseLost`` if not held)."""
    return _update_held(conn, t, item_id, owner, {"stats": sql.SQL("stats || %(stats)s")},
                        {"stats": Jsonb(dict(stats or {}))})


def heartbeat_many(conn: psycopg.Connection, t: LedgerTable, stats_by_item: Mapping[int, Mapping[str, Any]],
                   owner: str) -> dict[int, str]:
    """``heartbeat`` for several rows in one statement, each with its own ``stats``; returns the rows not
    held, each with why. Hold them first (``hold_many``): this statement locks in no particular order."""
    item_ids = list(stats_by_item)
    held = {r["id"] for r in conn.execute(
        table_sql("""UPDATE {table} x SET updated_at = now(), stats = x.stats || f.stats
                       FROM unnest(%(ids)s::bigint[], %(stats)s::jsonb[]) AS f(id, stats)
                      WHERE x.{key} = f.id AND x.owner = %(owner)s AND x.status = ANY(%(working)s)
                  RETURNING x.{key} AS id""", t),
        {"ids": item_ids, "stats": [Jsonb(dict(stats_by_item[i])) for i in item_ids], "owner": owner,
         "working": list(t.working)}).fetchall()}
    return _not_held(conn, t, item_ids, held, owner)


def extend_leases(conn: psycopg.Connection, owner: str, lease_seconds: float, dagster_run_id: str) -> int:
    """The owner's heartbeat: every row it holds, in both ledgers, keeps its claim a lease longer and
    names the run now working on it (a re-execution continues what its parent run claimed)."""
    extended = 0
    for t in TABLES:
        extended += conn.execute(
            table_sql("""UPDATE {table} SET lease_expires_at = now() + make_interval(secs => %(lease)s),
                                dagster_run_id = %(run)s
                   WHERE {key} IN (SELECT {key} FROM {table} WHERE owner = %(owner)s AND status = ANY(%(working)s)
                                      FOR NO KEY UPDATE SKIP LOCKED)""", t),
            {"lease": lease_seconds, "owner": owner, "working": list(t.working), "run": dagster_run_id},
        ).rowcount
    return extended


def _update_held(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str,
                 assignments: Mapping[str, sql.Composable], params: Mapping[str, Any] | None = None) -> dict:
    sets = sql.SQL(", ").join([sql.SQL("updated_at = now()")] + [
        sql.SQL("{} = {}").format(sql.Identifier(name), value) for name, value in assignments.items()
    ])
    row = conn.execute(
        sql.SQL("UPDATE {table} SET {sets} WHERE {key} = %(item)s AND owner = %(owner)s AND status = ANY(%(working)s) "
                "RETURNING *").format(table=sql.Identifier(t.table), sets=sets, key=sql.Identifier(t.key)),
        {"item": item_id, "owner": owner, "working": list(t.working), **(params or {})},
    ).fetchone()
    if row is None:
        hold(conn, t, item_id, owner)  # raises LeaseLost with the reason
        raise AssertionError("unreachable")
    return row


def field_assignments(t: LedgerTable, fields: Mapping[str, Any]) -> dict[str, sql.Composable]:
    unknown = set(fields) - set(t.fields)
    if unknown:
        raise ValueError(f"not a {t.table} field: {', '.join(sorted(unknown))}")
    return {name: sql.Placeholder(name) for name in fields}


def advance(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, status: str,
            stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """Move a held row to another working state (a later stage of the same attempt)."""
    if status not in t.working:
        raise ValueError(f"{status!r} is not a working state of {t.table}")
    row = _update_held(conn, t, item_id, owner, {
        "status": sql.Placeholder("status"), "stats": sql.SQL("stats || %(stats)s"), **field_assignments(t, fields),
    }, {"status": status, "stats": Jsonb(dict(stats or {})), **fields})
    record(conn, t, [row], status, message="")
    return row


def update_fields(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, **fields: Any) -> dict:
    """Set columns of a held row (e.g. where an S3 object's bytes were stored)."""
    return _update_held(conn, t, item_id, owner, field_assignments(t, fields), fields)


def finish(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, status: str | None = None,
           stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """The held unit of work succeeded (``status``: one of the kind's success states)."""
    status = status or t.succeeded[0]
    if status not in t.succeeded:
        raise ValueError(f"{status!r} is not a success state of {t.table}")
    row = _update_held(conn, t, item_id, owner, {
        "status": sql.Placeholder("status"), "stats": sql.SQL("stats || %(stats)s"),
        "finished_at": sql.SQL("now()"), "lease_expires_at": sql.NULL, "error": sql.NULL, "error_code": sql.NULL,
        "suggestion": sql.NULL, **field_assignments(t, fields),
    }, {"status": status, "stats": Jsonb(dict(stats or {})), **fields})
    record(conn, t, [row], "succeeded", message="")
    return row
