"""The upload store's contract, run against both stores: the local folder and S3 (the moto server the tests start)."""

import hashlib
import io
import threading
from pathlib import Path

import pytest

from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.s3_upload_store import PART_BYTES, S3UploadStore
from ingestion_pipeline.core.upload_store import LocalUploadStore, StoredObjectChanged, StoredObjectMissing


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    if request.param == "local":
        return LocalUploadStore(tmp_path / "store")
    client, name = request.getfixturevalue("bucket")
    return S3UploadStore(client, name, "uploads/documents", scratch_dir=tmp_path)


def stored_objects(store) -> list[str]:
    """Everything the store holds, temporary pieces included."""
    if isinstance(store, LocalUploadStore):
        return sorted(str(p) for p in store.root.rglob("*") if p.is_file())
    listed = store.client.list_objects_v2(Bucket=store.bucket).get("Contents", [])
    uploads = store.client.list_multipart_uploads(Bucket=store.bucket).get("Uploads", [])
    return sorted([f"s3://{store.bucket}/{o['Key']}" for o in listed] + [f"multipart:{u['Key']}" for u in uploads])


def read_back(store, location, sha256) -> bytes:
    with store.local_copy(location, sha256) as copy:
        return copy.path.read_bytes()


def overwrite(store, location, data: bytes) -> None:
    if isinstance(store, LocalUploadStore):
        Path(location).write_bytes(data)
    else:
        store.client.put_object(Bucket=store.bucket, Key=str(location).split("/", 3)[3], Body=data)


def test_bytes_are_stored_once_per_tenant_at_their_content_address(store):
    sha = hashlib.sha256(b"hello").hexdigest()
    first = store.put("acme", io.BytesIO(b"hello"))
    again = store.put("acme", io.BytesIO(b"hello"))
    other = store.put("globex", io.BytesIO(b"hello"))
    assert first.path == again.path and str(first.path).endswith(f"/acme/{sha}")
    assert str(other.path).endswith(f"/globex/{sha}")
    assert (first.created, again.created, other.created) == (True, False, True)
    assert (first.sha256, first.size) == (sha, 5)
    assert store.owns(first.path) and store.exists(first.path)
    assert read_back(store, first.path, sha) == b"hello"
    assert stored_objects(store) == sorted([str(first.path), str(other.path)])
    if isinstance(store, S3UploadStore):
        assert str(first.path) == f"s3://{store.bucket}/uploads/documents/acme/{sha}"


def test_a_large_upload_streams_in_parts_and_is_hashed_in_the_same_pass(store):
    data = bytes(range(256)) * (PART_BYTES * 5 // 2 // 256)  # 2.5 parts: multipart on S3
    incoming = store.incoming("acme")
    for start in range(0, len(data), 1 << 20):
        incoming.write(data[start:start + (1 << 20)])
        if isinstance(store, S3UploadStore):  # at most one part is ever held in memory
            assert len(incoming._buffer) < PART_BYTES
    stored = incoming.commit()
    assert stored.sha256 == hashlib.sha256(data).hexdigest() and stored.size == len(data)
    assert read_back(store, stored.path, stored.sha256) == data
    assert stored_objects(store) == [str(stored.path)]  # no temporary object or unfinished multipart upload left


@pytest.mark.parametrize("size", [11, PART_BYTES + 11])
def test_a_size_limit_breach_leaves_nothing_behind(store, size):
    with pytest.raises(SizeLimitExceeded, match=f"larger than the {size - 1:,} byte limit"):
        store.put("acme", io.BytesIO(b"x" * size), max_bytes=size - 1)
    assert stored_objects(store) == []


def test_identical_concurrent_uploads_store_one_object(store):
    data = b"same bytes " * 100_000
    results, barrier = [], threading.Barrier(4)

    def upload():
        barrier.wait()
        results.append(store.put("acme", io.BytesIO(data)))

    threads = [threading.Thread(target=upload) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({str(r.path) for r in results}) == 1 and len(results) == 4
    assert stored_objects(store) == [str(results[0].path)]
    assert read_back(store, results[0].path, results[0].sha256) == data


def test_release_removes_the_bytes_once(store):
    stored = store.put("acme", io.BytesIO(b"gone soon"))
    assert store.release(stored.path) == 9
    assert store.release(stored.path) == 0
    assert not store.exists(stored.path) and stored_objects(store) == []


def test_a_missing_or_changed_object_is_a_permanent_error_with_its_code(store):
    stored = store.put("acme", io.BytesIO(b"original"))
    overwrite(store, stored.path, b"tampered")
    with pytest.raises(StoredObjectChanged) as changed:
        read_back(store, stored.path, stored.sha256)
    assert changed.value.code == "raw_checksum_mismatch" and not changed.value.transient
    store.verify(stored.path, stored.sha256)  # cheap: the bytes are checked when they are read
    store.release(stored.path)
    for check in (lambda: store.verify(stored.path, stored.sha256),
                  lambda: read_back(store, stored.path, stored.sha256)):
        with pytest.raises(StoredObjectMissing) as missing:
            check()
        assert missing.value.code == "raw_missing" and not missing.value.transient


def test_a_download_is_counted_and_its_scratch_file_removed(store):
    stored = store.put("acme", io.BytesIO(b"count me"))
    with store.local_copy(stored.path, stored.sha256) as copy:
        scratch = copy.path
        assert scratch.read_bytes() == b"count me"
    assert copy.fetched_bytes == (8 if isinstance(store, S3UploadStore) else 0)
    assert scratch.exists() == isinstance(store, LocalUploadStore)  # the local store hands out the file itself


def test_stale_lists_old_objects_and_aborts_unfinished_uploads(store):
    stored = store.put("acme", io.BytesIO(b"old"))
    assert store.stale(3600) == []
    if isinstance(store, S3UploadStore):  # a process died mid-upload: its multipart upload is left open
        store.client.create_multipart_upload(Bucket=store.bucket, Key="uploads/documents/.incoming/dead")
    assert store.stale(-60) == [str(stored.path)]
    assert stored_objects(store) == [str(stored.path)]


def test_a_location_of_another_store_is_not_owned(store, tmp_path):
    assert not store.owns("s3://elsewhere/acme/" + "0" * 64)
    assert not store.owns(tmp_path / "other" / "acme" / ("0" * 64))


def test_a_reader_fetches_the_start_it_reads_not_the_whole_file(store):
    """`reader` is for a look at a file's start (metric submit: binary? which platform?): an S3 object is read by
    ranged GETs of what is read, so the look costs the first MiB of a 3 MiB object, not the object."""
    data = hashlib.sha256(b"seed").digest() * (3 * 2**20 // 32)
    stored = store.put("acme", io.BytesIO(data))
    with store.reader(stored.path) as stream:
        assert stream.peek(64 * 1024)[:64 * 1024] == data[:64 * 1024]  # a first peek gives at least 64 KiB
        assert stream.read(100) == data[:100]
        if isinstance(store, S3UploadStore):
            assert (stream.raw.fetched_bytes, stream.raw.requests) == (2**20, 1)
        assert stream.read() == data[100:]  # and the rest, when asked for
        if isinstance(store, S3UploadStore):
            assert (stream.raw.fetched_bytes, stream.raw.requests) == (len(data), 3)
    store.release(stored.path)
    with pytest.raises(StoredObjectMissing), store.reader(stored.path):
        pass
