"""Hybrid search: citations, tenant isolation, latest-only."""

import json

import dagster as dg
import pytest

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline_tests.conftest import copy_database
from ingestion_pipeline_tests.helpers import add_tenant_vectors, ingest, pipeline_for


def _search(db, database, tenant, query, k=5, *, late_interaction=True):
    embedder = pipeline_for(database).embedder
    vector, tokens = embedder.embed_query(query)
    return hybrid_search(db, tenant_id=tenant, query=query, query_vector=vector, k=k, model=embedder.info.name,
                         query_tokens=tokens if late_interaction else None)


@pytest.fixture(scope="module")
def two_tenants_template(pg_server_url, migrated_template, corpus_dir, tmp_path_factory) -> str:
    """Two tenants' documents ingested through Dagster once per module (and test worker), into a database that
    each test using ``two_tenants`` gets a copy of: the ingest took ~6 s a test."""
    folder = tmp_path_factory.mktemp("two-tenants")
    url = copy_database(pg_server_url, migrated_template, prefix="two_tenants")
    secret = folder / "acme-secret.md"
    secret.write_text("# Launch plan\n\nProject Nightingale launches on the ninth of March in Lisbon.\n")
    other = folder / "globex.md"
    other.write_text("# Globex memo\n\nProject Nightingale is Globex's name for its payroll migration.\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DATABASE_URL", url)
        patch.setenv("INGESTION_DATA_DIR", str(folder / "data"))
        patch.setenv("INGESTION_UPLOAD_DIR", str(folder / "uploads"))
        with Database(url) as database, dg.instance_for_test() as instance:
            ingest(instance, database, "acme", secret, corpus_dir / "documents" / "fake-memo.pdf")
            ingest(instance, database, "globex", other)
    return url.partition("?")[0].rsplit("/", 1)[1]  # the database's name: a template now, nothing connected


@pytest.fixture
def database_url(request, pg_server_url, migrated_template, monkeypatch) -> str:
    """The conftest's fresh database, or for a test using ``two_tenants`` a copy of their ingested one."""
    template = (request.getfixturevalue("two_tenants_template") if "two_tenants" in request.fixturenames
                else migrated_template)
    url = copy_database(pg_server_url, template)
    monkeypatch.setenv("DATABASE_URL", url)
    return url


@pytest.fixture
def two_tenants(database_url):
    """acme's memo and PDF, globex's memo: searchable (``database_url`` is a copy of ``two_tenants_template``)."""


def test_search_returns_citations_from_the_callers_tenant_only(db, database, two_tenants):
    hits = _search(db, database, "acme", "When does Project Nightingale launch?")
    assert hits and "Lisbon" in hits[0].text
    assert hits[0].vector_rank is not None and hits[0].text_rank is not None  # both rankings fused
    assert hits[0].title == "acme-secret" and hits[0].version_number == 1
    assert hits[0].section_path == ["Launch plan"]
    assert hits[0].citation().startswith("acme-secret (v1, Launch plan)")
    assert all("payroll" not in h.text for h in hits)

    globex = _search(db, database, "globex", "Project Nightingale")
    assert globex and all("Lisbon" not in h.text for h in globex)
    assert _search(db, database, "initech", "Project Nightingale") == []


def test_pdf_hits_cite_pages(db, database, two_tenants):
    hits = _search(db, database, "acme", "memo")
    pdf_hit = next(h for h in hits if h.filename == "fake-memo.pdf")
    assert pdf_hit.page_start == 1 and "p. 1" in pdf_hit.citation()


def test_deactivated_versions_are_not_served(db, database, two_tenants):
    db.execute("UPDATE document_versions SET is_active = false WHERE title = 'acme-secret'")
    hits = _search(db, database, "acme", "Project Nightingale Lisbon")
    assert all("Lisbon" not in h.text for h in hits)


