"""When a person's run of a partition finds nothing to do in it: the run says so, and what to run instead.

A person's launch (a materialisation, a backfill, a re-execution from the UI) re-drives what its partition
still has. When it has nothing (every file done, held by another run, or failed for a reason a new attempt
does not change) the run must not go green on nothing: ``nothing_to_do`` describes the partition and
``NothingToDo`` carries it to the step, which fails with it (a document batch's run says so at each step and
fails at its last, once the data's checks have looked at the batch: ``defs/documents/assets.py``).
"""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.ledger.tables import LedgerTable, table_sql

REPLAY_FAILED_TAG = "ingestion/replay_failed"  # a launch with this tag set to "true" replays failed work too


class NothingToDo(Exception):
    """A person's run found no work in its partition; the message says why and what to run instead.
    ``everything_done``: every row of the partition succeeded (none failed, held, queued or canceled)."""

    def __init__(self, message: str, *, everything_done: bool = False) -> None:
        super().__init__(message)
        self.everything_done = everything_done


def partition_states(conn: psycopg.Connection, t: LedgerTable, partition_key: str) -> list[dict]:
    """(status, count, error codes, owners, the first row's error and suggestion) of the partition's rows,
    by status."""
    return conn.execute(table_sql(
        """SELECT status, count(*) AS n,
                  array_remove(array_agg(DISTINCT error_code), NULL) AS codes,
                  array_remove(array_agg(DISTINCT owner), NULL) AS owners,
                  (array_agg(error ORDER BY {key}) FILTER (WHERE error IS NOT NULL))[1] AS first_error,
                  (array_agg(suggestion ORDER BY {key}) FILTER (WHERE suggestion IS NOT NULL))[1] AS suggestion
             FROM {table} WHERE partition_key = %s GROUP BY status ORDER BY status""", t),
        (partition_key,)).fetchall()


def nothing_to_do(conn: psycopg.Connection, t: LedgerTable, partition_key: str, *, noun: str,
                  retry_hint: str) -> NothingToDo:
    """What the partition holds and what a person can run instead (``retry_hint``: the command that replays
    one of its rows, e.g. ``ingestion-pipeline retry FILE_ID``)."""
    states = partition_states(conn, t, partition_key)
    if not states:
        return NothingToDo(f"nothing to do: partition {partition_key} has no {noun}s")
    parts, advice = [], []
    for s in states:
        what = f"{s['n']} {s['status']}"
        if s["codes"]:
            what += f" ({', '.join(s['codes'])}"
            what += f": {s['first_error']}" if s["first_error"] else ""
            what += f"; {s['suggestion']}" if s["suggestion"] else ""
            what += ")"
        if s["status"] in t.working and s["owners"]:
            what += f" (held by run {', '.join(s['owners'])})"
        parts.append(what)
    by_status = {s["status"] for s in states}
    if t.failed in by_status:
        advice.append(f"failed {noun}s failed for a reason another attempt does not change: fix the cause and "
                      f"`{retry_hint}`, or launch again with the tag {REPLAY_FAILED_TAG}=true")
    if by_status & set(t.working):
        advice.append(f"{noun}s held by another run are finished there (or taken over when its lease expires)")
    if t.queued in by_status:
        advice.append(f"queued {noun}s of a paused tenant or source wait for `ingestion-pipeline resume`")
    if t.canceled in by_status:
        advice.append(f"canceled {noun}s run again with `{retry_hint}`")
    if by_status <= set(t.succeeded):
        advice.append("everything is done" + ("; no version is stale (a person's run re-indexes those made by "
                                              "another pipeline fingerprint)" if t.kind == "document" else ""))
    return NothingToDo(f"nothing to do in partition {partition_key}: {'; '.join(parts)}. " + ". ".join(advice),
                       everything_done=by_status <= set(t.succeeded))
