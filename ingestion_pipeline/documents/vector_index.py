"""One HNSW index per embedding dimension (sql/013): `embedding::vector(dim)`, partial on the dimension.

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


def ensure_vector_index(conn: psycopg.Connection, dimension: int) -> bool:
    """Create the index of ``dimension`` if it does not exist yet (True if it was created)."""
    dimension = int(dimension)
    if not 1 <= dimension <= 2000:  # pgvector indexes vectors of up to 2,000 dimensions
        raise ValueError(f"embedding dimension {dimension} cannot be indexed (pgvector: 1 to 2000)")
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL AS present", (index_name(dimension),)).fetchone()
        created = not exists["present"]
        if created:
            conn.execute(sql.SQL(
                "CREATE INDEX {name} ON chunk_embeddings USING hnsw ((embedding::vector({dim})) vector_cosine_ops) "
                "WHERE vector_dims(embedding) = {dim}").format(name=sql.Identifier(index_name(dimension)),
                                                               dim=sql.Literal(dimension)))
    return created


def of_dimension(text: str, dimension: int) -> sql.Composed:
    """``text`` with ``{vector}`` (the embedding as its dimension's type) and ``{dim}`` filled in."""
    dim = sql.Literal(int(dimension))
    return sql.SQL(text).format(vector=sql.SQL("e.embedding::vector({dim})").format(dim=dim), dim=dim)
