"""Decoding of text-like files whose encoding is not declared (BOMs, UTF-16, cp1252, latin-1)."""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

from ingestion_pipeline.documents.extraction.errors import ExtractionError

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


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
