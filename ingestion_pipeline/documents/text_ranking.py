"""The full-text arm of search: a query's words ranked by their rarity in the tenant, in its languages.

Any word of the query matches (a question's words are not all in the passage that answers it); see
``_TEXT_TERMS_SQL`` for the weights and ``_TEXT_HITS_SQL`` for how candidates are found and scored.
"""

from __future__ import annotations

import re

import psycopg
from psycopg import sql

from ingestion_pipeline.documents.languages import DEFAULT_CONFIG, query_language_weights

MIN_SEEDING_IDF = 2.0  # a word in more than ~1 chunk in 8 scores the candidates but does not bring them
SEED_WORDS = 4  # the rarest words of a query bring its candidates (a phrase always does)
SEEDED_POOL = 400  # candidates scored by all the words
SINGLE_READ_SEEDS = 24  # up to this many seeds, each matching row is read once (see _TEXT_HITS_SQL)
_PHRASE = re.compile(r'"([^"]+)"')
_WORDS = re.compile(r"[^\W_]+")


# A chunk's words and its tenant's lexeme, as the full-text index holds them (sql/046), and a statement's words
# asked for within the tenant: the index intersects the two, so the heap is read for the tenant's matches only
# and not for its partition's other tenants'. The expression must be the index's, word for word. The words' query
# must not be empty: an empty query && the tenant's lexeme is the tenant's lexeme alone, which every row holds.
_WORDS_OF_TENANT = "(f.tsv || array_to_tsvector(ARRAY[chr(1) || f.tenant_id]))"
_IN_TENANT = "quote_literal(chr(1) || %(tenant)s)::tsquery"


# The tenant's languages (the configurations its active versions were indexed in) and its active chunks: from the
# totals a trigger keeps (sql/040), not from every active version.
_TENANT_TEXT_SQL = """
SELECT (SELECT array_agg(name ORDER BY name) FROM (
            SELECT name FROM tenant_serving_totals WHERE tenant_id = %(tenant)s AND kind = 'language'
             GROUP BY name HAVING sum(versions) > 0) l) AS configs,
       (SELECT coalesce(sum(chunks), 0) FROM tenant_serving_totals
         WHERE tenant_id = %(tenant)s AND kind = 'model')::bigint AS chunks
"""

# The full-text arm ranks rather than filters: any of the query's words matches, each weighted by how rare it
# is among the tenant's chunks (BM25's idf) times Postgres's saturating term-frequency rank (ts_rank of that
# word alone). The query is parsed in each of the tenant's languages it is likely to be in, a word's weight
# scaled by that likelihood (languages.query_language_weights); a word parsed in one language matches, and
# is counted among, the chunks indexed in that language. A document frequency is how many of the tenant's served
# chunks hold the word (kept as the full-text rows change, sql/047: the folded count and the changes not folded
# yet), taken up to %(df_cap)s, past which a word could not seed candidates anyway (the cap the count had when it
# was made at search time, kept so the ranking is the one measured). A quoted phrase weighs the sum of its words'
# weights once more (and brings candidates); two neighbouring words of the query found side by side weigh
# ``adjacency_weight`` of theirs more: the proximity that ranking each word alone would lose ("lighthouse lamp" is
# the cell "Lighthouse lamp | 340").
_TEXT_TERMS_SQL = """
WITH configs AS (
    SELECT c.cfg, c.weight FROM unnest(%(configs)s::text[], %(weights)s::float8[]) AS c(cfg, weight)
),
lexemes AS (
    SELECT DISTINCT configs.cfg, configs.weight, t.lexeme
      FROM configs, unnest(to_tsvector(configs.cfg::regconfig, %(query)s)) t
),
counted AS MATERIALIZED (  -- each word looked up once (inlined, every use of df looked it up again)
    SELECT l.cfg, l.weight, l.lexeme, quote_literal(l.lexeme)::tsquery AS tq,
           least(%(df_cap)s, coalesce((SELECT c.chunks FROM tenant_word_counts c
                                        WHERE c.tenant_id = %(tenant)s AND c.text_search_config = l.cfg
                                          AND c.lexeme = l.lexeme), 0)
                            + coalesce((SELECT sum(c.chunks) FROM tenant_word_changes c
                                        WHERE c.tenant_id = %(tenant)s AND c.text_search_config = l.cfg
                                          AND c.lexeme = l.lexeme), 0)) AS df
      FROM lexemes l
),
terms AS (
    SELECT cfg, lexeme, tq, df, weight * ln(1 + (%(population)s - df + 0.5) / (df + 0.5)) AS idf
      FROM counted WHERE df > 0
),
phrases AS (
    SELECT configs.cfg, phraseto_tsquery(configs.cfg::regconfig, ph.text) AS tq, ph.share,
           (SELECT coalesce(sum(t.idf), 0) FROM terms t
             WHERE t.cfg = configs.cfg
               AND t.lexeme IN (SELECT u.lexeme FROM unnest(to_tsvector(configs.cfg::regconfig, ph.text)) u)) AS idf
      FROM configs, unnest(%(phrases)s::text[], %(shares)s::float8[]) AS ph(text, share)
)
SELECT cfg, tq::text AS tq, idf, false AS phrase, true AS word, lexeme, df FROM terms
UNION ALL
SELECT DISTINCT cfg, tq::text, share * idf, share >= 1, false, NULL::text, NULL::bigint
  FROM phrases WHERE idf > 0 AND numnode(tq) > 1
"""

