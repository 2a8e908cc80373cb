"""Allow-lists of file types by extension (documents and metric exports each keep their own)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath


class UnsupportedFileType(ValueError):
    """The file's extension is not on the allow-list; the message lists what is."""


def check_extension(filename: str, allowed: Mapping[str, str]) -> str:
    """The lower-case extension of ``filename`` (``.pdf``) if it is a key of ``allowed``."""
    extension = PurePath(filename).suffix.lower()
    if extension not in allowed:
        names = ", ".join(sorted(e.lstrip(".") for e in allowed))
        raise UnsupportedFileType(f"file type {extension or '(none)'} is not allowed; allowed: {names}")
    return extension
