"""Hybrid search over a tenant's active document versions, with citations.

Two rankings are fused, each query's weights following whether it holds an exact term (``fusion.py``):
- pgvector cosine KNN over each version's own model's vectors (exact for a small tenant, HNSW for a large one):
  while a re-index under a new model runs, each model still serving the tenant finds its nearest chunks with
  the query embedded by it, and the query's own model ranks them all (``_vector_arm``);
- full text that *ranks* a question's words by their rarity in the tenant (any word matches; see
  ``_TEXT_TERMS_SQL``), parsed in each language the tenant's chunks were indexed in.
Near-identical passages then collapse into one hit (the others listed in ``also_in``), and table-of-contents
or index lines go after the passages they point to (``search_results.py``). Every statement reads only active
versions of the caller's tenant, so a deactivated version or another tenant's chunk is never returned.

The settings (``SearchSettings``) were chosen on the project's question set: benchmarks/retrieval_quality.py.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import psycopg

from ingestion_pipeline.core.tenants import validate_tenant_id
from ingestion_pipeline.documents import fusion, late_interaction, serving_models
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT
from ingestion_pipeline.documents.search_filters import SearchFilter, admitted_chunks
from ingestion_pipeline.documents.search_results import shape_results
from ingestion_pipeline.documents.text_ranking import scored_text_candidates
from ingestion_pipeline.documents.vector_index import graph_ready, of_dimension

# a tenant this small is ranked exactly (see _vector_candidates); a larger one has its own HNSW graph
# (vector_index.py)
EXACT_SEARCH_MAX_CHUNKS = 5_000
# how a larger tenant's HNSW scan goes on past its rows of other models and inactive versions (pgvector >= 0.8;
# benchmarks/search_latency.py --sweep measures the choices)
HNSW_EF_SEARCH = 600  # the scan's candidate list (at least; 4 x the candidates asked for, up to 1,000)
HNSW_SCAN_ORDER = "relaxed_order"
HNSW_MAX_SCAN_TUPLES = 20_000  # pgvector's default: index entries visited before an iterative scan gives up
MAX_NEIGHBOURS = 3  # chunks before and after a hit that a search may add to widen it


@dataclass(frozen=True)
class SearchSettings:
    """How the two arms are fused (``fusion.py``); the defaults are the measured choice (docs/pipeline.md, Search)."""

    fusion: str = "rrf"  # or "convex"
    rrf_k: int = 60
    vector_weight: float = 1.0
    text_weight: float = 1.0  # rrf: the text arm's weight for a query holding an exact term
    plain_text_weight: float | None = None  # rrf: for a query in plain words (None: ``text_weight``)
    vector_share: float = 0.6  # convex: the vector arm's share for a query in plain words
    exact_vector_share: float = 0.4  # convex: for a query holding an exact term
    candidates: int = 10  # from each arm: deeper lists let weak ranks of both arms outvote a strong one
    any_word: bool = True  # False: every word must match (websearch_to_tsquery), as a baseline to measure
    normalization: int = 0  # ts_rank's length normalisation flags
    adjacency_weight: float = 0.5  # two neighbouring query words found together: this share of their weights more
    # the best of each arm ranked again by their tokens against the query's (``late_interaction.py``)
    late_interaction: bool = True
    rerank_vector_candidates: int = 20
    rerank_text_candidates: int = 10
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
    context_before: list[str] = field(default_factory=list)  # the chunks just before it (``neighbours``), in order
    context_after: list[str] = field(default_factory=list)

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
    rrf = replace(base, fusion="rrf", text_weight=1.0, plain_text_weight=None)
    yield "no late interaction (fused order)", replace(base, late_interaction=False)
    for vector, text in ((10, 10), (30, 10), (20, 5), (20, 20), (40, 20)):
        yield f"late interaction over vectors' {vector} and text's {text}", replace(
            base, rerank_vector_candidates=vector, rerank_text_candidates=text)
    yield "all words, RRF 60, 50 candidates", replace(
        rrf, any_word=False, collapse_duplicates=False, demote_navigational=False, candidates=50)
    yield "text only", replace(base, fusion="rrf", vector_weight=0.0, text_weight=1.0, plain_text_weight=1.0)
    yield "RRF 60, text weight 1", rrf
    for rrf_k in (10, 30, 100):
        yield f"RRF k {rrf_k}", replace(rrf, rrf_k=rrf_k)
    for weight in (0.5, 0.75, 1.5):
        yield f"RRF, text weight {weight}", replace(rrf, text_weight=weight)
    for plain in (0.0, 0.25, 0.5):
        yield f"RRF, plain-words queries' text weight {plain}", replace(rrf, plain_text_weight=plain)
    for candidates in (5, 15, 20, 30):
        yield f"RRF, {candidates} candidates", replace(rrf, candidates=candidates)
    for plain in (0.5, 0.6, 0.7, 0.8):
        for exact in (0.3, 0.4, 0.5):
            yield f"convex, vector share {plain} / {exact} (exact terms)", replace(
                base, fusion="convex", vector_share=plain, exact_vector_share=exact)
    convex = replace(base, fusion="convex")
    for candidates in (5, 20, 30):
        yield f"convex, {candidates} candidates", replace(convex, candidates=candidates)
    for adjacency in (0.0, 1.0):
        yield f"adjacency weight {adjacency}", replace(base, adjacency_weight=adjacency)
    yield "length normalisation 1", replace(base, normalization=1)
    yield "no collapsing", replace(base, collapse_duplicates=False)
    yield "no demotion", replace(base, demote_navigational=False)


# The vector stage, by the tenant's own HNSW graph of the query's dimension (documents/vector_index.py: a partial
# index whose predicate names the tenant, used because the statement is planned with its tenant, see
# _ranked_vector_candidates), over the current model's vectors only. The graph is scanned before the model and
# active filters apply, so when its nearest vectors are another model's or inactive versions' it can return fewer
# than asked for (even none).
_VECTOR_ANN_SQL = """
SELECT e.chunk_id, ({vector} <=> %(vector)s) AS distance
  FROM chunk_embeddings e
  JOIN chunks c ON c.chunk_id = e.chunk_id
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active
 WHERE e.tenant_id = %(tenant)s AND c.tenant_id = %(tenant)s AND v.tenant_id = %(tenant)s
   AND vector_dims(e.embedding) = {dim} AND e.indexed AND e.model = %(model)s
 ORDER BY {vector} <=> %(vector)s
 LIMIT %(candidates)s
