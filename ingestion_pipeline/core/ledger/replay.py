"""What people do to finished or waiting work: replay it with a fresh retry budget, or cancel it."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from ingestion_pipeline.core.ledger.tables import LedgerTable, record, table_sql


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
