"""A big PDF through the real assets in units (INGESTION_UNIT_PAGES): the version it becomes is the one the
unsplit file gives, and a unit read before a failure is not read again by the retry."""

import dagster as dg
import numpy as np
import pytest

from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.documents.extraction.isolation import IsolatedExtractor
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline_tests.helpers import ingest, pipeline_for, process_in_process, submit, table

CHUNK_COLUMNS = "v.filename, c.ordinal, c.text, c.page_start, c.page_end, c.section_path, c.element_types, " \
                "c.token_count"


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


def _chunks(db, tenant: str) -> list[dict]:
    return table(db, f"""SELECT {CHUNK_COLUMNS} FROM chunks c JOIN document_versions v USING (version_id)
                          WHERE c.tenant_id = %s ORDER BY v.filename, c.ordinal""", tenant)


@pytest.mark.integration  # two whole runs of a 12-page PDF, and searches (~20 s)
def test_a_pdf_in_units_becomes_the_version_the_whole_file_makes(instance, database, db, corpus_dir, monkeypatch):
    olap = corpus_dir / "documents" / "fr_olap.pdf"  # 12 pages
    ingest(instance, database, "whole", olap)  # 12 text pages are a tenth of a unit's work by default
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "3")
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")  # a text PDF cut by its pages
    ingest(instance, database, "split", olap)
    runs = {r["tenant_id"]: r for r in table(db, "SELECT * FROM ingestion_runs")}
    assert {r["status"] for r in runs.values()} == {"succeeded"}
    assert "units" not in runs["whole"]["stats"]
    assert (runs["split"]["stats"]["units"], runs["split"]["stats"]["units_reused"]) == (4, 0)
    split, whole = _chunks(db, "split"), _chunks(db, "whole")
    assert split == whole and len(split) > 5  # same text, pages, sections and ordinals: no edge lost or doubled
    assert table(db, "SELECT count(*) AS n FROM staging_units")[0]["n"] == 0  # gone with the staged file

    embedder = pipeline_for(database).embedder
    for query in ("dimensions hiérarchies cube OLAP", "agrégation des mesures"):
        vector = embedder.embed([query])[0]
        answers = {tenant: [(r.text, r.page_start) for r in hybrid_search(
            db, tenant_id=tenant, query=query, query_vector=vector, model=embedder.info.name)]
            for tenant in ("whole", "split")}
        assert answers["split"] == answers["whole"] and answers["split"]


@pytest.mark.integration
def test_a_retried_file_reads_only_the_units_it_had_not_read(instance, database, db, corpus_dir, monkeypatch):
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "3")
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")  # a text PDF cut by its pages
    monkeypatch.setenv("INGESTION_BATCH_LANES", "1")  # units in page order
    monkeypatch.setenv("INGESTION_RETRY_BACKOFF", "0.2,0.2")
    submit(database, "acme", corpus_dir / "documents" / "fr_olap.pdf")
    original = IsolatedExtractor.__call__
    reads: list[tuple[int, int]] = []

    def third_unit_throttled_once(self, path, extension, reusable_ocr=(), pages=None):
        if pages is not None:
            reads.append(pages)
            if pages == (7, 9) and reads.count(pages) == 1:  # the worker died mid-file, once
                raise TransientError("worker_out_of_memory", "the extraction worker died (exit code -9)")
        return original(self, path, extension, reusable_ocr, pages)

    monkeypatch.setattr(IsolatedExtractor, "__call__", third_unit_throttled_once)
    process_in_process(instance, database)
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert (run["status"], run["attempts"]) == ("succeeded", 2), run["error"]
    assert reads == [(1, 3), (4, 6), (7, 9), (7, 9), (10, 12)]  # the retry began at the failed unit
    assert (run["stats"]["units"], run["stats"]["units_reused"]) == (4, 2)
    [version] = table(db, "SELECT * FROM document_versions")
    ordinals = [c["ordinal"] for c in table(db, "SELECT ordinal FROM chunks ORDER BY ordinal")]
    assert ordinals == list(range(version["chunk_count"]))  # no chunk twice