# Candidates hold one of the rarest words (``seeds``); the best SEEDED_POOL of them by those words are then
# scored by all the words. Every full-text row is a served chunk's (sql/041: a version's rows go when it is
# deactivated), so no match needs its version checked.
#
# A row that matches any seed is read once: one bitmap scan of the seeds' disjunction in each language, and each term
# scored on the row in hand by an expression of its own ({seed_score}, {score}: a sum of one CASE a term, composed by
# ``_hits_statement``). Scanning once per seed read a chunk holding two seeds twice, and a neighbouring pair's phrase
# read every chunk holding both words to check their positions, only to find chunks the words had found (at 1M
# chunks, "len ten": both words' matches read again for the pair; docs/benchmarks.md). Joining the row to a list of
# the terms made the planner scan once per term again, and a subquery a row cost what the single read saved
# (docs/benchmarks.md). The rows are ranked by the seeds' sum, the best SEEDED_POOL kept (with their words when other
# terms still score them), and those ranked by every term. Each row evaluates every seed's CASE, so a long query (its
# neighbouring pairs seed too: a 48-word query 51 seeds) is read seed by seed instead (``_TEXT_HITS_BY_SEED_SQL``),
# which ranks the same.
_TEXT_HITS_SQL = """
SELECT p.chunk_id, {score} AS score
  FROM (SELECT f.chunk_id{carried}, {seed_score} AS seed_score
          FROM unnest(%(any_cfgs)s::text[], %(any_tqs)s::tsquery[]) AS s(cfg, tq)
          JOIN chunk_fts f ON """ + _WORDS_OF_TENANT + """ @@ (s.tq && """ + _IN_TENANT + """)
                          AND f.tenant_id = %(tenant)s AND f.text_search_config = s.cfg
         ORDER BY seed_score DESC, f.chunk_id
         LIMIT %(pool)s) p
 ORDER BY score DESC, p.chunk_id
 LIMIT %(candidates)s
"""
_TERM_SCORE = "CASE WHEN {row}.text_search_config = {cfg} AND {row}.tsv @@ {tq}::tsquery " \
              "THEN {idf}::float8 * ts_rank({row}.tsv, {tq}::tsquery, %(normalization)s) ELSE 0 END"

# Each seed's matches scored by it, summed by chunk, the best SEEDED_POOL scored by every term: over
# SINGLE_READ_SEEDS seeds, cheaper than one read evaluating every seed on every row (at 1M chunks, 32 words and more:
# benchmarks/search_latency.py measures long queries; docs/benchmarks.md).
_TEXT_HITS_BY_SEED_SQL = """
WITH matched AS MATERIALIZED (
    SELECT f.chunk_id, s.idf * ts_rank(f.tsv, s.tq, %(normalization)s) AS score
      FROM unnest(%(seed_cfgs)s::text[], %(seed_tqs)s::tsquery[], %(seed_idfs)s::float8[]) AS s(cfg, tq, idf)
      JOIN chunk_fts f ON """ + _WORDS_OF_TENANT + """ @@ (s.tq && """ + _IN_TENANT + """)
                      AND f.tenant_id = %(tenant)s AND f.text_search_config = s.cfg
),
seeded AS (
    SELECT chunk_id, sum(score) AS seed_score FROM matched GROUP BY chunk_id ORDER BY seed_score DESC, chunk_id
     LIMIT %(pool)s
)
SELECT f.chunk_id, sum(w.idf * ts_rank(f.tsv, w.tq, %(normalization)s)) AS score
  FROM seeded s
  JOIN chunk_fts f ON f.chunk_id = s.chunk_id AND f.tenant_id = %(tenant)s
  JOIN unnest(%(cfgs)s::text[], %(tqs)s::tsquery[], %(idfs)s::float8[]) AS w(cfg, tq, idf)
    ON f.text_search_config = w.cfg AND f.tsv @@ w.tq
 GROUP BY f.chunk_id
 ORDER BY score DESC, f.chunk_id
 LIMIT %(candidates)s
"""