"""
# The same ranking computed exactly over the tenant's own rows ("+ 0" keeps the planner off the index): the
# %(nearest)s nearest of its vectors by distance alone, then only those checked for an active version. Checking
# every row's version through its chunk was most of the statement (two index lookups a row;
# benchmarks/search_latency.py measures the exact path). Each of the nearest comes back with whether it is active,
# so a ranking that kept fewer than asked is computed again over every row (%(nearest)s NULL: the active ones only,
# the best %(candidates)s) only when there were more rows than it looked at.
_EXACT_SQL = """
WITH nearest AS MATERIALIZED (
    SELECT e.chunk_id, ({vector} <=> %(vector)s) + 0 AS distance
      FROM chunk_embeddings e
     WHERE e.tenant_id = %(tenant)s AND vector_dims(e.embedding) = {dim} AND e.model = %(model)s{rows}
     ORDER BY distance
     LIMIT %(nearest)s
)
SELECT n.chunk_id, n.distance, v.version_id IS NOT NULL AS active
  FROM nearest n
  LEFT JOIN chunks c ON c.chunk_id = n.chunk_id AND c.tenant_id = %(tenant)s
  LEFT JOIN document_versions v ON v.version_id = c.version_id AND v.is_active AND v.tenant_id = %(tenant)s
 WHERE v.version_id IS NOT NULL OR %(nearest)s::int IS NOT NULL
 ORDER BY n.distance
 LIMIT CASE WHEN %(nearest)s::int IS NULL THEN %(candidates)s END
