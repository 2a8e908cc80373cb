"""The upload store on S3 (``INGESTION_UPLOAD_STORE=s3://bucket/prefix``): what lets hosts share no disk.

Objects are content-addressed like the local store's files: ``<prefix><tenant>/<sha256>``. Bytes arrive
piece by piece and are hashed in the same pass; the key is known only at the end, so

- an upload that fits in one part (``PART_BYTES``, 8 MiB) is held in memory and PUT to its address;
- a larger one streams as a multipart upload to ``<prefix>.incoming/<uuid>`` (one part in memory at a
  time), then is copied server-side to its address and the temporary object deleted.

Identical uploads (concurrent or not) land on the same key: one object. An object already at its address is
not written again (``created`` is False, as in the local store). A worker reads an object through
``local_copy``: one download per attempt into a scratch file, hashed on the way; a missing object or one
whose bytes changed is a permanent error (``StoredObjectMissing``, ``StoredObjectChanged``). ``reader`` is
for a look at the start of an object (ranged GETs: the bytes read, not the object).
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from botocore.exceptions import ClientError

from ingestion_pipeline.core.hashing import CHUNK_BYTES, SizeLimitExceeded
from ingestion_pipeline.core.s3_ranged_reader import S3RangedReader
from ingestion_pipeline.core.upload_store import (
    READER_BUFFER_BYTES,
    VIEWS,
    LocalCopy,
    StoredFile,
    StoredObjectChanged,
    StoredObjectMissing,
    view_name_ok,
    write_all,
)

PART_BYTES = 8 * 1024 * 1024  # S3's smallest part is 5 MiB; this is also the most one upload holds in memory
INCOMING = ".incoming/"
_MISSING = ("404", "NoSuchKey", "NotFound")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> (bucket, ``some/prefix/``); the prefix may be empty."""
    if not uri.startswith("s3://") or not uri[5:].split("/", 1)[0]:
        raise ValueError(f"{uri!r} is not an S3 URI; expected s3://bucket or s3://bucket/prefix")
    bucket, _, prefix = uri[5:].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def _missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in _MISSING


class S3IncomingFile:
    """Bytes arriving piece by piece, hashed as they are written to S3; ``commit`` puts them at their address."""

    def __init__(self, store: S3UploadStore, tenant_id: str, max_bytes: int | None) -> None:
        self._store, self._tenant_id, self._max_bytes = store, tenant_id, max_bytes
        self._digest = hashlib.sha256()
        self._buffer = bytearray()
        self._upload_id: str | None = None
        self._temp_key = f"{store.prefix}{INCOMING}{uuid.uuid4().hex}"
        self._parts: list[dict] = []
        self.size = 0

    def write(self, piece: bytes) -> None:
        self.size += len(piece)
        if self._max_bytes is not None and self.size > self._max_bytes:
            raise SizeLimitExceeded(self._max_bytes)
        self._digest.update(piece)
        self._buffer += piece
        if len(self._buffer) >= PART_BYTES:
            self._send_part()

    def _send_part(self) -> None:
        client, bucket = self._store.client, self._store.bucket
        if self._upload_id is None:
            self._upload_id = client.create_multipart_upload(Bucket=bucket, Key=self._temp_key)["UploadId"]
        number = len(self._parts) + 1
        etag = client.upload_part(Bucket=bucket, Key=self._temp_key, UploadId=self._upload_id, PartNumber=number,
                                  Body=bytes(self._buffer))["ETag"]
        self._parts.append({"PartNumber": number, "ETag": etag})
        self._buffer.clear()

    def commit(self) -> StoredFile:
        sha = self._digest.hexdigest()
        key = self._store.key_of(self._tenant_id, sha)
        client, bucket = self._store.client, self._store.bucket
        try:
            if self._store._head(key) is not None:  # the same bytes are stored already
                self.abort()
                return StoredFile(self._store.uri_of(key), sha, self.size, created=False)
            if self._upload_id is None:
                client.put_object(Bucket=bucket, Key=key, Body=bytes(self._buffer), Metadata={"sha256": sha})
            else:
                if self._buffer:
                    self._send_part()
                client.complete_multipart_upload(Bucket=bucket, Key=self._temp_key, UploadId=self._upload_id,
                                                 MultipartUpload={"Parts": self._parts})
                self._upload_id = None
                # server-side (multipart for objects over 5 GB): the bytes do not pass through this process again
                client.copy({"Bucket": bucket, "Key": self._temp_key}, bucket, key,
                            ExtraArgs={"Metadata": {"sha256": sha}, "MetadataDirective": "REPLACE"})
                client.delete_object(Bucket=bucket, Key=self._temp_key)
        except BaseException:
            self.abort()
            raise
        self._buffer = bytearray()
        return StoredFile(self._store.uri_of(key), sha, self.size, created=True)

    def abort(self) -> None:
        self._buffer = bytearray()
        if self._upload_id is not None:
            upload_id, self._upload_id = self._upload_id, None
            with suppress(ClientError):  # else the cleanup's ``stale`` aborts it later
                self._store.client.abort_multipart_upload(Bucket=self._store.bucket, Key=self._temp_key,
                                                          UploadId=upload_id)
        with suppress(ClientError):
            self._store.client.delete_object(Bucket=self._store.bucket, Key=self._temp_key)


