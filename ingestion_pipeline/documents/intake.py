"""Submitting uploaded files: stream to the store with SHA-256, then queue, skip or reject.

- The extension must be allow-listed and the size within the limit, or the file is rejected with a
  reason and leaves no row and no stored bytes.
- Identity is ``upload://sha256:<hex>``, or ``upload-key://<tenant>/<key>`` when the caller gives a
  stable key (a new upload under the key is a new version of that document); the document row is
  got-or-created with ON CONFLICT, so two concurrent submits of the same bytes share one document
  (and one queued ledger row).
- An identical re-upload whose active version has the same hash and pipeline fingerprint is
  ``skipped``: no ledger row, and the stored copy is removed.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import asdict, dataclass
from pathlib import Path

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType, check_extension
from ingestion_pipeline.core.hashing import SizeLimitExceeded
from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id
from ingestion_pipeline.core.upload_store import LocalUploadStore, StoredFile, SymlinkRefused, open_submitted_file
from ingestion_pipeline.documents import runs
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES

QUEUED, SKIPPED, DUPLICATE, REJECTED = "queued", "skipped", "duplicate", "rejected"


@dataclass
class SubmitResult:
    status: str
    filename: str
    tenant_id: str
    reason: str | None = None
    run_id: int | None = None
    doc_id: int | None = None
    source_uri: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None

    def as_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def upload_uri(sha256: str) -> str:
    return f"upload://sha256:{sha256}"


_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")


def keyed_uri(tenant_id: str, key: str) -> str:
    """The identity of a document uploaded under a stable key: a new upload under it is a new version."""
    if not _KEY.fullmatch(key or "") or ".." in key:
        raise ValueError(f"not a document key: {key!r} (1-200 of letters, digits, '.', '_', '-', '/')")
    return f"upload-key://{tenant_id}/{key}"


def check_document_name(filename: str) -> str:
    """The allow-listed extension of ``filename``; raises ``UnsupportedFileType`` with the reason."""
    return check_extension(filename, DOCUMENT_TYPES)


def submit_upload(
    db: Database,
    store: LocalUploadStore,
    *,
    tenant_id: str,
    path: Path,
    fingerprint: str,
    max_bytes: int,
    title: str | None = None,
    follow_symlinks: bool = False,
    key: str | None = None,
) -> SubmitResult:
    """Submit a file on disk (the CLI)."""
    path = Path(path)
    tenant_id = validate_tenant_id(tenant_id)
    result = SubmitResult(status=REJECTED, filename=path.name, tenant_id=tenant_id)
    if key is not None:
        keyed_uri(tenant_id, key)  # a bad key is bad input: raises before anything is stored
    try:
        check_document_name(path.name)
    except UnsupportedFileType as exc:
        result.reason = str(exc)
        return result
    try:
        stream = open_submitted_file(path, follow_symlinks=follow_symlinks)
    except SymlinkRefused as exc:
        result.reason = str(exc)
        return result
    except OSError:
        result.reason = "not a readable file"
        return result
    with stream:
        if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
            result.reason = "not a regular file"
            return result
        size = os.fstat(stream.fileno()).st_size
        if size > max_bytes:
            result.reason = f"file is {size:,} bytes, over the {max_bytes:,} byte limit"
            return result
        try:
            stored = store.put(tenant_id, stream, max_bytes=max_bytes)
        except SizeLimitExceeded as exc:  # the file grew while being read
            result.reason = str(exc)
            return result
    return submit_stored(db, store, stored, tenant_id=tenant_id, filename=path.name, fingerprint=fingerprint,
                         title=title, key=key)


def submit_stored(
    db: Database,
    store: LocalUploadStore,
    stored: StoredFile,
    *,
    tenant_id: str,
    filename: str,
    fingerprint: str,
    title: str | None = None,
    key: str | None = None,
    run_type: str = "upload",
) -> SubmitResult:
    """Queue (or skip) bytes already in the store: the one decision behind the CLI, the API and
    presigned uploads. The stored copy is released when nothing will read it."""
    tenant_id = validate_tenant_id(tenant_id)
    result = SubmitResult(status=REJECTED, filename=filename, tenant_id=tenant_id)
    try:
        extension = check_document_name(filename)
        source_uri = keyed_uri(tenant_id, key) if key is not None else upload_uri(stored.sha256)
    except (UnsupportedFileType, ValueError):
        if stored.created:
            store.release(stored.path)
        raise
    result.sha256, result.size_bytes, result.source_uri = stored.sha256, stored.size, source_uri
    config = {
        "title": title or Path(filename).stem,
        "filename": filename,
        "extension": extension,
        "content_type": DOCUMENT_TYPES[extension],
        "size_bytes": stored.size,
        "sha256": stored.sha256,
        "pipeline_fingerprint": fingerprint,
        **({"key": key} if key is not None else {}),
    }
    try:
        release_stored_copy = _record_submission(db, tenant_id, stored, source_uri, config, result, run_type)
    except BaseException:
        if stored.created:  # nothing refers to bytes this call brought in
            store.release(stored.path)
        raise
    if release_stored_copy:
        store.release(stored.path)
    return result


def _record_submission(db, tenant_id, stored, source_uri, config, result, run_type) -> bool:
    """The database half of a submit; returns whether the stored copy is no longer needed."""
    fingerprint = config["pipeline_fingerprint"]
    release_stored_copy = False
    with db.transaction() as conn:
        ensure_tenant(conn, tenant_id)
        doc = conn.execute(
            """INSERT INTO documents (tenant_id, source_uri, title) VALUES (%s, %s, %s)
               ON CONFLICT (tenant_id, source_uri) DO UPDATE SET updated_at = now()
               RETURNING doc_id""",
            (tenant_id, source_uri, config["title"]),
        ).fetchone()
        doc_id = doc["doc_id"]
        result.doc_id = doc_id
        # Serialise submits of one document: the checks below and the insert are one decision.
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"doc:{doc_id}",))
        active = conn.execute(
            """SELECT version_id FROM document_versions
                WHERE tenant_id = %s AND doc_id = %s AND is_active
                  AND content_hash = %s AND pipeline_fingerprint = %s""",
            (tenant_id, doc_id, stored.sha256, fingerprint),
        ).fetchone()
        in_flight = conn.execute(
            """SELECT run_id FROM ingestion_runs
                WHERE tenant_id = %s AND doc_id = %s AND content_hash = %s AND status IN ('queued', 'running')
                ORDER BY run_id LIMIT 1""",
            (tenant_id, doc_id, stored.sha256),
        ).fetchone()
        if active is not None:
            result.status = SKIPPED
            result.reason = "identical content is already the active version"
            # The same bytes may wait under another document (a keyed and an unkeyed upload share them).
            release_stored_copy = conn.execute(
                """SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN ('queued', 'running') LIMIT 1""",
                (str(stored.path),),
            ).fetchone() is None
        elif in_flight is not None:
            result.status = DUPLICATE
            result.reason = "identical content is already queued"
            result.run_id = in_flight["run_id"]
        else:
            result.run_id = runs.create_queued_run(
                conn,
                tenant_id=tenant_id,
                doc_id=doc_id,
                source_uri=source_uri,
                raw_path=str(stored.path),
                content_hash=stored.sha256,
                size_bytes=stored.size,
                config=config,
                run_type=run_type,
            )
            result.status = QUEUED
    return release_stored_copy