"""
_VECTOR_EXACT_SQL = _EXACT_SQL.replace("{rows}", "")
# Beside the index's answer, the tenant's vectors promoted but not in the graph yet (documents/vector_backlog.py),
# ranked so, read through the partial index chunk_embeddings_backlog: a version is searchable the moment its
# promotion commits.
_VECTOR_BACKLOG_SQL = _EXACT_SQL.replace("{rows}", " AND NOT e.indexed")
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

# The chunks around each hit, in their version's order (chunks' UNIQUE (version_id, ordinal)).
_NEIGHBOURS_SQL = """
SELECT h.chunk_id AS hit, c.ordinal - hc.ordinal AS offset, c.text
  FROM unnest(%(ids)s::bigint[]) AS h(chunk_id)
  JOIN chunks hc ON hc.chunk_id = h.chunk_id AND hc.tenant_id = %(tenant)s
  JOIN chunks c ON c.version_id = hc.version_id AND c.tenant_id = %(tenant)s
   AND c.ordinal BETWEEN hc.ordinal - %(n)s AND hc.ordinal + %(n)s AND c.ordinal <> hc.ordinal
 ORDER BY h.chunk_id, c.ordinal
"""

# The fused ranking's chunks (``fusion.py``), in its order, with their citations.
_FUSED_SQL = """
SELECT f.chunk_id, f.score, f.vector_rank, f.text_rank, c.doc_id, v.title, v.filename,
       d.source_uri, v.version_number, c.page_start, c.page_end, c.section_path, c.text,
       %(ocr_type)s = ANY(c.element_types) AS ocr
  FROM unnest(%(ids)s::bigint[], %(scores)s::float8[], %(vector_ranks)s::int[], %(text_ranks)s::int[])
       WITH ORDINALITY AS f(chunk_id, score, vector_rank, text_rank, position)
  JOIN chunks c ON c.chunk_id = f.chunk_id AND c.tenant_id = %(tenant)s
  JOIN document_versions v ON v.version_id = c.version_id AND v.is_active AND v.tenant_id = %(tenant)s
  JOIN documents d ON d.doc_id = c.doc_id AND d.tenant_id = %(tenant)s
 ORDER BY f.position
"""


# Whether each connection's server has pgvector >= 0.8, asked once a connection: the library a backend loaded
# stays loaded until it ends (an ALTER EXTENSION UPDATE meanwhile does not change what it runs).
_ITERATIVE_SCAN: weakref.WeakKeyDictionary[psycopg.Connection, bool] = weakref.WeakKeyDictionary()


def _supports_iterative_scan(conn: psycopg.Connection) -> bool:
    known = _ITERATIVE_SCAN.get(conn)
    if known is None:
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        version = tuple(int(p) for p in (row["extversion"] if row else "0.0").split(".")[:2])
        known = _ITERATIVE_SCAN[conn] = version >= (0, 8)
    return known


def hybrid_search(
    conn: psycopg.Connection, *, tenant_id: str, query: str, query_vector: np.ndarray, model: str, k: int = 5,
    candidates: int | None = None, settings: SearchSettings | None = None, neighbours: int = 0,
    other_models: serving_models.QueryUnderModels | None = None, query_tokens: np.ndarray | None = None,
    only: SearchFilter | None = None,
) -> list[SearchHit]:
    """The ``k`` best chunks of the tenant's active versions; ``model`` (the one that embedded
    ``query_vector``) picks the vectors compared with it; ``query_tokens`` (the same model's token vectors of the
    query, ``Embedder.embed_query``) rank the best candidates again (``late_interaction.py``); without them the
    fused order stands. Versions holding another model's vectors (a
    re-index under a new model not done yet) are searched through ``other_models`` (the query under their
    model); without it they are found by text only. ``neighbours``: each hit also carries up to that many
    chunks before and after it. ``only``: the chunks a filter admits, ranked exactly (``search_filters.py``); by
    the query's model only (during a model change, versions under another are found by text)."""
    validate_tenant_id(tenant_id)
    if not query.strip():
        raise ValueError("search query is empty")
    if k < 1:
        raise ValueError("k must be at least 1")
    if not 0 <= neighbours <= MAX_NEIGHBOURS:
        raise ValueError(f"neighbours must be between 0 and {MAX_NEIGHBOURS}")
    settings = settings or DEFAULT_SETTINGS
    candidates = max(candidates or settings.candidates, k)
    admitted = admitted_chunks(conn, tenant_id, only) if only else None
    if admitted is not None and not admitted:
        return []
    vectors = _QueryVectors(model, query_vector, other_models,
                            query_tokens if settings.late_interaction else None, admitted)
    hits, deeper = _search_once(conn, tenant_id, query, vectors, k, candidates, settings, neighbours)
    if 0 < len(hits) < k and deeper:  # duplicates folded below k while an arm had more: look deeper once
        hits, _ = _search_once(conn, tenant_id, query, vectors, k, 4 * candidates, settings, neighbours)
    return hits