def test_a_deactivated_versions_full_text_rows_go_with_it_and_come_back_with_it(db, database, two_tenants):
    """The full-text rows are the served versions' only (sql/041): deactivating a version removes its rows in the
    same transaction, whoever deactivates it, so no match of the text arm is an inactive chunk's and no word's
    document frequency counts one; made active again, its rows come back as promotion made them."""
    from ingestion_pipeline.documents.text_ranking import text_candidates
    from ingestion_pipeline_tests.helpers import table

    def rows() -> list[dict]:
        return table(db, "SELECT f.chunk_id, f.version_id, f.text_search_config, f.tsv::text FROM chunk_fts f "
                         "JOIN chunks c USING (chunk_id) JOIN document_versions v ON v.version_id = c.version_id "
                         "WHERE v.title = 'acme-secret' ORDER BY f.chunk_id")

    secret = {r["chunk_id"] for r in table(
        db, "SELECT c.chunk_id FROM chunks c JOIN document_versions v USING (version_id) "
            "WHERE v.title = 'acme-secret'")}
    promoted = rows()
    assert {r["chunk_id"] for r in promoted} == secret
    assert secret & set(text_candidates(db, "acme", "Nightingale Lisbon launch", 10))
    assert table(db, "SELECT count(*) AS n FROM chunk_fts f JOIN chunks c USING (chunk_id) "
                     "WHERE f.version_id IS DISTINCT FROM c.version_id")[0]["n"] == 0
    db.execute("UPDATE document_versions SET is_active = false WHERE title = 'acme-secret'")
    assert rows() == []
    assert not secret & set(text_candidates(db, "acme", "Nightingale Lisbon launch", 10))
    db.execute("UPDATE document_versions SET is_active = true WHERE title = 'acme-secret'")
    assert rows() == promoted
    # rows without a version, as a release before sql/039 promotes them during a rolling upgrade, go too
    db.execute("UPDATE chunk_fts SET version_id = NULL WHERE chunk_id = ANY(%s)", (list(secret),))
    assert secret & set(text_candidates(db, "acme", "Nightingale Lisbon launch", 10))
    db.execute("UPDATE document_versions SET is_active = false WHERE title = 'acme-secret'")
    assert rows() == []


def test_an_earlier_releases_full_text_rows_of_inactive_versions_are_removed(pg_server_url, tmp_path):
    """sql/041 removes the full-text rows of versions no longer served and keeps the active ones'; the chunks and
    vectors of every version stay."""
    import numpy as np

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.core.migrations import apply_migrations
    from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before

    url = database_migrated_before(pg_server_url, tmp_path, "041")
    with connect(url, autocommit=True) as conn:
        served = add_tenant_vectors(conn, "acme", np.random.default_rng(2).normal(size=(3, 384)))
        retired = add_tenant_vectors(conn, "acme", np.random.default_rng(3).normal(size=(2, 384)))
        conn.execute("""INSERT INTO chunk_fts (chunk_id, tenant_id, version_id, tsv)
                        SELECT chunk_id, tenant_id, version_id, to_tsvector('english', text) FROM chunks""")
        conn.execute("UPDATE document_versions SET is_active = false WHERE version_id = "
                     "(SELECT version_id FROM chunks WHERE chunk_id = %s)", (retired[0],))
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        assert [r["chunk_id"] for r in conn.execute("SELECT chunk_id FROM chunk_fts ORDER BY chunk_id")] == served
        assert conn.execute("SELECT count(*) AS n FROM chunks").fetchone()["n"] == 5
        assert conn.execute("SELECT count(*) AS n FROM chunk_embeddings").fetchone()["n"] == 5


def test_full_text_rows_of_an_earlier_release_are_upgraded_with_their_versions(pg_server_url, tmp_path):
    """sql/039 gives each existing full-text row its chunk's version, so the text arm keeps finding them."""
    import numpy as np

    from ingestion_pipeline.core.db import connect
    from ingestion_pipeline.core.migrations import apply_migrations
    from ingestion_pipeline.documents.text_ranking import text_candidates
    from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before

    url = database_migrated_before(pg_server_url, tmp_path, "039")
    with connect(url, autocommit=True) as conn:
        chunks = add_tenant_vectors(conn, "acme", np.random.default_rng(2).normal(size=(3, 384)))
        add_tenant_vectors(conn, "acme", np.random.default_rng(3).normal(size=(2, 384)))  # a second version
        conn.execute("""INSERT INTO chunk_fts (chunk_id, tenant_id, tsv)
                        SELECT chunk_id, tenant_id, to_tsvector('english', text) FROM chunks""")
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT f.version_id AS kept, c.version_id FROM chunk_fts f JOIN chunks c USING (chunk_id)"
                            ).fetchall()
        assert len(rows) == 5 and all(r["kept"] == r["version_id"] for r in rows)
        assert len({r["kept"] for r in rows}) == 2
        assert set(chunks) <= set(text_candidates(conn, "acme", "acme chunk", 10))