@pytest.mark.integration
def test_a_unit_another_live_worker_reads_is_waited_for_not_read_twice(instance, database, db, corpus_dir,
                                                                      monkeypatch):
    """A second delivery: another worker holds unit 2's lease and renews it while it reads; the run waits for
    that unit instead of reading it, and the version is the whole file's."""
    import threading
    import time

    from ingestion_pipeline.documents import units
    from ingestion_pipeline.documents.extraction import extract_pdf_pages

    monkeypatch.setenv("INGESTION_UNIT_PAGES", "3")
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")
    monkeypatch.setenv("INGESTION_BATCH_LANES", "1")
    olap = corpus_dir / "documents" / "fr_olap.pdf"
    submit(database, "acme", olap)
    original = IsolatedExtractor.__call__
    reads: list[tuple[int, int]] = []
    other: list[threading.Thread] = []

    def the_other_worker(file_id: int) -> None:
        with units.UnitLease(database, file_id, 1, "other-host:1", every=0.2):
            time.sleep(2.0)  # past several of the run's looks at the unit
            with database.transaction() as conn:
                units.finish(conn, file_id, units.Unit(1, 4, 6), extract_pdf_pages(olap, 4, 6),
                             done_by="other-host:1", extract_ms=2000)

    def recording(self, path, extension, reusable_ocr=(), pages=None):
        if pages is not None:
            reads.append(pages)
            if pages == (1, 3):  # another worker takes unit 2 now, while this one reads unit 1
                file_id = table(db, "SELECT file_id FROM staging_units LIMIT 1")[0]["file_id"]
                with database.transaction() as conn:
                    assert units.take(conn, file_id, 1, "other-host:1") == "taken"
                other.append(threading.Thread(target=the_other_worker, args=(file_id,)))
                other[0].start()
        return original(self, path, extension, reusable_ocr, pages)

    monkeypatch.setattr(IsolatedExtractor, "__call__", recording)
    process_in_process(instance, database)
    other[0].join()
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert (run["status"], run["attempts"]) == ("succeeded", 1), run["error"]
    assert reads == [(1, 3), (7, 9), (10, 12)]  # unit 2 was the other worker's
    assert table(db, "SELECT count(*) AS n FROM document_versions")[0]["n"] == 1
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "100")
    ingest(instance, database, "whole", olap)
    assert _chunks(db, "acme") == _chunks(db, "whole")


def spread_over_workers(monkeypatch) -> None:
    """Runs whose steps spread their units, parts and shares over workers, as under INGESTION_EXECUTOR=celery (run
    here with the in-process executor: the same steps, one after another)."""
    monkeypatch.setenv("INGESTION_EXECUTOR", "celery")


def _fanned_out_assets():
    """The document assets, the same graphs whatever the executor: whether units fan out is the run's."""
    from ingestion_pipeline.defs.documents import assets

    return [assets.raw_documents, assets.document_elements, assets.document_chunks, assets.document_embeddings,
            assets.promoted_documents]