@dataclass(frozen=True)
class _QueryVectors:
    model: str
    vector: np.ndarray
    others: serving_models.QueryUnderModels | None
    tokens: np.ndarray | None = None
    admitted: list[int] | None = None  # a filtered search's chunks (search_filters.py); None: every served one


def _search_once(conn: psycopg.Connection, tenant_id: str, query: str, vectors: _QueryVectors,
                 k: int, candidates: int, settings: SearchSettings, neighbours: int) -> tuple[list[SearchHit], bool]:
    """The hits, and whether an arm returned as many candidates as asked (a deeper search could find more)."""
    exact = bool(fusion.exact_terms(query))
    if settings.fusion == "convex":
        share = settings.exact_vector_share if exact else settings.vector_share
        vector_weight, text_weight = share, 1 - share
    elif settings.fusion == "rrf":
        vector_weight = settings.vector_weight
        plain = settings.plain_text_weight
        text_weight = settings.text_weight if exact or plain is None else plain
    else:
        raise ValueError(f"unknown fusion {settings.fusion!r}: rrf or convex")
    rerank = vectors.tokens is not None
    vector_depth = max(candidates, settings.rerank_vector_candidates) if rerank else candidates
    text_depth = max(candidates, settings.rerank_text_candidates) if rerank else candidates
    with conn.transaction():
        if vector_weight <= 0:
            vector = []
        elif vectors.admitted is not None:
            vector = _admitted_vector_arm(conn, tenant_id, vectors, vector_depth)
        else:
            vector = _vector_arm(conn, tenant_id, vectors, vector_depth, k)
        text = (scored_text_candidates(conn, tenant_id, query, text_depth, any_word=settings.any_word,
                                       normalization=settings.normalization, adjacency_weight=settings.adjacency_weight,
                                       admitted=vectors.admitted)
                if text_weight > 0 else [])
        if settings.fusion == "convex":
            fused = fusion.convex(vector[:candidates], text[:candidates], vector_share=vector_weight)
        else:
            fused = fusion.reciprocal_rank(vector[:candidates], text[:candidates], k=settings.rrf_k,
                                           vector_weight=vector_weight, text_weight=text_weight)
        if rerank:
            fused = _reranked(conn, tenant_id, vectors, fused, vector, text, settings)
        fused = fused[:max(4 * k, 40)]
        rows = conn.execute(_FUSED_SQL, {
            "tenant": tenant_id, "ids": [f.chunk_id for f in fused], "scores": [f.score for f in fused],
            "vector_ranks": [f.vector_rank for f in fused], "text_ranks": [f.text_rank for f in fused],
            "ocr_type": OCR_TEXT}).fetchall()
        hits = [SearchHit(**{**r, "section_path": list(r["section_path"] or [])}) for r in rows]
        hits = shape_results(hits, k, collapse=settings.collapse_duplicates, demote=settings.demote_navigational)
        if neighbours and hits:
            _add_neighbours(conn, tenant_id, hits, neighbours)
    return hits, max(len(vector), len(text)) >= candidates


_TOKEN_VECTORS_SQL = """
SELECT chunk_id, tokens FROM chunk_token_vectors
 WHERE tenant_id = %(tenant)s AND chunk_id = ANY(%(ids)s) AND model = %(model)s
"""


