"""One HNSW index per embedding dimension (sql/013): `embedding::vector(dim)`, partial on the dimension and on
``indexed`` (sql/044: a promoted vector joins the graph after its promotion, ``vector_backlog.py``).

The dimension is part of the SQL text (an index expression and predicate cannot take parameters, and a
query only uses a partial index whose predicate the planner can prove from literals); it is always an
int, composed with ``psycopg.sql.Literal``.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

_LOCK = 0x5EC7041D  # advisory lock: one process creates a new dimension's index at a time


def index_name(dimension: int) -> str:
    return f"chunk_embeddings_hnsw_{int(dimension)}"


def partition_index_name(partition: str, dimension: int) -> str:
    """The index of ``dimension`` on one partition of chunk_embeddings (sql/038): ``chunk_embeddings_p03_hnsw_384``."""
    return f"{partition}_hnsw_{int(dimension)}"


_INDEX = "CREATE INDEX {name} ON {only}{table} USING hnsw ((embedding::vector({dim})) vector_cosine_ops) " \
         "WHERE vector_dims(embedding) = {dim} AND indexed"


def ensure_vector_index(conn: psycopg.Connection, dimension: int) -> bool:
    """Create the index of ``dimension`` if it does not exist yet (True if it was created).

    chunk_embeddings is partitioned by tenant (sql/038): the index is made on the parent alone and one per
    partition, named by the partition and the dimension, then attached, so that an operator reading a plan or
    ``pg_indexes`` sees which tenant partition and which dimension an index serves."""
    dimension = int(dimension)
    if not 1 <= dimension <= 2000:  # pgvector indexes vectors of up to 2,000 dimensions
        raise ValueError(f"embedding dimension {dimension} cannot be indexed (pgvector: 1 to 2000)")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (index_name(dimension),)).fetchone()
        created = not exists["present"]
        if created:
            dim = sql.Literal(dimension)
            conn.execute(sql.SQL(_INDEX).format(name=sql.Identifier(index_name(dimension)), only=sql.SQL("ONLY "),
                                                table=sql.Identifier("chunk_embeddings"), dim=dim))
            for partition in partitions(conn):
                child = sql.Identifier(partition_index_name(partition, dimension))
                conn.execute(sql.SQL(_INDEX).format(name=child, only=sql.SQL(""), table=sql.Identifier(partition),
                                                    dim=dim))
                conn.execute(sql.SQL("ALTER INDEX {} ATTACH PARTITION {}").format(
                    sql.Identifier(index_name(dimension)), child))
    return created


def partitions(conn: psycopg.Connection) -> list[str]:
    """chunk_embeddings' partitions, by name."""
    return [r["name"] for r in conn.execute(
        "SELECT relid::regclass::text AS name FROM pg_partition_tree('chunk_embeddings') WHERE isleaf ORDER BY 1")]


def of_dimension(text: str, dimension: int) -> sql.Composed:
    """``text`` with ``{vector}`` (the embedding as its dimension's type) and ``{dim}`` filled in."""
    dim = sql.Literal(int(dimension))
    return sql.SQL(text).format(vector=sql.SQL("e.embedding::vector({dim})").format(dim=dim), dim=dim)
