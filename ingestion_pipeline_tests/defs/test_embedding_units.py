"""The embed step encodes the chunks of a batch's files together, and still fails only a file at fault."""

import dagster as dg
import pytest

from ingestion_pipeline.core.ledger import Worker
from ingestion_pipeline.definitions import defs
from ingestion_pipeline.documents.chunking import embedding_input
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline_tests.helpers import batch_queued, ingest, pipeline_for, shared_embedder, submit, table


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def notes(tmp_path):
    paths = []
    for i in range(12):
        path = tmp_path / f"note-{i:02d}.md"
        body = " ".join(f"Sentence {j} of note {i} about river barges." for j in range(i * 3 + 1))
        path.write_text(f"# Note {i}\n\n{body}\n")
        paths.append(path)
    return paths


def _run_to_embeddings(database, key):
    pipeline = pipeline_for(database)
    pipeline.worker = Worker("run-u", "run-u", 600)
    pipeline.claim_batch(key)
    pipeline.extract_batch(key)
    pipeline.chunk_batch(key)
    return pipeline


def test_small_files_share_encode_calls_sorted_by_length(database, db, notes, monkeypatch):
    submit(database, "acme", *notes)
    [key] = batch_queued(database)
    pipeline = _run_to_embeddings(database, key)
    calls: list[list[str]] = []
    embedder = shared_embedder()
    original = type(embedder).embed_with_tokens
    monkeypatch.setattr(type(embedder), "embed_with_tokens",
                        lambda self, texts: calls.append(texts) or original(self, texts))

    outcomes = pipeline.embed_batch(key)

    assert [o.status for o in outcomes] == ["running"] * 12
    assert len(calls) == 1  # twelve files, one encode call (a unit holds up to batch_size * 16 texts)
    # shortest first, each as the model reads it: its context line (title > headings), then its text
    staged = table(db, "SELECT embedding_context, text FROM staging_chunks ORDER BY token_count, file_id, ordinal")
    assert calls[0] == [embedding_input(r["embedding_context"], r["text"]) for r in staged]
    assert all(r["embedding_context"] for r in staged)
    stats = {r["config"]["filename"]: r["stats"] for r in table(db, "SELECT * FROM ingestion_runs")}
    assert all(s["embedded"] == s["chunks"] and s["embeddings_reused"] == 0 for s in stats.values())
    assert table(db, "SELECT count(*) AS n FROM staging_chunks WHERE embedding IS NULL OR token_vectors IS NULL"
                 )[0]["n"] == 0  # each chunk's token vectors from the same call
    [promoted] = {o.status for o in pipeline.promote_batch(key)}
    assert promoted == "succeeded"


def test_a_text_the_model_refuses_fails_its_file_alone(database, db, notes, monkeypatch):
    submit(database, "acme", *notes)
    [key] = batch_queued(database)
    pipeline = _run_to_embeddings(database, key)
    embedder = shared_embedder()
    original = type(embedder).embed_with_tokens

    def refuse_note_7(self, texts):
        if any("of note 7 " in t for t in texts):
            raise ValueError("the tokenizer cannot read this text")
        return original(self, texts)

    monkeypatch.setattr(type(embedder), "embed_with_tokens", refuse_note_7)
    outcomes = {o.filename: o for o in pipeline.embed_batch(key)}

    assert outcomes.pop("note-07.md").status == "failed"
    assert {o.status for o in outcomes.values()} == {"running"}
    [failed] = table(db, "SELECT * FROM ingestion_runs WHERE status = 'failed'")
    assert failed["config"]["filename"] == "note-07.md" and "cannot read this text" in failed["error"]
    assert {o.status for o in pipeline.promote_batch(key)} == {"succeeded"}
    assert len(table(db, "SELECT * FROM document_versions WHERE is_active")) == 11


@pytest.mark.integration
def test_the_model_loads_in_the_background_once_files_go_on_to_be_embedded(database, db, notes):
    submit(database, "acme", *notes[:2])
    [key] = batch_queued(database)
    pipeline = pipeline_for(database)
    pipeline.embedder = Embedder(shared_embedder().model_path)  # a cold process's model: not loaded yet
    pipeline.worker = Worker("run-w", "run-w", 600)
    pipeline.claim_batch(key)
    warming = pipeline.embedder._warming
    assert warming is not None and warming.name == "embedder-warm-up"
    warming.join(120)
    assert pipeline.embedder._model is not None  # loaded before the embed step asked for it


def test_nothing_loads_the_model_when_no_file_goes_on(database, db, notes, instance):
    [key] = ingest(instance, database, "acme", notes[0])
    pipeline = pipeline_for(database)  # the batch again, once it is done: nothing in it goes on
    pipeline.embedder = Embedder(shared_embedder().model_path)
    pipeline.worker = Worker("run-s", "run-s", 600)
    assert [o.status for o in pipeline.claim_batch(key)] == ["current"]
    assert pipeline.embedder._warming is None and pipeline.embedder._model is None


def test_only_the_fetch_step_builds_an_s3_client(monkeypatch):
    monkeypatch.setenv("INGESTION_EMBEDDED_POSTGRES", "1")  # loading the code location needs a database allowed
    d = defs()
    needs_s3 = {key.to_user_string() for key in d.resolve_asset_graph().get_all_asset_keys()
                if "s3" in d.resolve_assets_def(key).required_resource_keys}
    assert needs_s3 == {"raw_documents"}


