"""Integrity queries behind the asset checks (and usable on their own, e.g. from a shell)."""

from __future__ import annotations

import psycopg


def docs_without_exactly_one_active_version(conn: psycopg.Connection, doc_ids: list[int]) -> list[dict]:
    """Promoted documents must have exactly one active version."""
    return conn.execute(
        """SELECT d.doc_id, d.tenant_id, count(v.version_id) FILTER (WHERE v.is_active) AS active_versions
             FROM documents d LEFT JOIN document_versions v ON v.doc_id = d.doc_id AND v.tenant_id = d.tenant_id
            WHERE d.doc_id = ANY(%s)
            GROUP BY d.doc_id, d.tenant_id
           HAVING count(v.version_id) FILTER (WHERE v.is_active) <> 1""",
        (doc_ids,),
    ).fetchall()


def versions_with_embedding_mismatch(conn: psycopg.Connection, version_ids: list[int], dimension: int) -> list[dict]:
    """Every chunk has exactly one embedding, of the model's dimension."""
    return conn.execute(
        """SELECT v.version_id, v.chunk_count,
                  count(c.chunk_id) AS chunks, count(e.chunk_id) AS embeddings,
                  count(e.chunk_id) FILTER (WHERE vector_dims(e.embedding) <> %s) AS wrong_dimension
             FROM document_versions v
             LEFT JOIN chunks c ON c.version_id = v.version_id
             LEFT JOIN chunk_embeddings e ON e.chunk_id = c.chunk_id AND e.tenant_id = c.tenant_id
            WHERE v.version_id = ANY(%s)
            GROUP BY v.version_id, v.chunk_count
           HAVING count(c.chunk_id) <> count(e.chunk_id) OR count(c.chunk_id) <> v.chunk_count
               OR count(e.chunk_id) FILTER (WHERE vector_dims(e.embedding) <> %s) > 0""",
        (dimension, version_ids, dimension),
    ).fetchall()


def versions_without_chunks(conn: psycopg.Connection, version_ids: list[int]) -> list[dict]:
    return conn.execute(
        """SELECT v.version_id FROM document_versions v
            WHERE v.version_id = ANY(%s) AND NOT EXISTS (SELECT 1 FROM chunks c WHERE c.version_id = v.version_id)""",
        (version_ids,),
    ).fetchall()


def promoted_in_partition(conn: psycopg.Connection, partition_key: str) -> list[dict]:
    """(doc_id, version_id) of the batch's succeeded files (skipped files point at their current version)."""
    return conn.execute(
        """SELECT doc_id, (stats->>'version_id')::bigint AS version_id FROM ingestion_runs
            WHERE partition_key = %s AND status = 'succeeded' AND stats ? 'version_id'""",
        (partition_key,),
    ).fetchall()
