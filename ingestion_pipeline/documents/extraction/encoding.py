"""Reading text-like files whose encoding is not declared (BOMs, UTF-16, cp1252, latin-1), within a
character limit (a text, Markdown or HTML file over it fails before it is parsed)."""

from __future__ import annotations

import codecs
import re
from pathlib import Path

from charset_normalizer import from_bytes

from ingestion_pipeline.core.settings import ExtractionLimits
from ingestion_pipeline.documents.extraction.errors import ExtractionError

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_MAX_BYTES_PER_CHAR = 4  # UTF-8 and UTF-32 at worst


def decode_text(data: bytes) -> tuple[str, str]:
    """Return (text, encoding). BOM first, then strict UTF-8, then charset detection."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding), encoding
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    best = from_bytes(data).best()
    if best is None or best.encoding is None:
        raise ExtractionError("text encoding could not be detected (binary file with a text extension?)",
                              code="text_encoding_unknown")
    return str(best), best.encoding


def _declared_html_encoding(data: bytes) -> str | None:
    """The ``<meta charset>`` / ``http-equiv`` encoding of an HTML file, if it names a known codec."""
    match = _META_CHARSET.search(data[:4096])
    if not match:
        return None
    try:
        return codecs.lookup(match.group(1).decode("ascii")).name
    except (LookupError, UnicodeDecodeError):
        return None


def read_text(path: Path, limits: ExtractionLimits, what: str, *, html: bool = False) -> str:
    """The file decoded, or ``text_too_large`` if it holds more than ``limits.max_text_chars`` characters."""
    size = Path(path).stat().st_size
    if size > limits.max_text_chars * _MAX_BYTES_PER_CHAR:
        raise ExtractionError(f"{what} file is {size:,} bytes, more text than allowed "
                              f"(limit {limits.max_text_chars:,} characters)", code="text_too_large")
    data = Path(path).read_bytes()
    declared = _declared_html_encoding(data) if html and not data.startswith(tuple(b for b, _ in _BOMS)) else None
    if declared is not None and declared != "utf-8":
        text = data.decode(declared, errors="replace")
    else:
        text, _ = decode_text(data)
    if len(text) > limits.max_text_chars:
        raise ExtractionError(f"{what} is {len(text):,} characters long (limit {limits.max_text_chars:,} characters)",
                              code="text_too_large")
    return text
