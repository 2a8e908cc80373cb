"""Hybrid search: citations, tenant isolation, latest-only."""

import dagster as dg
import pytest

from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline_tests.helpers import ingest, pipeline_for


def _search(db, database, tenant, query, k=5):
    embedder = pipeline_for(database).embedder
    vector = embedder.embed([query])[0]
    return hybrid_search(db, tenant_id=tenant, query=query, query_vector=vector, k=k, model=embedder.info.name)


@pytest.fixture
def two_tenants(database, corpus_dir, tmp_path):
    secret = tmp_path / "acme-secret.md"
    secret.write_text("# Launch plan\n\nProject Nightingale launches on the ninth of March in Lisbon.\n")
    other = tmp_path / "globex.md"
    other.write_text("# Globex memo\n\nProject Nightingale is Globex's name for its payroll migration.\n")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", secret, corpus_dir / "documents" / "fake-memo.pdf")
        ingest(instance, database, "globex", other)


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


def test_bad_queries_are_refused(db, database):
    with pytest.raises(ValueError, match="empty"):
        _search(db, database, "acme", "   ")


@pytest.mark.parametrize("exact_max", [0, 5_000], ids=["through-hnsw", "small-tenant-exact"])
def test_a_tenant_whose_neighbourhood_belongs_to_another_tenant_still_gets_its_chunks(db, database, exact_max,
                                                                                     monkeypatch):
    """The HNSW scan stops after ef_search entries (pgvector < 0.8) before the tenant filter: when every
    near vector is another tenant's, the tenant's own chunks must still be found (exactly), whether the
    tenant is ranked through the index (``exact_max`` 0: it comes back short, then exactly) or, being small,
    exactly from the start."""
    import numpy as np

    from ingestion_pipeline.documents import search

    monkeypatch.setattr(search, "EXACT_SEARCH_MAX_CHUNKS", exact_max)

    rng = np.random.default_rng(3)
    query = rng.normal(size=384)
    query /= np.linalg.norm(query)

    def add(tenant: str, vectors: np.ndarray) -> list[int]:
        db.execute("INSERT INTO tenants (tenant_id) VALUES (%s) ON CONFLICT DO NOTHING", (tenant,))
        doc = db.execute("INSERT INTO documents (tenant_id, source_uri, title) VALUES (%s, %s, 'd') RETURNING doc_id",
                         (tenant, f"bench://{tenant}")).fetchone()["doc_id"]
        version = db.execute(
            """INSERT INTO document_versions (tenant_id, doc_id, version_number, content_hash, pipeline_fingerprint,
                   is_active, size_bytes, chunk_count, token_count, activated_at)
               VALUES (%s, %s, 1, 'h', 'f', true, 1, %s, 1, now()) RETURNING version_id""",
            (tenant, doc, len(vectors))).fetchone()["version_id"]
        ids = []
        for i, vector in enumerate(vectors):
            chunk = db.execute(
                """INSERT INTO chunks (tenant_id, version_id, doc_id, ordinal, text, token_count, content_hash)
                   VALUES (%s, %s, %s, %s, %s, 1, 'h') RETURNING chunk_id""",
                (tenant, version, doc, i, f"{tenant} chunk {i}")).fetchone()["chunk_id"]
            db.execute("INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, embedding) VALUES (%s, %s, 'm', %s)",
                       (chunk, tenant, (vector / np.linalg.norm(vector)).astype(np.float32)))
            ids.append(chunk)
        return ids

    add("crowd", query + rng.normal(scale=0.02, size=(3000, 384)))  # every near vector is another tenant's
    mine = add("loner", query + rng.normal(scale=0.6, size=(5, 384)))
    db.execute("ANALYZE")
    # At this size the planner would rather scan the tenant's rows than use the index; at production sizes
    # it uses the index (benchmarks/search_latency.py). Make it use the index here too.
    db.execute("SET enable_seqscan = off")
    db.execute("SET enable_sort = off")
    hits = hybrid_search(db, tenant_id="loner", query="nothing matches this", query_vector=query.astype(np.float32),
                         k=5, model="m")
    assert sorted(h.chunk_id for h in hits) == sorted(mine)
    # the vector stage reads the dimension's own HNSW index (sql/013: partial, on embedding::vector(384))
    from ingestion_pipeline.documents.search import _VECTOR_ANN_SQL
    from ingestion_pipeline.documents.vector_index import of_dimension

    with db.transaction():
        db.execute("SELECT set_config('hnsw.ef_search', '400', true)")
        plan = db.execute(of_dimension("EXPLAIN " + _VECTOR_ANN_SQL, 384),
                          {"tenant": "loner", "vector": query.astype(np.float32), "model": "m", "candidates": 50}
                          ).fetchall()
    assert "chunk_embeddings_hnsw_384" in " ".join(r["QUERY PLAN"] for r in plan)
