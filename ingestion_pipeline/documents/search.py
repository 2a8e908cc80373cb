"""Hybrid search over a tenant's active document versions, with citations.

Two rankings are fused with weighted reciprocal rank fusion (score = w_v / (k + vector rank) + w_t / (k +
text rank)):
- pgvector cosine KNN over the current model's vectors (exact for a small tenant, HNSW for a large one);
- full text that *ranks* a question's words by their rarity in the tenant (any word matches; see
  ``_TEXT_TERMS_SQL``), parsed in each language the tenant's chunks were indexed in.
Near-identical passages then collapse into one hit (the others listed in ``also_in``), and table-of-contents
or index lines go after the passages they point to (``search_results.py``). Every statement reads only active
versions of the caller's tenant, so a deactivated version or another tenant's chunk is never returned.

The settings (``SearchSettings``) were chosen on the project's question set: benchmarks/retrieval_quality.py.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT
from ingestion_pipeline.documents.languages import DEFAULT_CONFIG, FALLBACK_CONFIG, config_for, detect_language
from ingestion_pipeline.documents.search_results import shape_results
from ingestion_pipeline.documents.vector_index import of_dimension

EXACT_SEARCH_MAX_CHUNKS = 5_000  # a tenant this small is ranked exactly (see _vector_candidates)
MIN_SEEDING_IDF = 2.0  # a word in more than ~1 chunk in 8 scores the candidates but does not bring them
QUERY_LANGUAGE_CONFIDENCE = 0.9  # below this, a query is parsed in every language of the tenant
_PHRASE = re.compile(r'"([^"]+)"')


@dataclass(frozen=True)
class SearchSettings:
    """How the two arms are fused; the defaults are the measured choice (docs/pipeline.md, Search)."""

    rrf_k: int = 60
    vector_weight: float = 1.0
    text_weight: float = 1.0
    candidates: int = 50  # from each arm
    any_word: bool = True  # False: every word must match (websearch_to_tsquery), as a baseline to measure
    normalization: int = 0  # ts_rank's length normalisation flags
    collapse_duplicates: bool = True
    demote_navigational: bool = True


DEFAULT_SETTINGS = SearchSettings()


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
    navigational: bool = False  # a table of contents, an index or dot-leader lines: ranked after passages
    also_in: list[str] = field(default_factory=list)  # citations of the same passage elsewhere, collapsed here

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


def sweep_settings() -> Iterator[tuple[str, SearchSettings]]:
    """The settings benchmarks/retrieval_quality.py --sweep measures beside the default."""
    base = DEFAULT_SETTINGS
    yield "all words, RRF 60 (before)", replace(base, any_word=False, collapse_duplicates=False,
                                                demote_navigational=False, rrf_k=60, text_weight=1.0)
    yield "vector only", replace(base, text_weight=0.0)
    yield "text only", replace(base, vector_weight=0.0)
    for rrf_k in (10, 30, 100):
        yield f"rrf_k {rrf_k}", replace(base, rrf_k=rrf_k)
    for weight in (0.5, 0.75, 1.5, 2.0):
        yield f"text weight {weight}", replace(base, text_weight=weight)
    for candidates in (20, 100):
        yield f"candidates {candidates}", replace(base, candidates=candidates)
    yield "length normalisation 1", replace(base, normalization=1)
    yield "no collapsing", replace(base, collapse_duplicates=False)
    yield "no demotion", replace(base, demote_navigational=False)


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

# The tenant's languages (the configurations its active versions were indexed in) and its active chunks.
_TENANT_TEXT_SQL = """
SELECT (SELECT array_agg(DISTINCT cfg ORDER BY cfg) FROM document_versions v, unnest(v.text_search_configs) cfg
         WHERE v.tenant_id = %(tenant)s AND v.is_active) AS configs,
       (SELECT coalesce(sum(chunk_count), 0) FROM document_versions
         WHERE tenant_id = %(tenant)s AND is_active) AS chunks