def test_bad_queries_are_refused(db, database):
    with pytest.raises(ValueError, match="empty"):
        _search(db, database, "acme", "   ")


@pytest.mark.integration
@pytest.mark.parametrize("exact_max", [0, 5_000], ids=["through-its-graph", "small-tenant-exact"])
def test_a_tenant_whose_neighbourhood_belongs_to_another_tenant_still_gets_its_chunks(db, database, exact_max,
                                                                                     monkeypatch):
    """When every vector near the query is another tenant's, in the same partition, the tenant's own chunks are
    what it gets, whether it is ranked through its own graph (``exact_max`` 0) or, being small, exactly; the
    graph's scan reads the tenant's own graph in its own partition only."""
    import numpy as np

    from ingestion_pipeline.documents import search
    from ingestion_pipeline.documents.vector_index import build_graph, graph_name

    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", exact_max)

    rng = np.random.default_rng(3)
    query = rng.normal(size=384)
    query /= np.linalg.norm(query)

    add_tenant_vectors(db, tenant_beside(db, "loner"), query + rng.normal(scale=0.02, size=(3000, 384)))
    mine = add_tenant_vectors(db, "loner", query + rng.normal(scale=0.6, size=(5, 384)))
    if exact_max == 0:
        build_graph(db, "loner", 384)
    db.execute("ANALYZE")
    # At this size the planner would rather scan the tenant's rows than use the index; at production sizes
    # it uses the index (benchmarks/search_latency.py). Make it use the index here too.
    db.execute("SET enable_seqscan = off")
    db.execute("SET enable_sort = off")
    hits = hybrid_search(db, tenant_id="loner", query="nothing matches this", query_vector=query.astype(np.float32),
                         k=5, model="m")
    assert sorted(h.chunk_id for h in hits) == sorted(mine)
    if exact_max:
        return
    from ingestion_pipeline.documents.search import _VECTOR_ANN_SQL
    from ingestion_pipeline.documents.vector_index import of_dimension, partition_of, partitions

    with db.transaction():
        db.execute("SELECT set_config('hnsw.ef_search', '400', true), "
                   "set_config('plan_cache_mode', 'force_custom_plan', true)")
        [[plan]] = db.execute(of_dimension("EXPLAIN (FORMAT JSON) " + _VECTOR_ANN_SQL, 384),
                              {"tenant": "loner", "vector": query.astype(np.float32), "model": "m", "candidates": 50}
                              ).fetchone().values()
    text = json.dumps(plan)
    assert {p for p in partitions(db) if f'"{p}"' in text} == {partition_of(db, "loner")}
    assert f'"{graph_name("loner", 384)}"' in text


def tenant_beside(conn, tenant: str) -> str:
    """A tenant name whose vectors hash to ``tenant``'s partition of chunk_embeddings."""
    for i in range(1000):
        name = f"crowd{i}"
        if conn.execute("SELECT bool_or(satisfies_hash_partition('chunk_embeddings'::regclass, 16, r, %s::text) "
                        "AND satisfies_hash_partition('chunk_embeddings'::regclass, 16, r, %s::text)) AS same "
                        "FROM generate_series(0, 15) r", (tenant, name)).fetchone()["same"]:
            return name
    raise AssertionError(f"no name found beside {tenant}")


def test_a_small_tenants_exact_ranking_finds_its_active_chunks_behind_many_nearer_inactive_ones(db, database):
    """A small tenant is ranked exactly: its nearest vectors first, then only those checked for an active version.
    When the nearest are a replaced version's (hundreds nearer the query than any active chunk), the ranking is
    computed again over every row, and the active chunks nearest the query come back, nearest first."""
    import numpy as np

    rng = np.random.default_rng(5)
    query = rng.normal(size=384)
    query /= np.linalg.norm(query)
    replaced = add_tenant_vectors(db, "reviser", query + rng.normal(scale=0.05, size=(300, 384)))
    db.execute("UPDATE document_versions SET is_active = false WHERE version_id = "
               "(SELECT version_id FROM chunks WHERE chunk_id = %s)", (replaced[0],))
    active_vectors = query + rng.normal(scale=0.8, size=(20, 384))
    active = add_tenant_vectors(db, "reviser", active_vectors)
    normalised = active_vectors / np.linalg.norm(active_vectors, axis=1, keepdims=True)
    nearest_first = [active[i] for i in np.argsort(-(normalised @ query))]

    hits = hybrid_search(db, tenant_id="reviser", query="nothing matches this", query_vector=query.astype(np.float32),
                         k=5, model="m")
    assert [h.chunk_id for h in hits] == nearest_first[:5]


