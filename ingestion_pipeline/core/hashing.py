"""SHA-256 computed while bytes stream through, never holding a whole file in memory."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

CHUNK_BYTES = 1024 * 1024


class SizeLimitExceeded(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"file is larger than the {limit:,} byte limit")
        self.limit = limit


def copy_and_hash(src: BinaryIO, dst: BinaryIO, *, max_bytes: int | None = None) -> tuple[str, int]:
    """Copy ``src`` to ``dst`` in 1 MiB pieces; return (sha256 hex, size).

    Raises ``SizeLimitExceeded`` as soon as more than ``max_bytes`` have been read.
    """
    digest = hashlib.sha256()
    size = 0
    while True:
        piece = src.read(CHUNK_BYTES)
        if not piece:
            break
        size += len(piece)
        if max_bytes is not None and size > max_bytes:
            raise SizeLimitExceeded(max_bytes)
        digest.update(piece)
        dst.write(piece)
    return digest.hexdigest(), size


class _Discard:
    def write(self, _: bytes) -> None:
        pass


def stream_sha256(src: BinaryIO, *, max_bytes: int | None = None) -> tuple[str, int]:
    """(sha256 hex, size) of what ``src`` holds, read in 1 MiB pieces; ``SizeLimitExceeded`` past ``max_bytes``."""
    return copy_and_hash(src, _Discard(), max_bytes=max_bytes)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a stored file, read in 1 MiB pieces (a re-check before processing it)."""
    with Path(path).open("rb") as src:
        return stream_sha256(src)[0]
