"""Extractors on the real sample corpus: structure, pages, encodings, and specific failure reasons."""

from pathlib import Path

import pytest

from ingestion_pipeline.documents.extraction import ExtractionError, extract
from ingestion_pipeline.documents.extraction.elements import LIST_ITEM, TABLE, TITLE
from ingestion_pipeline_tests.helpers import needs_tesseract


def _extract(path: Path):
    return extract(path, path.suffix)


def test_every_corpus_document_extracts_text(corpus_dir):
    for path in sorted((corpus_dir / "documents").iterdir()):
        document = _extract(path)
        assert any(e.text.strip() for e in document.elements), path.name


def test_pdf_keeps_page_numbers_and_outline_sections(corpus_dir):
    document = _extract(corpus_dir / "documents" / "DA-619p.pdf")
    assert document.page_count == 619
    pages = {e.page_number for e in document.elements}
    assert min(pages) == 1 and max(pages) >= 600
    assert any(e.section_path for e in document.elements if e.type != TITLE)


def test_pdf_empty_pages_are_skipped_not_fatal(corpus_dir):
    document = _extract(corpus_dir / "documents" / "layout-parser-paper-with-empty-pages.pdf")
    assert document.page_count == 4
    assert {e.page_number for e in document.elements} < {1, 2, 3, 4}


def test_docx_headings_lists_tables_and_page_breaks(corpus_dir):
    docs = corpus_dir / "documents"
    assert any(e.type == LIST_ITEM for e in _extract(docs / "example-list-items-multiple.docx").elements)
    tables = [e for e in _extract(docs / "docx-tables.docx").elements if e.type == TABLE]
    assert tables and all(" | " in t.text for t in tables)
    paged = _extract(docs / "page-breaks.docx")
    assert paged.page_count > 1
    assert len({e.page_number for e in paged.elements}) > 1


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("fake-html-cp1252.html", "4,25 \u20ac"),  # euro sign decoded from cp1252
        ("example-steelJIS-datasheet-utf-16.html", "SteelJIS"),
        ("umlauts-non-utf8.md", "\u00e4"),
        ("fake-text-utf-16.txt", "This is a test document"),
    ],
)
def test_encodings_are_detected(corpus_dir, name, expected):
    text = "\n".join(e.text for e in _extract(corpus_dir / "documents" / name).elements)
    assert expected.lower() in text.lower() or expected in text


def test_html_drops_scripts(corpus_dir):
    text = "\n".join(e.text for e in _extract(corpus_dir / "documents" / "example-with-scripts.html").elements)
    assert "function(" not in text and "<script" not in text


def test_markdown_structure(corpus_dir):
    elements = _extract(corpus_dir / "documents" / "simple-table.md").elements
    assert [e.type for e in elements] == [TABLE]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("password.pdf", "PDF is password-protected"),
        ("empty.txt", "file is empty (0 bytes)"),
        ("fake-text-all-whitespace.txt", "file contains only whitespace"),
        ("fake-incomplete-json.txt", "JSON that is truncated or invalid at line 11"),
    ],
)
def test_broken_files_fail_with_specific_reason(corpus_dir, name, reason):
    with pytest.raises(ExtractionError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        _extract(corpus_dir / "broken" / name)


@pytest.mark.parametrize(
    "name",
    ["copy-protected.pdf", "failure-after-repair.pdf", "invalid-pdf-structure-pdfminer-one-page.pdf",
     "pdf-bad-color-space.pdf"],
)
def test_recoverable_pdfs_extract_completely(corpus_dir, name):
    """PDFium repairs these (see README: decision on the 'broken' PDFs) and reads every page's text."""
    document = _extract(corpus_dir / "broken" / name)
    assert document.page_count and sum(len(e.text) for e in document.elements) > 1000


def test_copy_protection_is_noted(corpus_dir):
    document = _extract(corpus_dir / "broken" / "copy-protected.pdf")
    assert any("copy-protected" in n for n in document.notes)


def test_pdf_without_text_layer_and_without_ocr_says_how_to_enable_it(tmp_path, monkeypatch):
    from ingestion_pipeline.samples.scanned_pdf import write_scanned_pdf

    path = write_scanned_pdf(tmp_path / "scan.pdf", ["Minutes of the harbour board"])
    monkeypatch.setenv("INGESTION_TESSERACT", str(tmp_path / "no-such-tesseract"))
    with pytest.raises(ExtractionError, match=r"no text layer on any of its 1 page\(s\) \(scanned or image-only\) "
                                              r"and OCR is not available: install Tesseract") as failure:
        _extract(path)
    assert failure.value.code == "pdf_no_text_layer"


@needs_tesseract
def test_blank_pdf_page_has_no_text_and_is_not_read_by_ocr(tmp_path):
    import pypdfium2 as pdfium

    pdf = pdfium.PdfDocument.new()
    pdf.new_page(200, 200)
    path = tmp_path / "blank.pdf"
    pdf.save(str(path))
    with pytest.raises(ExtractionError, match=r"PDF has no text on any of its 1 page\(s\), all of them blank$"):
        _extract(path)


def test_corrupt_files_fail(tmp_path):
    bad_pdf = tmp_path / "bad.pdf"
    bad_pdf.write_bytes(b"%PDF-1.4 this is not a pdf")
    with pytest.raises(ExtractionError, match="PDF"):
        _extract(bad_pdf)
    bad_docx = tmp_path / "bad.docx"
    bad_docx.write_bytes(b"not a zip")
    with pytest.raises(ExtractionError, match="DOCX is corrupt"):
        _extract(bad_docx)
