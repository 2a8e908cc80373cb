"""Plain-text extraction: paragraphs split on blank lines, headings by a conservative heuristic.

A ``.txt`` whose content is a JSON document (it starts with ``{`` or ``[``) is validated as JSON so a
truncated export fails with its position instead of being indexed as prose.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.elements import Element, ExtractedDocument, Kind
from ingestion_pipeline.documents.extraction.encoding import read_text
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_CHAPTER = re.compile(r"^(chapter|book|part|section|article|epilogue|prologue)\b[\w .:,'-]{0,60}$", re.I)
_PARAGRAPH_SPLIT = re.compile(r"\n\s*\n")


def _is_heading(paragraph: str) -> bool:
    if "\n" in paragraph or len(paragraph) > 80:
        return False
    if _CHAPTER.match(paragraph):
        return True
    letters = [c for c in paragraph if c.isalpha()]
    return len(letters) >= 4 and all(c.isupper() for c in letters) and not paragraph.endswith((".", ","))


def extract_text(path: Path, limits: ExtractionLimits | None = None) -> ExtractedDocument:
    size = path.stat().st_size
    if not size:
        raise ExtractionError("file is empty (0 bytes)", code="file_empty")
    text = read_text(path, limits or ExtractionLimits(), "text")
    if not text.strip():
        raise ExtractionError(f"file contains only whitespace ({size} bytes, no text)",
                              code="file_whitespace_only")
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ExtractionError(
                f"text file holds JSON that is truncated or invalid at line {exc.lineno}, column {exc.colno}: "
                f"{exc.msg}",
                code="text_truncated_json",
            ) from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    elements: list[Element] = []
    for block in _PARAGRAPH_SPLIT.split(text):
        paragraph = "\n".join(" ".join(line.split()) for line in block.strip().split("\n"))
        paragraph = paragraph.replace("\x00", "")
        if not paragraph.strip():
            continue
        if _is_heading(paragraph):
            elements.append(Element(Kind.TITLE, paragraph, level=1 if not _CHAPTER.match(paragraph) else 2))
        else:
            # Hard-wrapped prose: one paragraph, one line.
            elements.append(Element(Kind.NARRATIVE_TEXT, " ".join(paragraph.split("\n"))))
    return ExtractedDocument(elements, page_count=None)