def test_a_question_whose_words_are_not_all_in_the_passage_still_ranks_it_by_text(db, database, two_tenants):
    # "days", "until" and "Portugal" are in no chunk: every-word matching found nothing for such a question
    hits = _search(db, database, "acme", "How many days until the Nightingale launch in Portugal?")
    assert "Lisbon" in hits[0].text and hits[0].text_rank == 1


def test_the_every_word_setting_finds_the_tenants_chunks_holding_every_word_and_nothing_for_stop_words(
        db, database, two_tenants):
    from ingestion_pipeline.documents.text_ranking import text_candidates

    def texts(tenant: str, query: str) -> list[str]:
        found = text_candidates(db, tenant, query, 10, any_word=False)
        return [db.execute("SELECT text FROM chunks WHERE chunk_id = %s", (c,)).fetchone()["text"] for c in found]

    assert [t for t in texts("acme", "Nightingale Lisbon") if "Lisbon" in t and "Nightingale" in t]
    assert all("Lisbon" in t for t in texts("acme", "Nightingale Lisbon"))
    assert texts("globex", "Nightingale Lisbon") == []  # globex's memo holds one of the words, and acme's are acme's
    assert texts("acme", "the of and") == []  # an empty query: not every chunk of the tenant


def test_each_chunk_is_indexed_in_its_language_and_a_query_in_it_matches_inflections(db, database, tmp_path):
    french = tmp_path / "olap.md"
    french.write_text("# Résumés de requêtes\n\nNous proposons un langage algébrique qui résume les requêtes "
                      "OLAP lancées sur un entrepôt de données, et une mesure de la qualité de ces résumés.\n")
    english = tmp_path / "notes.md"
    english.write_text("# Notes\n\nThe warehouse team summarised every analytical query it ran last quarter.\n")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", french, english)
    configs = {r["title"]: r["text_search_configs"] for r in
               db.execute("SELECT title, text_search_configs FROM document_versions").fetchall()}
    assert configs == {"olap": ["french"], "notes": ["english"]}
    # "résumer" and "requête" are inflections of the chunk's "résume" and "requêtes" only to a French stemmer
    hits = _search(db, database, "acme", "résumer une requête")
    assert hits[0].title == "olap" and hits[0].text_rank == 1


def test_neighbouring_chunks_widen_a_hit_within_its_version(db, database, tmp_path):
    from ingestion_pipeline.documents.search import hybrid_search

    doc = tmp_path / "manual.md"
    doc.write_text("\n\n".join(f"# Part {i}\n\nPart {i} covers topic number {i} of the manual and nothing else."
                               for i in range(1, 6)) + "\n\n# Part 6\n\nThe boiler pressure valve is in part six.\n")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", doc)
    chunks = [r["text"] for r in db.execute("SELECT text FROM chunks ORDER BY ordinal").fetchall()]
    embedder = pipeline_for(database).embedder
    query = "boiler pressure valve"
    [hit] = [h for h in hybrid_search(db, tenant_id="acme", query=query, query_vector=embedder.embed([query])[0],
                                      model=embedder.info.name, k=1, neighbours=2)]
    position = chunks.index(hit.text)
    assert hit.context_before == chunks[max(0, position - 2):position]
    assert hit.context_after == chunks[position + 1:position + 3]
    with pytest.raises(ValueError, match="neighbours"):
        hybrid_search(db, tenant_id="acme", query=query, query_vector=embedder.embed([query])[0],
                      model=embedder.info.name, neighbours=9)


def test_the_same_passage_in_two_documents_is_one_hit_listing_the_other(db, database, tmp_path):
    passage = "Expense reports above five hundred euros need the approval of a second director before payment."
    first, second = tmp_path / "policy-2024.md", tmp_path / "policy-2025.md"
    first.write_text(f"# Expenses\n\n{passage}\n")
    second.write_text(f"# Expenses\n\n{passage}\n\n# Travel\n\nTravel is booked through the portal.\n")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", first, second)
    hits = _search(db, database, "acme", "who approves large expense reports?")
    assert sum(passage in h.text for h in hits) == 1
    holder = next(h for h in hits if passage in h.text)
    assert len(holder.also_in) == 1 and "policy-202" in holder.also_in[0]


