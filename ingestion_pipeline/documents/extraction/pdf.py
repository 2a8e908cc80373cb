"""PDF extraction with PDFium (pypdfium2): the text layer, page numbers kept; pages without one (scans)
are read by OCR (``ocr.py``, Tesseract) when it is installed.

Sections come from the PDF outline (bookmarks) when it has one, otherwise from a conservative
heading heuristic (numbered or upper-case short lines). PDFium repairs many structural defects
(missing startxref, broken linearization) and then reads the text layer completely; such files
are ingested. Files it cannot open, encrypted files and files without any text fail with the reason
(for a scan without Tesseract: how to enable OCR).

A file's pages are bounded: a PDF of more than ``INGESTION_MAX_PAGES_PER_FILE`` pages, or with more than
``INGESTION_MAX_OCR_PAGES_PER_FILE`` pages to read by OCR, is refused (``file_too_many_pages``) before any page
is read, whether it is read whole or surveyed to be cut into units. A blank page is no work: it is never read by
OCR nor counted as a page to OCR (a 1.3 MB PDF holds 10,000 of them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction import ocr
from ingestion_pipeline.documents.extraction.elements import (
    Element,
    ExtractedDocument,
    Kind,
    PdfPages,
    PdfSurvey,
    ReadPage,
    clean_text,
)
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_NUMBERED_HEADING = re.compile(r"^(\d+(\.\d+){0,3}\.?|[IVX]{1,5}\.|[A-Z]\.)\s+[A-Z][^.!?]{2,80}$")
# Permission bits of the PDF spec (1-based bit positions 3 = print, 5 = copy/extract).
_PERMISSION_COPY = 1 << 4


def _open(path: Path) -> pdfium.PdfDocument:
    try:
        return pdfium.PdfDocument(str(path))
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise ExtractionError("PDF is password-protected; upload an unencrypted copy",
                                  code="pdf_password_protected") from exc
        if "format" in message.lower() or "file" in message.lower():
            raise ExtractionError(f"PDF is corrupt and cannot be opened ({message})", code="pdf_corrupt") from exc
        raise ExtractionError(f"PDF cannot be opened: {message}", code="pdf_corrupt") from exc


def _outline_titles(pdf: pdfium.PdfDocument) -> dict[int, list[tuple[int, str]]]:
    """page index -> [(level, title)] from the bookmarks, in outline order."""
    by_page: dict[int, list[tuple[int, str]]] = {}
    try:
        for item in pdf.get_toc(max_depth=6):
            title = " ".join((item.get_title() or "").split())
            dest = item.get_dest()
            page = dest.get_index() if dest is not None else None
            if title and page is not None:
                by_page.setdefault(page, []).append((item.level + 1, title))
    except pdfium.PdfiumError:
        return {}
    return by_page


def _identity(path: Path) -> tuple[int, int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns, stat.st_ino


_outlines: dict[tuple, dict[int, list[tuple[int, str]]]] = {}


def _cached_outline(path: str, size: int, mtime_ns: int, inode: int,
                    pdf: pdfium.PdfDocument) -> dict[int, list[tuple[int, str]]]:
    """The outline of the file at ``path`` as it is now: a big PDF's units come to one worker in turn, and reading a
    long outline for each would be most of a text unit's time (benchmarks/big_documents.py)."""
    key = (path, size, mtime_ns, inode)
    if key not in _outlines:
        _outlines.clear()  # one file at a time: units of one file follow each other
        _outlines[key] = _outline_titles(pdf)
    return _outlines[key]


def _paragraphs(page_text: str) -> list[str]:
    """Group PDFium's lines into paragraphs: blank lines and short ending lines break them."""
    paragraphs: list[str] = []
    current: list[str] = []
    for raw in page_text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = " ".join(raw.split())
        if not line:
            if current:
                paragraphs.append(" ".join(current))
                current = []
            continue
        if _looks_like_heading(line) and current:
            paragraphs.append(" ".join(current))
            current = []
        current.append(line)
        if _looks_like_heading(line) or line.endswith((".", ":", "?", "!")) and len(line) < 50:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def _looks_like_heading(line: str) -> bool:
    if len(line) > 90 or len(line) < 3:
        return False
    if _NUMBERED_HEADING.match(line):
        return True
    letters = [c for c in line if c.isalpha()]
    return len(letters) >= 4 and all(c.isupper() for c in letters) and not line.endswith((".", ","))


def _draws_nothing(page: pdfium.PdfPage) -> bool:
    """Whether a page is blank by its content: no object and no annotation (a form field, a stamp) to draw.
    Told from the parsed page without rendering it: never rendered, read by OCR or counted as OCR work."""
    return pdfium_c.FPDFPage_CountObjects(page.raw) == 0 and pdfium_c.FPDFPage_GetAnnotCount(page.raw) == 0