@pytest.mark.integration  # two whole runs, one fanned out into a step per unit and per share (~24 s)
def test_units_fan_out_as_mapped_steps_and_assemble_into_the_whole_files_version(instance, database, db, corpus_dir,
                                                                                monkeypatch):
    from ingestion_pipeline_tests.helpers import batch_queued, test_resources

    olap, memo = corpus_dir / "documents" / "fr_olap.pdf", corpus_dir / "documents" / "fake-memo.pdf"
    ingest(instance, database, "whole", olap, memo)
    spread_over_workers(monkeypatch)
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "5")  # 12 pages: units 1-4, 5-8, 9-12; the memo is read whole
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")  # a text PDF cut by its pages
    monkeypatch.setenv("INGESTION_EMBEDDING_SHARE_CHUNKS", "10")
    submit(database, "split", olap, memo)
    [key] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [key])
    result = dg.materialize(_fanned_out_assets(), partition_key=key, instance=instance, resources=test_resources())
    assert result.success
    [olap_file] = table(db, "SELECT file_id FROM ingestion_runs WHERE tenant_id = 'split' "
                           "AND config->>'filename' = 'fr_olap.pdf'")
    steps = sorted(e.step_key for e in result.all_events if e.event_type == dg.DagsterEventType.STEP_SUCCESS)
    file_id = olap_file["file_id"]
    assert [s for s in steps if s.startswith("document_elements.")] == [
        "document_elements.assemble_units", *(f"document_elements.extract_unit[file_{file_id}_unit_{n}]"
                                              for n in range(3)),
        "document_elements.extract_unit[whole_files]", "document_elements.plan_units"]
    runs = {r["config"]["filename"]: r for r in table(db, "SELECT * FROM ingestion_runs WHERE tenant_id = 'split'")}
    assert {r["status"] for r in runs.values()} == {"succeeded"}
    assert runs["fr_olap.pdf"]["stats"]["units"] == 3 and "units" not in runs["fake-memo.pdf"]["stats"]
    assert _chunks(db, "split") == _chunks(db, "whole")
    materialized = result.asset_materializations_for_node("document_elements")
    assert materialized and materialized[0].metadata["units_read"].value == 3

    # the chunks to encode in shares of 10, a step each; every chunk encoded once, its vector the unsplit one's
    chunk_total = len(_chunks(db, "split"))
    shares = [s for s in steps if s.startswith("document_embeddings.embed_share[")]
    assert len(shares) == -(-chunk_total // 10) and "document_embeddings.finish_embeddings" in steps
    figures = [(r["stats"]["embedded"], r["stats"]["embeddings_reused"]) for r in runs.values()]
    assert sum(embedded for embedded, _ in figures) == chunk_total and {r for _, r in figures} == {0}
    vectors = {tenant: np.array([r["embedding"] for r in table(
        db, """SELECT e.embedding::real[] AS embedding FROM chunk_embeddings e JOIN chunks c USING (chunk_id)
               JOIN document_versions v USING (version_id) WHERE c.tenant_id = %s ORDER BY v.filename, c.ordinal""",
        tenant)]) for tenant in ("split", "whole")}
    assert np.allclose(vectors["split"], vectors["whole"], atol=1e-5)
    embedded = result.asset_materializations_for_node("document_embeddings")[0].metadata
    assert (embedded["embedded"].value, embedded["shares"].value) == (chunk_total, len(shares))


def fanned_out_job() -> dg.JobDefinition:
    """For ``dg.reconstructable``: the batch job of the fanned-out shape, in process."""
    from ingestion_pipeline_tests.helpers import test_resources

    return dg.Definitions(
        assets=_fanned_out_assets(), resources=test_resources(),
        jobs=[dg.define_asset_job("fanned_out_batch_job", executor_def=dg.in_process_executor)],
    ).resolve_job_def("fanned_out_batch_job")


@pytest.mark.integration  # a heavy end-to-end case: with make test, not test-fast
def test_a_reexecution_from_failure_runs_only_the_failed_unit_again(instance, database, db, corpus_dir, monkeypatch):
    from ingestion_pipeline.documents.pipeline import DocumentPipeline
    from ingestion_pipeline_tests.helpers import batch_queued

    spread_over_workers(monkeypatch)
    monkeypatch.setenv("INGESTION_UNIT_PAGES", "5")
    monkeypatch.setenv("INGESTION_UNIT_TEXT_PAGES", "1")  # a text PDF cut by its pages
    submit(database, "acme", corpus_dir / "documents" / "fr_olap.pdf")
    [key] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [key])
    [row] = table(db, "SELECT file_id FROM ingestion_runs")
    failing = f"file_{row['file_id']}_unit_1"
    extract_unit = DocumentPipeline.extract_unit

    def host_lost_on_the_second_unit(self, partition_key, unit):
        if unit == failing:
            raise RuntimeError("the worker host went away")
        return extract_unit(self, partition_key, unit)

    monkeypatch.setattr(DocumentPipeline, "extract_unit", host_lost_on_the_second_unit)
    job = dg.reconstructable(fanned_out_job)
    first = dg.execute_job(job, instance=instance, tags={"dagster/partition": key})
    assert not first.success
    ran = {e.step_key for e in first.all_events if e.event_type == dg.DagsterEventType.STEP_START}
    assert "document_elements.extract_unit[whole_files]" not in ran, ran  # no file to read whole: no step for it
    units = table(db, "SELECT unit_number, state FROM staging_units ORDER BY 1")
    assert units == [{"unit_number": 0, "state": "done"}, {"unit_number": 1, "state": "pending"},
                     {"unit_number": 2, "state": "done"}]

    monkeypatch.setattr(DocumentPipeline, "extract_unit", extract_unit)
    retry = dg.execute_job(job, instance=instance, tags={"dagster/partition": key},
                           reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, instance))
    assert retry.success
    started = sorted(e.step_key for e in retry.all_events if e.event_type == dg.DagsterEventType.STEP_START)
    assert [s for s in started if s.startswith("document_elements.")] == [
        "document_elements.assemble_units", f"document_elements.extract_unit[{failing}]"]
    [run] = table(db, "SELECT status, stats FROM ingestion_runs")
    assert run["status"] == "succeeded" and run["stats"]["units"] == 3
    [version] = table(db, "SELECT chunk_count FROM document_versions")
    assert [c["ordinal"] for c in table(db, "SELECT ordinal FROM chunks ORDER BY 1")] == list(
        range(version["chunk_count"]))


