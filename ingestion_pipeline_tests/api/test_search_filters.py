"""Search narrowed by a filter (documents, source, type, language, dates): only admitted chunks come back, and the
filtered set's best are found even where the rest of the knowledge base would outrank them."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import dagster as dg
import numpy as np
import pytest

from ingestion_pipeline.documents import search_filters
from ingestion_pipeline.documents.search import DEFAULT_SETTINGS, hybrid_search
from ingestion_pipeline.documents.search_filters import FilterTooBroad, search_filter
from ingestion_pipeline.documents.text_ranking import scored_text_candidates
from ingestion_pipeline_tests.helpers import ingest, shared_embedder

pytestmark = pytest.mark.integration  # an ingest of four files through Dagster (~10 s)
QUESTION = "When does Project Nightingale launch in Lisbon?"
VECTORS_ONLY = replace(DEFAULT_SETTINGS, text_weight=0.0, plain_text_weight=0.0, late_interaction=False)


@pytest.fixture
def knowledge_base(api, database, corpus_dir, tmp_path) -> dict[str, int]:
    files = {
        "plan.md": "# Launch plan\n\nProject Nightingale launches on the ninth of March in Lisbon.\n",
        "notes.txt": "Lisbon notes. Nightingale launch in Lisbon on the ninth of March: Lisbon, Nightingale.\n",
        "plan-fr.md": "# Plan de lancement\n\nLe projet Rossignol sera lancé le neuf mars à Lisbonne, "
                      "dans les bureaux du port, avec toute l'équipe.\n",
    }
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", *paths, corpus_dir / "documents" / "fake-memo.pdf")
    with database.connection() as conn:
        rows = conn.execute("SELECT filename, doc_id FROM document_versions WHERE tenant_id = 'acme'").fetchall()
    return {r["filename"]: r["doc_id"] for r in rows}


def _search(database, only, *, settings=None, k=5):
    embedder = shared_embedder()
    vector, tokens = embedder.embed_query(QUESTION)
    with database.connection() as conn:
        return hybrid_search(conn, tenant_id="acme", query=QUESTION, query_vector=vector, k=k,
                             model=embedder.info.name, query_tokens=tokens, settings=settings, only=only)


def test_a_filter_keeps_the_search_to_what_it_admits_and_finds_their_best(database, knowledge_base):
    everything = _search(database, None)
    assert {h.filename for h in everything[:2]} == {"plan.md", "notes.txt"}
    # the memo is about water bottles: unfiltered it is never near the top, filtered it is the answer
    pdf = _search(database, search_filter(file_types=["PDF"]))
    assert pdf and {h.filename for h in pdf} == {"fake-memo.pdf"}
    one = _search(database, search_filter(doc_ids=[knowledge_base["plan.md"]]))
    assert [h.filename for h in one] == ["plan.md"]
    french = _search(database, search_filter(languages=["french"]))
    assert {h.filename for h in french} == {"plan-fr.md"}
    assert len(_search(database, search_filter(source="upload://"))) == len(everything)
    assert _search(database, search_filter(source="s3://")) == []
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    assert _search(database, search_filter(since=tomorrow)) == []
    assert len(_search(database, search_filter(until=tomorrow))) == len(everything)


def test_the_filtered_vector_ranking_is_exact(database, knowledge_base):
    only = search_filter(doc_ids=[knowledge_base["plan-fr.md"], knowledge_base["fake-memo.pdf"]])
    embedder = shared_embedder()
    vector, _ = embedder.embed_query(QUESTION)
    with database.connection() as conn:
        admitted = search_filters.admitted_chunks(conn, "acme", only)
        stored = conn.execute("SELECT chunk_id, embedding FROM chunk_embeddings WHERE chunk_id = ANY(%s)",
                              (admitted,)).fetchall()
    brute = sorted(stored, key=lambda r: (-float(np.dot(r["embedding"].to_numpy(), vector)), r["chunk_id"]))
    hits = _search(database, only, settings=VECTORS_ONLY, k=len(admitted))
    assert [h.chunk_id for h in hits] == [r["chunk_id"] for r in brute]


def test_the_text_arm_seeds_only_from_admitted_chunks(database, knowledge_base):
    only = search_filter(doc_ids=[knowledge_base["plan.md"]])
    with database.connection() as conn:
        admitted = search_filters.admitted_chunks(conn, "acme", only)
        found = scored_text_candidates(conn, "acme", "Lisbon Nightingale", 10, admitted=admitted)
        unfiltered = scored_text_candidates(conn, "acme", "Lisbon Nightingale", 10)
        assert scored_text_candidates(conn, "acme", "Lisbon", 10, admitted=[]) == []
    assert [c for c, _ in found] == admitted
    assert len(unfiltered) > len(found)


def test_a_filter_admitting_too_much_or_an_empty_range_is_refused_saying_why(api, database, knowledge_base,
                                                                              monkeypatch):
    monkeypatch.setattr(search_filters, "MAX_ADMITTED_CHUNKS", 1)
    with pytest.raises(FilterTooBroad, match="admits more than 1 chunks"):
        _search(database, search_filter(source="upload://"))
    r = api.client.get("/v1/search", params={"q": QUESTION, "source": "upload://"}, headers=api.as_("acme-user"))
    assert r.status_code == 400 and r.json()["error"]["code"] == "filter_too_broad"
    with pytest.raises(ValueError, match="date range is empty"):
        search_filter(since=datetime(2026, 2, 1, tzinfo=UTC), until=datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="date range is empty"):  # a moment without a zone is UTC's
        search_filter(since=datetime(2026, 2, 1), until=datetime(2026, 1, 1, tzinfo=UTC))
    r = api.client.get("/v1/search", params={"q": QUESTION, "since": "2026-02-01T00:00:00Z",
                                             "until": "2026-01-01T00:00:00Z"}, headers=api.as_("acme-user"))
    assert r.status_code == 400 and "date range is empty" in r.json()["error"]["message"]


def test_the_api_takes_each_filter_and_another_tenant_admits_nothing(api, knowledge_base):
    r = api.client.get("/v1/search", params=[("q", QUESTION), ("type", "pdf"), ("type", "md")],
                       headers=api.as_("acme-user"))
    assert r.status_code == 200
    assert {h["source"]["filename"] for h in r.json()["hits"]} <= {"fake-memo.pdf", "plan.md", "plan-fr.md"}
    r = api.client.get("/v1/search", params={"q": QUESTION, "doc_id": knowledge_base["notes.txt"]},
                       headers=api.as_("acme-user"))
    assert [h["source"]["filename"] for h in r.json()["hits"]] == ["notes.txt"]
    r = api.client.get("/v1/search", params={"q": QUESTION, "doc_id": knowledge_base["notes.txt"]},
                       headers=api.as_("globex-user"))
    assert r.status_code == 200 and r.json()["hits"] == []
    assert api.client.get("/v1/search", params={"q": QUESTION, "type": "p d f"},
                          headers=api.as_("acme-user")).status_code == 400
