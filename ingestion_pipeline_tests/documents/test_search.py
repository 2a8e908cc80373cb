"""Hybrid search: citations, tenant isolation, latest-only."""

import dagster as dg
import pytest

from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline_tests.helpers import ingest, pipeline_for


def _search(db, database, tenant, query, k=5):
    vector = pipeline_for(database).embedder.embed([query])[0]
    return hybrid_search(db, tenant_id=tenant, query=query, query_vector=vector, k=k)


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