def _within_page_budget(page_count: int, limits: ExtractionLimits) -> None:
    """Refuse a PDF of more pages than a file may have, from its page count alone: even blank, each page is
    parsed, and a 1.3 MB file can hold 10,000 of them."""
    if page_count > limits.max_pages:
        raise ExtractionError(
            f"PDF has {page_count:,} pages, over the limit of {limits.max_pages:,} pages per file "
            "(INGESTION_MAX_PAGES_PER_FILE raises it)", code="file_too_many_pages",
            suggestion="split the file, or raise INGESTION_MAX_PAGES_PER_FILE")


def _within_ocr_budget(ocr_pages: int, limits: ExtractionLimits) -> None:
    """Refuse a PDF with more pages to read by OCR than a file may have, before any is read (0.2-2 s each)."""
    if ocr_pages > limits.max_ocr_pages:
        raise ExtractionError(
            f"PDF has {ocr_pages:,} pages to read by OCR, over the limit of {limits.max_ocr_pages:,} per file "
            "(INGESTION_MAX_OCR_PAGES_PER_FILE raises it)", code="file_too_many_pages",
            suggestion="split the file, or raise INGESTION_MAX_OCR_PAGES_PER_FILE")


def _has_text(page: pdfium.PdfPage) -> bool:
    """Whether the page's text strips to something: the reader's own test (text that strips to nothing is OCR
    work). Built by PDFium in C: walking a page's objects in Python to look for a text one took minutes for
    pages of tens of thousands of drawing operators."""
    textpage = page.get_textpage()
    try:
        return bool(textpage.get_text_bounded().strip())
    finally:
        textpage.close()


def pdf_survey(path: Path, look_beyond: int = 0, known_sources: frozenset[str] = frozenset(),
               limits: ExtractionLimits | None = None) -> PdfSurvey:
    """The page count, and — for a PDF of more than ``look_beyond`` pages — the pages whose text strips to nothing
    (scans: OCR reads them, at ~400 times the cost of a text page), so a big PDF is cut into units of even work. A
    scanned page whose source is in ``known_sources`` (``ocr.source_digest``: an earlier version's unchanged page,
    whose text is reused) is no work either, nor is a page that draws nothing (blank). Each page's text is built by
    PDFium to answer (the reader's own test, so the OCR budget counts what the reader will OCR; its cost:
    ``benchmarks/hostile_inputs.py``, docs/benchmarks.md). A PDF over ``limits``' page budget is refused from its
    count, one over its OCR budget once its pages are looked at (``file_too_many_pages``)."""
    limits = limits or ExtractionLimits()
    pdf = _open(path)
    try:
        count = len(pdf)
        _within_page_budget(count, limits)
        if count <= look_beyond:
            return PdfSurvey(count, None)
        scanned, known, blank = [], 0, 0
        for index in range(count):
            try:
                page = pdf[index]
            except pdfium.PdfiumError:  # read (and failed, saying where) by the unit that holds it
                continue
            try:
                # the reader's own test (text that strips to nothing is OCR work): a text object of a space over
                # a scanned image must count against the OCR budget as the reader will spend it
                if _has_text(page):
                    continue
                if _draws_nothing(page):
                    blank += 1
                elif known_sources and ocr.source_digest(page) in known_sources:
                    known += 1
                else:
                    scanned.append(index + 1)
            finally:
                page.close()
        _within_ocr_budget(len(scanned), limits)
        return PdfSurvey(count, scanned, known, blank)
    finally:
        pdf.close()


