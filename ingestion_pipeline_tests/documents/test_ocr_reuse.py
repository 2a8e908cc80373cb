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


@needs_tesseract
def test_ocr_keeps_each_words_box_and_a_reused_page_keeps_them(tmp_path):
    first = extract(write_scanned_pages(tmp_path / "v1.pdf", PAGES), ".pdf")
    words = first.ocr_pages[0].words
    ferry = [box for text, box in words if text == "ferry"]
    assert ferry, words
    # the second line is drawn at x 150 px, y 280 px of a 1700 x 2200 px page
    x0, y0, x1, y1 = ferry[0]
    assert 0.05 < x0 < x1 < 0.5 and 0.11 < y0 < y1 < 0.16, ferry
    assert " ".join(text for text, _ in words).startswith("Minutes of the harbour board")

    revised = [PAGES[0], ["Budget for the winter season", "Dredging costs fell by half."], PAGES[2]]
    second = extract(write_scanned_pages(tmp_path / "v2.pdf", revised), ".pdf", reusable_ocr=first.ocr_pages)
    assert second.ocr_pages[0].reused and second.ocr_pages[0].words == words
    assert "fell" in [text for text, _ in second.ocr_pages[1].words]


@needs_tesseract
def test_without_page_images_ocr_reads_the_text_alone(tmp_path):
    from ingestion_pipeline.core.settings import ExtractionLimits

    limits = ExtractionLimits(page_images=False)  # the boxes are for the page images
    [page] = extract(write_scanned_pages(tmp_path / "v1.pdf", PAGES[:1]), ".pdf", limits).ocr_pages
    assert "ferry" in page.text and page.words is None


def test_tesseracts_words_are_read_from_its_tsv_and_a_malformed_row_is_skipped():
    from ingestion_pipeline.documents.extraction.ocr import words_of

    header = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext"
    rows = ["1\t1\t0\t0\t0\t0\t0\t0\t1000\t2000\t-1\t",      # the page: not a word
            "5\t1\t1\t1\t1\t1\t100\t200\t300\t40\t96.1\tHarbour",
            "5\t1\t1\t1\t1\t2\t450\t200\t100\t40\t95.0\t ",    # a word of no text
            "5\t1\t1\t1\t1\t3\tx\t200\t100\t40\t95.0\tboard",  # not a number
            "5\t1\t1\t1\t1\t4\t900\t1990\t400\t40\t91.0\tedge",  # past the page: clamped
            "5\t1\t1"]
    assert words_of("\n".join([header, *rows]), 1000, 2000) == [
        ("Harbour", [0.1, 0.1, 0.4, 0.12]), ("edge", [0.9, 0.995, 1.0, 1.0])]
    assert words_of("\n".join([header, *rows]), 0, 2000) == []


@pytest.mark.parametrize("stored, read", [
    (None, None), ("words", None), ({"a": 1}, None),
    ([["ferry", [0.1, 0.2, 0.3, 0.4]]], [("ferry", [0.1, 0.2, 0.3, 0.4])]),
    ([["ferry", [0.1, 0.2]], [3, [0, 0, 1, 1]], "x", ["a", "b"], [["x"], [0, 0, 1, 1]], ["ok", [0, 0, 1, 1]]],
     [("ok", [0.0, 0.0, 1.0, 1.0])]),
    # not finite, text, true, five values: dropped; past the page or reversed: clamped and ordered
    ([["nan", [float("nan"), 0, 1, 1]], ["inf", [0, 0, float("inf"), 1]], ["s", ["0", "0", "1", "1"]],
      ["b", [True, 0, 1, 1]], ["five", [0, 0, 1, 1, 1]], ["s2", "0000"], ["wide", [-2, 0.5, 3, 0.1]]],
     [("wide", [0.0, 0.1, 1.0, 0.5])]),
])
def test_stored_words_are_read_back_as_untrusted(stored, read):
    from ingestion_pipeline.documents.extraction.elements import ocr_words

    assert ocr_words(stored) == read


@needs_tesseract
def test_a_tesseract_that_writes_no_word_boxes_still_gives_the_pages_text(tmp_path, monkeypatch):
    """An older Tesseract, or a tessdata folder without the tsv config: the text is served, the words are not."""
    real = shutil.which("tesseract")
    wrapper = tmp_path / "tesseract"
    # the same call without its last word, "tsv": what such a Tesseract does (it warns and writes the text only)
    wrapper.write_text(f'#!/bin/bash\nargs=("$@"); [ "${{args[-1]}}" = tsv ] && unset "args[-1]"\n'
                       f'exec "{real}" "${{args[@]}}"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("INGESTION_TESSERACT", str(wrapper))
    [page] = extract(write_scanned_pages(tmp_path / "v1.pdf", PAGES[:1]), ".pdf").ocr_pages
    assert "ferry" in page.text and page.words is None


@needs_tesseract
def test_a_page_read_before_without_its_words_is_read_again_once_when_they_are_wanted(tmp_path, counted_tesseract):
    from ingestion_pipeline.core.settings import ExtractionLimits

    path = write_scanned_pages(tmp_path / "scan.pdf", PAGES[:2])
    without = extract(path, ".pdf", ExtractionLimits(page_images=False))
    assert counted_tesseract() == 2 and all(p.words is None for p in without.ocr_pages)
    # page images off again: the text is reused as it is
    again = extract(path, ".pdf", ExtractionLimits(page_images=False), reusable_ocr=without.ocr_pages)
    assert counted_tesseract() == 2 and all(p.reused for p in again.ocr_pages)
    # page images on: read once more, for the words; from then on reused with them
    wanted = extract(path, ".pdf", reusable_ocr=without.ocr_pages)
    assert counted_tesseract() == 4 and all(p.words and not p.reused for p in wanted.ocr_pages)
    kept = extract(path, ".pdf", reusable_ocr=wanted.ocr_pages)
    assert counted_tesseract() == 4 and [p.words for p in kept.ocr_pages] == [p.words for p in wanted.ocr_pages]


@needs_tesseract
def test_the_extraction_worker_gets_a_reused_pages_words_back_without_being_sent_them(tmp_path, monkeypatch):
    from ingestion_pipeline.core.settings import ExtractionLimits
    from ingestion_pipeline.documents.extraction import isolation

    sent = []
    ask = isolation.IsolatedExtractor._ask
    monkeypatch.setattr(isolation.IsolatedExtractor, "_ask", lambda self, task: sent.append(task) or ask(self, task))
    path = write_scanned_pages(tmp_path / "scan.pdf", PAGES[:2])
    with isolation.IsolatedExtractor(ExtractionLimits()) as extractor:
        first = extractor(path, ".pdf")
        assert all(p.words for p in first.ocr_pages)
        whole = extractor(path, ".pdf", first.ocr_pages)
        unit = extractor(path, ".pdf", first.ocr_pages, (2, 2))
    assert [p.words for p in whole.ocr_pages] == [p.words for p in first.ocr_pages]
    assert all(p.reused for p in whole.ocr_pages)
    assert unit.read_pages[0].reused and unit.read_pages[0].words == first.ocr_pages[1].words
    assert all(p.words == [] for task in sent[1:] for p in task[3])  # "has words", not the words