def test_a_search_reads_only_its_tenants_full_text_partition(db, database, two_tenants):
    """chunk_fts is partitioned by the tenant (sql/031): the text arm of acme's search scans acme's partition and
    no other, so another tenant's words never cost it anything."""
    from ingestion_pipeline_tests.helpers import table

    parts = {r["tenant_id"]: r["part"] for r in table(
        db, "SELECT DISTINCT tenant_id, tableoid::regclass::text AS part FROM chunk_fts")}
    assert parts["acme"] != parts["globex"]  # the two tenants hash apart

    def scans() -> dict[str, int]:
        db.execute("SELECT pg_stat_force_next_flush()")
        db.execute("SELECT 1")  # a transaction ends: this session's counts are flushed
        db.execute("SELECT pg_stat_clear_snapshot()")
        return {r["relname"]: r["n"] for r in table(
            db, "SELECT relname, seq_scan + coalesce(idx_scan, 0) AS n FROM pg_stat_user_tables "
                "WHERE relname LIKE 'chunk_fts_p%%'")}

    before = scans()
    assert _search(db, database, "acme", "When does Project Nightingale launch?")
    after = scans()
    read = {name for name in after if after[name] > before.get(name, 0)}
    assert read == {parts["acme"]}, (read, parts)


def _parts(path, texts: list[str]):
    path.write_text("\n\n".join(f"# Entry {i}\n\n{text}" for i, text in enumerate(texts, 1)) + "\n")
    return path


def test_a_query_of_common_words_is_seeded_by_the_chunks_holding_them_all_and_by_each_when_too_few_do(
        db, database, tmp_path, monkeypatch):
    """Both words of "harbour lantern" are in more than an eighth of each tenant's chunks (too common to bring
    candidates alone). Where ten or more chunks hold both, those bring the candidates and nothing else is scored
    (one statement); where two do, they still come first and the chunks holding either word fill the ten."""
    import psycopg

    from ingestion_pipeline.documents.text_ranking import text_candidates

    def entries(both: int) -> list[str]:
        return ([f"The harbour lantern log, record {i}." for i in range(both)]
                + [f"The harbour office log, record {i}." for i in range(8)]
                + [f"The lantern workshop log, record {i}." for i in range(8)]
                + [f"The station kitchen log, record {i}." for i in range(6)])

    with dg.instance_for_test() as instance:
        ingest(instance, database, "many", _parts(tmp_path / "many.md", entries(12)))
        ingest(instance, database, "few", _parts(tmp_path / "few.md", entries(2)))
    seeded: list[list[str]] = []  # each scoring statement's seeds
    execute = psycopg.Connection.execute

    def recording(self, query, params=None, **kwargs):
        if "seed_score" in str(query):  # one scan of the seeds' disjunction, in each language
            seeded.append([seed[1:-1] for tqs in params["any_tqs"] for seed in tqs.split(" | ")])
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    texts = {r["chunk_id"]: r["text"] for r in db.execute("SELECT chunk_id, text FROM chunks")}
    together = ["'harbour' & 'lantern'", "'harbour' <-> 'lantern'"]
    for tenant, both in (("many", 12), ("few", 2)):
        seeded.clear()
        found = [texts[c] for c in text_candidates(db, tenant, "harbour lantern", 10)]
        assert len(found) == 10
        assert all("harbour lantern" in t for t in found[:min(both, 10)]), found
        assert all(("harbour" in t) or ("lantern" in t) for t in found), found
        assert [_unordered(s) for s in seeded] == [_unordered(together)] + (
            [] if both >= 10 else [_unordered(["'harbour'", "'lantern'", "'harbour' <-> 'lantern'"])]), seeded