def _reranked(conn: psycopg.Connection, tenant_id: str, vectors: _QueryVectors, fused: list[fusion.Fused],
              vector: list[tuple[int, float]], text: list[tuple[int, float]],
              settings: SearchSettings) -> list[fusion.Fused]:
    """The best ``rerank_vector_candidates`` of the vector arm and ``rerank_text_candidates`` of the text arm,
    ranked by late interaction, then the rest of the fused order; the fused order itself when a candidate has no
    token vectors of the query's model (``late_interaction.rerank``)."""
    pool = list(dict.fromkeys([c for c, _ in vector[:settings.rerank_vector_candidates]]
                              + [c for c, _ in text[:settings.rerank_text_candidates]]))
    if not pool:
        return fused
    stored = {r["chunk_id"]: bytes(r["tokens"]) for r in conn.execute(
        _TOKEN_VECTORS_SQL, {"tenant": tenant_id, "ids": pool, "model": vectors.model})}
    ranked = late_interaction.rerank(pool, vectors.tokens, stored, vectors.tokens.shape[1])
    if ranked is None:
        return fused
    vector_ranks = {c: rank for rank, (c, _) in enumerate(vector, start=1)}
    text_ranks = {c: rank for rank, (c, _) in enumerate(text, start=1)}
    head = [fusion.Fused(c, score, vector_ranks.get(c), text_ranks.get(c)) for c, score in ranked]
    ranked_ids = set(pool)
    return head + [f for f in fused if f.chunk_id not in ranked_ids]


def _add_neighbours(conn: psycopg.Connection, tenant_id: str, hits: list[SearchHit], n: int) -> None:
    """Each hit's ``n`` chunks before and after it in its version (one statement)."""
    by_id = {h.chunk_id: h for h in hits}
    for r in conn.execute(_NEIGHBOURS_SQL, {"tenant": tenant_id, "ids": list(by_id), "n": n}):
        hit = by_id[r["hit"]]
        (hit.context_before if r["offset"] < 0 else hit.context_after).append(r["text"])


_STORED_VECTORS_SQL = ("SELECT chunk_id, embedding FROM chunk_embeddings "
                       "WHERE chunk_id = ANY(%(ids)s) AND tenant_id = %(tenant)s")
_CANDIDATE_TEXTS_SQL = """
SELECT c.chunk_id, v.title, v.filename, c.section_path, c.text
  FROM chunks c JOIN document_versions v ON v.version_id = c.version_id AND v.tenant_id = %(tenant)s
 WHERE c.chunk_id = ANY(%(ids)s) AND c.tenant_id = %(tenant)s
"""


# A filtered search's vector ranking: every admitted chunk's vector of the query's model, exactly (search_filters.py)
_ADMITTED_VECTORS_SQL = """
SELECT e.chunk_id, ({vector} <=> %(vector)s) + 0 AS distance
  FROM chunk_embeddings e
 WHERE e.tenant_id = %(tenant)s AND e.chunk_id = ANY(%(admitted)s) AND vector_dims(e.embedding) = {dim}
   AND e.model = %(model)s
 ORDER BY distance, e.chunk_id
 LIMIT %(candidates)s
"""


def _admitted_vector_arm(conn: psycopg.Connection, tenant_id: str, vectors: _QueryVectors,
                         candidates: int) -> list[tuple[int, float]]:
    """The admitted chunks nearest the query, exactly: read by their ids, never through a graph."""
    dim = len(vectors.vector)
    rows = conn.execute(of_dimension(_ADMITTED_VECTORS_SQL, dim), {
        "tenant": tenant_id, "vector": vectors.vector, "model": vectors.model, "admitted": vectors.admitted,
        "candidates": candidates}).fetchall()
    return [(r["chunk_id"], 1 - float(r["distance"])) for r in rows]