class S3UploadStore:
    """The upload store in ``bucket`` under ``prefix``; ``client`` is a boto3 S3 client (``core/s3_clients``)."""

    def __init__(self, client: Any, bucket: str, prefix: str = "", *, scratch_dir: Path | None = None) -> None:
        self.client, self.bucket = client, bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.scratch_dir = scratch_dir  # where local copies are written (None: the system's temp folder)

    @classmethod
    def from_uri(cls, client: Any, uri: str, *, scratch_dir: Path | None = None) -> S3UploadStore:
        bucket, prefix = parse_s3_uri(uri)
        return cls(client, bucket, prefix, scratch_dir=scratch_dir)

    def __repr__(self) -> str:
        return f"S3UploadStore(s3://{self.bucket}/{self.prefix})"

    def key_of(self, tenant_id: str, sha256: str) -> str:
        return f"{self.prefix}{tenant_id}/{sha256}"

    def uri_of(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def owns(self, location: str | Path) -> bool:
        return str(location).startswith(f"s3://{self.bucket}/{self.prefix}")

    def _key(self, location: str | Path) -> str:
        if not self.owns(location):
            raise ValueError(f"{location} is not in this store (s3://{self.bucket}/{self.prefix})")
        return str(location)[len(f"s3://{self.bucket}/"):]

    def _head(self, key: str) -> dict | None:
        try:
            return self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _missing(exc):
                return None
            raise

    def incoming(self, tenant_id: str, *, max_bytes: int | None = None) -> S3IncomingFile:
        """An object to write into piece by piece; a size-limit breach raises ``SizeLimitExceeded``."""
        return S3IncomingFile(self, tenant_id, max_bytes)

    def put(self, tenant_id: str, stream: BinaryIO, *, max_bytes: int | None = None) -> StoredFile:
        return write_all(self.incoming(tenant_id, max_bytes=max_bytes), stream)

    def adopt(self, tenant_id: str, bucket: str, key: str, *, sha256: str, size: int) -> StoredFile:
        """Copy an object whose SHA-256 is known (a presigned upload S3 checked) to its address, server-side."""
        address = self.key_of(tenant_id, sha256)
        if self._head(address) is not None:
            return StoredFile(self.uri_of(address), sha256, size, created=False)
        self.client.copy({"Bucket": bucket, "Key": key}, self.bucket, address,
                         ExtraArgs={"Metadata": {"sha256": sha256}, "MetadataDirective": "REPLACE"})
        return StoredFile(self.uri_of(address), sha256, size, created=True)

    def exists(self, location: str | Path) -> bool:
        return self._head(self._key(location)) is not None

    def verify(self, location: str | Path, sha256: str) -> None:
        """Cheap: the object is there and was stored under that hash (``local_copy`` re-hashes the bytes)."""
        head = self._head(self._key(location))
        if head is None:
            raise StoredObjectMissing(str(location))
        recorded = head.get("Metadata", {}).get("sha256")
        if recorded is not None and recorded != sha256:
            raise StoredObjectChanged(str(location), recorded)

    @contextmanager
    def local_copy(self, location: str | Path, sha256: str | None) -> Iterator[LocalCopy]:
        """Download the object once into a scratch file, hashing it (None: just stored, not checked); removed
        when the block ends."""
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._key(location))["Body"]
        except ClientError as exc:
            if _missing(exc):
                raise StoredObjectMissing(str(location)) from exc
            raise
        digest, fetched = hashlib.sha256(), 0
        if self.scratch_dir is not None:
            self.scratch_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.scratch_dir, prefix="stored-", delete=True) as scratch:
            try:
                for piece in body.iter_chunks(CHUNK_BYTES):
                    digest.update(piece)
                    scratch.write(piece)
                    fetched += len(piece)
            finally:
                body.close()
            scratch.flush()
            if sha256 is not None and digest.hexdigest() != sha256:
                raise StoredObjectChanged(str(location), digest.hexdigest())
            yield LocalCopy(Path(scratch.name), fetched)

    @contextmanager
    def reader(self, location: str | Path) -> Iterator[io.BufferedReader]:
        """The object as a stream that fetches what is read (ranged GETs), unchecked: a look at the start of a
        file just stored. ``stream.raw`` counts the bytes fetched."""
        key = self._key(location)
        head = self._head(key)
        if head is None:
            raise StoredObjectMissing(str(location))
        raw = S3RangedReader(self.client, self.bucket, key, int(head["ContentLength"]), head.get("ETag"))
        with io.BufferedReader(raw, READER_BUFFER_BYTES) as stream:
            yield stream

    def release(self, location: str | Path) -> int:
        head = self._head(self._key(location))
        if head is None:
            return 0
        self.client.delete_object(Bucket=self.bucket, Key=self._key(location))
        return int(head.get("ContentLength", 0))

    def _view_key(self, tenant_id: str, sha256: str, name: str) -> str:
        if not (view_name_ok(name) and view_name_ok(sha256) and view_name_ok(tenant_id)):
            raise ValueError(f"not a view's name: {tenant_id!r}/{sha256!r}/{name!r}")
        return f"{self.prefix}{VIEWS}/{tenant_id}/{sha256}/{name}"

    def put_view(self, tenant_id: str, sha256: str, name: str, data: bytes) -> None:
        """Keep ``data`` as the view ``name`` of the tenant's file ``sha256`` (tenant-prefixed keys)."""
        self.client.put_object(Bucket=self.bucket, Key=self._view_key(tenant_id, sha256, name), Body=data)

    def get_view(self, tenant_id: str, sha256: str, name: str) -> bytes | None:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._view_key(tenant_id, sha256, name))["Body"]
            return body.read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise

    def stale(self, older_than_seconds: float) -> list[str]:
        """Objects (and temporary ``.incoming/`` ones) last written longer ago than that; unfinished multipart
        uploads that old are aborted on the way (a process died mid-upload)."""
        cutoff = datetime.now(UTC) - timedelta(seconds=older_than_seconds)
        found: list[str] = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            found += [self.uri_of(o["Key"]) for o in page.get("Contents", [])
                      if o["LastModified"] < cutoff and not o["Key"].startswith(f"{self.prefix}{VIEWS}/")]
        for page in self.client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=f"{self.prefix}{INCOMING}"):
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < cutoff:
                    self.client.abort_multipart_upload(Bucket=self.bucket, Key=upload["Key"],
                                                       UploadId=upload["UploadId"])
        return found