# Every word must match (websearch_to_tsquery), ranked by ts_rank_cd: kept as a setting to measure against. Like
# the statements above it reads served chunks only (sql/041).
_TEXT_ALL_WORDS_SQL = """
SELECT f.chunk_id, ts_rank_cd(f.tsv, q.query) AS score
  FROM chunk_fts f, websearch_to_tsquery('english', %(query)s) AS q(query)
 WHERE f.tenant_id = %(tenant)s AND """ + _WORDS_OF_TENANT + """ @@ (q.query && """ + _IN_TENANT + """)
   AND numnode(q.query) > 0  -- a query of stop words only is empty, and (empty && the tenant) is the tenant alone
 ORDER BY score DESC, f.chunk_id
 LIMIT %(candidates)s
"""


# A filtered search's words (``search_filters.py``): the same statements, each row matched also kept to the chunks
# the filter admits, so the seeded pool is the filtered set's best and never another's.
_ADMITTED = " AND f.chunk_id = ANY(%(admitted)s)"
_SEED_JOIN = "AND f.tenant_id = %(tenant)s AND f.text_search_config = s.cfg"


def _admitting(statement: str) -> str:
    filtered = statement.replace(_SEED_JOIN, _SEED_JOIN + _ADMITTED).replace(
        "WHERE f.tenant_id = %(tenant)s AND", "WHERE f.tenant_id = %(tenant)s" + _ADMITTED + " AND")
    if filtered == statement:
        raise RuntimeError("a statement of the text arm lost the place its filter goes")
    return filtered


def text_candidates(conn: psycopg.Connection, tenant_id: str, query: str, candidates: int, *, any_word: bool = True,
                    normalization: int = 0, adjacency_weight: float = 0.5) -> list[int]:
    """The tenant's best chunks by their words, best first (see ``_TEXT_TERMS_SQL``)."""
    return [chunk_id for chunk_id, _ in scored_text_candidates(
        conn, tenant_id, query, candidates, any_word=any_word, normalization=normalization,
        adjacency_weight=adjacency_weight)]


