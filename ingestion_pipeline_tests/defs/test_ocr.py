"""Scanned pages through the real assets: OCR with the system's Tesseract, chunks marked as read by OCR;
without Tesseract a scan fails with how to enable OCR."""

import dagster as dg
import pytest

from ingestion_pipeline.documents import reindex
from ingestion_pipeline.documents.intake import submit_upload
from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages, write_scanned_pdf
from ingestion_pipeline_tests.helpers import (
    batch_queued,
    ingest,
    materialize_batch,
    needs_tesseract,
    pipeline_for,
    table,
)

SCANNED = ["Harbour Board minutes, winter session", "The harbour master approved the winter ferry schedule.",
           "Ferries sail twice daily until the ice melts in April."]


@pytest.fixture
def instance():
    with dg.instance_for_test() as inst:
        yield inst


@needs_tesseract
def test_a_scanned_page_is_read_by_ocr_and_its_chunks_say_so(instance, database, db, corpus_dir, tmp_path):
    mixed = write_scanned_pdf(tmp_path / "memo-and-scan.pdf", SCANNED,
                              after=corpus_dir / "documents" / "fake-memo.pdf")  # a text page, then a scan
    ingest(instance, database, "acme", mixed)
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert run["status"] == "succeeded", run["error"]
    chunks = table(db, "SELECT text, page_start, element_types FROM chunks ORDER BY ordinal")
    scanned = [c for c in chunks if "OcrText" in c["element_types"]]
    assert scanned and all(c["page_start"] == 2 for c in scanned)
    assert all("OcrText" not in c["element_types"] for c in chunks if c["page_start"] == 1)

    embedder = pipeline_for(database).embedder
    query = "winter ferry schedule approved"
    [top, *_] = hybrid_search(db, tenant_id="acme", query=query, query_vector=embedder.embed([query])[0],
                              model=embedder.info.name)
    assert "approved the winter ferry schedule" in top.text and top.ocr and top.page_start == 2
    assert "p. 2" in top.citation() and "OCR" in top.citation()


def test_without_tesseract_a_scan_fails_with_how_to_enable_ocr(instance, database, db, tmp_path, monkeypatch):
    monkeypatch.setenv("INGESTION_TESSERACT", str(tmp_path / "no-tesseract"))  # the extraction worker inherits it
    scan = write_scanned_pdf(tmp_path / "scan.pdf", SCANNED)
    ingest(instance, database, "acme", scan)
    [run] = table(db, "SELECT * FROM ingestion_runs")
    assert run["status"] == "failed" and run["error_code"] == "pdf_no_text_layer"
    assert "OCR is not available: install Tesseract (Debian/Ubuntu: apt-get install tesseract-ocr)" in run["error"]


@pytest.mark.integration  # two whole runs with OCR (~11 s)
@needs_tesseract
def test_a_new_version_reads_only_its_changed_pages_and_serves_their_new_text(instance, database, db, tmp_path,
                                                                           monkeypatch):
    pages = [["Harbour Board minutes, winter session", "The harbour master approved the winter ferry schedule."],
             ["Dredging budget", "Dredging the north channel costs forty thousand crowns."],
             ["Tide tables", "High water comes at dawn through March."]]
    pipeline = pipeline_for(database)

    def ingest_as_the_minutes(path):
        submit_upload(database, pipeline.store, tenant_id="acme", path=path, key="board/minutes.pdf",
                      fingerprint=pipeline.fingerprint, max_bytes=pipeline.settings.upload.max_bytes)
        for partition_key in batch_queued(database):
            materialize_batch(instance, partition_key)

    ingest_as_the_minutes(write_scanned_pages(tmp_path / "minutes-v1.pdf", pages))
    pages[1] = ["Dredging budget", "Dredging the north channel now costs ninety thousand crowns."]
    ingest_as_the_minutes(write_scanned_pages(tmp_path / "minutes-v2.pdf", pages))  # a new version: page 2 changed

    first, second = table(db, "SELECT * FROM ingestion_runs ORDER BY file_id")
    assert second["status"] == "succeeded", second["error"]
    assert first["doc_id"] == second["doc_id"]
    assert (first["stats"]["ocr_pages_read"], first["stats"].get("ocr_pages_reused")) == (3, 0)
    assert (second["stats"]["ocr_pages_read"], second["stats"]["ocr_pages_reused"]) == (1, 2)
    kept = table(db, """SELECT v.version_number, p.page_number, p.text FROM version_ocr_pages p
                         JOIN document_versions v USING (version_id) ORDER BY 1, 2""")
    assert [(k["version_number"], k["page_number"]) for k in kept] == [(1, 1), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3)]
    assert kept[0]["text"] == kept[3]["text"] and "ninety thousand" in kept[4]["text"]

    embedder = pipeline.embedder
    query = "what does dredging the north channel cost"
    [top, *_] = hybrid_search(db, tenant_id="acme", query=query, query_vector=embedder.embed([query])[0],
                              model=embedder.info.name)
    assert "ninety thousand" in top.text and top.page_start <= 2 <= top.page_end and top.ocr
    served = table(db, "SELECT c.text FROM chunks c JOIN document_versions v USING (version_id) WHERE v.is_active")
    assert not any("forty thousand" in c["text"] for c in served)

    # a re-index makes a version from the stored elements: the pages' text goes along to the next version
    monkeypatch.setenv("INGESTION_CHUNK_TARGET_TOKENS", "60")
    with database.transaction() as conn:
        reindex.queue(conn, reindex.find_versions(conn, pipeline_for(database).fingerprint_for, tenant_id="acme"))
    for partition_key in batch_queued(database):
        materialize_batch(instance, partition_key)
    pipeline = pipeline_for(database)
    pages[2] = ["Tide tables", "High water comes at noon through April."]
    ingest_as_the_minutes(write_scanned_pages(tmp_path / "minutes-v4.pdf", pages))
    *_, reindexed, fourth = table(db, "SELECT * FROM ingestion_runs ORDER BY file_id")
    assert reindexed["run_type"] == "reindex" and reindexed["status"] == "succeeded", reindexed["error"]
    assert fourth["status"] == "succeeded", fourth["error"]
    assert (fourth["stats"]["ocr_pages_read"], fourth["stats"]["ocr_pages_reused"]) == (1, 2)
