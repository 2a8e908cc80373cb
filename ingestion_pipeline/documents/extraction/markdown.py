"""Markdown extraction with markdown-it-py (CommonMark + tables): structure from the token stream."""

from __future__ import annotations

from pathlib import Path

from markdown_it import MarkdownIt

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.elements import Element, ExtractedDocument, Kind, clean_text
from ingestion_pipeline.documents.extraction.encoding import read_text
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_parser = MarkdownIt("commonmark").enable("table")
# markdown-it stops reading a block nested deeper than its maxNesting (20), dropping the rest silently; the
# file's text is then read again as plain paragraphs (nothing lost, a note says why).
MAX_NESTING = _parser.options["maxNesting"]


def extract_markdown(path: Path, limits: ExtractionLimits | None = None) -> ExtractedDocument:
    text = read_text(path, limits or ExtractionLimits(), "Markdown")
    if not text.strip():
        raise ExtractionError("Markdown file is empty" if not text else "Markdown file contains only whitespace",
                              code="file_empty")
    tokens = _parser.parse(text)
    unread = _lines_not_read(text, tokens)
    if unread:
        return ExtractedDocument(_plain_paragraphs(text), page_count=None, notes=[
            f"Markdown nested more than {MAX_NESTING} levels deep ({unread:,} line(s) the parser would drop): "
            "read as plain paragraphs"])
    elements: list[Element] = []
    list_depth = 0
    table_rows: list[list[str]] | None = None
    row: list[str] = []
    heading_level: int | None = None
    for tok in tokens:
        if tok.type == "heading_open":
            heading_level = int(tok.tag[1])
        elif tok.type in ("bullet_list_open", "ordered_list_open"):
            list_depth += 1
        elif tok.type in ("bullet_list_close", "ordered_list_close"):
            list_depth -= 1
        elif tok.type == "table_open":
            table_rows = []
        elif tok.type == "tr_open":
            row = []
        elif tok.type == "tr_close" and table_rows is not None:
            table_rows.append(row)
        elif tok.type == "table_close" and table_rows is not None:
            body = "\n".join(" | ".join(cells) for cells in table_rows if any(cells))
            if body:
                elements.append(Element(Kind.TABLE, body))
            table_rows = None
        elif tok.type == "inline":
            content = clean_text(tok.content)
            if table_rows is not None:
                row.append(content)
            elif not content:
                continue
            elif heading_level is not None:
                elements.append(Element(Kind.TITLE, content, level=heading_level))
                heading_level = None
            elif list_depth > 0:
                elements.append(Element(Kind.LIST_ITEM, content))
            else:
                elements.append(Element(Kind.NARRATIVE_TEXT, content))
        elif tok.type in ("fence", "code_block"):
            if tok.content.strip():
                elements.append(Element(Kind.CODE_BLOCK, tok.content.rstrip("\n")))
        elif tok.type == "html_block":
            content = clean_text(tok.content)
            if content:
                elements.append(Element(Kind.NARRATIVE_TEXT, content))
    if not elements:
        raise ExtractionError("Markdown file has no text content", code="markdown_no_text")
    return ExtractedDocument(elements, page_count=None)


def _lines_not_read(text: str, tokens) -> int:
    """When the parse reached the nesting limit: the non-blank source lines no text-bearing token came from
    (what markdown-it dropped). Below the limit nothing is dropped, and nothing is counted."""
    if not tokens or max(tok.level for tok in tokens) < MAX_NESTING - 2:
        return 0
    covered = set()
    for tok in tokens:
        if tok.map and tok.type in ("inline", "fence", "code_block", "html_block", "hr"):
            covered.update(range(*tok.map))
    return sum(1 for number, line in enumerate(text.splitlines()) if line.strip() and number not in covered)


def _plain_paragraphs(text: str) -> list[Element]:
    """Every blank-line-separated block as one paragraph, its lines joined (list markers and all)."""
    blocks = (clean_text(" ".join(line.strip() for line in block.splitlines())) for block in text.split("\n\n"))
    return [Element(Kind.NARRATIVE_TEXT, block) for block in blocks if block]
