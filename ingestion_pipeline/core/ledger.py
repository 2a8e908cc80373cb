"""The ledger mechanism: the state transitions of a unit of work, written once for both kinds of work.

A unit of work is a row of a ledger table: a document file (``ingestion_runs``) or a metric upload
(``data_uploads``). Each kind names its own states in a ``LedgerTable``; the transitions are the same:

    queued --claim--> working --finish--> succeeded
                         |  \\--fail----> failed
                         \\--advance--> working (the next stage of a multi-stage kind)

``started_at`` is set once (kept across retries), ``updated_at`` is the heartbeat, ``finished_at``
closes the row; ``attempts`` counts claims; ``stats`` merges what each step reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb


@dataclass(frozen=True)
class LedgerTable:
    """One kind of work: its table, key column and the names of its states."""

    kind: str  # document | metric_upload
    table: str
    key: str
    queued: str
    working: tuple[str, ...]  # claimed and not finished; the first is the state a claim sets
    succeeded: tuple[str, ...]
    failed: str = "failed"
    fields: tuple[str, ...] = ()  # other columns a transition may set

    @property
    def unfinished(self) -> tuple[str, ...]:
        return (self.queued, *self.working)

    @property
    def terminal(self) -> tuple[str, ...]:
        return (*self.succeeded, self.failed)


DOCUMENT_RUNS = LedgerTable("document", "ingestion_runs", "run_id", "queued", ("running",), ("succeeded",))
METRIC_UPLOADS = LedgerTable(
    "metric_upload", "data_uploads", "upload_id", "pending", ("processing", "staging_complete", "promoting"),
    ("completed", "partial"),
    fields=("total_rows", "valid_rows", "invalid_rows", "promoted_rows", "unpromotable_rows"),
)


def _sql(text: str, t: LedgerTable) -> sql.Composed:
    return sql.SQL(text).format(table=sql.Identifier(t.table), key=sql.Identifier(t.key))


def claim(
    conn: psycopg.Connection, t: LedgerTable, *, partition_key: str, dagster_run_id: str,
    claimable: Sequence[str] | None = None,
) -> list[dict]:
    """Move the partition's claimable rows (default: queued, working or failed) to the first working
    state under ``dagster_run_id``; return them."""
    statuses = list(claimable or (*t.unfinished, t.failed))
    return conn.execute(
        _sql(
            """UPDATE {table}
                  SET status = %(claimed)s, dagster_run_id = %(run)s, attempts = attempts + 1,
                      started_at = coalesce(started_at, now()), updated_at = now(), finished_at = NULL, error = NULL
                WHERE partition_key = %(partition)s AND status = ANY(%(statuses)s)
            RETURNING *""", t),
        {"claimed": t.working[0], "run": dagster_run_id, "partition": partition_key, "statuses": statuses},
    ).fetchall()


def heartbeat(conn: psycopg.Connection, t: LedgerTable, item_id: int, stats: Mapping[str, Any] | None = None) -> None:
    conn.execute(_sql("UPDATE {table} SET updated_at = now(), stats = stats || %s WHERE {key} = %s", t),
                 (Jsonb(dict(stats or {})), item_id))


def _transition(
    conn: psycopg.Connection, t: LedgerTable, item_id: int, status: str, *, error: str | None,
    stats: Mapping[str, Any] | None, fields: Mapping[str, Any], only_working_under: str | None = None,
) -> dict | None:
    unknown = set(fields) - set(t.fields)
    if unknown:
        raise ValueError(f"not a {t.table} field: {', '.join(sorted(unknown))}")
    assignments = [
        sql.SQL("status = %(status)s"), sql.SQL("error = %(error)s"), sql.SQL("stats = stats || %(stats)s"),
        sql.SQL("updated_at = now()"), sql.SQL("started_at = coalesce(started_at, now())"),
        sql.SQL("finished_at = now()" if status in t.terminal else "finished_at = NULL"),
    ]
    assignments += [sql.SQL("{} = {}").format(sql.Identifier(name), sql.Placeholder(name)) for name in fields]
    guard = sql.SQL("")
    if only_working_under is not None:
        guard = sql.SQL(" AND dagster_run_id = %(owner)s AND status = ANY(%(working)s)")
    query = sql.SQL("UPDATE {table} SET {assignments} WHERE {key} = %(item)s{guard} RETURNING *").format(
        table=sql.Identifier(t.table), assignments=sql.SQL(", ").join(assignments), key=sql.Identifier(t.key),
        guard=guard,
    )
    return conn.execute(query, {
        "status": status, "error": error, "stats": Jsonb(dict(stats or {})), "item": item_id,
        "owner": only_working_under, "working": list(t.working), **fields,
    }).fetchone()


def advance(conn: psycopg.Connection, t: LedgerTable, item_id: int, status: str,
            stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """Move a claimed row to another working state (a later stage of the same attempt)."""
    if status not in t.working:
        raise ValueError(f"{status!r} is not a working state of {t.table}")
    return _transition(conn, t, item_id, status, error=None, stats=stats, fields=fields)


def finish(conn: psycopg.Connection, t: LedgerTable, item_id: int, status: str | None = None,
           stats: Mapping[str, Any] | None = None, **fields: Any) -> dict:
    """The unit of work succeeded (``status``: one of the kind's success states)."""
    status = status or t.succeeded[0]
    if status not in t.succeeded:
        raise ValueError(f"{status!r} is not a success state of {t.table}")
    return _transition(conn, t, item_id, status, error=None, stats=stats, fields=fields)


def fail(conn: psycopg.Connection, t: LedgerTable, item_id: int, error: str, stats: Mapping[str, Any] | None = None,
         *, only_working_under: str | None = None, **fields: Any) -> dict | None:
    """The unit of work failed with ``error`` (a reason a person can act on).

    With ``only_working_under``, only while that Dagster run still works on it (never a finished row).
    """
    return _transition(conn, t, item_id, t.failed, error=error, stats=stats, fields=fields,
                       only_working_under=only_working_under)


def fail_unfinished(conn: psycopg.Connection, t: LedgerTable, *, dagster_run_id: str,
                    partition_key: str | None, reason: str) -> list[dict]:
    """A Dagster run died: its working rows, and its partition's rows still queued, end failed."""
    return conn.execute(
        _sql(
            """UPDATE {table}
                  SET status = %(failed)s, error = %(reason)s, updated_at = now(), finished_at = now()
                WHERE (dagster_run_id = %(run)s AND status = ANY(%(unfinished)s))
                   OR (%(partition)s::text IS NOT NULL AND partition_key = %(partition)s AND status = %(queued)s)
            RETURNING *""", t),
        {"failed": t.failed, "reason": reason, "run": dagster_run_id, "unfinished": list(t.unfinished),
         "partition": partition_key, "queued": t.queued},
    ).fetchall()
