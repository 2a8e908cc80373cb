"""A PDF's pages are bounded per file, and a blank page is never read by OCR: a PDF of more pages than
``INGESTION_MAX_PAGES_PER_FILE``, or with more pages to OCR than ``INGESTION_MAX_OCR_PAGES_PER_FILE``, is refused
(``file_too_many_pages``, permanent) before any page is read, and its units are never planned. Before: a 1.3 MB
PDF of 10,000 blank pages was surveyed as 10,000 pages to OCR (500 units), each page rendered and handed to
Tesseract (~0.9 s a page here: hours of CPU) to find no text.

The budgets are lowered here so the files stay small; the mechanism is the one that holds the defaults."""

from __future__ import annotations

import time

import pypdfium2 as pdfium
import pytest

from ingestion_pipeline.core.failures import classify
from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents import units
from ingestion_pipeline.documents.extraction import ExtractionError, extract, ocr, pdf_survey
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT
from ingestion_pipeline.samples.scanned_pdf import write_blank_pages, write_scanned_pages
from ingestion_pipeline_tests.helpers import needs_tesseract, table


@pytest.fixture
def ocr_calls(monkeypatch) -> dict[str, int]:
    """Count the pages rendered for OCR and the pages handed to Tesseract (both still done)."""
    calls = {"render": 0, "tesseract": 0}
    render, read_image = ocr.render, ocr.read_image

    def counted_render(page):
        calls["render"] += 1
        return render(page)

    def counted_read(image, page_number, binary, words=True):
        calls["tesseract"] += 1
        return read_image(image, page_number, binary, words)

    monkeypatch.setattr(ocr, "render", counted_render)
    monkeypatch.setattr(ocr, "read_image", counted_read)
    return calls


def _budgets(monkeypatch, **variables: int) -> ExtractionLimits:
    for name, value in variables.items():
        monkeypatch.setenv(name, str(value))
    return ExtractionLimits.from_environment()


def test_a_pdf_over_the_page_budget_is_refused_before_any_page_is_read(tmp_path, monkeypatch, ocr_calls):
    path = write_blank_pages(tmp_path / "blank-50.pdf", 50)
    limits = _budgets(monkeypatch, INGESTION_MAX_PAGES_PER_FILE=20)
    started = time.perf_counter()
    with pytest.raises(ExtractionError) as refused:
        extract(path, ".pdf", limits)
    # the survey that plans a big PDF's units refuses it too: no unit is ever planned
    with pytest.raises(ExtractionError) as surveyed:
        pdf_survey(path, limits.unit_pages, limits=limits)
    assert time.perf_counter() - started < 2
    for error in (refused.value, surveyed.value):
        info = classify(error)
        assert (info.code, info.transient) == ("file_too_many_pages", False)
        assert "50 pages, over the limit of 20" in info.message and "INGESTION_MAX_PAGES_PER_FILE" in info.message
    assert ocr_calls == {"render": 0, "tesseract": 0}
    # at the budget, it is read
    assert pdf_survey(write_blank_pages(tmp_path / "blank-20.pdf", 20), 8, limits=limits).page_count == 20


def test_the_ten_thousand_blank_pages_are_refused_in_the_worker_under_the_default_budget(tmp_path):
    from ingestion_pipeline.documents.extraction.isolation import ExtractorPool

    path = write_blank_pages(tmp_path / "blank-10000.pdf", 10_000)  # 1.3 MB
    limits = ExtractionLimits()
    with ExtractorPool(limits, 1) as pool:
        started = time.perf_counter()
        with pytest.raises(ExtractionError) as refused:
            pool.survey(path, limits.unit_pages)  # what the extract step asks before planning units
        assert time.perf_counter() - started < 5  # a worker's start (~0.5 s) and the file's page count
    assert refused.value.code == "file_too_many_pages"
    assert "10,000 pages, over the limit of 5,000" in str(refused.value)


def test_blank_pages_within_the_budget_are_read_in_seconds_and_never_ocrd(tmp_path, monkeypatch, ocr_calls):
    monkeypatch.setenv("INGESTION_TESSERACT", "/bin/false")  # were a page handed to OCR, it would fail
    path = write_blank_pages(tmp_path / "blank-2000.pdf", 2_000)
    limits = ExtractionLimits()
    started = time.perf_counter()
    survey = pdf_survey(path, limits.unit_pages, limits=limits)
    assert (survey.page_count, survey.scanned, survey.blank) == (2_000, [], 2_000)
    # no page is OCR work: they weigh as text pages (20 pages' work, 3 units), not as 2,000 pages of OCR (250)
    assert len(units.plan_units(survey.page_count, limits.unit_pages, survey.scanned, limits.unit_text_pages)) == 3
    with pytest.raises(ExtractionError, match=r"no text on any of its 2000 page\(s\), all of them blank") as failed:
        extract(path, ".pdf", limits)
    assert time.perf_counter() - started < 10
    assert failed.value.code == "pdf_no_text_layer" and "Tesseract" not in str(failed.value)
    assert ocr_calls == {"render": 0, "tesseract": 0}


@needs_tesseract
def test_a_blank_scanned_sheet_is_rendered_but_not_read_by_ocr(tmp_path, ocr_calls):
    path = write_scanned_pages(tmp_path / "white-sheets.pdf", [[], []])  # images of white paper: objects, no marks
    with pytest.raises(ExtractionError, match=r"no text on any of its 2 page\(s\), all of them blank"):
        extract(path, ".pdf")
    assert ocr_calls == {"render": 2, "tesseract": 0}


