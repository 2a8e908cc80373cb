"""The document frequencies of a tenant's words (sql/047): kept as its full-text rows change, and always what
counting its served chunks gives, the way search used to count them (each word's matches)."""

from __future__ import annotations

import dagster as dg
import numpy as np
import pytest

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.documents.promotion import deactivate_document
from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before, ingest, table


def _kept(conn, tenant: str) -> dict[tuple[str, str], int]:
    """The counts search reads: each word's folded count plus its changes not folded yet."""
    rows = table(conn, """SELECT text_search_config AS cfg, lexeme, sum(chunks) AS n FROM (
                              SELECT text_search_config, lexeme, chunks FROM tenant_word_counts WHERE tenant_id = %s
                              UNION ALL
                              SELECT text_search_config, lexeme, chunks FROM tenant_word_changes WHERE tenant_id = %s
                          ) w GROUP BY 1, 2 HAVING sum(chunks) <> 0""", tenant, tenant)
    return {(r["cfg"], r["lexeme"]): int(r["n"]) for r in rows}


def _counted(conn, tenant: str) -> dict[tuple[str, str], int]:
    """Each word of the tenant's rows (and of any count kept for it) counted by matching it, as a query does."""
    rows = conn.execute("""
        WITH words AS (
            SELECT DISTINCT f.text_search_config AS cfg, w.lexeme
              FROM chunk_fts f, unnest(tsvector_to_array(f.tsv)) AS w(lexeme) WHERE f.tenant_id = %(t)s
            UNION SELECT text_search_config, lexeme FROM tenant_word_counts WHERE tenant_id = %(t)s
            UNION SELECT text_search_config, lexeme FROM tenant_word_changes WHERE tenant_id = %(t)s
        )
        SELECT cfg, lexeme, (SELECT count(*) FROM chunk_fts f
                              WHERE f.tenant_id = %(t)s AND f.text_search_config = cfg
                                AND f.tsv @@ quote_literal(lexeme)::tsquery) AS n
          FROM words""", {"t": tenant}).fetchall()
    return {(r["cfg"], r["lexeme"]): int(r["n"]) for r in rows if r["n"]}


def _entries(path, texts: list[str]):
    path.write_text("\n\n".join(f"# Entry {i}\n\n{text}" for i, text in enumerate(texts, 1)) + "\n")
    return path


@pytest.mark.integration  # a heavy end-to-end case: with make test, not test-fast
def test_a_tenants_word_counts_are_what_counting_its_served_chunks_gives_after_every_change(
        db, database, tmp_path, monkeypatch):
    """Promotion, a new version of a document, a deactivated document made active again, a row's words changed,
    folded or not: the kept counts are the matches' counts, another tenant's are untouched, a fold leaves one row a
    word and none for a word no chunk holds, and search ranks by the kept count."""
    import psycopg

    from ingestion_pipeline.documents.text_ranking import text_candidates

    log = tmp_path / "acme" / "log.md"
    log.parent.mkdir()
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", _entries(log, [f"The harbour lantern log, record {i}." for i in range(3)]
                                                    + [f"The station kitchen log, record {i}." for i in range(9)]),
               key="log.md")
        ingest(instance, database, "acme", _entries(tmp_path / "quay.md", ["A lantern on the quay, its wick trimmed."]),
               key="quay.md")
        ingest(instance, database, "globex", _entries(tmp_path / "globex.md", ["The lantern room of the mill."]))
    globex = _counted(db, "globex")
    assert _kept(db, "globex") == globex and globex[("english", "lantern")] == 1
    assert _kept(db, "acme") == _counted(db, "acme")
    assert _kept(db, "acme")[("english", "lantern")] == 4
    assert table(db, "SELECT 1 FROM tenant_word_changes WHERE tenant_id = 'acme'") == []  # promotion folded them

    with dg.instance_for_test() as instance:  # a new version of the log: the old one's rows go, the new one's come
        ingest(instance, database, "acme", _entries(log, ["The harbour log, no lantern any more.", "Kitchen."]),
               key="log.md")
    assert _kept(db, "acme") == _counted(db, "acme")
    assert _kept(db, "acme")[("english", "lantern")] == 2 and ("english", "station") not in _kept(db, "acme")
    assert table(db, "SELECT 1 FROM tenant_word_counts WHERE tenant_id = 'acme' AND chunks = 0") == []

    [quay] = table(db, "SELECT v.doc_id, v.version_id FROM document_versions v JOIN documents d USING (doc_id) "
                       "WHERE v.tenant_id = 'acme' AND v.is_active AND d.source_uri LIKE '%%quay.md'")
    steps = [
        lambda: deactivate_document(db, "acme", quay["doc_id"]),
        lambda: db.execute("UPDATE document_versions SET is_active = true WHERE version_id = %s",
                           (quay["version_id"],)),
        lambda: db.execute("UPDATE chunk_fts SET tsv = to_tsvector('english', 'wick wick candle') "
                           "WHERE version_id = %s", (quay["version_id"],)),
    ]
    for step in steps:
        step()  # not folded (the reactivation and the rewrite are not promotion's): the changes are counted too
        assert _kept(db, "acme") == _counted(db, "acme")
    assert _kept(db, "acme")[("english", "candl")] == 1 and _kept(db, "acme")[("english", "lantern")] == 1
    assert table(db, "SELECT 1 FROM tenant_word_changes WHERE tenant_id = 'acme'") != []
    db.execute("SELECT fold_tenant_serving_totals('acme')")
    assert table(db, "SELECT 1 FROM tenant_word_changes WHERE tenant_id = 'acme'") == []
    assert table(db, "SELECT 1 FROM tenant_word_counts WHERE tenant_id = 'acme' AND chunks = 0") == []
    assert _kept(db, "acme") == _counted(db, "acme") and _kept(db, "globex") == globex

    weights: dict[str, float] = {}
    execute = psycopg.Connection.execute

    def recording(self, query, params=None, **kwargs):
        if "seed_score" in str(query):
            weights.update({params[f"tq{i}"]: params[f"idf{i}"] for i in range(len(params)) if f"tq{i}" in params})
        return execute(self, query, params, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "execute", recording)
    text_candidates(db, "acme", "harbour lantern", 10)
    kept = weights.pop("'lantern'")
    db.execute("UPDATE tenant_word_counts SET chunks = chunks + 5 WHERE tenant_id = 'acme' AND lexeme = 'lantern'")
    text_candidates(db, "acme", "harbour lantern", 10)
    assert weights["'lantern'"] < kept  # the ranking weighs the word by the kept count


