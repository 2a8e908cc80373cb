"""Hybrid search over a tenant's active document versions, with citations.

Two rankings — pgvector cosine KNN (HNSW) and Postgres full-text (ts_rank_cd) — are fused with
reciprocal rank fusion: score = sum(1 / (k + rank)). Both read only active versions of the caller's
tenant, so a deactivated version or another tenant's chunk can never be returned.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.documents.promotion import FTS_CONFIG

RRF_K = 60


@dataclass
class SearchHit:
    chunk_id: int
    score: float
    vector_rank: int | None
    text_rank: int | None
    doc_id: int
    title: str | None
    filename: str | None
    source_uri: str
    version_number: int
    page_start: int | None
    page_end: int | None
    section_path: list[str]
    text: str

    def citation(self) -> str:
        where = []
        if self.page_start is not None:
            pages = (f"p. {self.page_start}" if self.page_start == self.page_end
                     else f"pp. {self.page_start}-{self.page_end}")
            where.append(pages)
        if self.section_path:
            where.append(" > ".join(self.section_path))
        label = self.title or self.filename or self.source_uri
        return f"{label} (v{self.version_number}" + (", " + ", ".join(where) if where else "") + ")"

    def as_dict(self) -> dict:
        return {**asdict(self), "citation": self.citation()}


_SEARCH_SQL = """
WITH vector_hits AS (
    SELECT c.chunk_id, row_number() OVER (ORDER BY e.embedding <=> %(vector)s) AS rank
      FROM (SELECT e.chunk_id, e.embedding
              FROM chunk_embeddings e
              JOIN chunks c ON c.chunk_id = e.chunk_id
              JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
             WHERE e.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s
             ORDER BY e.embedding <=> %(vector)s
             LIMIT %(candidates)s) e
      JOIN chunks c ON c.chunk_id = e.chunk_id
),
text_hits AS (
    SELECT f.chunk_id,
           row_number() OVER (ORDER BY ts_rank_cd(f.tsv, q.query) DESC, f.chunk_id) AS rank
      FROM chunk_fts f
      JOIN chunks c ON c.chunk_id = f.chunk_id
      JOIN document_versions v ON v.version_id = c.version_id AND v.is_active,
           websearch_to_tsquery(%(fts_config)s::regconfig, %(query)s) AS q(query)
     WHERE f.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s
       AND f.tsv @@ q.query
     ORDER BY ts_rank_cd(f.tsv, q.query) DESC, f.chunk_id
     LIMIT %(candidates)s
),
fused AS (
    SELECT coalesce(vh.chunk_id, th.chunk_id) AS chunk_id,
           coalesce(1.0 / (%(rrf_k)s + vh.rank), 0) + coalesce(1.0 / (%(rrf_k)s + th.rank), 0) AS score,
           vh.rank AS vector_rank, th.rank AS text_rank
      FROM vector_hits vh FULL OUTER JOIN text_hits th ON th.chunk_id = vh.chunk_id
)
SELECT f.chunk_id, f.score::float8 AS score, f.vector_rank, f.text_rank, c.doc_id, v.title, v.filename,
       d.source_uri, v.version_number, c.page_start, c.page_end, c.section_path, c.text
  FROM fused f
  JOIN chunks c ON c.chunk_id = f.chunk_id AND c.tenant_id = %(tenant)s
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active AND v.tenant_id = %(tenant)s
  JOIN documents d ON d.doc_id = c.doc_id AND d.tenant_id = %(tenant)s
 ORDER BY f.score DESC, f.chunk_id
 LIMIT %(k)s
"""


def _supports_iterative_scan(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    version = tuple(int(p) for p in (row["extversion"] if row else "0.0").split(".")[:2])
    return version >= (0, 8)


def hybrid_search(
    conn: psycopg.Connection, *, tenant_id: str, query: str, query_vector: np.ndarray, k: int = 5,
    candidates: int = 50,
) -> list[SearchHit]:
    validate_tenant_id(tenant_id)
    if not query.strip():
        raise ValueError("search query is empty")
    if k < 1:
        raise ValueError("k must be at least 1")
    with conn.transaction():
        # Filtered HNSW scans: with pgvector >= 0.8 the scan continues until enough rows pass the
        # tenant/active filter; older versions (pgserver ships 0.6) rely on a wide ef_search.
        if _supports_iterative_scan(conn):
            conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(400, min(candidates * 4, 1000))),))
        rows = conn.execute(
            _SEARCH_SQL,
            {"tenant": tenant_id, "vector": query_vector, "query": query, "candidates": max(candidates, k),
             "k": k, "rrf_k": RRF_K, "fts_config": FTS_CONFIG},
        ).fetchall()
    return [SearchHit(**{**r, "section_path": list(r["section_path"] or [])}) for r in rows]