def _vector_arm(conn: psycopg.Connection, tenant_id: str, vectors: _QueryVectors, candidates: int,
                k: int) -> list[tuple[int, float]]:
    """The vector ranking over every model serving the tenant's active versions (``serving_models.py``): chunk ids
    with their cosine similarity to the query, nearest first.

    One model (the usual case, and a deployment whose new model has re-indexed nothing yet): its ranking.
    Several (a re-index under a new model under way): each model's nearest chunks, found by its own index
    with the query embedded by that model, and then all of them ranked by one model, the query's own: the
    other models' candidates are embedded by it as a re-index would embed them (context line and text, a few
    per search, cached): distances of two models cannot be compared, distances of one model can. With two
    models of the same weights, half-way recall is the old model's exactly (``test_model_migration.py``)."""
    models = serving_models.in_use(conn, tenant_id)
    others = [m for m in models if m.name is not None and m.name != vectors.model]
    own_chunks = sum(m.chunks for m in models) - sum(m.chunks for m in others)
    if not others:
        # more chunks served than an exact ranking takes: the index, without counting the tenant's rows again
        return _scored_vector_candidates(conn, tenant_id, vectors.vector, vectors.model, candidates, k,
                                         exact=False if own_chunks > EXACT_SEARCH_MAX_CHUNKS else None)
    searchable = [(m, vectors.others.vector(m.name)) for m in others] if vectors.others else []
    searchable = [(m, v) for m, v in searchable if v is not None]  # None: this host cannot embed with it
    if own_chunks == 0 and len(searchable) == 1:  # one other model serves every version
        [(m, vector)] = searchable
        return _scored_vector_candidates(conn, tenant_id, vector, m.name, candidates, k)
    own = (_vector_candidates(conn, tenant_id, vectors.vector, vectors.model, candidates, k,
                              exact=own_chunks <= EXACT_SEARCH_MAX_CHUNKS) if own_chunks else [])
    theirs = [chunk_id for m, vector in searchable
              for chunk_id in _vector_candidates(conn, tenant_id, vector, m.name, candidates, k,
                                                 exact=m.chunks <= EXACT_SEARCH_MAX_CHUNKS)]
    scored: dict[int, float] = {}
    if own:
        for r in conn.execute(_STORED_VECTORS_SQL, {"ids": own, "tenant": tenant_id}):
            scored[r["chunk_id"]] = float(np.dot(r["embedding"].to_numpy(), vectors.vector))
    if theirs and vectors.others:
        rows = conn.execute(_CANDIDATE_TEXTS_SQL, {"ids": theirs, "tenant": tenant_id}).fetchall()
        passages = vectors.others.embed_passages(
            [serving_models.Passage(r["title"], r["filename"], list(r["section_path"] or []), r["text"]) for r in rows])
        for r, passage in zip(rows, passages, strict=True):
            scored[r["chunk_id"]] = float(np.dot(passage, vectors.vector))
    return sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:candidates]


def _vector_candidates(conn: psycopg.Connection, tenant_id: str, query_vector: np.ndarray, model: str,
                       candidates: int, k: int, *, exact: bool | None = None) -> list[int]:
    """``_scored_vector_candidates``' chunk ids."""
    return [chunk_id for chunk_id, _ in _scored_vector_candidates(conn, tenant_id, query_vector, model, candidates, k,
                                                                  exact=exact)]


def _scored_vector_candidates(conn: psycopg.Connection, tenant_id: str, query_vector: np.ndarray, model: str,
                              candidates: int, k: int, *, exact: bool | None = None) -> list[tuple[int, float]]:
    """``_ranked_vector_candidates`` in a transaction: the settings its statements are planned and scanned with
    (``set_config(..., true)``) last as long as the transaction, and outside one they would last no statement."""
    if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
        with conn.transaction():
            return _ranked_vector_candidates(conn, tenant_id, query_vector, model, candidates, k, exact=exact)
    return _ranked_vector_candidates(conn, tenant_id, query_vector, model, candidates, k, exact=exact)


