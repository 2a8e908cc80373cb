"""The kinds of work the ledger tracks (``LedgerTable``), who claims it (``Worker``), and its history."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import psycopg
from psycopg import sql


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


DOCUMENT_FILES = LedgerTable(
    "document", "ingestion_runs", "file_id", "tenant_id", "queued", ("running",), ("succeeded",),
    fields=("raw_path", "content_hash", "size_bytes"),
)
METRIC_UPLOADS = LedgerTable(
    "metric_upload", "data_uploads", "upload_id", "workspace_id", "pending",
    ("processing", "staging_complete", "promoting"), ("completed", "partial"),
    fields=("total_rows", "valid_rows", "invalid_rows", "promoted_rows", "unpromotable_rows", "layout", "skipped_rows",
            "notes"),
)
TABLES = (DOCUMENT_FILES, METRIC_UPLOADS)


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


def history(conn: psycopg.Connection, t: LedgerTable, item_id: int) -> list[dict]:
    return conn.execute(
        """SELECT attempt, event, status, error_code, message, dagster_run_id, actor, at FROM ledger_history
            WHERE kind = %s AND item_id = %s ORDER BY history_id""",
        (t.kind, item_id),
    ).fetchall()