def test_the_candidates_come_in_the_order_of_each_chunks_sum_of_every_terms_weighted_rank(
        db, database, tmp_path, monkeypatch):
    """"harbour lantern": both words rare enough to bring candidates, and the pair of them too. Each chunk that
    holds any of them is a candidate, ranked by the sum of every term's weight times its rank in the chunk."""
    import psycopg

    from ingestion_pipeline.documents.text_ranking import text_candidates

    entries = ([f"The harbour lantern log, record {i}." for i in range(3)]
               + [f"The harbour office log, record {i}." for i in range(2)]
               + [f"A lantern lantern in the workshop, record {i}." for i in range(2)]
               + [f"The station kitchen log, record {i}." for i in range(40)])
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", _parts(tmp_path / "log.md", entries))
    terms: dict = {}
    execute = psycopg.Connection.execute

    def recording(self, query, params=None, **kwargs):
        if "seed_score" in str(query):
            terms.update(params)
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    found = text_candidates(db, "acme", "harbour lantern", 10)
    weighted = [(terms[f"tq{i}"], terms[f"idf{i}"]) for i in range(100) if f"tq{i}" in terms]
    assert sorted(tq for tq, _ in weighted) == sorted(["'harbour'", "'lantern'", "'harbour' <-> 'lantern'"])
    scores = {}
    for r in execute(db, "SELECT chunk_id, tsv FROM chunk_fts WHERE tenant_id = 'acme'"):
        score = sum(idf * execute(db, "SELECT CASE WHEN %(v)s::tsvector @@ %(q)s::tsquery "
                                      "THEN ts_rank(%(v)s::tsvector, %(q)s::tsquery, 0) ELSE 0 END AS r",
                                  {"v": r["tsv"], "q": tq}).fetchone()["r"] for tq, idf in weighted)
        if score > 0:
            scores[r["chunk_id"]] = round(score, 9)
    assert len(scores) == 7 and found == sorted(scores, key=lambda c: (-scores[c], c))
    texts = {r["chunk_id"]: r["text"] for r in execute(db, "SELECT chunk_id, text FROM chunks")}
    assert all("harbour lantern" in texts[c] for c in found[:3]), [texts[c] for c in found]


def test_each_row_holding_a_seed_is_read_once_and_no_other_tenants_row_is(db, monkeypatch):
    """Two rare words and their pair seed: a chunk holding both words, or the pair, is read once, not once for each
    seed it holds; and another tenant's chunks holding the same words (in the same partition, as hashing puts
    several tenants in each) are not read at all (sql/046). On 5,000 rows whose full-text index the planner uses (a
    temporary chunk_fts, which the statement's unqualified name finds first)."""
    import json

    from psycopg import sql

    from ingestion_pipeline.documents import text_ranking

    acme = ["kitchen log entry"] * 2480 + ["harbour lantern"] * 10 + ["harbour office"] * 5 + ["lantern shed"] * 5
    other = ["kitchen log entry"] * 2000 + ["harbour lantern"] * 500
    with db.transaction():
        db.execute("CREATE TEMP TABLE chunk_fts (chunk_id bigint, tenant_id text, tsv tsvector, "
                   "text_search_config text) ON COMMIT DROP")
        db.execute("INSERT INTO chunk_fts SELECT i, CASE WHEN i <= 2500 THEN 'acme' ELSE 'other' END, "
                   "to_tsvector('english', w), 'english' FROM unnest(%s::text[]) WITH ORDINALITY AS t(w, i)",
                   (acme + other,))
        db.execute("CREATE INDEX ON chunk_fts USING gin ((tsv || array_to_tsvector(ARRAY[chr(1) || tenant_id])))")
        db.execute("ANALYZE chunk_fts")
        terms = [{"cfg": "english", "tq": tq, "idf": idf}
                 for tq, idf in (("'harbour'", 5.0), ("'lantern'", 5.0), ("'harbour' <-> 'lantern'", 5.0))]
        statement, values = text_ranking._hits_statement(terms, terms)
        params = {"tenant": "acme", "candidates": 50, "pool": 400, "normalization": 0, **values}
        [plan] = db.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + statement, params).fetchone()["QUERY PLAN"]
        found = [r["chunk_id"] for r in db.execute(statement, params)]
        monkeypatch.setattr(text_ranking, "SINGLE_READ_SEEDS", 2)  # a long query's many seeds: read seed by seed
        by_seed = [chunk_id for chunk_id, _ in text_ranking._hits(db, {"tenant": "acme", "candidates": 50}, terms,
                                                                  terms, 0)]

    def scans(node: dict) -> list[dict]:
        own = [node] if node.get("Relation Name") == "chunk_fts" else []
        return own + [s for child in node.get("Plans", []) for s in scans(child)]

    plan = plan if isinstance(plan, dict) else json.loads(plan)[0]
    by_words = [s for s in scans(plan["Plan"]) if s["Node Type"] == "Bitmap Heap Scan"]
    assert by_words, json.dumps(plan, indent=1)
    assert sum(round(s["Actual Rows"] * s["Actual Loops"]) for s in by_words) == 20  # 10 + 5 + 5 chunks, once each
    assert sum(s.get("Rows Removed by Filter", 0) for s in by_words) == 0  # none of the other tenant's 500
    assert found[:10] == list(range(2481, 2491)) and sorted(found) == list(range(2481, 2501))
    assert by_seed == found  # the two statements rank alike


