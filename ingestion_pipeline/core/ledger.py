"""The ledger mechanism: how a unit of work is claimed, kept, finished, retried and replayed.

A unit of work is a row of a ledger table: a document file (``ingestion_runs``) or a metric upload
(``data_uploads``). Each kind names its states in a ``LedgerTable``; the transitions are written once:

    queued --claim--> working --finish--> succeeded
      ^                  |  \\--fail (permanent)------------------> failed
      |                  |   \\-fail (transient, attempts left)--> queued, after a backoff
      |                  |    \\fail (transient, attempts spent)-> dead_letter
      +-- release -------+  (interrupted or paused: back to the queue, the attempt not counted)
      +-- requeue (replay of failed / dead_letter / canceled, a fresh budget of attempts)
    queued | working --cancel--> canceled

**Ownership.** A claim records an *owner* (the root Dagster run, so a re-execution continues what its
parent claimed) and a *lease* that the owner's heartbeat (``core/leases.py``) extends. A claim takes
rows that are queued and due, rows the same owner already holds, and rows whose lease expired
(``FOR UPDATE SKIP LOCKED``: two claimers never take the same row). Every write of a step first
*holds* its row (``SELECT … FOR NO KEY UPDATE`` where owner and state still match) in the same
transaction, so a worker that lost its lease raises ``LeaseLost`` and touches nothing.

**Attempts.** ``attempts`` counts claims; the retry budget (``ReliabilitySettings``: by default 4
attempts, waiting 5 s, 10 s, 30 s between them) counts from ``attempts_before_replay``. Every
transition appends a ``ledger_history`` row in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.failures import FailureInfo
from ingestion_pipeline.core.settings import ReliabilitySettings


class LeaseLost(Exception):
    """This worker no longer holds the unit of work (taken over after its lease expired, canceled,
    paused or requeued); it must stop touching it."""


@dataclass(frozen=True)
class LedgerTable:
    """One kind of work: its table, key column and the names of its states."""

    kind: str  # document | metric_upload (ledger_history.kind)
    table: str
    key: str
    tenant_column: str
    queued: str
    working: tuple[str, ...]  # claimed and not finished; a claim sets the first
    succeeded: tuple[str, ...]
    fields: tuple[str, ...] = ()  # other columns a transition may set
    failed: str = "failed"
    dead_letter: str = "dead_letter"
    canceled: str = "canceled"

    @property
    def unfinished(self) -> tuple[str, ...]:
        return (self.queued, *self.working)

    @property
    def replayable(self) -> tuple[str, ...]:
        return (self.failed, self.dead_letter, self.canceled)

    @property
    def terminal(self) -> tuple[str, ...]:
        return (*self.succeeded, *self.replayable)


DOCUMENT_RUNS = LedgerTable(
    "document", "ingestion_runs", "run_id", "tenant_id", "queued", ("running",), ("succeeded",),
    fields=("raw_path", "content_hash", "size_bytes"),
)
METRIC_UPLOADS = LedgerTable(
    "metric_upload", "data_uploads", "upload_id", "workspace_id", "pending",
    ("processing", "staging_complete", "promoting"), ("completed", "partial"),
    fields=("total_rows", "valid_rows", "invalid_rows", "promoted_rows", "unpromotable_rows", "layout", "skipped_rows",
            "notes"),
)
TABLES = (DOCUMENT_RUNS, METRIC_UPLOADS)


@dataclass(frozen=True)
class Worker:
    """Who claims: the owner (root run id), the Dagster run doing the work, and the lease it keeps."""

    owner: str
    dagster_run_id: str
    lease_seconds: float
    max_attempts: int = 4  # a row whose attempts are spent is not taken over (expire_leases dead-letters it)


def table_sql(text: str, t: LedgerTable) -> sql.Composed:
    """``text`` with ``{table}``, ``{key}`` and ``{tenant}`` filled in for ``t`` (identifiers, not values)."""
    return sql.SQL(text).format(table=sql.Identifier(t.table), key=sql.Identifier(t.key),
                                tenant=sql.Identifier(t.tenant_column))


def record(conn: psycopg.Connection, t: LedgerTable, rows: Iterable[Mapping], event: str, *,
           message: str | None = None, actor: str | None = None) -> None:
    """Append one ``ledger_history`` row per row (in the caller's transaction)."""
    params = [
        (t.kind, r[t.key], r["attempts"], event, r["status"], r.get("error_code"),
         (message if message is not None else r.get("error")) or None, r.get("owner"), r.get("dagster_run_id"), actor)
        for r in rows
    ]
    if params:
        with conn.cursor() as cur:
            cur.executemany(
                """INSERT INTO ledger_history (kind, item_id, attempt, event, status, error_code, message, owner,
                                               dagster_run_id, actor)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                params,
            )


# -- claiming and keeping -------------------------------------------------------------------------
def claim(conn: psycopg.Connection, t: LedgerTable, worker: Worker, *, partition_key: str,
          replay_finished: bool = False) -> list[dict]:
    """Claim the partition's rows this worker may work on; return them (with ``claim_event``).

    Claimable: queued and due; held by this owner already (a re-execution); held by another owner
    whose lease expired, unless its attempts are spent (a file that keeps killing its workers ends in
    dead_letter through ``expire_leases`` instead of killing the next one); with ``replay_finished``
    (a person re-materialised the partition) also failed and dead-lettered rows, with a fresh retry
    budget. Rows of a paused tenant or source are left.
    """
    rows = conn.execute(
        table_sql("""
        WITH candidate AS (
            SELECT w.{key} AS id, w.status AS previous_status, w.owner AS previous_owner
              FROM {table} w
              LEFT JOIN tenants tn ON tn.tenant_id = w.{tenant}
              LEFT JOIN ingestion_sources src ON src.source_id = w.source_id
             WHERE w.partition_key = %(partition)s
               AND NOT coalesce(tn.paused, false) AND NOT coalesce(src.paused, false)
               AND (   (w.status = %(queued)s AND w.next_attempt_at <= now())
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
         "replay": replay_finished, "replayable": [t.failed, t.dead_letter], "claimed": t.working[0],
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


def _field_assignments(t: LedgerTable, fields: Mapping[str, Any]) -> dict[str, sql.Composable]:
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
        "status": sql.Placeholder("status"), "stats": sql.SQL("stats || %(stats)s"), **_field_assignments(t, fields),
    }, {"status": status, "stats": Jsonb(dict(stats or {})), **fields})
    record(conn, t, [row], status, message="")
    return row


def update_fields(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, **fields: Any) -> dict:
    """Set columns of a held row (e.g. where an S3 object's bytes were stored)."""
    return _update_held(conn, t, item_id, owner, _field_assignments(t, fields), fields)


def finish(conn: psycopg.Connection, t: LedgerTable, item_id: int, owner: str, status: str | None = None,
           stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """The held unit of work succeeded (``status``: one of the kind's success states)."""
    status = status or t.succeeded[0]
    if status not in t.succeeded:
        raise ValueError(f"{status!r} is not a success state of {t.table}")
    row = _update_held(conn, t, item_id, owner, {
        "status": sql.Placeholder("status"), "stats": sql.SQL("stats || %(stats)s"),
        "finished_at": sql.SQL("now()"), "lease_expires_at": sql.NULL, "error": sql.NULL, "error_code": sql.NULL,
        "suggestion": sql.NULL, **_field_assignments(t, fields),
    }, {"status": status, "stats": Jsonb(dict(stats or {})), **fields})
    record(conn, t, [row], "succeeded", message="")
    return row


# -- failing, retrying, dead letters ----------------------------------------------------------------
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
                    for k in _field_assignments(t, fields or {})]
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
            item_ids: Sequence[int] | None = None) -> list[dict]:
    """Give held rows back to the queue (interrupted or paused): this attempt is not counted."""
    rows = conn.execute(
        table_sql("""UPDATE {table}
                 SET status = %(queued)s, owner = NULL, lease_expires_at = NULL, next_attempt_at = now(),
                     attempts = greatest(attempts - 1, attempts_before_replay), launch_gen = launch_gen + 1,
                     updated_at = now()
               WHERE owner = %(owner)s AND status = ANY(%(working)s)
                 AND (%(ids)s::bigint[] IS NULL OR {key} = ANY(%(ids)s))
           RETURNING *""", t),
        {"queued": t.queued, "owner": owner, "working": list(t.working),
         "ids": list(item_ids) if item_ids is not None else None},
    ).fetchall()
    record(conn, t, rows, event, message=reason)
    return rows


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


# -- what people do: replay, cancel ------------------------------------------------------------------
def requeue(conn: psycopg.Connection, t: LedgerTable, item_ids: Sequence[int], *, actor: str) -> list[dict]:
    """Replay failed, dead-lettered or canceled rows as a new attempt with a fresh retry budget."""
    rows = conn.execute(
        table_sql("""UPDATE {table}
                 SET status = %(queued)s, owner = NULL, lease_expires_at = NULL, next_attempt_at = now(),
                     attempts_before_replay = attempts, launch_gen = launch_gen + 1, finished_at = NULL,
                     error = NULL, error_code = NULL, suggestion = NULL, canceled_at = NULL, canceled_by = NULL,
                     updated_at = now()
               WHERE {key} = ANY(%(ids)s) AND status = ANY(%(replayable)s)
           RETURNING *""", t),
        {"queued": t.queued, "ids": list(item_ids), "replayable": list(t.replayable)},
    ).fetchall()
    record(conn, t, rows, "requeued", message="replayed by a person", actor=actor)
    return rows


def cancel(conn: psycopg.Connection, t: LedgerTable, item_ids: Sequence[int], *, actor: str) -> list[dict]:
    """Cancel queued or working rows; a worker holding one loses it at its next write."""
    rows = conn.execute(
        table_sql("""UPDATE {table}
                 SET status = %(canceled)s, owner = NULL, lease_expires_at = NULL, finished_at = now(),
                     canceled_at = now(), canceled_by = %(actor)s, error = %(message)s, error_code = 'canceled',
                     updated_at = now()
               WHERE {key} = ANY(%(ids)s) AND status = ANY(%(unfinished)s)
           RETURNING *""", t),
        {"canceled": t.canceled, "actor": actor, "message": f"canceled by {actor}", "ids": list(item_ids),
         "unfinished": list(t.unfinished)},
    ).fetchall()
    record(conn, t, rows, "canceled", actor=actor)
    return rows


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


def history(conn: psycopg.Connection, t: LedgerTable, item_id: int) -> list[dict]:
    return conn.execute(
        """SELECT attempt, event, status, error_code, message, dagster_run_id, actor, at FROM ledger_history
            WHERE kind = %s AND item_id = %s ORDER BY history_id""",
        (t.kind, item_id),
    ).fetchall()