def scored_text_candidates(conn: psycopg.Connection, tenant_id: str, query: str, candidates: int, *,
                           any_word: bool = True, normalization: int = 0, adjacency_weight: float = 0.5,
                           admitted: list[int] | None = None) -> list[tuple[int, float]]:
    """``text_candidates`` with each chunk's score (the sum of its words' weighted ranks), best first; ``admitted``:
    among those chunks only (a filtered search, ``search_filters.py``), the words' weights still the tenant's."""
    params = {"tenant": tenant_id, "query": query, "candidates": candidates, "admitted": admitted}
    if admitted is not None and not admitted:
        return []
    if not any_word:
        statement = _TEXT_ALL_WORDS_SQL if admitted is None else _admitting(_TEXT_ALL_WORDS_SQL)
        return [(r["chunk_id"], float(r["score"])) for r in conn.execute(statement, params).fetchall()]
    tenant = conn.execute(_TENANT_TEXT_SQL, params).fetchone()
    if not tenant["chunks"]:
        return []
    weights = query_language_weights(query, tenant["configs"] or [DEFAULT_CONFIG])
    population = int(tenant["chunks"])
    rows = conn.execute(_TEXT_TERMS_SQL, {
        **params, "configs": list(weights), "weights": list(weights.values()), "population": population,
        "df_cap": max(100, population // 7), **_phrases(query, adjacency_weight)}).fetchall()
    terms = list(rows)
    if not terms:
        return []
    words = sorted((t for t in terms if not t["phrase"]), key=lambda t: -t["idf"])
    phrases = [t for t in terms if t["phrase"]]
    rare = [t for t in words if t["idf"] >= MIN_SEEDING_IDF][:SEED_WORDS]
    if rare:
        return _hits(conn, params, terms, rare + phrases, normalization)
    # Every word is common in the tenant: each matches thousands of chunks (the largest tenant of
    # benchmarks/search_latency.py: a two-word query scored tens of thousands of matches), and the chunks holding
    # them all are the ones their summed scores put first. Those seed, with the neighbouring pairs; every match of
    # each word only when too few hold them all (docs/benchmarks.md: at 1M chunks the same ten candidates for each
    # such query, 200 queries on four tenants).
    hits = _hits(conn, params, terms, _together(words) + phrases, normalization)
    if len(hits) < candidates:
        hits = _hits(conn, params, terms, words[:SEED_WORDS] + phrases, normalization)
    return hits


def _hits(conn: psycopg.Connection, params: dict, terms: list[dict], seeds: list[dict],
          normalization: int) -> list[tuple[int, float]]:
    """The candidates ``seeds`` bring, scored by every term: ``_TEXT_HITS_SQL``, or ``_TEXT_HITS_BY_SEED_SQL`` for
    over SINGLE_READ_SEEDS seeds."""
    if not seeds:
        return []
    params = {**params, "pool": SEEDED_POOL, "normalization": normalization}
    filtered = params.get("admitted") is not None
    if len(seeds) > SINGLE_READ_SEEDS:
        statement = _admitting(_TEXT_HITS_BY_SEED_SQL) if filtered else _TEXT_HITS_BY_SEED_SQL
        rows = conn.execute(statement, {
            **params, "cfgs": [t["cfg"] for t in terms], "tqs": [t["tq"] for t in terms],
            "idfs": [t["idf"] for t in terms], "seed_cfgs": [t["cfg"] for t in seeds],
            "seed_tqs": [t["tq"] for t in seeds], "seed_idfs": [t["idf"] for t in seeds]}).fetchall()
    else:
        statement, values = _hits_statement(terms, seeds, filtered)
        rows = conn.execute(statement, {**params, **values}).fetchall()
    return [(r["chunk_id"], float(r["score"])) for r in rows]


def _hits_statement(terms: list[dict], seeds: list[dict], filtered: bool = False) -> tuple[sql.Composed, dict]:
    """``_TEXT_HITS_SQL`` for these terms and seeds, and its values: each seed and each term scored by a CASE of
    its own, its configuration, query and weight bound as ``cfg<i>``, ``tq<i>``, ``idf<i>``. The terms are put in a
    fixed order, so a chunk's sum is added up the same way every time and ties fall to the chunk id alone."""
    def key(t: dict) -> tuple:
        return t["cfg"], t["tq"], t["idf"]

    scored = {key(t) for t in terms}
    seeding = {key(t) for t in seeds}
    every = sorted(scored | seeding)
    by_config: dict[str, list[str]] = {}
    for cfg, tq, _ in sorted(seeding):
        by_config.setdefault(cfg, []).append(f"({tq})")
    values: dict = {"any_cfgs": list(by_config), "any_tqs": [" | ".join(tqs) for tqs in by_config.values()]}

    def score(i: int, row: str) -> sql.Composed:
        return sql.SQL(_TERM_SCORE).format(row=sql.Identifier(row), cfg=sql.Placeholder(f"cfg{i}"),
                                           tq=sql.Placeholder(f"tq{i}"), idf=sql.Placeholder(f"idf{i}"))

    for i, (cfg, tq, idf) in enumerate(every):
        values[f"cfg{i}"], values[f"tq{i}"], values[f"idf{i}"] = cfg, tq, idf
    seed_score = sql.SQL(" + ").join(score(i, "f") for i, t in enumerate(every) if t in seeding)
    if seeding <= scored:  # every seed is a term: the seeds' sum is part of the score, the rest is added to it
        rest = [score(i, "p") for i, t in enumerate(every) if t in scored and t not in seeding]
        total = sql.SQL(" + ").join([sql.SQL("p.seed_score"), *rest])
    else:  # a seed of common words together is not a term: the terms score the pool anew
        rest = [score(i, "p") for i, t in enumerate(every) if t in scored]
        total = sql.SQL(" + ").join(rest)
    carried = sql.SQL(", f.tsv, f.text_search_config" if rest else "")
    statement = _admitting(_TEXT_HITS_SQL) if filtered else _TEXT_HITS_SQL
    return sql.SQL(statement).format(score=total, carried=carried, seed_score=seed_score), values


def _together(words: list[dict]) -> list[dict]:
    """Seeds for a query of common words only: in each language it was parsed in, one query of all its words
    (weighing their weights' sum), and the neighbouring pairs of words."""
    by_config: dict[str, list[dict]] = {}
    for t in words:
        if t["word"]:
            by_config.setdefault(t["cfg"], []).append(t)
    return [{"cfg": cfg, "tq": " & ".join(t["tq"] for t in ts), "idf": sum(t["idf"] for t in ts)}
            for cfg, ts in by_config.items()] + [t for t in words if not t["word"]]


def _phrases(query: str, adjacency_weight: float) -> dict[str, list]:
    """The query's quoted phrases (share 1) and its pairs of neighbouring words (share ``adjacency_weight``)."""
    quoted = _PHRASE.findall(query)
    words = _WORDS.findall(_PHRASE.sub(" ", query))
    pairs = [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)] if adjacency_weight > 0 else []
    return {"phrases": quoted + pairs, "shares": [1.0] * len(quoted) + [adjacency_weight] * len(pairs)}
