import hashlib
import io

import pytest

from ingestion_pipeline.core.hashing import CHUNK_BYTES, SizeLimitExceeded, copy_and_hash
from ingestion_pipeline.core.upload_store import LocalUploadStore


class CountingReader(io.RawIOBase):
    """A stream of n bytes that records the largest read request (proves streaming)."""

    def __init__(self, n: int) -> None:
        self.remaining = n
        self.largest_read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        self.largest_read = max(self.largest_read, size if size >= 0 else 1 << 62)
        size = self.remaining if size < 0 else min(size, self.remaining)
        self.remaining -= size
        return b"x" * size


def test_copy_and_hash_streams_in_bounded_pieces():
    reader = CountingReader(5 * CHUNK_BYTES + 17)
    sink = io.BytesIO()
    sha, size = copy_and_hash(reader, sink)
    assert size == 5 * CHUNK_BYTES + 17
    assert sha == hashlib.sha256(b"x" * size).hexdigest()
    assert reader.largest_read == CHUNK_BYTES


def test_store_put_is_content_addressed(tmp_path):
    store = LocalUploadStore(tmp_path)
    first = store.put("acme", io.BytesIO(b"hello"))
    again = store.put("acme", io.BytesIO(b"hello"))
    assert first.path == again.path == tmp_path / "acme" / hashlib.sha256(b"hello").hexdigest()
    assert first.created and not again.created
    assert first.path.read_bytes() == b"hello"


def test_size_limit_leaves_nothing_behind(tmp_path):
    store = LocalUploadStore(tmp_path)
    with pytest.raises(SizeLimitExceeded, match="larger than the 10 byte limit"):
        store.put("acme", io.BytesIO(b"x" * 11), max_bytes=10)
    assert list((tmp_path / "acme").iterdir()) == []