def read_pdf_pages(path: Path, first_page: int, last_page: int | None,
                   reusable_ocr: Iterable[ReadPage] = (), words: bool = True) -> PdfPages:
    """Pages ``first_page``..``last_page`` (1-based, inclusive; None: the last) — the text layer, OCR for pages
    without one (with its words' boxes, for the page images, when ``words``). A page whose rendered image is in
    ``reusable_ocr`` (an earlier version's pages) is not read again. Paragraphs never cross a page, so the
    elements of consecutive ranges are those of the whole range, in order."""
    known = ocr.KnownPages(reusable_ocr)
    pdf = _open(path)
    try:
        page_count = len(pdf)
        if page_count == 0:
            raise ExtractionError("PDF has no pages", code="pdf_no_pages")
        last_page = page_count if last_page is None else last_page
        if not 1 <= first_page <= last_page <= page_count:
            raise ExtractionError(f"pages {first_page}-{last_page} are not in this {page_count}-page PDF",
                                  code="pdf_page_unreadable")
        permissions = pdfium_c.FPDF_GetDocPermissions(pdf.raw)
        result = PdfPages(first_page, last_page, [],
                          copy_protected=permissions != 0xFFFFFFFF and not permissions & _PERMISSION_COPY)
        outline = _cached_outline(str(path), *_identity(path), pdf)
        tesseract = ocr.tesseract_binary()
        elements = result.elements
        for index in range(first_page - 1, last_page):
            page_number = index + 1
            for level, title in outline.get(index, []):
                elements.append(Element(Kind.TITLE, title, page_number, level=level))
            page = pdf[index]
            by_ocr = False
            try:
                textpage = page.get_textpage()
                text = textpage.get_text_bounded()
                textpage.close()
                if not text.strip():  # no text layer: a scanned page, or a blank one
                    if _draws_nothing(page):
                        result.blank.append(page_number)
                    elif tesseract is None:
                        result.unread.append(page_number)
                    else:
                        read = ocr.read_page(page, page_number, tesseract, known, words)
                        if read is None:  # rendered blank: nothing for Tesseract to read
                            result.blank.append(page_number)
                        else:
                            result.read_pages.append(read)
                            text, by_ocr = read.text, True
            except pdfium.PdfiumError as exc:
                raise ExtractionError(f"PDF page {page_number} cannot be read ({exc})",
                                      code="pdf_page_unreadable") from exc
            finally:
                page.close()
            for paragraph in _paragraphs(text):
                paragraph = clean_text(paragraph)
                if not paragraph:
                    continue
                if by_ocr:  # OCR finds no headings worth trusting: its text is prose, marked as read by OCR
                    elements.append(Element(Kind.OCR_TEXT, paragraph, page_number, level=2))
                    continue
                is_heading = not outline and _looks_like_heading(paragraph)
                # Under an outline, numbered headings nest below the outline entries.
                kind = Kind.TITLE if is_heading else Kind.NARRATIVE_TEXT
                elements.append(Element(kind, paragraph, page_number, level=2))
        return result
    finally:
        pdf.close()


def finish_pdf(parts: Sequence[PdfPages], page_count: int) -> ExtractedDocument:
    """The document the ranges ``parts`` make together (in page order, covering every page): its notes, and the
    reason it fails when no page has text."""
    elements = [element for part in parts for element in part.elements]
    read_pages = [page for part in parts for page in part.read_pages]
    unread = [page for part in parts for page in part.unread]
    blank = sum(len(part.blank) for part in parts)
    notes: list[str] = []
    if any(part.copy_protected for part in parts):
        notes.append("PDF is copy-protected (owner permissions); its text layer was extracted for indexing")
    if read_pages:
        reused = sum(p.reused for p in read_pages)
        notes.append(f"{len(read_pages)} page(s) without a text layer read by OCR (Tesseract)"
                     + (f", {reused} of them unchanged since the last version: its text reused" if reused else ""))
    if blank:
        notes.append(f"{blank} blank page(s) skipped, not read by OCR")
    if not any(e.text.strip() for e in elements if e.type != Kind.TITLE):
        if unread:
            raise ExtractionError(
                f"PDF has no text layer on any of its {page_count} page(s) (scanned or image-only) and OCR "
                f"is not available: {ocr.HOW_TO_ENABLE}", code="pdf_no_text_layer",
                suggestion=ocr.HOW_TO_ENABLE)
        raise ExtractionError(
            f"PDF has no text on any of its {page_count} page(s)"
            + (", all of them blank" if blank == page_count else "")
            + (" (not even by OCR)" if read_pages else ""), code="pdf_no_text_layer")
    if unread:
        notes.append(f"page(s) {_ranges(unread)} have no text layer and were not read: {ocr.HOW_TO_ENABLE}")
    return ExtractedDocument(elements, page_count=page_count, notes=notes, ocr_pages=read_pages)


def extract_pdf(path: Path, limits: ExtractionLimits | None = None,
                reusable_ocr: Iterable[ReadPage] = ()) -> ExtractedDocument:
    """The text layer of every page, OCR for pages without one, within ``limits``' page and OCR budgets (refused
    before any page is read). A page whose rendered image is in ``reusable_ocr`` (an earlier version's pages) is
    not read again."""
    limits = limits or ExtractionLimits()
    reusable_ocr = list(reusable_ocr)
    # a PDF of no more pages than the OCR budget cannot exceed it: then only its page count is looked at
    pdf_survey(path, limits.max_ocr_pages, frozenset(ocr.reusable_sources(reusable_ocr, limits.page_images)), limits)
    pages = read_pdf_pages(path, 1, None, reusable_ocr, limits.page_images)
    return finish_pdf([pages], pages.last_page)


def _ranges(pages: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    parts: list[str] = []
    start = prev = pages[0]
    for n in pages[1:] + [0]:
        if n != prev + 1:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = n
        prev = n
    return ", ".join(parts)
