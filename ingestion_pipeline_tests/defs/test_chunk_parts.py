"""A big document's sections chunked in parts, one mapped step each (the shape under INGESTION_EXECUTOR=celery),
through the real assets: the version it becomes is the one the whole file gives, a revision chunks only what
changed, and a part delivered twice adds no chunk and no second promotion."""

import dagster as dg
import pytest

from ingestion_pipeline_tests.defs.test_big_documents import (
    SECTION_COLUMNS,
    _fanned_out_assets,
    _manual,
    spread_over_workers,
)
from ingestion_pipeline_tests.helpers import batch_queued, history, ingest, submit, table
from ingestion_pipeline_tests.helpers import test_resources as resources

SERVED = f"""SELECT {SECTION_COLUMNS} FROM chunks c JOIN document_versions v USING (version_id)
              WHERE c.tenant_id = %s AND v.is_active ORDER BY c.ordinal"""


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def in_parts(monkeypatch):
    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", "20000")  # the 130,000-character manual: ~6 sections
    spread_over_workers(monkeypatch)
    monkeypatch.setenv("INGESTION_CHUNK_PART_CHARACTERS", "40000")  # in 2-3 parts


def _fanned_out(instance, database, tenant: str, path, key: str) -> dg.ExecuteInProcessResult:
    submit(database, tenant, path, key=key)
    [batch] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [batch])
    result = dg.materialize(_fanned_out_assets(), partition_key=batch, instance=instance, resources=resources())
    assert result.success
    return result


def _steps(result, event=dg.DagsterEventType.STEP_SUCCESS) -> list[str]:
    return sorted(e.step_key for e in result.all_events
                  if e.event_type == event and e.step_key.startswith("document_chunks."))


@pytest.mark.integration  # six runs of a 130,000-character manual (~50 s)
def test_parts_fan_out_as_mapped_steps_and_a_revision_chunks_only_what_changed(instance, database, db, tmp_path,
                                                                               in_parts, monkeypatch):
    (tmp_path / "v1").mkdir(), (tmp_path / "v2").mkdir()
    first, revised = _manual(tmp_path / "v1" / "manual.md"), _manual(tmp_path / "v2" / "manual.md", changed=17)
    ingest(instance, database, "whole", first, key="manual")  # in one step, as in one process

    result = _fanned_out(instance, database, "parts", first, "manual")
    [row] = table(db, "SELECT file_id, stats FROM ingestion_runs WHERE tenant_id = 'parts'")
    parts = row["stats"]["chunk_parts"]
    assert parts >= 2 and row["stats"]["sections"] > parts
    assert _steps(result) == sorted([
        "document_chunks.assemble_chunks", "document_chunks.plan_chunk_parts",
        *(f"document_chunks.chunk_part[file_{row['file_id']}_part_{n}]" for n in range(parts))])
    assert table(db, SERVED, "parts") == table(db, SERVED, "whole")  # text, pages, paths, hashes, languages, keys
    [materialized] = result.asset_materializations_for_node("document_chunks")
    assert materialized.metadata["parts_chunked"].value == parts

    # one chapter changed: less to chunk than a part, so the plan's step chunks it, taking the rest; two steps
    revision = _fanned_out(instance, database, "parts", revised, "manual")
    assert _steps(revision) == ["document_chunks.assemble_chunks", "document_chunks.plan_chunk_parts"]
    [materialized] = revision.asset_materializations_for_node("document_chunks")
    assert materialized.metadata["chunks"].value == 240 and materialized.metadata["parts_chunked"].value == 0
    [stats] = [r["stats"] for r in table(db, "SELECT stats FROM ingestion_runs WHERE tenant_id = 'parts' "
                                             "ORDER BY file_id DESC LIMIT 1")]
    assert stats["sections_reused"] == stats["sections"] - 1 and "chunk_parts" not in stats
    ingest(instance, database, "fresh", revised, key="manual")
    assert table(db, SERVED, "parts") == table(db, SERVED, "fresh")

    # chapters 2 and 33 changed too (17 as served): more than a part to chunk, in parts of sections apart
    (tmp_path / "v3").mkdir()
    third = tmp_path / "v3" / "manual.md"
    text = _manual(third, changed=2).read_text()
    for chapter in (17, 33):
        text = text.replace(f"Paragraph 1 of chapter {chapter} is as it was.",
                            f"Paragraph 1 of chapter {chapter} was reworded in the revision.")
    third.write_text(text)
    monkeypatch.setenv("INGESTION_CHUNK_PART_CHARACTERS", "10000")  # the two sections, a part each
    revision = _fanned_out(instance, database, "parts", third, "manual")
    assert [s for s in _steps(revision) if "_part_" in s]
    [stats] = [r["stats"] for r in table(db, "SELECT stats FROM ingestion_runs WHERE tenant_id = 'parts' "
                                             "ORDER BY file_id DESC LIMIT 1")]
    assert stats["sections_reused"] == stats["sections"] - 2 and stats["chunk_parts"] == 2
    ingest(instance, database, "third", third, key="manual")
    assert table(db, SERVED, "parts") == table(db, SERVED, "third")
    assert sum("was reworded" in c["text"] for c in table(db, SERVED, "parts")) == 3


