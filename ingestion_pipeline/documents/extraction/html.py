"""HTML extraction with lxml: headings, paragraphs, list items and tables in document order.

Scripts, styles and other non-content elements are dropped. The encoding comes from the BOM, the
``<meta charset>`` or detection (UTF-16 and cp1252 files exist in the wild). The tree is parsed by
libxml2 (``huge_tree``: nesting up to 2,048 levels, deeper fails with ``html_too_deep`` instead of
losing text) and walked with an explicit stack; its size is bounded by the character limit.
"""

from __future__ import annotations

import re
from pathlib import Path

import lxml.html
from lxml import etree

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.elements import Element, ExtractedDocument, Kind, clean_text
from ingestion_pipeline.documents.extraction.encoding import read_text
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_DROP = {"script", "style", "noscript", "template", "head", "svg", "iframe", "object", "form", "button", "nav"}
_HEADINGS = {f"h{i}": i for i in range(1, 7)}
_BLOCKS = {
    "p", "div", "section", "article", "main", "aside", "header", "footer", "blockquote", "ul", "ol", "dl",
    "dt", "dd", "li", "table", "pre", "figure", "figcaption", "center", "body", "html", "address", "tr",
    "td", "th", "tbody", "thead", "hr", "br", "font",
} | set(_HEADINGS)
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)  # lxml refuses it in a str (XHTML filings)


def _name(node) -> str | None:
    """The lower-case tag name of an element; None for comments and processing instructions."""
    return node.tag.lower() if isinstance(node.tag, str) else None


def _text(node, separator: str = " ") -> str:
    """The visible text below ``node`` (scripts, styles and other dropped elements left out)."""
    parts = [node.text or ""]
    stack: list = list(reversed(node))
    while stack:
        child = stack.pop()
        if isinstance(child, str):  # the tail of an element, after everything inside it
            parts.append(child)
            continue
        if child.tail:
            stack.append(child.tail)
        if _name(child) in _DROP or _name(child) is None:
            continue
        parts.append(child.text or "")
        stack.extend(reversed(child))
    return separator.join(part for part in parts if part)


def _table_text(table) -> str:
    rows: list[str] = []
    for tr in table.iter("tr"):
        cells = [" ".join(_text(td).split()) for td in tr if _name(td) in ("td", "th")]
        cells = [c for c in cells if c]
        if cells:
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _has_block_child(node) -> bool:
    return any(_name(c) in _BLOCKS and _name(c) not in ("br", "font") for c in node)


class _Walker:
    def __init__(self) -> None:
        self.elements: list[Element] = []
        self.inline: list[str] = []

    def flush(self) -> None:
        text = clean_text(" ".join(self.inline))
        self.inline = []
        if text:
            self.elements.append(Element(Kind.NARRATIVE_TEXT, text))

    def _start(self, node) -> bool:
        """Handle an element as it opens; True to walk its children."""
        name = _name(node)
        if name is None or name in _DROP:
            return False
        if name in _HEADINGS:
            self.flush()
            text = clean_text(_text(node))
            if text:
                self.elements.append(Element(Kind.TITLE, text, level=_HEADINGS[name]))
            return False
        if name == "table":
            self.flush()
            # Layout tables (a single cell wrapping blocks) are walked, data tables kept whole.
            if node.find(".//table") is not None or sum(1 for _ in node.iter("td")) <= 1:
                return True
            text = _table_text(node)
            if text:
                self.elements.append(Element(Kind.TABLE, text))
            return False
        if name == "li" and not _has_block_child(node):
            self.flush()
            text = clean_text(_text(node))
            if text:
                self.elements.append(Element(Kind.LIST_ITEM, text))
            return False
        if name == "pre":
            self.flush()
            text = _text(node, separator="").strip("\n")
            if text.strip():
                self.elements.append(Element(Kind.CODE_BLOCK, text))
            return False
        if name == "br":
            self.inline.append("\n")
            return False
        if name in _BLOCKS:
            self.flush()
        return True  # a block, or inline markup (span, a, b, i …)

    def _end(self, node, walked: bool) -> None:
        if walked and _name(node) in _BLOCKS:
            self.flush()  # a walked table or a block closes its text
        if node.tail:
            self.inline.append(node.tail)  # text after an element belongs to its parent's flow

    def walk(self, root) -> None:
        """Depth first with an explicit stack: nesting depth costs memory, never the call stack."""
        if root.text:
            self.inline.append(root.text)
        stack: list[tuple[object, bool, bool]] = [(child, False, False) for child in reversed(root)]
        while stack:
            node, closing, walked = stack.pop()
            if closing:
                self._end(node, walked)
                continue
            descend = self._start(node)
            stack.append((node, True, descend))
            if descend:
                if node.text:
                    self.inline.append(node.text)
                stack.extend((child, False, False) for child in reversed(node))
        self.flush()


def _first_limit(parser) -> str:
    return next(e.message for e in parser.error_log if e.type_name == "ERR_RESOURCE_LIMIT").split(",")[0]


def extract_html(path: Path, limits: ExtractionLimits | None = None) -> ExtractedDocument:
    text = read_text(path, limits or ExtractionLimits(), "HTML", html=True)
    try:
        parser = lxml.html.HTMLParser(huge_tree=True, remove_comments=True, remove_pis=True)
        document = lxml.html.document_fromstring(_XML_DECLARATION.sub("", text, count=1), parser=parser)
    except (etree.ParserError, ValueError) as exc:
        raise ExtractionError(f"HTML cannot be parsed: {exc}", code="html_unparseable") from exc
    if any(e.type_name == "ERR_RESOURCE_LIMIT" for e in parser.error_log):
        # libxml2 stops reading past its nesting limit (2,048 levels): fail rather than index half a file
        raise ExtractionError(f"HTML nests elements deeper than the parser's limit ({_first_limit(parser)})",
                              code="html_too_deep")
    body = document.find("body")
    walker = _Walker()
    walker.walk(body if body is not None else document)
    if not walker.elements:
        raise ExtractionError("HTML has no visible text (only markup, scripts or styles)", code="html_no_text")
    return ExtractedDocument(walker.elements, page_count=None)