def _ranked_vector_candidates(conn: psycopg.Connection, tenant_id: str, query_vector: np.ndarray, model: str,
                              candidates: int, k: int, *, exact: bool | None = None) -> list[tuple[int, float]]:
    """The tenant's nearest active chunks (up to ``candidates``) and their cosine similarity, nearest first,
    chosen by the tenant's size
    (figures: ``benchmarks/search_latency.py``, 1M chunks in 50 tenants):

    - a tenant of at most ``EXACT_SEARCH_MAX_CHUNKS`` chunks is ranked exactly: reading its rows costs less than an
      HNSW scan;
    - a larger one by its own HNSW graph (``vector_index.py``; exactly until the graph is built), and its vectors
      not in the graph yet (promoted since the graph last took its backlog, ``vector_backlog.py``) exactly beside
      it, the two merged by distance. With pgvector >= 0.8 the scan goes on until enough rows pass the model and
      active filters (iterative scans); older versions (0.6: the embedded server before) stop after
      ``ef_search`` index entries, so it is the most pgvector allows (1,000) and the scan can come back short
      when the query's neighbourhood is inactive versions or another model's. Fewer than ``k`` then, and the
      tenant's rows are ranked exactly, so a tenant never gets fewer results than it has chunks.

    Nothing on either path reads another tenant's rows, so what a search costs depends on its own tenant's content
    only.

    ``exact``: whether the model's share of the tenant is small enough to rank exactly (None: by the tenant's size)."""
    params = {"tenant": tenant_id, "vector": query_vector, "model": model, "candidates": candidates}
    dim = len(query_vector)
    if exact is None:
        exact = conn.execute(_TENANT_CHUNKS_SQL, {"tenant": tenant_id, "limit": EXACT_SEARCH_MAX_CHUNKS + 1}
                             ).fetchone()["n"] <= EXACT_SEARCH_MAX_CHUNKS
    # a large tenant whose graph is not built yet (or whose build failed) is ranked exactly meanwhile: slower, but
    # never through another tenant's rows
    if exact or not graph_ready(conn, tenant_id, dim):
        return [(r["chunk_id"], 1 - float(r["distance"])) for r in _exact_rows(conn, params, dim, _VECTOR_EXACT_SQL)]
    # planned with its values: a generic plan (a statement prepared after a few runs) cannot prove the graph's
    # predicate from a parameter and would scan the partition instead
    conn.execute("SELECT set_config('plan_cache_mode', 'force_custom_plan', true)")
    if _supports_iterative_scan(conn):
        conn.execute("SELECT set_config('hnsw.iterative_scan', %s, true), set_config('hnsw.max_scan_tuples', %s, true),"
                     " set_config('hnsw.ef_search', %s, true)",
                     (HNSW_SCAN_ORDER, str(HNSW_MAX_SCAN_TUPLES), str(max(HNSW_EF_SEARCH, min(candidates * 4, 1000)))))
    else:
        conn.execute("SELECT set_config('hnsw.ef_search', '1000', true)")
    found = conn.execute(of_dimension(_VECTOR_ANN_SQL, dim), params).fetchall()
    found += _exact_rows(conn, params, dim, _VECTOR_BACKLOG_SQL)
    # by distance: the two lists merged, and the relaxed scan's slightly out-of-order rows put in order
    found = sorted(found, key=lambda r: (r["distance"], r["chunk_id"]))[:candidates]
    if len(found) < k and conn.execute(of_dimension(_ACTIVE_CHUNKS_SQL, dim), params).fetchone()["n"] > len(found):
        found = _exact_rows(conn, params, dim, _VECTOR_EXACT_SQL, every_row=True)
    return [(r["chunk_id"], 1 - float(r["distance"])) for r in found]


def _exact_rows(conn: psycopg.Connection, params: dict, dim: int, statement: str, *,
                every_row: bool = False) -> list[dict]:
    """The exact ranking of ``statement`` (chunk ids and distances, the best ``candidates`` active ones): its
    version check on the 4 x candidates + 50 nearest vectors; again on every row (``every_row``) when fewer than
    the candidates asked for were active among those and the tenant has more rows than that."""
    nearest = None if every_row else 4 * params["candidates"] + 50
    # through the tenant's key, never a scan of the partition: the planner reads the whole partition when the
    # tenant is most of it, and its neighbours' rows would then make the search slower the more they store
    # (hostile/test_neighbour_timing.py). Only for this statement: the caller's setting is put back after.
    # (A statement that fails leaves the setting to the transaction's rollback, which undoes it.)
    was = conn.execute("SELECT current_setting('enable_seqscan') AS v, set_config('enable_seqscan', 'off', true)"
                       ).fetchone()["v"]
    rows = conn.execute(of_dimension(statement, dim), {**params, "nearest": nearest}).fetchall()
    conn.execute("SELECT set_config('enable_seqscan', %s, true)", (was,))
    if every_row:
        return rows
    active = [r for r in rows if r["active"]]
    if len(active) < params["candidates"] and len(rows) == nearest:
        return _exact_rows(conn, params, dim, statement, every_row=True)
    return active[:params["candidates"]]