def _words(conn, tenant: str, chunks: int) -> None:
    """A version of ``chunks`` chunks with its full-text rows, as promotion writes them."""
    ids = add_tenant_vectors(conn, tenant, np.random.default_rng(chunks).normal(size=(chunks, 384)))
    conn.execute("""INSERT INTO chunk_fts (chunk_id, tenant_id, version_id, text_search_config, tsv)
                    SELECT chunk_id, tenant_id, version_id, 'english', to_tsvector('english', text)
                      FROM chunks WHERE chunk_id = ANY(%s)""", (ids,))


def test_two_promotions_of_a_tenant_neither_wait_on_a_words_count_nor_lose_one(database_url):
    """Both write rows holding the same words at once: the one that folds while the other's fold holds the tenant's
    lock moves on at once, each sees its own rows counted, and once both commit the counts count both."""
    with connect(database_url, autocommit=True) as setup:
        _words(setup, "acme", 2)
    with connect(database_url) as one, connect(database_url) as two:
        two.execute("SET lock_timeout = '2s'")  # waiting on the other's fold would fail the test, not hang it
        _words(one, "acme", 3)
        _words(two, "acme", 4)
        assert one.execute("SELECT fold_tenant_serving_totals('acme') AS f").fetchone()["f"] is True
        assert two.execute("SELECT fold_tenant_serving_totals('acme') AS f").fetchone()["f"] is False
        assert _kept(two, "acme")[("english", "chunk")] == 6  # its own rows and the committed ones
        two.commit()
        one.commit()
    with connect(database_url, autocommit=True) as conn:
        assert _kept(conn, "acme") == _counted(conn, "acme")
        assert _kept(conn, "acme")[("english", "chunk")] == 9
        conn.execute("SELECT fold_tenant_serving_totals('acme')")
        assert _kept(conn, "acme") == _counted(conn, "acme")
        assert table(conn, "SELECT 1 FROM tenant_word_changes") == []


def test_an_earlier_releases_full_text_rows_are_counted_when_it_upgrades(pg_server_url, tmp_path):
    """sql/047 counts the words of the rows that are there, each tenant's own."""
    from ingestion_pipeline.core.migrations import apply_migrations

    url = database_migrated_before(pg_server_url, tmp_path, "047")
    with connect(url, autocommit=True) as conn:
        _words(conn, "acme", 3)
        _words(conn, "globex", 5)
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        for tenant, chunks in (("acme", 3), ("globex", 5)):
            assert _kept(conn, tenant) == _counted(conn, tenant)
            assert _kept(conn, tenant)[("english", "chunk")] == chunks
        assert table(conn, "SELECT 1 FROM tenant_word_changes") == []