"""

# The full-text arm ranks rather than filters: any of the query's words matches, each weighted by how rare it
# is in the tenant's active chunks (BM25's idf), times Postgres's saturating term-frequency rank (ts_rank of
# that word alone). The query is parsed in its own language and English (query_configs). A document
# frequency counts the tenant's chunks of every version (a statistic: no join to tell active ones), up to
# %(df_cap)s: a word that common cannot bring candidates (MIN_SEEDING_IDF)
# and weighs little either way. A quoted phrase weighs the sum of its words' weights, once more.
_TEXT_TERMS_SQL = """
WITH configs AS (
    SELECT unnest(%(configs)s::regconfig[]) AS cfg
),
lexemes AS (
    SELECT DISTINCT t.lexeme FROM configs, unnest(to_tsvector(configs.cfg, %(query)s)) t
),
population AS (
    SELECT greatest(coalesce(sum(chunk_count), 0), 1)::float8 AS n
      FROM document_versions WHERE tenant_id = %(tenant)s AND is_active
),
counted AS (
    SELECT l.lexeme, quote_literal(l.lexeme)::tsquery AS tq,
           (SELECT count(*) FROM (
                SELECT 1 FROM chunk_fts f
                 WHERE f.tenant_id = %(tenant)s AND f.tsv @@ quote_literal(l.lexeme)::tsquery
                 LIMIT %(df_cap)s) x) AS df
      FROM lexemes l
),
terms AS (
    SELECT c.lexeme, c.tq, ln(1 + (p.n - c.df + 0.5) / (c.df + 0.5)) AS idf
      FROM counted c, population p WHERE c.df > 0
),
phrases AS (
    SELECT phraseto_tsquery(configs.cfg, ph) AS tq,
           (SELECT coalesce(sum(t.idf), 0) FROM terms t
             WHERE t.lexeme IN (SELECT u.lexeme FROM unnest(to_tsvector(configs.cfg, ph)) u)) AS idf
      FROM configs, unnest(%(phrases)s::text[]) ph
)
SELECT tq::text AS tq, idf FROM terms
UNION ALL
SELECT tq::text, idf FROM phrases WHERE idf > 0 AND numnode(tq) > 1
"""

# Candidates are the chunks holding one of the rarer words (``seeds``); each is scored by all the words.
_TEXT_HITS_SQL = """
WITH seeded AS (
    SELECT DISTINCT f.chunk_id, f.tsv
      FROM unnest(%(seeds)s::tsquery[]) AS s(tq)
      JOIN chunk_fts f ON f.tsv @@ s.tq AND f.tenant_id = %(tenant)s
      JOIN chunks c ON c.chunk_id = f.chunk_id AND c.tenant_id = %(tenant)s
      JOIN document_versions v ON v.version_id = c.version_id AND v.is_active AND v.tenant_id = %(tenant)s
)
SELECT s.chunk_id, sum(w.idf * ts_rank(s.tsv, w.tq, %(normalization)s)) AS score
  FROM seeded s JOIN unnest(%(tqs)s::tsquery[], %(idfs)s::float8[]) AS w(tq, idf) ON s.tsv @@ w.tq
 GROUP BY s.chunk_id
 ORDER BY score DESC, s.chunk_id
 LIMIT %(candidates)s
"""

# Every word must match (websearch_to_tsquery), ranked by ts_rank_cd: kept as a setting to measure against.
_TEXT_ALL_WORDS_SQL = """
SELECT f.chunk_id, ts_rank_cd(f.tsv, q.query) AS score
  FROM chunk_fts f
  JOIN chunks c ON c.chunk_id = f.chunk_id
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active,
       websearch_to_tsquery('english', %(query)s) AS q(query)
 WHERE f.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s AND f.tsv @@ q.query
 ORDER BY score DESC, f.chunk_id
 LIMIT %(candidates)s
"""

# Weighted reciprocal rank fusion of the two arms' ranks, then the chunks with their citations.
_FUSED_SQL = """
WITH vector_hits AS (
    SELECT h.chunk_id, h.rank FROM unnest(%(vector_ids)s::bigint[]) WITH ORDINALITY AS h(chunk_id, rank)
),
text_hits AS (
    SELECT h.chunk_id, h.rank FROM unnest(%(text_ids)s::bigint[]) WITH ORDINALITY AS h(chunk_id, rank)
),
fused AS (
    SELECT coalesce(vh.chunk_id, th.chunk_id) AS chunk_id,
           coalesce(%(vector_weight)s / (%(rrf_k)s + vh.rank), 0)
           + coalesce(%(text_weight)s / (%(rrf_k)s + th.rank), 0) AS score,
           vh.rank AS vector_rank, th.rank AS text_rank
      FROM vector_hits vh FULL OUTER JOIN text_hits th ON th.chunk_id = vh.chunk_id
)
SELECT f.chunk_id, f.score::float8 AS score, f.vector_rank, f.text_rank, c.doc_id, v.title, v.filename,
       d.source_uri, v.version_number, c.page_start, c.page_end, c.section_path, c.text, c.content_hash,
       %(ocr_type)s = ANY(c.element_types) AS ocr
  FROM fused f
  JOIN chunks c ON c.chunk_id = f.chunk_id AND c.tenant_id = %(tenant)s
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active AND v.tenant_id = %(tenant)s
  JOIN documents d ON d.doc_id = c.doc_id AND d.tenant_id = %(tenant)s
 ORDER BY f.score DESC, f.chunk_id
 LIMIT %(pool)s