def _unordered(tsqueries: list[str]) -> list[str]:
    """Seeds compared whatever the order of equally weighted words (in the list, and inside an ``&``)."""
    return sorted(" & ".join(sorted(tq.split(" & "))) for tq in tsqueries)




def test_search_eval_reports_each_kind_with_the_interval_of_its_hit_at_3(two_tenants, tmp_path, capsys):
    """`search-eval` over a tenant's knowledge base: each kind's figures and the bootstrap interval beside hit@3;
    another tenant's passage never answers (globex's memo holds the words of the second question's answer)."""
    from ingestion_pipeline.cli import main

    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(q) for q in [
        {"id": "n1", "document": "acme-secret.md", "kind": "natural", "language": "en",
         "question": "Which city hosts the start of the programme?",
         "answer": "launches on the ninth of March in Lisbon"},
        {"id": "l2", "document": "acme-secret.md", "kind": "lookup", "language": "en",
         "question": "What is Project Nightingale at Globex?", "answer": "Globex's name for its payroll migration"},
    ]) + "\n")
    assert main(["search-eval", str(questions), "--tenant", "acme", "--json"]) == 0
    rows = {r["group"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["all"]["questions"] == 2 and rows["natural"]["questions"] == rows["lookup"]["questions"] == 1
    assert rows["natural"]["hit@3"] == 1.0 and rows["natural"]["hit@3 95%"] == "1.00-1.00"
    assert rows["lookup"]["hit@3"] == 0.0  # only globex holds it
    assert rows["missed at 3"]["ids"] == ["l2"]


def test_every_promoted_chunk_keeps_its_token_vectors_and_search_ranks_its_candidates_by_them(db, database,
                                                                                              two_tenants):
    """Promotion stores each chunk's token vectors beside its vector, in its tenant; a search ranks its candidates
    by late interaction with the query's tokens, and keeps the fused order when a candidate has none (a version
    promoted before they were kept) or when no query tokens are given."""
    from ingestion_pipeline.documents.late_interaction import unpack

    counts = {r["tenant_id"]: (r["chunks"], r["tokens"]) for r in db.execute(
        """SELECT c.tenant_id, count(*) AS chunks, count(t.chunk_id) AS tokens
             FROM chunks c LEFT JOIN chunk_token_vectors t ON t.chunk_id = c.chunk_id AND t.tenant_id = c.tenant_id
            GROUP BY c.tenant_id""")}
    assert set(counts) == {"acme", "globex"} and all(chunks == tokens > 0 for chunks, tokens in counts.values())
    row = db.execute("SELECT t.tokens, c.token_count FROM chunk_token_vectors t JOIN chunks c USING (chunk_id) "
                     "WHERE t.tenant_id = 'acme' ORDER BY chunk_id LIMIT 1").fetchone()
    assert len(unpack(bytes(row["tokens"]), 384)) >= row["token_count"]  # the context line's tokens too

    question = "When does Project Nightingale launch?"
    reranked = _search(db, database, "acme", question)
    fused = _search(db, database, "acme", question, late_interaction=False)
    assert "Lisbon" in reranked[0].text and "Lisbon" in fused[0].text
    assert reranked[0].score > 0.2 > fused[0].score  # a MaxSim score, against a reciprocal rank's ~0.03
    assert all("payroll" not in h.text for h in reranked)  # globex's chunk, though its words are near

    db.execute("DELETE FROM chunk_token_vectors WHERE chunk_id = %s", (reranked[-1].chunk_id,))
    without = _search(db, database, "acme", question)
    assert [(h.chunk_id, h.score) for h in without] == [(h.chunk_id, h.score) for h in fused]
