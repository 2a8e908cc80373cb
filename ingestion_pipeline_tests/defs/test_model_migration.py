"""A model change with no search gap: while the re-index under the new model is half done, every document stays
in the vector half of search (each version ranked by its own model's vectors), through the real assets.

The new model is the packaged one under another name and digest (its tokenizer configuration carries one more
key): the same vectors, so known-item recall during the migration can be held to the old model's exactly, and a
search that compared the query only with the new model's vectors (what the old search did) visibly falls short.
"""

import json
import logging
import shutil
from pathlib import Path

import dagster as dg
import psycopg
import pytest
from psycopg.rows import dict_row

from ingestion_pipeline.core.settings import load_settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents import reindex
from ingestion_pipeline.documents.embedding import Embedder, default_model_path
from ingestion_pipeline.documents.pipeline import DocumentPipeline
from ingestion_pipeline.documents.search import SearchSettings, hybrid_search
from ingestion_pipeline.documents.serving_models import QueryEmbedders, migration_progress
from ingestion_pipeline_tests.cli.test_corpus_cli import json_lines, run_cli
from ingestion_pipeline_tests.helpers import batch_queued, ingest, materialize_batch, shared_embedder, table

FILES = ("norwich-city.txt", "example-10k-1p.html", "fake-memo.pdf", "simple.docx", "ideas-page.html",
         "eng_spa_mult.md", "page-breaks.docx", "codeblock.md")
VECTORS_ONLY = SearchSettings(text_weight=0.0)  # the text half would find most phrases anyway


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _renamed_copy_of_the_model(folder: Path) -> Path:
    copy = folder / "all-MiniLM-L6-v2-next"
    shutil.copytree(default_model_path(), copy)
    config = copy / "tokenizer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "model_revision": "next"}))
    return copy


def _known_items(db) -> list[tuple[str, str]]:
    """(a phrase from the middle of a chunk, that chunk's text) for every active chunk of a few words."""
    items = []
    for r in table(db, """SELECT c.text FROM chunks c JOIN document_versions v ON v.version_id = c.version_id
                           WHERE v.is_active ORDER BY c.chunk_id"""):
        words = r["text"].split()
        if len(words) >= 24:
            items.append((" ".join(words[8:20]), r["text"]))
    return items


def _recall(db, embedders: QueryEmbedders, items, *, other_models: bool = True) -> float:
    """Share of phrases whose chunk is in the top 3 of a vectors-only search."""
    found = 0
    for phrase, text in items:
        hits = hybrid_search(db, tenant_id="acme", query=phrase, query_vector=embedders.embedder.embed([phrase])[0],
                             model=embedders.model, k=3, settings=VECTORS_ONLY,
                             other_models=embedders.for_query(phrase) if other_models else None)
        found += any(h.text == text for h in hits)
    return found / len(items)


def _embedders(current: Embedder, database_url: str) -> QueryEmbedders:
    return QueryEmbedders(current, lambda: psycopg.connect(database_url, autocommit=True, row_factory=dict_row),
                          lambda path: Embedder(path))


def _reindex(instance, database, pipeline: DocumentPipeline, every: int) -> int:
    with database.transaction() as conn:
        plan = reindex.find_versions(conn, pipeline.fingerprint_for)
        plan.reindexable = sorted(plan.reindexable, key=lambda v: v.filename or "")[::every]  # the same half
        reindex.queue(conn, plan)
    for key in batch_queued(database):
        assert materialize_batch(instance, key, resources={"embedder": pipeline.embedder}).success
    return len(plan.reindexable)


@pytest.mark.integration  # two re-indexes of eight documents: 35 s
def test_every_version_stays_in_vector_search_while_a_new_model_reindexes(
        instance, database, database_url, db, corpus_dir, tmp_path, monkeypatch):
    ingest(instance, database, "acme", *(corpus_dir / "documents" / name for name in FILES))
    old = shared_embedder()
    # the same runtime as the old model's (its own export): the vectors agree bit for bit, not to 1e-5
    new = Embedder(str(_renamed_copy_of_the_model(tmp_path)), backend=old.backend_in_use or "auto")
    assert new.info.name != old.info.name and new.info.digest != old.info.digest
    items = _known_items(db)
    assert len(items) > 50
    before = _recall(db, _embedders(old, database_url), items)

    pipeline = DocumentPipeline(database, LocalUploadStore(load_settings().upload.upload_dir), new, load_settings())
    half = _reindex(instance, database, pipeline, every=2)
    with database.connection() as conn:
        progress = migration_progress(conn, new.info.name)
    assert (progress.done, progress.versions) == (half, len(FILES)) and not progress.complete
    assert set(progress.by_model) == {old.info.name, new.info.name}

    # the deployment runs the new model now; the old one is loaded from where it promoted from
    embedders = _embedders(new, database_url)
    during = _recall(db, embedders, items)
    blind = _recall(db, embedders, items, other_models=False)  # the query compared with the new model's only
    print(f"known items in the top 3 (vectors only): before {before:.3f}, half-way {during:.3f}, "
          f"half-way comparing the new model's vectors only {blind:.3f}")
    assert during >= before, (during, before)
    assert blind < 0.7 * before, (blind, before)

    monkeypatch.setenv("INGESTION_EMBEDDING_MODEL", new.model_path)
    [shown] = json_lines(run_cli("model", "migration", "--tenant", "acme", "--json").stdout)
    assert (shown["done"], shown["versions"], shown["complete"]) == (half, len(FILES), False)
    assert "serving until re-indexed" in run_cli("model", "migration").stdout

    _reindex(instance, database, pipeline, every=1)
    with database.connection() as conn:
        assert migration_progress(conn, new.info.name).complete
    assert _recall(db, _embedders(new, database_url), items) >= before
    models = table(db, """SELECT DISTINCT e.model, v.embedding_model FROM chunk_embeddings e
                            JOIN chunks c ON c.chunk_id = e.chunk_id
                            JOIN document_versions v ON v.version_id = c.version_id AND v.is_active""")
    assert models == [{"model": new.info.name, "embedding_model": new.info.name}]


def test_a_host_without_the_old_model_searches_its_versions_by_text(
        instance, database, database_url, db, corpus_dir, tmp_path, caplog):
    ingest(instance, database, "acme", corpus_dir / "documents" / "codeblock.md")
    db.execute("UPDATE embedding_models SET model_path = %s", (str(tmp_path / "gone"),))
    new = Embedder(str(_renamed_copy_of_the_model(tmp_path)), backend="torch")
    embedders = _embedders(new, database_url)
    query = "simple HTML example"
    with caplog.at_level(logging.WARNING, logger="ingestion_pipeline.search"):
        hits = hybrid_search(db, tenant_id="acme", query=query, query_vector=new.embed([query])[0],
                             model=new.info.name, other_models=embedders.for_query(query))
        hybrid_search(db, tenant_id="acme", query=query, query_vector=new.embed([query])[0],
                      model=new.info.name, other_models=embedders.for_query(query))
    assert hits and all(h.vector_rank is None and h.text_rank for h in hits)
    [warning] = [r.getMessage() for r in caplog.records if "searched by text only" in r.getMessage()]
    assert "its files are not on this host" in warning and "gone" in warning
