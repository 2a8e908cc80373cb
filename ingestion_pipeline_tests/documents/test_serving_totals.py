"""The per-tenant totals every search reads (sql/040): the models, languages and chunks of a tenant's active
versions, kept by a trigger on document_versions instead of being counted over every active version; and the
tenant's change counter (sql/045, kept for an earlier release's processes during a rolling upgrade), which grows
with every change to them."""

from __future__ import annotations

import numpy as np

from ingestion_pipeline.core.db import connect
from ingestion_pipeline.documents import serving_models
from ingestion_pipeline.documents.text_ranking import _TENANT_TEXT_SQL
from ingestion_pipeline_tests.helpers import add_tenant_vectors, database_migrated_before, table


def _counted(conn, tenant: str) -> dict:
    """What the totals must say, counted the slow way over the tenant's active versions."""
    models = conn.execute(
        """SELECT embedding_model AS name, count(*) AS versions, sum(chunk_count) AS chunks
             FROM document_versions WHERE tenant_id = %s AND is_active
            GROUP BY embedding_model ORDER BY chunks DESC, embedding_model""", (tenant,)).fetchall()
    configs = conn.execute(
        """SELECT array_agg(DISTINCT cfg ORDER BY cfg) AS configs FROM document_versions v,
                  unnest(v.text_search_configs) cfg WHERE v.tenant_id = %s AND v.is_active""", (tenant,)).fetchone()
    return {"models": [(m["name"], m["versions"], int(m["chunks"])) for m in models],
            "configs": configs["configs"], "chunks": sum(m["chunks"] for m in models),
            "versions": sum(m["versions"] for m in models)}


def _kept(conn, tenant: str) -> dict:
    text = conn.execute(_TENANT_TEXT_SQL, {"tenant": tenant, "query": ""}).fetchone()
    models = serving_models.in_use(conn, tenant)
    return {"models": [(m.name, m.versions, m.chunks) for m in models], "configs": text["configs"],
            "chunks": text["chunks"], "versions": sum(m.versions for m in models)}


def _changes(conn, tenant: str) -> int:
    return conn.execute("""SELECT coalesce(sum(versions), 0) AS n FROM tenant_serving_totals
                            WHERE tenant_id = %s AND kind = 'changes'""", (tenant,)).fetchone()["n"]


def _version(conn, tenant: str, chunks: int, model: str | None = "m1") -> int:
    [chunk] = add_tenant_vectors(conn, tenant, np.random.default_rng(chunks).normal(size=(1, 384)))
    version = table(conn, "SELECT version_id FROM chunks WHERE chunk_id = %s", chunk)[0]["version_id"]
    conn.execute("UPDATE document_versions SET chunk_count = %s, embedding_model = %s WHERE version_id = %s",
                 (chunks, model, version))
    return version


