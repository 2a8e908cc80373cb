"""Allow-lists of file types by extension (documents and metric exports each keep their own)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath


class UnsupportedFileType(ValueError):
    """The file's extension is not on the allow-list; the message lists what is."""


class BadFileName(UnsupportedFileType):
    """The name itself cannot be a file's name: too long, empty, or holding a separator or NUL."""


MAX_NAME_BYTES = 255  # what every common file system allows for one name, and what a presigned upload allows


def check_file_name(filename: str) -> str:
    """``filename`` if it can be one file's name (at most 255 bytes of UTF-8, no ``/`` or NUL); else
    ``BadFileName`` saying why (quoting at most the name's first 60 characters)."""
    size = len(filename.encode("utf-8", errors="surrogatepass"))
    if size > MAX_NAME_BYTES:
        raise BadFileName(f"file name of {size:,} bytes ({filename[:60]!r}…) is over the {MAX_NAME_BYTES}-byte limit")
    # control characters are a file name's right on Linux; every output escapes them (cli/output.py)
    if not filename or filename in (".", "..") or "/" in filename or "\x00" in filename:
        raise BadFileName(f"{filename[:60]!r} is not a file name: it is empty, '.' or '..', or holds '/' or NUL")
    return filename


def check_extension(filename: str, allowed: Mapping[str, str]) -> str:
    """The lower-case extension of ``filename`` (``.pdf``) if it is a key of ``allowed`` and the name can be a
    file's (``check_file_name``)."""
    check_file_name(filename)
    extension = PurePath(filename).suffix.lower()
    if extension not in allowed:
        names = ", ".join(sorted(e.lstrip(".") for e in allowed))
        raise UnsupportedFileType(f"file type {extension or '(none)'} is not allowed; allowed: {names}")
    return extension