def test_a_pdf_with_more_pages_to_ocr_than_the_budget_is_refused_before_any_is_read(tmp_path, monkeypatch,
                                                                                      ocr_calls):
    lines = [[f"Minutes of meeting {n}", "The ferry sails twice daily."] for n in range(1, 6)]
    scan = write_scanned_pages(tmp_path / "scan.pdf", lines)
    limits = _budgets(monkeypatch, INGESTION_MAX_OCR_PAGES_PER_FILE=3)
    with pytest.raises(ExtractionError) as refused:
        extract(scan, ".pdf", limits)
    with pytest.raises(ExtractionError) as surveyed:
        pdf_survey(scan, 0, limits=limits)
    for error in (refused.value, surveyed.value):
        info = classify(error)
        assert (info.code, info.transient) == ("file_too_many_pages", False)
        assert "5 pages to read by OCR, over the limit of 3" in info.message
        assert "INGESTION_MAX_OCR_PAGES_PER_FILE" in info.message
    assert ocr_calls == {"render": 0, "tesseract": 0}
    # blank pages and an earlier version's unchanged scanned pages are no OCR work: within the budget
    pdf = pdfium.PdfDocument(str(scan))
    known = [ocr.source_digest(pdf[i]) for i in range(2)]
    pdf.close()
    padded = write_blank_pages(tmp_path / "scan-and-blanks.pdf", 40, after=scan)
    assert pdf_survey(padded, 0, known, limits=limits) == pdf_survey(padded, 0, known)
    assert pdf_survey(padded, 0, known, limits=limits).scanned == [3, 4, 5]


@needs_tesseract
def test_among_blank_pages_a_text_page_keeps_its_text_and_a_scanned_page_is_read_by_ocr(corpus_dir, tmp_path,
                                                                                         ocr_calls):
    memo = corpus_dir / "documents" / "fake-memo.pdf"
    with_blanks = write_blank_pages(tmp_path / "memo-and-blanks.pdf", 30, after=memo)  # page 1: text, 2-31: blank
    path = write_scanned_pages(tmp_path / "mixed.pdf", [["Harbour board minutes", "The ferry sails at dawn."], []],
                               after=with_blanks)  # 32: a scan, 33: a blank scanned sheet
    survey = pdf_survey(path, 0)
    assert (survey.scanned, survey.blank) == ([32, 33], 30)  # a white sheet is an image: work until rendered
    document = extract(path, ".pdf")
    assert document.page_count == 33
    assert extract(memo, ".pdf").elements[0].text in {e.text for e in document.elements if e.page_number == 1}
    scanned = " ".join(e.text for e in document.elements if e.type == OCR_TEXT)
    assert "ferry sails at dawn" in scanned and {e.page_number for e in document.elements} == {1, 32}
    assert ocr_calls == {"render": 2, "tesseract": 1}
    assert "31 blank page(s) skipped, not read by OCR" in document.notes


def test_the_pipeline_fails_a_pdf_over_the_page_budget_once_without_planning_units(database, db, tmp_path,
                                                                                   monkeypatch):
    import dagster as dg

    from ingestion_pipeline_tests.helpers import ingest

    path = write_blank_pages(tmp_path / "blank-50.pdf", 50)
    monkeypatch.setenv("INGESTION_MAX_PAGES_PER_FILE", "20")
    with dg.instance_for_test() as instance:
        ingest(instance, database, "acme", path)
    [row] = table(db, "SELECT * FROM ingestion_runs")
    assert (row["status"], row["error_code"], row["attempts"]) == ("failed", "file_too_many_pages", 1), row
    assert "INGESTION_MAX_PAGES_PER_FILE" in row["error"]
    assert table(db, "SELECT * FROM staging_units") == []


def _with_a_space_on_each_page(source, path):
    """Each page given a text object of one space: text the reader strips to nothing, so it reads the page by
    OCR all the same."""
    import ctypes

    import pypdfium2.raw as pdfium_c

    document = pdfium.PdfDocument(str(source))
    for index in range(len(document)):
        page = document[index]
        text = pdfium_c.FPDFPageObj_NewTextObj(document.raw, b"Helvetica", ctypes.c_float(12))
        buffer = ctypes.create_string_buffer(" ".encode("utf-16-le") + b"\x00\x00")
        pdfium_c.FPDFText_SetText(text, ctypes.cast(buffer, ctypes.POINTER(pdfium_c.FPDF_WCHAR)))
        pdfium_c.FPDFPage_InsertObject(page.raw, text)
        pdfium_c.FPDFPage_GenerateContent(page.raw)
        page.close()
    document.save(str(path))
    document.close()
    return path


def test_a_scanned_page_behind_an_empty_text_object_counts_against_the_ocr_budget(tmp_path, monkeypatch, ocr_calls):
    """Before: the survey counted any page holding a text object as a text page, while the reader OCRs every page
    whose text strips to nothing, so such pages were OCR'd up to the page budget, past the OCR budget."""
    scan = write_scanned_pages(tmp_path / "scan.pdf", [[f"Minutes of meeting {n}"] for n in range(1, 6)])
    masked = _with_a_space_on_each_page(scan, tmp_path / "masked.pdf")
    assert pdf_survey(masked, 0).scanned == [1, 2, 3, 4, 5]
    limits = _budgets(monkeypatch, INGESTION_MAX_OCR_PAGES_PER_FILE=3)
    with pytest.raises(ExtractionError, match="5 pages to read by OCR, over the limit of 3"):
        extract(masked, ".pdf", limits)
    assert ocr_calls == {"render": 0, "tesseract": 0}