def test_the_totals_follow_every_change_of_a_tenants_active_versions(db):
    """Promotion's writes and every other: activation, deactivation, a model change (a re-index), a new
    language, a deleted version; folded or not, the totals say what counting the active versions says, and a
    tenant's totals are its own."""
    first = _version(db, "acme", 3)
    second = _version(db, "acme", 5)
    _version(db, "globex", 7, model="m2")
    steps = [
        None,
        "UPDATE document_versions SET is_active = false WHERE version_id = {first}",
        "UPDATE document_versions SET embedding_model = 'm2' WHERE version_id = {second}",
        "UPDATE document_versions SET text_search_configs = '{{english,french}}' WHERE version_id = {second}",
        "UPDATE document_versions SET chunk_count = 9 WHERE version_id = {second}",
        "UPDATE document_versions SET is_active = true WHERE version_id = {first}",
        "UPDATE document_versions SET title = 'renamed' WHERE version_id = {first}",  # counts nothing
        "DELETE FROM chunk_fts WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE version_id = {first});"
        "DELETE FROM chunk_embeddings WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE version_id = {first});"
        "DELETE FROM chunk_token_vectors WHERE chunk_id IN (SELECT chunk_id FROM chunks WHERE version_id = {first});"
        "DELETE FROM chunks WHERE version_id = {first}; DELETE FROM document_versions WHERE version_id = {first}",
    ]
    for number, step in enumerate(steps):
        changes = _changes(db, "acme"), _changes(db, "globex")
        if step:
            for statement in step.format(first=first, second=second).split(";"):
                db.execute(statement)
        if number % 2:
            assert db.execute("SELECT fold_tenant_serving_totals('acme') AS folded").fetchone()["folded"]
        # the change counter grows with every change a search counts, a fold keeps it, and it is the tenant's own
        assert (_changes(db, "acme") > changes[0]) == (step is not None and "title" not in step), step
        assert _changes(db, "globex") == changes[1]
        assert _kept(db, "acme") == _counted(db, "acme"), step
        assert _kept(db, "globex") == _counted(db, "globex") == {
            "models": [("m2", 1, 7)], "configs": ["english"], "chunks": 7, "versions": 1}
    assert _kept(db, "acme")["configs"] == ["english", "french"]
    db.execute("SELECT fold_tenant_serving_totals('acme')")
    # folded: one row per model and language the tenant still has
    assert sorted((r["kind"], r["name"] or "") for r in table(
        db, "SELECT kind, name FROM tenant_serving_totals WHERE tenant_id = 'acme'")) == [
        ("changes", ""), ("language", "english"), ("language", "french"), ("model", "m2")]
    db.execute("UPDATE document_versions SET is_active = false WHERE tenant_id = 'acme'")
    assert _kept(db, "acme") == {"models": [], "configs": None, "chunks": 0, "versions": 0}


def test_two_promotions_of_a_tenant_neither_wait_for_the_totals_nor_lose_a_count(database_url):
    """Two transactions of one tenant write versions at once: the one that folds while the other's fold holds
    the tenant's lock moves on at once (its rows are left to the next fold), and once both commit the totals
    count both."""
    with connect(database_url, autocommit=True) as setup:
        _version(setup, "acme", 2)
    with connect(database_url) as one, connect(database_url) as two:
        two.execute("SET lock_timeout = '2s'")  # waiting on the other's fold would fail the test, not hang it
        _version(one, "acme", 3)
        _version(two, "acme", 4, model="m2")
        assert one.execute("SELECT fold_tenant_serving_totals('acme') AS f").fetchone()["f"] is True
        assert two.execute("SELECT fold_tenant_serving_totals('acme') AS f").fetchone()["f"] is False
        assert _kept(two, "acme")["chunks"] == 6  # its own version and the committed one
        two.commit()
        one.commit()
    with connect(database_url, autocommit=True) as conn:
        assert _kept(conn, "acme") == _counted(conn, "acme")
        assert _kept(conn, "acme")["models"] == [("m1", 2, 5), ("m2", 1, 4)]
        conn.execute("SELECT fold_tenant_serving_totals('acme')")
        assert len(table(conn, "SELECT 1 FROM tenant_serving_totals WHERE tenant_id = 'acme'")) == 4


def test_an_earlier_releases_versions_are_counted_when_it_upgrades(pg_server_url, tmp_path):
    """sql/040 counts the versions that are there: active ones of each tenant, inactive ones not at all."""
    from ingestion_pipeline.core.migrations import apply_migrations

    url = database_migrated_before(pg_server_url, tmp_path, "040")
    with connect(url, autocommit=True) as conn:
        _version(conn, "acme", 3)
        retired = _version(conn, "acme", 4, model="m2")
        _version(conn, "globex", 5, model=None)
        conn.execute("UPDATE document_versions SET is_active = false WHERE version_id = %s", (retired,))
        conn.execute("UPDATE document_versions SET text_search_configs = '{german}' WHERE tenant_id = 'globex'")
    apply_migrations(url)
    with connect(url, autocommit=True) as conn:
        assert _kept(conn, "acme") == _counted(conn, "acme") == {
            "models": [("m1", 1, 3)], "configs": ["english"], "chunks": 3, "versions": 1}
        assert _kept(conn, "globex") == {"models": [(None, 1, 5)], "configs": ["german"], "chunks": 5, "versions": 1}
        progress = serving_models.migration_progress(conn, "m1")
        assert progress.versions == 2 and progress.done == 1
