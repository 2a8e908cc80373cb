"""A scanned page is read by OCR once: the text of a page whose rendered image is unchanged is reused, by the
real Tesseract's count of calls (a wrapper that logs each call and runs it)."""

from __future__ import annotations

import dataclasses
import shutil
import stat

import pytest

from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.extraction.elements import OCR_TEXT
from ingestion_pipeline.samples.scanned_pdf import write_scanned_pages
from ingestion_pipeline_tests.helpers import needs_tesseract

PAGES = [["Minutes of the harbour board", "The ferry sails twice daily."],
         ["Budget for the winter season", "Dredging costs rose by a third."],
         ["Appendix: tide tables", "High water at dawn in March."]]


@pytest.fixture
def counted_tesseract(tmp_path, monkeypatch):
    """The system's tesseract behind a script that logs each page it is asked to read."""
    real = shutil.which("tesseract")
    log = tmp_path / "ocr-calls.log"
    wrapper = tmp_path / "tesseract"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = "stdin" ] && echo read >> "{log}"\nexec "{real}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("INGESTION_TESSERACT", str(wrapper))
    return lambda: len(log.read_text().splitlines()) if log.exists() else 0


def _page_text(document, page: int) -> str:
    return " ".join(e.text for e in document.elements if e.page_number == page and e.type == OCR_TEXT)


@needs_tesseract
def test_only_changed_pages_are_read_again(tmp_path, counted_tesseract):
    first = extract(write_scanned_pages(tmp_path / "v1.pdf", PAGES), ".pdf")
    assert counted_tesseract() == 3
    assert [p.page_number for p in first.ocr_pages] == [1, 2, 3] and not any(p.reused for p in first.ocr_pages)
    assert "Dredging costs" in _page_text(first, 2)

    revised = [PAGES[0], ["Budget for the winter season", "Dredging costs fell by half."], PAGES[2]]
    second = extract(write_scanned_pages(tmp_path / "v2.pdf", revised), ".pdf", reusable_ocr=first.ocr_pages)
    assert counted_tesseract() == 4  # page 2 only
    assert [p.reused for p in second.ocr_pages] == [True, False, True]
    assert "fell by half" in _page_text(second, 2) and "rose by a third" not in _page_text(second, 2)
    assert _page_text(second, 1) == _page_text(first, 1) and _page_text(second, 3) == _page_text(first, 3)
    assert second.ocr_pages[0].image_sha256 == first.ocr_pages[0].image_sha256
    assert second.ocr_pages[1].image_sha256 != first.ocr_pages[1].image_sha256
    assert any("2 of them unchanged since the last version" in note for note in second.notes)


@needs_tesseract
def test_the_reused_text_is_the_stored_one_and_another_engine_reads_again(tmp_path, counted_tesseract):
    path = write_scanned_pages(tmp_path / "scan.pdf", PAGES[:1])
    [page] = extract(path, ".pdf").ocr_pages
    stored = dataclasses.replace(page, text="Remembered text of the first page.")
    assert _page_text(extract(path, ".pdf", reusable_ocr=[stored]), 1) == "Remembered text of the first page."
    assert counted_tesseract() == 1

    other_engine = dataclasses.replace(stored, engine="tesseract 4.1.1 eng psm3 200dpi")
    again = extract(path, ".pdf", reusable_ocr=[other_engine])
    assert counted_tesseract() == 2 and "harbour board" in _page_text(again, 1)


@needs_tesseract
def test_the_isolated_worker_takes_the_reusable_pages(tmp_path, counted_tesseract):
    from ingestion_pipeline.core.settings import ExtractionLimits
    from ingestion_pipeline.documents.extraction.isolation import IsolatedExtractor

    path = write_scanned_pages(tmp_path / "scan.pdf", PAGES[:2])
    with IsolatedExtractor(ExtractionLimits()) as extractor:
        first = extractor(path, ".pdf")
        second = extractor(path, ".pdf", first.ocr_pages)
    assert counted_tesseract() == 2 and all(p.reused for p in second.ocr_pages)


@needs_tesseract
def test_an_unchanged_scanned_page_is_not_even_rendered_and_a_changed_one_is(tmp_path, counted_tesseract, monkeypatch):
    from ingestion_pipeline.documents.extraction import ocr

    first = extract(write_scanned_pages(tmp_path / "v1.pdf", PAGES), ".pdf")
    assert all(p.source_sha256 for p in first.ocr_pages)
    rendered: list[int] = []
    real_render = ocr.render
    monkeypatch.setattr(ocr, "render", lambda page: rendered.append(1) or real_render(page))
    revised = [PAGES[0], PAGES[1], ["Appendix: tide tables", "High water at noon in April."]]
    second = extract(write_scanned_pages(tmp_path / "v2.pdf", revised), ".pdf", reusable_ocr=first.ocr_pages)
    assert len(rendered) == 1 and counted_tesseract() == 4  # page 3 alone rendered and read
    assert [p.reused for p in second.ocr_pages] == [True, True, False]
    # a page found by its source keeps the image digest it was read from: the chain holds for the next version
    assert [p.image_sha256 for p in second.ocr_pages[:2]] == [p.image_sha256 for p in first.ocr_pages[:2]]


def test_a_page_with_more_than_images_has_no_source_digest(corpus_dir):
    import pypdfium2 as pdfium

    from ingestion_pipeline.documents.extraction import ocr

    pdf = pdfium.PdfDocument(str(corpus_dir / "documents" / "fake-memo.pdf"))
    try:
        assert ocr.source_digest(pdf[0]) is None  # a text page: rendered and compared by its image, if ever read
    finally:
        pdf.close()