"""


def _supports_iterative_scan(conn: psycopg.Connection) -> bool:
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    version = tuple(int(p) for p in (row["extversion"] if row else "0.0").split(".")[:2])
    return version >= (0, 8)


def hybrid_search(
    conn: psycopg.Connection, *, tenant_id: str, query: str, query_vector: np.ndarray, model: str, k: int = 5,
    candidates: int | None = None, settings: SearchSettings | None = None,
) -> list[SearchHit]:
    """The ``k`` best chunks of the tenant's active versions; ``model`` (the one that embedded
    ``query_vector``) picks the vectors compared with it. Versions not yet re-indexed under it are found
    by text only."""
    validate_tenant_id(tenant_id)
    if not query.strip():
        raise ValueError("search query is empty")
    if k < 1:
        raise ValueError("k must be at least 1")
    settings = settings or DEFAULT_SETTINGS
    candidates = max(candidates or settings.candidates, k)
    with conn.transaction():
        vector_ids = (_vector_candidates(conn, tenant_id, query_vector, model, candidates, k)
                      if settings.vector_weight > 0 else [])
        text_ids = _text_candidates(conn, tenant_id, query, candidates, settings) if settings.text_weight > 0 else []
        rows = conn.execute(
            _FUSED_SQL,
            {"tenant": tenant_id, "vector_ids": vector_ids, "text_ids": text_ids, "rrf_k": settings.rrf_k,
             "vector_weight": settings.vector_weight, "text_weight": settings.text_weight,
             "pool": max(4 * k, 40), "ocr_type": OCR_TEXT},
        ).fetchall()
    hits = [SearchHit(**{**{name: r[name] for name in r if name != "content_hash"},
                         "section_path": list(r["section_path"] or [])}) for r in rows]
    return shape_results(hits, k, collapse=settings.collapse_duplicates, demote=settings.demote_navigational)


def _text_candidates(conn: psycopg.Connection, tenant_id: str, query: str, candidates: int,
                     settings: SearchSettings) -> list[int]:
    """The tenant's best chunks by their words, best first (see ``_TEXT_TERMS_SQL``)."""
    params = {"tenant": tenant_id, "query": query, "candidates": candidates}
    if not settings.any_word:
        return [r["chunk_id"] for r in conn.execute(_TEXT_ALL_WORDS_SQL, params).fetchall()]
    tenant = conn.execute(_TENANT_TEXT_SQL, params).fetchone()
    if not tenant["chunks"]:
        return []
    # counted this far, a word's idf is below MIN_SEEDING_IDF: more would not change what it does
    df_cap = max(100, int(tenant["chunks"]) // 7)
    terms = conn.execute(_TEXT_TERMS_SQL, {**params, "df_cap": df_cap, "phrases": _PHRASE.findall(query),
                                           "configs": query_configs(query, tenant["configs"] or [])}).fetchall()
    if not terms:
        return []
    seeds = [t["tq"] for t in terms if t["idf"] >= MIN_SEEDING_IDF] or [t["tq"] for t in terms]
    return [r["chunk_id"] for r in conn.execute(
        _TEXT_HITS_SQL, {**params, "seeds": seeds, "tqs": [t["tq"] for t in terms],
                         "idfs": [t["idf"] for t in terms], "normalization": settings.normalization}).fetchall()]


def query_configs(query: str, tenant_configs: list[str]) -> list[str]:
    """The configurations a query is parsed in, among the tenant's: its own language when that is clear, and
    English (questions in other languages still name things in English); every one of the tenant's when the
    language is not clear. ``simple`` (no stop words) only for a language without a stemmer or a tenant
    with nothing else: parsed that way, an English question's "how" and "do" would be rare words."""
    configs = set(tenant_configs) or {DEFAULT_CONFIG}
    code, probability = detect_language(query)
    if probability >= QUERY_LANGUAGE_CONFIDENCE and config_for(code) in configs:
        chosen = {config_for(code)}
    else:
        chosen = configs - {FALLBACK_CONFIG}
    chosen |= {DEFAULT_CONFIG} & configs
    return sorted(chosen or configs)


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