@pytest.mark.integration  # two runs of the spread shape (~15 s)
def test_a_persons_launch_of_a_done_batch_says_so_at_every_step_when_steps_spread_over_workers(
        instance, database, db, corpus_dir, monkeypatch):
    """The spread graphs treat a batch with nothing to do as a single step does: each asset materialises saying
    so (the catalog keeps the partition materialised), the run fails at its end, and nothing is redone."""
    from ingestion_pipeline_tests.helpers import batch_queued

    spread_over_workers(monkeypatch)
    submit(database, "acme", corpus_dir / "documents" / "fake-memo.pdf")
    [key] = batch_queued(database)
    instance.add_dynamic_partitions("document_batches", [key])
    job = dg.reconstructable(fanned_out_job)
    assert dg.execute_job(job, instance=instance, tags={"dagster/partition": key,
                                                       "dagster/sensor_name": "upload_sensor"}).success
    versions = table(db, "SELECT version_id FROM document_versions")

    again = dg.execute_job(job, instance=instance, tags={"dagster/partition": key}, raise_on_error=False)  # a person's
    assert not again.success
    materialized = {e.asset_key.to_user_string(): e.step_materialization_data.materialization.metadata
                    for e in again.all_events if e.is_step_materialization}
    assert set(materialized) == {"raw_documents", "document_elements", "document_chunks", "document_embeddings",
                                 "promoted_documents"}
    assert all("nothing to do" in m["nothing_to_do"].value for m in materialized.values()), materialized
    [failure] = [e for e in again.all_events if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    assert failure.step_key == "promoted_documents"  # launched without the batch checks: it fails there
    assert table(db, "SELECT version_id FROM document_versions") == versions


def _manual(path, changed: int | None = None):
    """A Markdown manual of 40 chapters (~3,300 characters each); ``changed``: that chapter's second paragraph
    reworded."""
    parts = []
    for chapter in range(40):
        parts.append(f"# Chapter {chapter}: the {['harbour', 'ferry', 'dredger', 'lighthouse'][chapter % 4]}\n")
        for p in range(3):
            said = "was reworded in the revision" if (chapter, p) == (changed, 1) else "is as it was"
            parts.append(f"Paragraph {p} of chapter {chapter} {said}. " + " ".join(
                f"Berth {chapter * 10 + i} holds vessel {p * 7 + i} at tide {i % 5}." for i in range(25)) + "\n")
    path.write_text("\n".join(parts))
    return path


SECTION_COLUMNS = CHUNK_COLUMNS + ", c.content_hash, c.text_search_config, c.section_key"


@pytest.mark.integration  # four runs of a 130,000-character manual (~40 s)
def test_a_revision_chunks_only_its_changed_section_and_stores_what_a_fresh_ingest_makes(
        instance, database, db, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", "20000")
    (tmp_path / "v1").mkdir(), (tmp_path / "v2").mkdir()
    first, revised = _manual(tmp_path / "v1" / "manual.md"), _manual(tmp_path / "v2" / "manual.md", changed=17)
    ingest(instance, database, "acme", first, key="manual")
    first_sections = table(db, "SELECT stats FROM ingestion_runs")[0]["stats"]["sections"]
    ingest(instance, database, "acme", revised, key="manual")
    said = [e.user_message for e in instance.all_logs(instance.get_runs(limit=1)[0].run_id)]
    assert any(f"sections, {first_sections - 1} unchanged since the served version" in m for m in said), said
    ingest(instance, database, "fresh", revised, key="manual")  # the revision as a first version
    runs = table(db, "SELECT tenant_id, status, stats FROM ingestion_runs ORDER BY file_id")
    assert [r["status"] for r in runs] == ["succeeded"] * 3
    first_stats, revision_stats, fresh_stats = (r["stats"] for r in runs)
    assert first_stats["sections"] > 3 and first_stats["sections_reused"] == 0
    assert revision_stats["sections"] == first_stats["sections"]
    assert revision_stats["sections_reused"] == revision_stats["sections"] - 1  # the changed chapter's only
    assert fresh_stats["sections_reused"] == 0  # another tenant's sections are never taken

    served = f"""SELECT {SECTION_COLUMNS} FROM chunks c JOIN document_versions v USING (version_id)
                  WHERE c.tenant_id = %s AND v.is_active ORDER BY c.ordinal"""
    revision = table(db, served, "acme")
    assert revision == table(db, served, "fresh")  # the same chunks, hashes, languages, keys and ordinals
    assert any("was reworded" in c["text"] for c in revision)
    assert sum("was reworded" in c["text"] for c in revision) == 1

    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", "100000000")  # the revision chunked whole
    ingest(instance, database, "whole", revised, key="manual")
    whole = table(db, served, "whole")
    assert {c["section_key"] for c in whole} == {None}
    strip = lambda rows: [{k: v for k, v in r.items() if k != "section_key"} for r in rows]  # noqa: E731
    assert strip(revision) == strip(whole)


def _bilingual_manual(path, changed: bool = False):
    """40 chapters in English but 12-23 in French, each with a closing line too short to tell its language; in
    ``changed``, chapter 17 reworded."""
    parts = []
    for chapter in range(40):
        french = 12 <= chapter <= 23
        parts.append(f"# {'Chapitre' if french else 'Chapter'} {chapter}\n")
        for p in range(3):
            if french:
                said = "a été reformulé" if changed and (chapter, p) == (17, 1) else "est inchangé"
                parts.append(f"Le paragraphe {p} du chapitre {chapter} {said}. " + " ".join(
                    f"Le quai {chapter * 10 + i} accueille le navire {p * 7 + i} à marée {i % 5}." for i in range(22)))
            else:
                parts.append(f"Paragraph {p} of chapter {chapter} is as it was. " + " ".join(
                    f"The harbour master records that berth {chapter * 10 + i} holds the vessel during the morning "
                    f"tide, and the crew unloads its cargo before noon." for i in range(8)))
        parts.append(f"## Note {chapter}\n\nSee {chapter + 1}.\n")  # a chunk of its own, a few letters long
    path.write_text("\n\n".join(parts))
    return path


@pytest.mark.integration  # three runs of a 130,000-character manual (~30 s)
def test_a_revisions_short_chunks_take_the_whole_files_language_not_the_changed_sections(
        instance, database, db, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_UNIT_CHARACTERS", "20000")
    (tmp_path / "v1").mkdir(), (tmp_path / "v2").mkdir()
    first = _bilingual_manual(tmp_path / "v1" / "manual.md")
    revised = _bilingual_manual(tmp_path / "v2" / "manual.md", changed=True)
    ingest(instance, database, "acme", first, key="manual")
    ingest(instance, database, "acme", revised, key="manual")
    ingest(instance, database, "fresh", revised, key="manual")
    runs = table(db, "SELECT status, stats FROM ingestion_runs ORDER BY file_id")
    assert [r["status"] for r in runs] == ["succeeded"] * 3
    assert runs[1]["stats"]["sections_reused"] == runs[1]["stats"]["sections"] - 1
    served = f"""SELECT {SECTION_COLUMNS} FROM chunks c JOIN document_versions v USING (version_id)
                  WHERE c.tenant_id = %s AND v.is_active ORDER BY c.ordinal"""
    revision, fresh = table(db, served, "acme"), table(db, served, "fresh")
    notes = [c["text_search_config"] for c in fresh if c["text"].startswith("Note")]
    assert set(notes) == {"english"} and len(notes) == 40  # short chunks: the file's main language
    assert {c["text_search_config"] for c in fresh} == {"english", "french"}
    assert revision == fresh
