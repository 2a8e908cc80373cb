"""Which Dagster partitions may go: a batch (or metric upload) all of whose ledger rows are finished, the
last of them longer ago than ``INGESTION_PARTITION_RETENTION_DAYS``.

Dynamic partitions are never deleted by Dagster itself, so without this the partition list of
``document_batches`` grows by one every batch, for ever: every sensor tick and the asset page read it.
Deleting a partition keeps its runs and materialisations (Dagster's run history); replaying a pruned
batch's files adds the partition again (the planner adds partitions it does not know).
"""

from __future__ import annotations

import psycopg

from ingestion_pipeline.core.ledger import LedgerTable, table_sql

_FINISHED = """
SELECT f.partition_key
  FROM (SELECT partition_key, max(coalesce(finished_at, updated_at)) AS last_finished
          FROM {table}
         WHERE partition_key IS NOT NULL
         GROUP BY partition_key
        HAVING bool_and(status = ANY(%(terminal)s))) f
 WHERE f.last_finished < now() - make_interval(secs => %(seconds)s)
   AND NOT EXISTS (SELECT 1 FROM pruned_partitions p
                    WHERE p.partitions_def = %(partitions_def)s AND p.partition_key = f.partition_key
                      AND p.pruned_at >= f.last_finished)
 ORDER BY f.last_finished, f.partition_key
 LIMIT %(limit)s
"""


def finished_partitions(conn: psycopg.Connection, t: LedgerTable, partitions_def: str, *, older_than_days: float,
                        limit: int) -> list[str]:
    """Partition keys of ``t`` whose every row is finished (succeeded, failed, dead-lettered, canceled) and
    whose last finish is older than ``older_than_days``, not pruned since; oldest first."""
    rows = conn.execute(table_sql(_FINISHED, t), {
        "terminal": list(t.terminal), "seconds": older_than_days * 86400.0, "partitions_def": partitions_def,
        "limit": limit,
    }).fetchall()
    return [r["partition_key"] if isinstance(r, dict) else r[0] for r in rows]


def record_pruned(conn: psycopg.Connection, partitions_def: str, keys: list[str]) -> None:
    conn.execute(
        """INSERT INTO pruned_partitions (partitions_def, partition_key)
           SELECT %s, unnest(%s::text[])
           ON CONFLICT (partitions_def, partition_key) DO UPDATE SET pruned_at = now()""",
        (partitions_def, keys),
    )