@pytest.mark.integration  # two runs of the manual, one re-executed from failure (~30 s)
def test_a_part_delivered_again_after_it_was_kept_adds_no_chunk_and_promotes_once(instance, database, db, tmp_path,
                                                                                 in_parts, monkeypatch):
    """The worker keeps its part and is lost before Dagster hears of it: the step fails, and the re-execution
    from failure delivers the same part again. It is not chunked twice; the file is promoted once."""
    from ingestion_pipeline.documents.pipeline import DocumentPipeline
    from ingestion_pipeline_tests.defs.test_big_documents import fanned_out_job

    manual = _manual(tmp_path / "manual.md")
    submit(database, "acme", manual, key="manual")
    [batch] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [batch])
    [row] = table(db, "SELECT file_id FROM ingestion_runs")
    lost = f"file_{row['file_id']}_part_1"
    chunk_part = DocumentPipeline.chunk_part

    def kept_then_host_lost(self, partition_key, key):
        outcome = chunk_part(self, partition_key, key)
        if key == lost:
            raise RuntimeError("the worker host went away after keeping its part")
        return outcome

    monkeypatch.setattr(DocumentPipeline, "chunk_part", kept_then_host_lost)
    job = dg.reconstructable(fanned_out_job)
    first = dg.execute_job(job, instance=instance, tags={"dagster/partition": batch})
    assert not first.success
    kept = table(db, "SELECT part_number, state, jsonb_array_length(chunks) AS n FROM staging_chunk_parts "
                     "ORDER BY 1")
    assert [p["state"] for p in kept] == ["done"] * len(kept) and len(kept) >= 2

    monkeypatch.setattr(DocumentPipeline, "chunk_part", chunk_part)
    retry = dg.execute_job(job, instance=instance, tags={"dagster/partition": batch},
                           reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance))
    assert retry.success
    assert _steps(retry, dg.DagsterEventType.STEP_START) == [
        "document_chunks.assemble_chunks", f"document_chunks.chunk_part[{lost}]"]
    said = [e.user_message for e in instance.all_logs(retry.run_id)]
    assert any("part 1 already chunked" in m for m in said), said  # delivered again: the kept part stands
    assert sum(p["n"] for p in kept) == len(table(db, "SELECT 1 FROM chunks"))
    [run] = table(db, "SELECT status FROM ingestion_runs")
    [version] = table(db, "SELECT chunk_count FROM document_versions")
    assert run["status"] == "succeeded"
    ordinals = [c["ordinal"] for c in table(db, "SELECT ordinal FROM chunks ORDER BY 1")]
    assert ordinals == list(range(version["chunk_count"]))  # no chunk twice
    assert history(db, row["file_id"]).count("succeeded") == 1  # promoted once: one version, one success
    assert len(table(db, "SELECT 1 FROM document_versions")) == 1


@pytest.mark.integration
@pytest.mark.parametrize("limit", [10_000, 20_000])  # a part alone over it (~15,000 tokens); the parts together
def test_a_file_chunked_in_parts_over_the_token_limit_fails_with_the_limit(instance, database, db, tmp_path,
                                                                           in_parts, monkeypatch, limit):
    monkeypatch.setenv("INGESTION_MAX_TOKENS_PER_FILE", str(limit))  # the manual holds ~29,000
    submit(database, "acme", _manual(tmp_path / "manual.md"), key="manual")
    [batch] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [batch])
    dg.materialize(_fanned_out_assets(), partition_key=batch, instance=instance, resources=resources(),
                   raise_on_error=False)
    [run] = table(db, "SELECT status, error_code, error FROM ingestion_runs")
    assert (run["status"], run["error_code"]) == ("failed", "file_too_much_text"), run
    assert f"{limit:,} tokens" in run["error"] and "INGESTION_MAX_TOKENS_PER_FILE" in run["error"]
    assert table(db, "SELECT count(*) AS n FROM chunks")[0]["n"] == 0


@pytest.mark.integration  # two fanned-out runs of a small file (~10 s)
def test_a_batch_with_nothing_to_encode_or_read_whole_runs_no_empty_mapped_step(instance, database, db, corpus_dir,
                                                                               monkeypatch):
    """Dagster runs a collecting step after no mapped step at all: no step is spent on an empty share or on
    whole files when there are none."""
    spread_over_workers(monkeypatch)
    memo = corpus_dir / "documents" / "fake-memo.pdf"
    _fanned_out(instance, database, "acme", memo, "memo")
    again = _fanned_out(instance, database, "acme", memo, "memo-copy")  # the same text: every vector reused
    steps = sorted(e.step_key for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_SUCCESS)
    assert "document_embeddings.finish_embeddings" in steps
    assert not [s for s in steps if s.startswith("document_embeddings.embed_share")]
    assert "document_elements.extract_unit[whole_files]" in steps  # the memo is read whole
    runs = table(db, "SELECT status, stats FROM ingestion_runs ORDER BY file_id")
    assert [r["status"] for r in runs] == ["succeeded"] * 2
    assert runs[1]["stats"]["embeddings_reused"] == runs[1]["stats"]["chunks"] > 0
    [embedded] = again.asset_materializations_for_node("document_embeddings")
    assert embedded.metadata["shares"].value == 0
