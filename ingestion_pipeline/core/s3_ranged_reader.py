"""An S3 object read as a stream, one ranged GET per read: reading the start of a large object costs its start.

``metrics submit`` looks at the first 64 KiB of an export (binary or text) and its first rows (which platform)
before it records the upload. With the S3 store that look used to download the whole object into a scratch
file; through this reader it fetches what is read, in ranges of at most ``RANGE_BYTES``. Bytes are not hashed:
the worker's ``local_copy`` does that when it stages the file.
"""

from __future__ import annotations

import io
from typing import Any

RANGE_BYTES = 1024 * 1024  # one GET reads at most this; io.BufferedReader over it asks for this much at a time


class S3RangedReader(io.RawIOBase):
    """The raw bytes of ``s3://bucket/key`` (``size`` bytes, known from a HEAD) for ``io.BufferedReader``."""

    def __init__(self, client: Any, bucket: str, key: str, size: int, etag: str | None = None) -> None:
        self._client, self._bucket, self._key, self._etag = client, bucket, key, etag
        self.size = size
        self.position = 0
        self.fetched_bytes = 0  # what crossed the network: the sum of the ranges read
        self.requests = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), RANGE_BYTES, self.size - self.position)
        if wanted <= 0:
            return 0
        extra = {"IfMatch": self._etag} if self._etag else {}  # an object replaced mid-read fails, not mixes
        body = self._client.get_object(Bucket=self._bucket, Key=self._key,
                                       Range=f"bytes={self.position}-{self.position + wanted - 1}", **extra)["Body"]
        try:
            data = body.read()
        finally:
            body.close()
        buffer[:len(data)] = data
        self.position += len(data)
        self.fetched_bytes += len(data)
        self.requests += 1
        return len(data)

    def readall(self) -> bytes:
        """The rest, a range at a time (``io.RawIOBase.readall`` would ask for 8 KiB per GET)."""
        pieces = []
        while piece := self.read(RANGE_BYTES):
            pieces.append(piece)
        return b"".join(pieces)
