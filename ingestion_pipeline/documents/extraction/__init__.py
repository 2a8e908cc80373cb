"""Turn a file into structured elements (titles, paragraphs, list items, tables) with page numbers.

``extract(path, extension)`` dispatches on the (allow-listed) extension and always returns at least
one text element or raises ``ExtractionError`` with a reason a person can act on.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
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

__all__ = ["EXTRACTOR_VERSION", "Element", "ExtractedDocument", "ExtractionError", "ReadPage", "extract",
           "load_extractors"]


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
    characters = sum(len(element.text) for element in document.elements)
    if characters > limits.max_text_chars:  # checked in the worker: no more than this reaches the pipeline
        raise ExtractionError(
            f"the file holds {characters:,} characters of text, over the limit of {limits.max_text_chars:,} "
            "(INGESTION_MAX_TEXT_CHARS raises it)", code="file_too_much_text")
    document.elements = list(assign_section_paths(document.elements))
    return document