def _chunk_scans(plan: dict) -> list[dict]:
    """The plan's nodes that read ``chunks``."""
    found = [plan] if plan.get("Relation Name") == "chunks" else []
    for child in plan.get("Plans", []):
        found += _chunk_scans(child)
    return found


def test_reuse_takes_a_tenants_own_vectors_and_looks_each_text_up_by_its_hash(database, db, notes, monkeypatch):
    """Reuse is one statement per batch: a file takes the stored vectors of its own tenant only, and each
    staged text is found through the (tenant, content hash) index, even for a tenant the planner's
    statistics do not know yet (the first load of a tenant used to scan all its chunks for every file)."""
    from ingestion_pipeline.documents.staging import REUSE_STORED_EMBEDDINGS

    submit(database, "acme", *notes[:6])
    [first] = batch_queued(database)
    pipeline = _run_to_embeddings(database, first)
    pipeline.embed_batch(first)
    assert {o.status for o in pipeline.promote_batch(first)} == {"succeeded"}
    with database.connection() as conn:  # acme holds ~40,000 chunks; the statistics know them, not globex
        conn.execute("""INSERT INTO chunks (tenant_id, version_id, doc_id, ordinal, text, token_count, content_hash)
                        SELECT tenant_id, version_id, doc_id, ordinal + 1000 * g, text, token_count,
                               md5(g || content_hash)
                          FROM chunks, generate_series(1, 4000) g""")
        conn.execute("ANALYZE chunks")

    monkeypatch.setenv("INGESTION_CHUNK_MAX_TOKENS", "250")  # a new fingerprint: acme's files are queued again
    submit(database, "acme", *notes[:6])
    submit(database, "globex", *notes[:6])
    keys = batch_queued(database)  # a batch per tenant
    assert len(keys) == 2
    for key in keys:
        pipeline = _run_to_embeddings(database, key)
        rows = table(db, "SELECT file_id, tenant_id FROM ingestion_runs WHERE partition_key = %s", key)
        if rows[0]["tenant_id"] == "globex":
            with database.connection() as conn:
                [[plan]] = conn.execute("EXPLAIN (FORMAT JSON) " + REUSE_STORED_EMBEDDINGS, {
                    "model": pipeline.model.name, "digest": pipeline.model.digest,
                    "files": [r["file_id"] for r in rows]}).fetchone().values()
            scans = _chunk_scans(plan["Plan"])
            assert scans and all("content_hash" in scan.get("Index Cond", "") for scan in scans), scans
        assert [o.status for o in pipeline.embed_batch(key)] == ["running"] * 6

    stats = table(db, "SELECT tenant_id, stats FROM ingestion_runs WHERE partition_key = ANY(%s)", keys)
    assert len(stats) == 12
    for row in stats:
        figures = row["stats"]
        if row["tenant_id"] == "acme":  # the same texts, embedded by the first batch
            assert (figures["embeddings_reused"], figures["embedded"]) == (figures["chunks"], 0)
        else:  # the same texts in another tenant: never its vectors
            assert (figures["embeddings_reused"], figures["embedded"]) == (0, figures["chunks"])
    assert table(db, "SELECT count(*) AS n FROM staging_chunks WHERE embedding IS NULL")[0]["n"] == 0


@pytest.mark.parametrize("taken_before", ["reuse", "finish"])
def test_a_file_another_run_took_over_mid_step_is_lost_and_not_marked_embedded(database, db, notes, monkeypatch,
                                                                              taken_before):
    """The batch-wide reuse and finish hold every file first: one taken over meanwhile leaves as lost."""
    from ingestion_pipeline.documents.steps import embed as pipeline_module

    submit(database, "acme", *notes[:4])
    [key] = batch_queued(database)
    pipeline = _run_to_embeddings(database, key)
    [taken] = [r["file_id"] for r in table(
        db, "SELECT file_id FROM ingestion_runs WHERE config->>'filename' = 'note-01.md'")]

    def take_it():
        with database.connection() as other:
            other.execute("UPDATE ingestion_runs SET owner = 'run-other' WHERE file_id = %s", (taken,))

    if taken_before == "reuse":
        original = pipeline_module.file_ledger.hold_many
        calls = []

        def hold_many(conn, file_ids, owner):
            if not calls:
                take_it()
            calls.append(file_ids)
            return original(conn, file_ids, owner)

        monkeypatch.setattr(pipeline_module.file_ledger, "hold_many", hold_many)
    else:
        finish = pipeline_module._finish_embedding
        monkeypatch.setattr(pipeline_module, "_finish_embedding", lambda run, work: take_it() or finish(run, work))

    outcomes = {o.filename: o for o in pipeline.embed_batch(key)}

    assert outcomes["note-01.md"].status == "lost" and "run-other" in outcomes["note-01.md"].detail
    assert {outcomes[n].status for n in ("note-00.md", "note-02.md", "note-03.md")} == {"running"}
    done = {r["file_id"]: r["embeddings_done"]
            for r in table(db, "SELECT file_id, embeddings_done FROM staging_documents")}
    assert done.pop(taken) is False and all(done.values())
    if taken_before == "reuse":  # it left before the model: none of its chunks was encoded
        assert table(db, "SELECT count(*) AS n FROM staging_chunks WHERE file_id = %s AND embedding IS NOT NULL",
                     taken)[0]["n"] == 0
