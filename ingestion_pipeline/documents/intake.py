"""Submitting uploaded files: stream to the store with SHA-256, then queue, skip or reject.

- The extension must be allow-listed and the size within the limit, or the file is rejected with a
  reason and leaves no row and no stored bytes.
- Identity is ``upload://sha256:<hex>``, or ``upload-key://<tenant>/<key>`` when the caller gives a
  stable key (a new upload under the key is a new version of that document); the document row is
  got-or-created with ON CONFLICT, so two concurrent submits of the same bytes share one document
  (and one queued ledger row).
- An identical re-upload whose active version has the same hash and pipeline fingerprint is
  ``skipped``: no ledger row, and the stored copy is removed.
- ``submit_uploads`` (the CLI's ``submit`` and ``ingest`` of many files) answers the unchanged files of the
  whole submit with one query before anything is stored; the rest go through ``submit_upload`` one by one.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psycopg

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.file_types import UnsupportedFileType, check_extension
from ingestion_pipeline.core.hashing import SizeLimitExceeded, stream_sha256
from ingestion_pipeline.core.tenants import ensure_tenant, validate_tenant_id
from ingestion_pipeline.core.upload_store import RefusedPath, StoredFile, UploadStore, open_submitted_file
from ingestion_pipeline.documents import file_ledger
from ingestion_pipeline.documents.formats import DOCUMENT_TYPES

QUEUED, SKIPPED, DUPLICATE, REJECTED = "queued", "skipped", "duplicate", "rejected"
ALREADY_ACTIVE = "identical content is already the active version"
# Files up to this size are hashed before anything is stored, so that an unchanged one costs no stored copy
# and no transaction of its own (an unchanged re-ingest submits every file again: benchmarks/ingest_corpus.py).
# A larger file is read once, while it is stored.
PRECHECK_MAX_BYTES = 16 * 1024 * 1024


@dataclass
class SubmitResult:
    status: str
    filename: str
    tenant_id: str
    reason: str | None = None
    file_id: int | None = None
    doc_id: int | None = None
    source_uri: str | None = None
    sha256: str | None = None
    size_bytes: int | None = None

    def as_dict(self) -> dict:
        """The result as the CLI and the API print it: ``file_id`` (first) is the file's ledger row; ``run_id``,
        its old name, is kept in its old place for scripts written before (deprecated)."""
        values = {("run_id" if k == "file_id" else k): v for k, v in asdict(self).items() if v is not None}
        return {"file_id": self.file_id, **values} if self.file_id is not None else values

    @classmethod
    def from_record(cls, record: dict) -> SubmitResult:
        """The inverse of ``as_dict`` (a stored result, with ``file_id`` or only its old name ``run_id``)."""
        names = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in names}
        if values.get("file_id") is None and record.get("run_id") is not None:
            values["file_id"] = record["run_id"]
        return cls(**values)


# Writes the caller's record of a submit's outcome in the submit's own transaction.
Recorder = Callable[[psycopg.Connection, SubmitResult], None]


def upload_uri(sha256: str) -> str:
    return f"upload://sha256:{sha256}"


KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$"  # and no ".." (a stable key of an uploaded document)
_KEY = re.compile(KEY_PATTERN)


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
    store: UploadStore,
    *,
    tenant_id: str,
    path: Path,
    fingerprint: str,
    max_bytes: int,
    title: str | None = None,
    follow_symlinks: bool = False,
    key: str | None = None,
    in_same_transaction: Recorder | None = None,
) -> SubmitResult:
    """Submit a file on disk (the CLI, a queue job). ``in_same_transaction`` writes the caller's own record of
    the outcome in the transaction that writes the ledger row (a queue job's row: see ``submit_stored``)."""
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
    except RefusedPath as exc:
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
                         title=title, key=key, in_same_transaction=in_same_transaction)


def submit_uploads(
    db: Database,
    store: UploadStore,
    *,
    tenant_id: str,
    paths: Iterable[Path],
    fingerprint: str,
    max_bytes: int,
    title: str | None = None,
    follow_symlinks: bool = False,
    keys: Sequence[str | None] | None = None,
) -> list[SubmitResult]:
    """Submit files on disk, in order, each with the outcome ``submit_upload`` gives it (``keys``: each
    file's document key, or None for identity by content).

    A file whose bytes are already its document's active version (same pipeline fingerprint) is
    ``skipped`` without being stored: those are found for the whole submit by one query. Skipping then is
    what the one-by-one path decides too (it checks the active version, not what is queued); the
    documents' ``updated_at`` is touched as it would be.
    """
    tenant_id = validate_tenant_id(tenant_id)
    paths = [Path(p) for p in paths]
    keys = list(keys) if keys is not None else [None] * len(paths)
    if len(keys) != len(paths):
        raise ValueError(f"{len(keys)} document keys for {len(paths)} files")
    for key in set(keys) - {None}:
        keyed_uri(tenant_id, key)  # a bad key is bad input: raises before anything is read or stored
    unchanged = _already_active(db, tenant_id, paths, keys, fingerprint, min(max_bytes, PRECHECK_MAX_BYTES),
                                follow_symlinks)
    return [unchanged.get(i) or submit_upload(db, store, tenant_id=tenant_id, path=path, fingerprint=fingerprint,
                                              max_bytes=max_bytes, title=title, follow_symlinks=follow_symlinks,
                                              key=key)
            for i, (path, key) in enumerate(zip(paths, keys, strict=True))]


