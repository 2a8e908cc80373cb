"""HTML extraction with BeautifulSoup + lxml: headings, paragraphs, list items and tables in order.

Scripts, styles and other non-content elements are dropped. The encoding comes from the BOM, the
``<meta charset>`` or detection (UTF-16 and cp1252 files exist in the wild).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from bs4 import BeautifulSoup, NavigableString, Tag, XMLParsedAsHTMLWarning
from bs4.element import Comment, Doctype, ProcessingInstruction

from ingestion_pipeline.documents.extraction.elements import (
    CODE_BLOCK,
    LIST_ITEM,
    NARRATIVE_TEXT,
    TABLE,
    TITLE,
    Element,
    ExtractedDocument,
    clean_text,
)
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_DROP = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object", "form", "button", "nav"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKS = {
    "p", "div", "section", "article", "main", "aside", "header", "footer", "blockquote", "ul", "ol", "dl",
    "dt", "dd", "li", "table", "pre", "figure", "figcaption", "center", "body", "html", "address", "tr",
    "td", "th", "tbody", "thead", "hr", "br", "font",
} | set(_HEADINGS)


def _table_text(table: Tag) -> str:
    rows: list[str] = []
    for tr in table.find_all("tr"):
        cells = [" ".join(td.get_text(" ").split()) for td in tr.find_all(["td", "th"], recursive=False)]
        cells = [c for c in cells if c]
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _has_block_child(tag: Tag) -> bool:
    return any(isinstance(c, Tag) and c.name in _BLOCKS and c.name not in ("br", "font") for c in tag.children)


class _Walker:
    def __init__(self) -> None:
        self.elements: list[Element] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        text = clean_text(" ".join(self.inline))
        self.inline = []
        if text:
            self.elements.append(Element(NARRATIVE_TEXT, text))

    def walk(self, node: Tag) -> None:
        for child in node.children:
            if isinstance(child, (Comment, Doctype, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                self.inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _DROP:
                continue
            if name in _HEADINGS:
                self.flush()
                text = clean_text(child.get_text(" "))
                if text:
                    self.elements.append(Element(TITLE, text, level=_HEADINGS[name]))
            elif name == "table":
                self.flush()
                # Layout tables (a single cell wrapping blocks) are walked, data tables kept whole.
                if child.find("table") is not None or len(child.find_all("td")) <= 1:
                    self.walk(child)
                    self.flush()
                else:
                    text = _table_text(child)
                    if text:
                        self.elements.append(Element(TABLE, text))
            elif name == "li" and not _has_block_child(child):
                self.flush()
                text = clean_text(child.get_text(" "))
                if text:
                    self.elements.append(Element(LIST_ITEM, text))
            elif name == "pre":
                self.flush()
                text = child.get_text().strip("\n")
                if text.strip():
                    self.elements.append(Element(CODE_BLOCK, text))
            elif name == "br":
                self.inline.append("\n")
            elif name in _BLOCKS:
                self.flush()
                self.walk(child)
                self.flush()
            else:  # inline markup: span, a, b, i, …
                self.walk(child)


def extract_html(path: Path) -> ExtractedDocument:
    data = path.read_bytes()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)  # XHTML (SEC filings) parses fine
            soup = BeautifulSoup(data, "lxml")
    except Exception as exc:
        raise ExtractionError(f"HTML cannot be parsed: {exc}", code="html_unparseable") from exc
    root = soup.body or soup
    walker = _Walker()
    walker.walk(root)
    walker.flush()
    if not walker.elements:
        raise ExtractionError("HTML has no visible text (only markup, scripts or styles)", code="html_no_text")
    return ExtractedDocument(walker.elements, page_count=None)
