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
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT
from ingestion_pipeline.documents.promotion import FTS_CONFIG
from ingestion_pipeline.documents.vector_index import of_dimension

RRF_K = 60
EXACT_SEARCH_MAX_CHUNKS = 5_000  # a tenant this small is ranked exactly (see _vector_candidates)


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
    ocr: bool = False  # read by OCR from a scanned page (the text may hold recognition errors)

    def citation(self) -> str:
        where = []
        if self.page_start is not None:
            pages = (f"p. {self.page_start}" if self.page_start == self.page_end
                     else f"pp. {self.page_start}-{self.page_end}")
            where.append(pages)
        if self.section_path:
            where.append(" > ".join(self.section_path))
        if self.ocr:
            where.append("OCR")
        label = self.title or self.filename or self.source_uri
        return f"{label} (v{self.version_number}" + (", " + ", ".join(where) if where else "") + ")"

    def as_dict(self) -> dict:
        return {**asdict(self), "citation": self.citation()}


# The vector stage, by the HNSW index of the query's dimension (documents/vector_index.py), over the
# current model's vectors only. The index is scanned before the tenant/active filter applies, so when
# the nearest vectors belong to other tenants it can return fewer than asked for (even none).
_VECTOR_ANN_SQL = """
SELECT e.chunk_id
  FROM chunk_embeddings e
  JOIN chunks c ON c.chunk_id = e.chunk_id
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
 WHERE e.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s
   AND vector_dims(e.embedding) = {dim} AND e.model = %(model)s
 ORDER BY {vector} <=> %(vector)s
 LIMIT %(candidates)s
"""
# The same ranking computed exactly over the tenant's own rows ("+ 0" keeps the planner off the index).
_VECTOR_EXACT_SQL = _VECTOR_ANN_SQL.replace("ORDER BY {vector} <=> %(vector)s",
                                            "ORDER BY ({vector} <=> %(vector)s) + 0")
# Bounded: how many chunks the tenant has, counted up to a limit (an index-only scan of chunks_reuse_idx)
_TENANT_CHUNKS_SQL = "SELECT count(*) AS n FROM (SELECT 1 FROM chunks WHERE tenant_id = %(tenant)s LIMIT %(limit)s) x"
_ACTIVE_CHUNKS_SQL = """
SELECT count(*) AS n FROM (
    SELECT 1 FROM chunk_embeddings e
      JOIN chunks c ON c.chunk_id = e.chunk_id
      JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
     WHERE e.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s
       AND vector_dims(e.embedding) = {dim} AND e.model = %(model)s
     LIMIT %(candidates)s) x
"""

_SEARCH_SQL = """
WITH vector_hits AS (
    SELECT h.chunk_id, h.rank FROM unnest(%(vector_ids)s::bigint[]) WITH ORDINALITY AS h(chunk_id, rank)
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
       d.source_uri, v.version_number, c.page_start, c.page_end, c.section_path, c.text,
       %(ocr_type)s = ANY(c.element_types) AS ocr
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
    conn: psycopg.Connection, *, tenant_id: str, query: str, query_vector: np.ndarray, model: str, k: int = 5,
    candidates: int = 50,
) -> list[SearchHit]:
    """The ``k`` best chunks of the tenant's active versions; ``model`` (the one that embedded
    ``query_vector``) picks the vectors compared with it. Versions not yet re-indexed under it are found
    by text only."""
    validate_tenant_id(tenant_id)
    if not query.strip():
        raise ValueError("search query is empty")
    if k < 1:
        raise ValueError("k must be at least 1")
    candidates = max(candidates, k)
    with conn.transaction():
        vector_ids = _vector_candidates(conn, tenant_id, query_vector, model, candidates, k)
        rows = conn.execute(
            _SEARCH_SQL,
            {"tenant": tenant_id, "vector_ids": vector_ids, "query": query, "candidates": candidates,
             "k": k, "rrf_k": RRF_K, "fts_config": FTS_CONFIG, "ocr_type": OCR_TEXT},
        ).fetchall()
    return [SearchHit(**{**r, "section_path": list(r["section_path"] or [])}) for r in rows]


def _vector_candidates(conn: psycopg.Connection, tenant_id: str, query_vector: np.ndarray, model: str,
                       candidates: int, k: int) -> list[int]:
    """The tenant's nearest active chunks (up to ``candidates``), nearest first, chosen by the tenant's size
    (figures: ``benchmarks/search_latency.py``, 1M chunks in 50 tenants):

    - a tenant of at most ``EXACT_SEARCH_MAX_CHUNKS`` chunks is ranked exactly: reading its rows costs
      less than an HNSW scan whose neighbourhood is mostly other tenants' (4 ms for 1,000 chunks);
    - a larger one by the HNSW index. With pgvector >= 0.8 the scan goes on until enough rows pass the
      tenant filter (iterative scans); older versions (pgserver ships 0.6) stop after ``ef_search`` index
      entries, so it is the most pgvector allows (1,000) and the scan can come back short when the query's
      neighbourhood belongs to other tenants. Fewer than ``k`` then, and the tenant's rows are ranked
      exactly, so a tenant never gets fewer results than it has chunks."""
    params = {"tenant": tenant_id, "vector": query_vector, "model": model, "candidates": candidates}
    dim = len(query_vector)
    small = conn.execute(_TENANT_CHUNKS_SQL, {"tenant": tenant_id, "limit": EXACT_SEARCH_MAX_CHUNKS + 1}
                         ).fetchone()["n"] <= EXACT_SEARCH_MAX_CHUNKS
    if small:
        return [r["chunk_id"] for r in conn.execute(of_dimension(_VECTOR_EXACT_SQL, dim), params).fetchall()]
    if _supports_iterative_scan(conn):
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true)")
        conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(max(400, min(candidates * 4, 1000))),))
    else:
        conn.execute("SELECT set_config('hnsw.ef_search', '1000', true)")
    ids = [r["chunk_id"] for r in conn.execute(of_dimension(_VECTOR_ANN_SQL, dim), params).fetchall()]
    if len(ids) < k and conn.execute(of_dimension(_ACTIVE_CHUNKS_SQL, dim), params).fetchone()["n"] > len(ids):
        ids = [r["chunk_id"] for r in conn.execute(of_dimension(_VECTOR_EXACT_SQL, dim), params).fetchall()]
    return ids