def _already_active(db: Database, tenant_id: str, paths: list[Path], keys: list[str | None], fingerprint: str,
                    max_bytes: int, follow_symlinks: bool) -> dict[int, SubmitResult]:
    """The ``skipped`` results of the files (by position) whose content is their document's active version.

    A file that cannot be read or checked here is left to ``submit_upload``, which gives its reason.
    """
    candidates: list[tuple[int, str, str, int]] = []  # position, source_uri, sha256, size
    for i, (path, key) in enumerate(zip(paths, keys, strict=True)):
        try:
            check_document_name(path.name)
            with open_submitted_file(path, follow_symlinks=follow_symlinks) as stream:
                info = os.fstat(stream.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
                    continue
                sha, size = stream_sha256(stream, max_bytes=max_bytes)
        except (UnsupportedFileType, RefusedPath, SizeLimitExceeded, OSError):
            continue
        candidates.append((i, keyed_uri(tenant_id, key) if key is not None else upload_uri(sha), sha, size))
    if not candidates:
        return {}
    with db.transaction() as conn:
        found = conn.execute(
            """SELECT c.n, d.doc_id
                 FROM unnest(%s::int[], %s::text[], %s::text[]) AS c(n, source_uri, sha)
                 JOIN documents d ON d.tenant_id = %s AND d.source_uri = c.source_uri
                 JOIN document_versions v ON v.tenant_id = d.tenant_id AND v.doc_id = d.doc_id AND v.is_active
                                         AND v.content_hash = c.sha AND v.pipeline_fingerprint = %s""",
            ([c[0] for c in candidates], [c[1] for c in candidates], [c[2] for c in candidates], tenant_id,
             fingerprint),
        ).fetchall()
        doc_of = {row["n"]: row["doc_id"] for row in found}
        if doc_of:
            conn.execute("UPDATE documents SET updated_at = now() WHERE doc_id = ANY(%s)",
                         (sorted(set(doc_of.values())),))
    return {i: SubmitResult(status=SKIPPED, filename=paths[i].name, tenant_id=tenant_id, reason=ALREADY_ACTIVE,
                            doc_id=doc_of[i], source_uri=source_uri, sha256=sha, size_bytes=size)
            for i, source_uri, sha, size in candidates if i in doc_of}


def submit_stored(
    db: Database,
    store: UploadStore,
    stored: StoredFile,
    *,
    tenant_id: str,
    filename: str,
    fingerprint: str,
    title: str | None = None,
    key: str | None = None,
    run_type: str = "upload",
    in_same_transaction: Recorder | None = None,
) -> SubmitResult:
    """Queue (or skip) bytes already in the store: the one decision behind the CLI, the API and
    presigned uploads. The stored copy is released when nothing will read it.

    ``in_same_transaction(conn, result)`` runs after the decision, before the commit: a queue intake writes
    its job's row there, so a job is accepted exactly when its ledger row is."""
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
        release_stored_copy = _record_submission(db, tenant_id, stored, source_uri, config, result, run_type,
                                                 in_same_transaction)
    except BaseException:
        if stored.created:  # nothing refers to bytes this call brought in
            store.release(stored.path)
        raise
    if release_stored_copy:
        store.release(stored.path)
    return result


def _record_submission(db, tenant_id, stored, source_uri, config, result, run_type, in_same_transaction) -> bool:
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
            """SELECT file_id FROM ingestion_runs
                WHERE tenant_id = %s AND doc_id = %s AND content_hash = %s AND status IN ('queued', 'running')
                ORDER BY file_id LIMIT 1""",
            (tenant_id, doc_id, stored.sha256),
        ).fetchone()
        if active is not None:
            result.status = SKIPPED
            result.reason = ALREADY_ACTIVE
            # The same bytes may wait under another document (a keyed and an unkeyed upload share them).
            release_stored_copy = conn.execute(
                """SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN ('queued', 'running') LIMIT 1""",
                (str(stored.path),),
            ).fetchone() is None
        elif in_flight is not None:
            result.status = DUPLICATE
            result.reason = "identical content is already queued"
            result.file_id = in_flight["file_id"]
        else:
            result.file_id = file_ledger.create_queued_file(
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
        if in_same_transaction is not None:
            in_same_transaction(conn, result)
    return release_stored_copy
