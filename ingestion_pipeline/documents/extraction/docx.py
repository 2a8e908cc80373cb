"""DOCX extraction with python-docx: body paragraphs and tables in document order.

Heading styles become titles (their level from the style name), list paragraphs list items, tables
one element each (cells joined with " | "). DOCX has no fixed pages: page numbers count explicit page
breaks and Word's last-rendered page breaks, which is what a reader sees in Word.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from docx import Document
from docx.opc.exceptions import PackageNotFoundError
from docx.oxml.ns import qn
from docx.table import Table
from docx.text.paragraph import Paragraph

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.elements import Element, ExtractedDocument, Kind, clean_text
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_HEADING_STYLE = re.compile(r"^(heading|titre|überschrift)\s*(\d)", re.IGNORECASE)


def _style_name(paragraph: Paragraph, style_names: dict[str, str]) -> str:
    """The paragraph's style name via a prebuilt id->name map (python-docx's lookup is O(styles) each)."""
    p_style = paragraph._p.pPr.pStyle if paragraph._p.pPr is not None else None
    if p_style is None:
        return "Normal"
    return style_names.get(p_style.val, p_style.val or "")


def _heading_level(paragraph: Paragraph, name: str) -> int | None:
    if name.lower() == "title":
        return 1
    match = _HEADING_STYLE.match(name)
    if match:
        return int(match.group(2))
    outline = paragraph._p.find(f"{qn('w:pPr')}/{qn('w:outlineLvl')}")
    if outline is not None:
        return int(outline.get(qn("w:val"), "0")) + 1
    return None


def _is_list_item(paragraph: Paragraph, name: str) -> bool:
    if name.lower().startswith("list"):
        return True
    return paragraph._p.find(f"{qn('w:pPr')}/{qn('w:numPr')}") is not None


def _page_breaks(paragraph: Paragraph) -> int:
    p = paragraph._p
    explicit = sum(1 for br in p.iter(qn("w:br")) if br.get(qn("w:type")) == "page")
    rendered = sum(1 for _ in p.iter(qn("w:lastRenderedPageBreak")))
    return max(explicit, rendered)


def _table_text(table: Table) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # merged cells repeat
                continue
            seen.add(id(cell._tc))
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _human(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:.1f}".removesuffix(".0") + f" {unit}"
        n /= 1024
    return f"{n} bytes"


def check_zip_members(path: Path, limits: ExtractionLimits, kind: str = "docx") -> None:
    """Refuse a package whose parts expand beyond the limits, before anything is decompressed; the error codes
    name the format (``kind``: docx, xlsx, pptx, odt, epub: ``xlsx_too_large``, ``xlsx_compression_ratio``).

    An office file is a zip: a few kilobytes can declare gigabytes of XML (a "zip bomb"). The sizes come from
    the zip directory; zipfile never decompresses more than a member declares.
    """
    try:
        with zipfile.ZipFile(path) as package:
            members = package.infolist()
    except (zipfile.BadZipFile, OSError):
        return  # python-docx reports the corrupt package with its own reason
    total = 0
    for member in members:
        total += member.file_size
        if member.file_size > limits.max_member_bytes:
            raise ExtractionError(
                f"{member.filename} expands to {_human(member.file_size)} (limit {_human(limits.max_member_bytes)})",
                code=f"{kind}_too_large")
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > 1024 * 1024 and ratio > limits.max_compression_ratio:
            raise ExtractionError(
                f"{member.filename} is compressed {ratio:,.0f}:1 (limit {limits.max_compression_ratio:,.0f}:1); "
                "refusing a likely zip bomb", code=f"{kind}_compression_ratio")
    if total > 4 * limits.max_member_bytes:
        raise ExtractionError(f"the package expands to {_human(total)} in all (limit "
                              f"{_human(4 * limits.max_member_bytes)})", code=f"{kind}_too_large")


def extract_docx(path: Path, limits: ExtractionLimits | None = None) -> ExtractedDocument:
    check_zip_members(path, limits or ExtractionLimits())
    try:
        document = Document(str(path))
    except (zipfile.BadZipFile, PackageNotFoundError) as exc:
        raise ExtractionError("DOCX is corrupt: not a valid Office Open XML (zip) package",
                              code="docx_corrupt") from exc
    except KeyError as exc:
        raise ExtractionError(f"DOCX is corrupt: missing part {exc}", code="docx_corrupt") from exc
    except Exception as exc:  # python-docx raises assorted errors on malformed XML
        raise ExtractionError(f"DOCX cannot be read: {type(exc).__name__}: {exc}", code="docx_unreadable") from exc

    style_names = {style.style_id: style.name or "" for style in document.styles}
    elements: list[Element] = []
    page = 1
    body = document.element.body
    for child in body.iterchildren():
        if child.tag == qn("w:p"):
            paragraph = Paragraph(child, document)
            breaks = _page_breaks(paragraph)
            text = clean_text(paragraph.text)
            if text:
                name = _style_name(paragraph, style_names)
                level = _heading_level(paragraph, name)
                if level is not None:
                    elements.append(Element(Kind.TITLE, text, page, level=level))
                elif _is_list_item(paragraph, name):
                    elements.append(Element(Kind.LIST_ITEM, text, page))
                else:
                    elements.append(Element(Kind.NARRATIVE_TEXT, text, page))
            page += breaks
        elif child.tag == qn("w:tbl"):
            text = _table_text(Table(child, document))
            if text.strip():
                elements.append(Element(Kind.TABLE, text, page))
    if not elements:
        raise ExtractionError("DOCX contains no text (empty document or images only)", code="docx_no_text")
    return ExtractedDocument(elements, page_count=page)
