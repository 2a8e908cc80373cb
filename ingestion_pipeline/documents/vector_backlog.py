"""Promoted vectors into their tenant's HNSW graph, after the transaction that promoted them (sql/044). A tenant
small enough to be ranked exactly has no graph (``vector_index.py``): for its vectors ``indexed`` is only a flag.

Inserting a vector into an HNSW graph is CPU in the database backend, the more the larger the graph
(benchmarks/hnsw_insert.py, search_latency.py measure it), and it was nearly all of a promotion (docs/benchmarks.md:
one version's promotion under EXPLAIN). Inside the promotion it held the version's transaction and locks that long and
ran only on the pipeline's own lanes. A version is now promoted with its vectors ``indexed = false`` (outside every
HNSW index's predicate; search ranks them exactly, ``search._VECTOR_BACKLOG_SQL``), and this module sets them
``indexed = true`` in small transactions of their own, which is the graph insertion. Batches are taken with
``FOR UPDATE SKIP LOCKED``, so several connections (and several runs) share one backlog without waiting on each
other, and whatever a killed worker left is taken by the next sweep: every promotion step sweeps the whole backlog
once its files are promoted (``steps/promote.py``), ``process`` with nothing queued sweeps what is left, and the
janitor takes a bounded share each round while no run is in progress (``runtime/janitor.py``).

The sweep's connections are its own, their backends at a lowered CPU priority (``INGESTION_INDEX_SWEEP_NICE``,
10 by default) where the database runs on this host (``cpu_priority.lower_local_backend``): the graph's insertions
are the most CPU a load asks of it, and every vector is searchable before they run, so they take the cores searches
leave, not the searches' share (figures: ``benchmarks/search_latency.py --promoting --clients``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.progress import CountProgress, Sink

BATCH = 500  # vectors a transaction indexes: short enough that a search or a promotion never waits long on it
SWEEP_NICE = 10  # the sweep's backends' CPU priority by default (INGESTION_INDEX_SWEEP_NICE; 0: the server's own)

_PENDING_SQL = "SELECT count(*) AS n FROM chunk_embeddings WHERE NOT indexed"
_PENDING_OF_TENANT_SQL = "SELECT count(*) AS n FROM chunk_embeddings WHERE NOT indexed AND tenant_id = %(tenant)s"
# The UPDATE writes each row again; the new row is inside the HNSW predicate, so that is the graph insertion.
_INDEX_SOME_SQL = """
UPDATE chunk_embeddings e SET indexed = true
  FROM (SELECT tenant_id, chunk_id FROM chunk_embeddings WHERE NOT indexed LIMIT %(batch)s FOR UPDATE SKIP LOCKED) b
 WHERE e.tenant_id = b.tenant_id AND e.chunk_id = b.chunk_id AND NOT e.indexed
"""


def pending(conn: psycopg.Connection, tenant_id: str | None = None) -> int:
    """Vectors promoted but not in their HNSW graph yet (a tenant's, or every tenant's)."""
    if tenant_id is None:
        return conn.execute(_PENDING_SQL).fetchone()["n"]
    return conn.execute(_PENDING_OF_TENANT_SQL, {"tenant": tenant_id}).fetchone()["n"]


def index_some(conn: psycopg.Connection, batch: int = BATCH) -> int:
    """Index up to ``batch`` pending vectors that no other connection is indexing; how many. The caller commits."""
    return conn.execute(_INDEX_SOME_SQL, {"batch": batch}).rowcount


@contextmanager
def sweep_connections(db: Database, connections: int, nice: int) -> Iterator[Database]:
    """``connections`` connections of the sweep's own, lowered to ``nice``, closed after: a lowered backend cannot
    be raised back, so it never returns to ``db``'s pool (``nice`` 0: ``db`` itself)."""
    if not nice:
        yield db
        return
    with Database(db.url, max_size=max(1, connections), name="index-sweep", backend_nice=nice) as own:
        yield own


def index_up_to(db: Database, limit: int, *, batch: int = BATCH, nice: int = SWEEP_NICE) -> tuple[int, int]:
    """Index at most ``limit`` pending vectors on one connection, ``batch`` a transaction: how many, and how many
    are left (a bounded share of the backlog, for a service whose other duties must not wait on a whole sweep)."""
    done = 0
    with db.connection() as conn:
        left = pending(conn)
    if limit <= 0 or left == 0:  # no connection of its own opened for nothing
        return 0, left
    with sweep_connections(db, 1, nice) as sweep:
        while done < limit:
            with sweep.transaction() as conn:
                taken = index_some(conn, min(batch, limit - done))
            if taken == 0:
                break
            done += taken
    with db.connection() as conn:
        return done, pending(conn)


def index_backlog(db: Database, *, connections: int = 1, batch: int = BATCH, sinks: Iterable[Sink] = (),
                  nice: int = SWEEP_NICE) -> int:
    """Index every pending vector, ``connections`` transactions at a time, on backends lowered to ``nice``; the
    number indexed. Progress (vectors, rate, ETA) goes to the progress logger and ``sinks`` (a Dagster step's run
    log)."""
    with db.connection() as conn:
        total = pending(conn)
    if total == 0:
        return 0
    progress = CountProgress("index", total, "vectors", sinks=sinks)
    errors: list[BaseException] = []

    def lane(sweep: Database) -> None:
        try:
            while not errors:
                with sweep.transaction() as conn:
                    done = index_some(conn, batch)
                    if done:  # a lane that found nothing (the others hold the rest) holds nothing to lose
                        failpoint("index.batch")  # a batch indexed, not committed
                if done == 0:
                    return
                progress.advance(done)
        except BaseException as exc:  # kept and raised by the caller: the other lanes stop at their next batch
            errors.append(exc)

    count = max(1, min(connections, db.max_size))
    with sweep_connections(db, count, nice) as sweep:
        lanes = [threading.Thread(target=lane, args=(sweep,), name=f"index-lane-{i}", daemon=True)
                 for i in range(count)]
        for thread in lanes:
            thread.start()
        try:
            for thread in lanes:
                thread.join()
        except BaseException:  # an interrupted process: its lanes' statements end now, their batches roll back
            sweep.cancel_statements()
            raise
    progress.finish()
    if errors:
        raise errors[0]
    return progress.done
