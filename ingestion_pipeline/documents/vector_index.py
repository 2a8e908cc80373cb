"""One HNSW graph per tenant and embedding dimension, for a tenant too large to rank exactly (sql/052).

A graph shared by the tenants of a partition leaked one tenant's content to another through time: a large
tenant's query in a co-partitioned tenant's vocabulary walked that tenant's vectors, filtered out one by one, and
came back measurably slower. A tenant's own graph holds only its own rows, so what its searches cost depends on
its own content. A tenant of at most ``search.EXACT_SEARCH_MAX_CHUNKS`` served chunks needs no graph: it is ranked
exactly over its own rows (no graph maintenance either). Past that size its graph is built once (``ensure_graphs``)
by the promotion step whose promotion took it past, and kept by every insertion after; ``db migrate`` and the intake
service's janitor build any that are missing (after an upgrade, or a build that failed). Until it is valid, its
searches rank exactly, which is slower but neither wrong nor dependent on anyone else's rows. Figures:
``benchmarks/search_latency.py``.

A graph is a partial index on the tenant's partition of chunk_embeddings (sql/038):
``embedding::vector(dim)`` WHERE the tenant, the dimension and ``indexed`` (sql/044: a promoted vector joins the
graph after its promotion, ``vector_backlog.py``). The tenant and the dimension are literals in the DDL (an index
predicate cannot take parameters), composed with ``psycopg.sql.Literal``; a search proves the predicate from its
bound tenant because it is planned with its values (``search.py`` asks for custom plans). The index's name is
derived from the tenant and the dimension (``graph_name``), so finding a tenant's graph is a catalog lookup.

Built with ``CREATE INDEX CONCURRENTLY``: the partition's other tenants keep promoting meanwhile. A build that
failed or was killed leaves an invalid index, which the next ``ensure_graphs`` drops and builds again.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from ingestion_pipeline.core.db import Database

log = logging.getLogger(__name__)

_PREFIX = "chunk_embeddings_hnsw_"
_BUILD_LOCK = 0x5EC7041E  # advisory lock class: one build of a (tenant, dimension) graph at a time
BUILD_LOCK_TIMEOUT = "30s"  # how long a build waits for the partition's older transactions before it gives up

_GRAPH = ("CREATE INDEX CONCURRENTLY {name} ON {partition} USING hnsw ((embedding::vector({dim})) vector_cosine_ops) "
          "WHERE tenant_id = {tenant} AND vector_dims(embedding) = {dim} AND indexed")

# The graph's state by name: absent (no row), valid, or left invalid by a build that did not finish.
_STATE_SQL = """
SELECT c.relname AS name, i.indisvalid AS valid
  FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
 WHERE c.relname = ANY(%(names)s) AND c.relkind = 'i'
"""
# Tenants past the size, with every dimension their served models embed in (the models' dimensions as registered
# by the promotion that used them, sql/029).
_LARGE_TENANTS_SQL = """
SELECT t.tenant_id, m.dimension
  FROM tenant_serving_totals t
  JOIN (SELECT DISTINCT model_name, dimension FROM embedding_models) m ON m.model_name = t.name
 WHERE t.kind = 'model' AND (%(tenants)s::text[] IS NULL OR t.tenant_id = ANY(%(tenants)s))
 GROUP BY t.tenant_id, m.dimension
HAVING sum(t.chunks) > %(chunks)s
"""


def graph_name(tenant_id: str, dimension: int) -> str:
    """The index holding ``tenant_id``'s graph of ``dimension``: ``chunk_embeddings_hnsw_384_<digest>``, a digest of
    the tenant id (96 bits), so that any tenant id, of any length or characters, names one index of at most 63
    characters."""
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:24]
    return f"{_PREFIX}{int(dimension)}_{digest}"


def graph_ready(conn: psycopg.Connection, tenant_id: str, dimension: int) -> bool:
    """Whether the tenant's graph of ``dimension`` exists and is valid (a search may use it)."""
    rows = conn.execute(_STATE_SQL, {"names": [graph_name(tenant_id, dimension)]}).fetchall()
    return bool(rows) and rows[0]["valid"]


def partition_of(conn: psycopg.Connection, tenant_id: str) -> str:
    """The partition of chunk_embeddings that takes ``tenant_id``'s rows (by the hash of its id, sql/038)."""
    row = conn.execute(
        """SELECT relid::regclass::text AS p FROM pg_partition_tree('chunk_embeddings') t
            WHERE isleaf AND satisfies_hash_partition('chunk_embeddings'::regclass,
                  (SELECT count(*)::int FROM pg_partition_tree('chunk_embeddings') WHERE isleaf),
                  (regexp_match(relid::regclass::text, '_p([0-9]+)$'))[1]::int, %s::text)""", (tenant_id,)).fetchone()
    if row is None:
        raise LookupError(f"no partition of chunk_embeddings takes tenant {tenant_id!r}")
    return row["p"]


