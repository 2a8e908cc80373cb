"""Presigned uploads: a client PUTs a document straight to S3, then asks for it to be queued.

``create`` records an ``api_uploads`` row and signs a PUT for ``<prefix><tenant>/<upload_id>/<name>``
(valid ``presign_seconds``; the declared size and content type are part of the signature). ``complete``
checks what arrived against the declaration, streams it into the upload store with its SHA-256 (never
whole in memory; with the S3 store and a declared SHA-256, a server-side copy instead) and queues it through
``intake.submit_stored``, the decision behind every submit; the S3 object is then removed. ``expire``
removes objects of uploads never completed.
"""

from __future__ import annotations

import base64
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from botocore.exceptions import ClientError
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType
from ingestion_pipeline.core.hashing import CHUNK_BYTES, SizeLimitExceeded
from ingestion_pipeline.core.s3_upload_store import S3UploadStore
from ingestion_pipeline.core.settings import ApiSettings
from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id
from ingestion_pipeline.core.upload_store import StoredFile, UploadStore
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES
from ingestion_pipeline.documents.intake import SubmitResult, check_document_name, keyed_uri, submit_stored

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
GENERIC_CONTENT_TYPES = ("application/octet-stream", "binary/octet-stream")


class UploadRefused(ValueError):
    """The upload cannot be accepted; ``code`` names why (the API maps it to a status)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class PresignedUpload:
    upload_id: str
    url: str
    method: str
    headers: dict[str, str]
    bucket: str
    object_key: str
    expires_at: datetime


def create(
    conn: psycopg.Connection, client: Any, settings: ApiSettings, *, tenant_id: str, user_id: str | None,
    filename: str, size_bytes: int, content_type: str, max_bytes: int, title: str | None = None,
    key: str | None = None, sha256: str | None = None,
) -> PresignedUpload:
    validate_tenant_id(tenant_id)
    if not settings.upload_bucket:
        raise UploadRefused("not_configured", "presigned uploads need INGESTION_UPLOAD_BUCKET on the server")
    try:
        extension = check_document_name(filename)
    except UnsupportedFileType as exc:
        raise UploadRefused("unsupported_type", str(exc)) from exc
    expected_type = DOCUMENT_TYPES[extension]
    if content_type not in (expected_type, *GENERIC_CONTENT_TYPES):
        raise UploadRefused("unsupported_type", f"content type {content_type!r} does not match {filename!r} "
                                                f"(expected {expected_type})")
    if size_bytes < 1:
        raise UploadRefused("invalid_request", "size_bytes must be at least 1")
    if size_bytes > max_bytes:
        raise UploadRefused("too_large", f"file is {size_bytes:,} bytes, over the {max_bytes:,} byte limit")
    if key is not None:
        keyed_uri(tenant_id, key)
    upload_id = str(uuid.uuid4())
    safe_name = _UNSAFE.sub("_", filename)[-120:] or "file"
    object_key = f"{settings.upload_prefix}{tenant_id}/{upload_id}/{safe_name}"
    with conn.transaction():
        ensure_tenant(conn, tenant_id)
        row = conn.execute(
            """INSERT INTO api_uploads (upload_id, tenant_id, user_id, filename, content_type, size_bytes, bucket,
                                        object_key, title, doc_key, sha256, expires_at)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now() + make_interval(secs => %s))
               RETURNING expires_at""",
            (upload_id, tenant_id, _uuid_or_none(user_id), filename, content_type, size_bytes,
             settings.upload_bucket, object_key, title, key, sha256, settings.presign_seconds),
        ).fetchone()
    params = {"Bucket": settings.upload_bucket, "Key": object_key, "ContentType": content_type,
              "ContentLength": size_bytes}
    headers = {"Content-Type": content_type}
    if sha256 is not None:  # signed: S3 refuses a PUT whose bytes do not hash to it (BadDigest)
        params["ChecksumSHA256"] = headers["x-amz-checksum-sha256"] = base64.b64encode(bytes.fromhex(sha256)).decode()
    url = client.generate_presigned_url("put_object", Params=params, ExpiresIn=settings.presign_seconds)
    return PresignedUpload(upload_id, url, "PUT", headers, settings.upload_bucket, object_key, row["expires_at"])


def _uuid_or_none(value: str | None) -> str | None:
    try:
        return str(uuid.UUID(value)) if value else None
    except ValueError:  # development mode has no user row
        return None


def get(conn: psycopg.Connection, upload_id: str, *, tenant_id: str) -> dict | None:
    try:
        uuid.UUID(upload_id)
    except ValueError:
        return None
    return conn.execute("SELECT * FROM api_uploads WHERE upload_id = %s AND tenant_id = %s",
                        (upload_id, tenant_id)).fetchone()


def complete(
    db: Database, store: UploadStore, client: Any, *, upload_id: str, tenant_id: str, fingerprint: str,
    max_bytes: int,
) -> SubmitResult:
    """Check the object against its declaration, stream it into the store and queue it (once)."""
    with db.connection() as conn:
        upload = get(conn, upload_id, tenant_id=tenant_id)
    if upload is None:
        raise LookupError(f"no upload {upload_id}")
    if upload["status"] == "completed":
        return SubmitResult.from_record(upload["result"])
    if upload["status"] != "pending":
        raise UploadRefused(upload["status"], f"upload {upload_id} is {upload['status']}")
    try:
        head = client.head_object(Bucket=upload["bucket"], Key=upload["object_key"])
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            raise UploadRefused("not_uploaded", "nothing was uploaded to the presigned URL yet") from exc
        raise
    if head["ContentLength"] != upload["size_bytes"]:
        _finish(db, client, upload, "rejected", None)
        code = "too_large" if head["ContentLength"] > upload["size_bytes"] else "size_mismatch"
        raise UploadRefused(code, f"{head['ContentLength']:,} bytes arrived, {upload['size_bytes']:,} were declared")
    if upload["sha256"] and isinstance(store, S3UploadStore):
        stored = _adopt(db, store, client, upload, tenant_id)
    else:
        stored = _stream_into(db, store, client, upload, tenant_id, head, max_bytes)
    result = submit_stored(db, store, stored, tenant_id=tenant_id, filename=upload["filename"],
                           fingerprint=fingerprint, title=upload["title"], key=upload["doc_key"])
    result.source_uri = result.source_uri or f"s3://{upload['bucket']}/{upload['object_key']}"
    _finish(db, client, upload, "completed", result)
    return result


def _adopt(db: Database, store: S3UploadStore, client: Any, upload: dict, tenant_id: str) -> StoredFile:
    """The declared SHA-256 was signed into the PUT, so S3 checked the bytes: copy the object server-side.
    (An S3 that does not check it, moto, is caught by the worker, which hashes what it downloads.)"""
    head = client.head_object(Bucket=upload["bucket"], Key=upload["object_key"], ChecksumMode="ENABLED")
    recorded = head.get("ChecksumSHA256")
    if recorded and base64.b64decode(recorded).hex() != upload["sha256"]:
        _finish(db, client, upload, "rejected", None)
        raise UploadRefused("checksum_mismatch", "the uploaded bytes do not match the declared sha256")
    return store.adopt(tenant_id, upload["bucket"], upload["object_key"], sha256=upload["sha256"],
                       size=head["ContentLength"])


def _stream_into(db: Database, store: UploadStore, client: Any, upload: dict, tenant_id: str, head: dict,
                 max_bytes: int) -> StoredFile:
    """Stream the object into the store, hashing it (no declared SHA-256, or a local store: then the hash is
    checked against the declared one here)."""
    body = client.get_object(Bucket=upload["bucket"], Key=upload["object_key"], IfMatch=head["ETag"])["Body"]
    incoming = store.incoming(tenant_id, max_bytes=min(max_bytes, upload["size_bytes"]))
    try:
        for piece in body.iter_chunks(CHUNK_BYTES):
            incoming.write(piece)
        stored = incoming.commit()
    except SizeLimitExceeded as exc:
        incoming.abort()
        _finish(db, client, upload, "rejected", None)
        raise UploadRefused("too_large", str(exc)) from exc
    except BaseException:
        incoming.abort()
        raise
    finally:
        body.close()
    if upload["sha256"] and stored.sha256 != upload["sha256"]:  # declared: every store holds it to its word
        if stored.created:
            store.release(stored.path)
        _finish(db, client, upload, "rejected", None)
        raise UploadRefused("checksum_mismatch", "the uploaded bytes do not match the declared sha256")
    return stored


def _finish(db: Database, client: Any, upload: dict, status: str, result: SubmitResult | None) -> None:
    with db.connection() as conn:
        conn.execute(
            """UPDATE api_uploads SET status = %s, result = %s, completed_at = now()
                WHERE upload_id = %s AND status = 'pending'""",
            (status, Jsonb(result.as_dict()) if result else None, upload["upload_id"]),
        )
    client.delete_object(Bucket=upload["bucket"], Key=upload["object_key"])


def expire(db: Database, client: Any, *, grace_seconds: float = 3600.0) -> int:
    """Remove the objects of uploads never completed (their URL expired over ``grace_seconds`` ago)."""
    with db.connection() as conn:
        stale = conn.execute(
            """UPDATE api_uploads SET status = 'expired', completed_at = now()
                WHERE status = 'pending' AND expires_at < now() - make_interval(secs => %s)
                RETURNING bucket, object_key""",
            (grace_seconds,),
        ).fetchall()
    for row in stale:
        client.delete_object(Bucket=row["bucket"], Key=row["object_key"])
    return len(stale)
