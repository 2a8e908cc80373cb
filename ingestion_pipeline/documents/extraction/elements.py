"""The element shape every extractor produces (the subset of unstructured's element model we use)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field


class Kind:
    """The element types (``Element.type``; stored as these strings)."""

    TITLE = "Title"
    NARRATIVE_TEXT = "NarrativeText"
    LIST_ITEM = "ListItem"
    TABLE = "Table"
    CODE_BLOCK = "CodeBlock"
    OCR_TEXT = "OcrText"  # prose read by OCR from a page without a text layer (chunks carrying it: ``ocr``)


TITLE, NARRATIVE_TEXT, LIST_ITEM = Kind.TITLE, Kind.NARRATIVE_TEXT, Kind.LIST_ITEM
TABLE, CODE_BLOCK, OCR_TEXT = Kind.TABLE, Kind.CODE_BLOCK, Kind.OCR_TEXT

ELEMENT_TYPES = (TITLE, NARRATIVE_TEXT, LIST_ITEM, TABLE, CODE_BLOCK, OCR_TEXT)


@dataclass
class Element:
    type: str
    text: str
    page_number: int | None = None
    level: int = 1  # heading depth for titles (1 = top)
    section_path: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReadPage:
    """The text OCR read on one page, keyed by the digest of the image it read (``ocr.py``)."""

    page_number: int
    image_sha256: str
    engine: str
    text: str
    source_sha256: str | None = None  # of the page's images as stored (ocr.source_digest); None: not a plain scan
    reused: bool = False  # taken from an earlier version of the document, not read again
    # its words, each (text, [x0, y0, x1, y1] in fractions of the page from its top left); None: not known (a page
    # read before words were kept)
    words: list[tuple[str, list[float]]] | None = None


@dataclass
class ExtractedDocument:
    elements: list[Element]
    page_count: int | None = None
    notes: list[str] = field(default_factory=list)  # e.g. "PDF is copy-protected; text layer extracted"
    ocr_pages: list[ReadPage] = field(default_factory=list)  # each page read by OCR (PDF scans)


@dataclass
class PdfPages:
    """What a range of a PDF's pages holds: their elements (no section paths yet), the pages read by OCR, the
    pages without a text layer that could not be read, whether the file forbids copying, and the blank pages
    (no text, nothing for OCR to read). A whole PDF is one range; a big one is read as several
    (``documents/units.py``) and finished as one (``pdf.finish_pdf``)."""

    first_page: int
    last_page: int
    elements: list[Element]
    read_pages: list[ReadPage] = field(default_factory=list)
    unread: list[int] = field(default_factory=list)
    copy_protected: bool = False
    blank: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class PdfSurvey:
    """A cheap look at a PDF before it is read (``pdf.pdf_survey``): how many pages, which draw no text and need
    OCR (``None``: not looked at, the file being small), how many more draw none but are an earlier version's
    unchanged pages (their text is reused), and how many draw nothing at all (blank: no work)."""

    page_count: int
    scanned: list[int] | None = None
    known: int = 0
    blank: int = 0


MAX_TITLE_CHARS = 200


def assign_section_paths(elements: Iterable[Element]) -> Iterator[Element]:
    """Give every element the titles above it (outermost first), from the titles' levels."""
    stack: list[tuple[int, str]] = []
    for el in elements:
        if el.type == TITLE:
            while stack and stack[-1][0] >= el.level:
                stack.pop()
            stack.append((el.level, el.text[:MAX_TITLE_CHARS]))
            el.section_path = [t for _, t in stack[:-1]]
        else:
            el.section_path = [t for _, t in stack]
        yield el


def clean_text(text: str) -> str:
    """Collapse runs of spaces and strip control characters that break tokenisation and tsvector. PDFium marks a
    word hyphenated at a line end with U+0002 (``distribu\x02tion``): dropped, the word is whole again, so it is
    found by search and embedded as the word it is."""
    text = text.replace("\x00", "").replace("\x02", "").replace("\u00ad", "").replace("\ufeff", "")
    lines = [" ".join(line.split()) for line in text.splitlines()]
    return "\n".join(line for line in lines if line)


def ocr_words(stored) -> list[tuple[str, list[float]]] | None:
    """A page's words as stored (a staged unit, ``sql/054_ocr_words.sql``), read back as untrusted: a malformed
    entry is dropped, a value that is not a list reads as not known."""
    if not isinstance(stored, list):
        return None
    words = []
    for entry in stored:
        try:
            text, box = entry
        except (TypeError, ValueError):
            continue
        if isinstance(text, str) and (box := page_box(box)) is not None:
            words.append((text, box))
    return words


def page_box(values) -> list[float] | None:
    """A box ``[x0, y0, x1, y1]`` read back as untrusted: four finite numbers (not text), clamped to the page
    (fractions 0-1) and ordered; None for anything else."""
    if not isinstance(values, list | tuple) or len(values) != 4:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return None
    x0, y0, x1, y1 = (min(max(float(v), 0.0), 1.0) for v in values)
    return [min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)]
