"""Scanned pages through the real assets: OCR with the system's Tesseract, chunks marked as read by OCR;
without Tesseract a scan fails with how to enable OCR."""

import dagster as dg
import pytest

from ingestion_pipeline.documents.search import hybrid_search
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pdf
from ingestion_pipeline_tests.helpers import ingest, needs_tesseract, pipeline_for, table

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
