"""Turn a file into structured elements (titles, paragraphs, list items, tables) with page numbers.

``extract(path, extension)`` dispatches on the (allow-listed) extension and always returns at least
one text element or raises ``ExtractionError`` with a reason a person can act on.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.elements import (
    Element,
    ExtractedDocument,
    ReadPage,
    assign_section_paths,
)
from ingestion_pipeline.documents.extraction.errors import ExtractionError

# Part of the pipeline fingerprint: bump when extraction output changes, so backfills re-index.
EXTRACTOR_VERSION = "direct-2"  # 2: words hyphenated at a PDF line end are whole


@functools.cache
def _extractors() -> dict:
    """Extension -> extractor, imported on first use: the parsers (python-docx, lxml, PDFium, the office
    readers) cost a command that only submits, or a chunker that reads elements, a fifth of a second."""
    from ingestion_pipeline.documents.extraction.docx import extract_docx
    from ingestion_pipeline.documents.extraction.html import extract_html
    from ingestion_pipeline.documents.extraction.markdown import extract_markdown
    from ingestion_pipeline.documents.extraction.office import OFFICE_FORMATS, extract_office
    from ingestion_pipeline.documents.extraction.pdf import extract_pdf
    from ingestion_pipeline.documents.extraction.text import extract_text

    return {
        ".pdf": extract_pdf,
        ".docx": extract_docx,
        ".html": extract_html,
        ".htm": extract_html,
        ".md": extract_markdown,
        ".txt": extract_text,
        **{extension: functools.partial(extract_office, extension=extension) for extension in OFFICE_FORMATS},
    }

__all__ = ["EXTRACTOR_VERSION", "Element", "ExtractedDocument", "ExtractionError", "InProcessExtractor", "ReadPage",
           "assemble_pdf", "extract", "extract_pdf_pages", "load_extractors", "pdf_survey"]


def load_extractors() -> None:
    """Import every extractor now (the extraction worker, before its first file)."""
    _extractors()


def extract(path: Path, extension: str, limits: ExtractionLimits | None = None,
            reusable_ocr: Sequence[ReadPage] = ()) -> ExtractedDocument:
    """Extract one file; ``limits`` bounds what it may expand to (characters, zip members). ``reusable_ocr``:
    the pages an earlier version of the document had read by OCR, whose text an unchanged page reuses."""
    extractor = _extractors().get(extension.lower())
    if extractor is None:
        raise ExtractionError(f"no extractor for {extension!r} files", code="unsupported_format")
    path = Path(path)
    if path.stat().st_size == 0:
        raise ExtractionError("file is empty (0 bytes)", code="file_empty")
    limits = limits or ExtractionLimits()
    document = extractor(path, limits, reusable_ocr) if extension.lower() == ".pdf" else extractor(path, limits)
    return _finished(document, limits)


def extract_pdf_pages(path: Path, first_page: int, last_page: int,
                      reusable_ocr: Sequence[ReadPage] = (), words: bool = True):
    """One unit of a big PDF: pages ``first_page``..``last_page`` read as ``extract`` reads them
    (``extraction/pdf.py: PdfPages``); ``assemble_pdf`` makes the document of all of them."""
    from ingestion_pipeline.documents.extraction.pdf import read_pdf_pages

    return read_pdf_pages(Path(path), first_page, last_page, reusable_ocr, words)


def pdf_survey(path: Path, look_beyond: int = 0, known_sources: Sequence[str] = (),
               limits: ExtractionLimits | None = None):
    """A PDF's page count and, past ``look_beyond`` pages, the pages without text not among ``known_sources``;
    a PDF over ``limits``' page or OCR budget is refused (``pdf.pdf_survey``)."""
    from ingestion_pipeline.documents.extraction.pdf import pdf_survey as survey

    return survey(Path(path), look_beyond, frozenset(known_sources), limits)


class InProcessExtractor:
    """What an extraction worker does, done in this process (a pipeline built without one: tests, tools)."""

    def __init__(self, limits: ExtractionLimits | None = None) -> None:
        self.limits = limits or ExtractionLimits()

    def __call__(self, path: Path, extension: str, reusable_ocr: Sequence[ReadPage] = (),
                 pages: tuple[int, int] | None = None):
        if pages is None:
            return extract(path, extension, self.limits, reusable_ocr)
        return extract_pdf_pages(path, *pages, reusable_ocr, self.limits.page_images)

    def survey(self, path: Path, look_beyond: int = 0, known_sources: Sequence[str] = ()):
        return pdf_survey(path, look_beyond, known_sources, self.limits)

    def render(self, path: Path, first_page: int, last_page: int, ocr_words: Mapping | None = None) -> list:
        from ingestion_pipeline.documents.page_views import render_pages

        return render_pages(Path(path), first_page, last_page, ocr_words=ocr_words)


def assemble_pdf(parts: Sequence, page_count: int, limits: ExtractionLimits | None = None) -> ExtractedDocument:
    """The document a PDF's units make: what ``extract`` returns for the whole file (the same elements, notes,
    limits and section paths)."""
    from ingestion_pipeline.documents.extraction.pdf import finish_pdf

    parts = sorted(parts, key=lambda part: part.first_page)
    expected = 1
    for part in parts:  # every page once, in order: a gap or an overlap would lose or repeat text
        if part.first_page != expected:
            raise ValueError(f"the units do not cover the PDF's pages in order: page {expected} expected, "
                             f"a unit starts at {part.first_page}")
        expected = part.last_page + 1
    if expected != page_count + 1:
        raise ValueError(f"the units end at page {expected - 1} of {page_count}")
    return _finished(finish_pdf(parts, page_count), limits or ExtractionLimits())


def _finished(document: ExtractedDocument, limits: ExtractionLimits) -> ExtractedDocument:
    characters = sum(len(element.text) for element in document.elements)
    if characters > limits.max_text_chars:  # checked in the worker: no more than this reaches the pipeline
        raise ExtractionError(
            f"the file holds {characters:,} characters of text, over the limit of {limits.max_text_chars:,} "
            "(INGESTION_MAX_TEXT_CHARS raises it)", code="file_too_much_text")
    document.elements = list(assign_section_paths(document.elements))
    return document