def build_graph(conn: psycopg.Connection, tenant_id: str, dimension: int) -> bool:
    """Build the tenant's graph of ``dimension`` unless it is valid already or another connection is building it;
    True if this call built it. ``conn`` must be in autocommit mode (a concurrent build runs outside any
    transaction). An invalid index left by a failed build is dropped first."""
    dimension = int(dimension)
    if not 1 <= dimension <= 2000:  # pgvector indexes vectors of up to 2,000 dimensions
        raise ValueError(f"embedding dimension {dimension} cannot be indexed (pgvector: 1 to 2000)")
    name = graph_name(tenant_id, dimension)
    lock = (_BUILD_LOCK, int(hashlib.sha256(name.encode()).hexdigest()[:7], 16))  # the tenant and the dimension
    if not conn.execute("SELECT pg_try_advisory_lock(%s, %s) AS got", lock).fetchone()["got"]:
        return False  # another connection is building it
    try:
        rows = conn.execute(_STATE_SQL, {"names": [name]}).fetchall()
        if rows and rows[0]["valid"]:
            return False
        # waits on the partition's older transactions, bounded: past it the build fails and is tried again later
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (BUILD_LOCK_TIMEOUT,))
        if rows:  # a build that did not finish
            conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL(_GRAPH).format(
            name=sql.Identifier(name), partition=sql.Identifier(partition_of(conn, tenant_id)),
            dim=sql.Literal(dimension), tenant=sql.Literal(tenant_id)))
        return True
    finally:
        conn.execute("RESET lock_timeout")
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", lock)


@dataclass(frozen=True)
class GraphsEnsured:
    built: list[tuple[str, int]]
    failed: list[tuple[str, int, str]]


def ensure_graphs(db: Database, min_chunks: int, tenants: list[str] | None = None) -> GraphsEnsured:
    """Build the graph of every tenant (of ``tenants``; None: of all) serving more than ``min_chunks`` chunks that has
    none valid, in each dimension its models embed in. Nothing here is raised: a build that fails is logged and
    reported, its tenant is ranked exactly meanwhile, and the next call tries again (a promotion of the tenant's,
    the janitor's next round, ``db migrate``); the caller's own work (promotions committed already) stands."""
    built: list[tuple[str, int]] = []
    failed: list[tuple[str, int, str]] = []
    try:
        with db.connection() as conn:
            wanted = [(r["tenant_id"], r["dimension"]) for r in conn.execute(
                _LARGE_TENANTS_SQL, {"chunks": min_chunks, "tenants": tenants})]
            names = {graph_name(t, d): (t, d) for t, d in wanted}
            valid = {r["name"] for r in conn.execute(_STATE_SQL, {"names": list(names)}) if r["valid"]}
    except psycopg.Error as exc:
        log.warning("the tenants that need an HNSW graph could not be listed (%s); tried again later", exc)
        return GraphsEnsured(built, [("", 0, str(exc))])
    for name, (tenant_id, dimension) in names.items():
        if name in valid:
            continue
        try:
            with db.connection() as conn:
                if build_graph(conn, tenant_id, dimension):
                    built.append((tenant_id, dimension))
                    log.info("built the HNSW graph of tenant %s, dimension %d (%s)", tenant_id, dimension, name)
        except (psycopg.Error, LookupError, ValueError) as exc:
            log.warning("the HNSW graph of tenant %s, dimension %d was not built (%s); it is ranked exactly "
                        "until a later try builds it", tenant_id, dimension, exc)
            failed.append((tenant_id, dimension, str(exc)))
    return GraphsEnsured(built, failed)


def partitions(conn: psycopg.Connection) -> list[str]:
    """chunk_embeddings' partitions, by name."""
    return [r["name"] for r in conn.execute(
        "SELECT relid::regclass::text AS name FROM pg_partition_tree('chunk_embeddings') WHERE isleaf ORDER BY 1")]


def of_dimension(text: str, dimension: int) -> sql.Composed:
    """``text`` with ``{vector}`` (the embedding as its dimension's type) and ``{dim}`` filled in."""
    dim = sql.Literal(int(dimension))
    return sql.SQL(text).format(vector=sql.SQL("e.embedding::vector({dim})").format(dim=dim), dim=dim)
