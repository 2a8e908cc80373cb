"""The document pipeline's steps over one batch (partition), as plain functions the assets call.

Each step works file by file: a failure marks only that file's ledger row failed (with a reason a
person can act on) and the step goes on with the others. State between steps lives in the staging
tables, so a retried step resumes instead of starting over, and each step ends with a heartbeat.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.hashing import file_sha256
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore
from ingestion_pipeline.documents import runs, staging
from ingestion_pipeline.documents.chunking import chunk_elements, effective_budgets
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.extraction import extract
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.fingerprint import pipeline_fingerprint
from ingestion_pipeline.documents.promotion import PromotionError, promote_document_version

_log = logging.getLogger("ingestion_pipeline.documents")

# endpoint URL (None: the default) -> a boto3 S3 client
S3ClientFor = Callable[[str | None], Any]

# Errors whose message is already what a person needs; anything else is prefixed with its type.
_EXPECTED_ERRORS = (ExtractionError, PromotionError)


@dataclass
class FileOutcome:
    run_id: int
    filename: str
    status: str  # running (step done, more to come) | succeeded | skipped | failed
    detail: str = ""
    stats: dict = field(default_factory=dict)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, _EXPECTED_ERRORS):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def _ms(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


class DocumentPipeline:
    """The steps of one batch, with what they need handed in: database, raw store, embedder, S3."""

    def __init__(
        self, db: Database, store: LocalUploadStore, embedder: Embedder, settings: Settings,
        s3_client_for: S3ClientFor | None = None,
    ) -> None:
        self.db = db
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.model = embedder.info
        self._s3_client_for = s3_client_for
        if self.model.dimension != 384:
            raise ValueError(
                f"embedding model has dimension {self.model.dimension}, the schema stores vector(384); "
                "add a migration for another dimension"
            )

    # -- shared ---------------------------------------------------------------------------------
    @property
    def fingerprint(self) -> str:
        return pipeline_fingerprint(self.model, self.settings.chunk.target_tokens, self.settings.chunk.max_tokens)

    def _for_each(
        self, partition_key: str, dagster_run_id: str, work: Callable[[dict], FileOutcome | None]
    ) -> list[FileOutcome]:
        outcomes: list[FileOutcome] = []
        with self.db.connection() as conn:
            rows = runs.active_rows(conn, partition_key, dagster_run_id)
        for row in rows:
            filename = (row["config"] or {}).get("filename", row["source_uri"])
            try:
                outcome = work(row)
            except Exception as exc:  # one bad file never fails the batch
                reason = _describe(exc)
                _log.warning("file %s (run %s) failed: %s", filename, row["run_id"], reason)
                with self.db.transaction() as conn:
                    runs.mark_failed(conn, row["run_id"], reason, dagster_run_id=dagster_run_id)
                outcome = FileOutcome(row["run_id"], filename, runs.FAILED, reason)
            if outcome is not None:
                outcomes.append(outcome)
        return outcomes

    # -- step 1: raw_documents ----------------------------------------------------------------------
    def claim_batch(self, partition_key: str, dagster_run_id: str) -> list[FileOutcome]:
        """Claim the batch's rows, fetch S3 objects, verify each stored file, skip what is already current."""
        with self.db.transaction() as conn:
            rows = runs.claim_partition(conn, partition_key, dagster_run_id)
        already = [
            FileOutcome(r["run_id"], (r["config"] or {}).get("filename", ""), runs.SUCCEEDED, "already done")
            for r in rows if r["status"] == runs.SUCCEEDED
        ]
        return already + self._for_each(partition_key, dagster_run_id, self._verify_raw)

    def _verify_raw(self, row: dict) -> FileOutcome:
        start = time.perf_counter()
        filename = (row["config"] or {}).get("filename", "")
        if row.get("source_id") is not None and not (row["raw_path"] and Path(row["raw_path"]).is_file()):
            row = self._fetch_s3_object(row)
        raw = Path(row["raw_path"] or "")
        if not raw.is_file():
            raise ExtractionError(f"stored upload is missing ({raw}); submit the file again")
        if file_sha256(raw) != row["content_hash"]:
            raise ExtractionError("stored upload does not match its SHA-256 (corrupted in storage); submit again")
        with self.db.transaction() as conn:
            current = conn.execute(
                """SELECT version_id FROM document_versions
                    WHERE tenant_id = %s AND doc_id = %s AND is_active AND content_hash = %s
                      AND pipeline_fingerprint = %s""",
                (row["tenant_id"], row["doc_id"], row["content_hash"], self.fingerprint),
            ).fetchone()
            if current is not None:
                runs.mark_succeeded(conn, row["run_id"], {"skipped": "already the active version",
                                                            "version_id": current["version_id"]})
                if row.get("source_id") is not None:  # new ETag, same bytes: the object is current
                    conn.execute(
                        """UPDATE source_objects SET status = 'active', updated_at = now()
                            WHERE source_id = %s AND key = %s AND last_run_id = %s""",
                        (row["source_id"], row["source_key"], row["run_id"]),
                    )
                staging.discard(conn, row["run_id"])
                outcome = FileOutcome(row["run_id"], filename, "skipped", "already the active version")
            else:
                staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
                runs.heartbeat(conn, row["run_id"], {"timings_ms": {"verify": _ms(start)}})
                return FileOutcome(row["run_id"], filename, runs.RUNNING, "verified")
        self._release_raw(row)
        return outcome

    def _fetch_s3_object(self, row: dict) -> dict:
        """Stream the listed object version into the raw store, hashing on the way; record hash and size."""
        if self._s3_client_for is None:
            raise ExtractionError("no S3 connection configured for this run")
        with self.db.connection() as conn:
            source = conn.execute(
                "SELECT bucket, endpoint_url FROM ingestion_sources WHERE source_id = %s", (row["source_id"],)
            ).fetchone()
        client = self._s3_client_for(source["endpoint_url"])
        location = f"s3://{source['bucket']}/{row['source_key']}"
        try:
            response = client.get_object(Bucket=source["bucket"], Key=row["source_key"], IfMatch=row["source_etag"])
        except Exception as exc:  # botocore ClientError carries the S3 error code
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404"):
                raise ExtractionError(f"{location} no longer exists (deleted after it was listed)") from exc
            if code in ("PreconditionFailed", "412"):
                raise ExtractionError(
                    f"{location} changed after it was listed (ETag {row['source_etag']}); the next sync queues it"
                ) from exc
            raise ExtractionError(f"cannot read {location}: {exc}") from exc
        body = response["Body"]
        try:
            stored = self.store.put(row["tenant_id"], body, max_bytes=self.settings.upload.max_bytes)
        finally:
            body.close()
        with self.db.transaction() as conn:
            return conn.execute(
                """UPDATE ingestion_runs
                      SET raw_path = %s, content_hash = %s, size_bytes = %s,
                          config = config || jsonb_build_object('sha256', %s::text, 'size_bytes', %s::bigint),
                          updated_at = now()
                    WHERE run_id = %s RETURNING *""",
                (str(stored.path), stored.sha256, stored.size, stored.sha256, stored.size, row["run_id"]),
            ).fetchone()

    # -- step 2: document_elements ------------------------------------------------------------------
    def extract_batch(self, partition_key: str, dagster_run_id: str) -> list[FileOutcome]:
        return self._for_each(partition_key, dagster_run_id, self._extract_one)

    def _extract_one(self, row: dict) -> FileOutcome:
        config = row["config"] or {}
        filename = config.get("filename", "")
        with self.db.connection() as conn:
            state = staging.staging_state(conn, row["run_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome(row["run_id"], filename, runs.RUNNING, "elements already staged")
        start = time.perf_counter()
        document = extract(Path(row["raw_path"]), config.get("extension") or Path(filename).suffix)
        elapsed = _ms(start)
        stats = {"elements": len(document.elements), "pages": document.page_count, "notes": document.notes}
        with self.db.transaction() as conn:
            staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
            staging.write_elements(conn, row["run_id"], document.elements, document.page_count, stats)
            runs.heartbeat(conn, row["run_id"], {**stats, "timings_ms": _timings(row, extract=elapsed)})
        return FileOutcome(row["run_id"], filename, runs.RUNNING, f"{len(document.elements)} elements", stats)

    # -- step 3: document_chunks ----------------------------------------------------------------------
    def chunk_batch(self, partition_key: str, dagster_run_id: str) -> list[FileOutcome]:
        return self._for_each(partition_key, dagster_run_id, self._chunk_one)

    def _chunk_one(self, row: dict) -> FileOutcome:
        filename = (row["config"] or {}).get("filename", "")
        with self.db.connection() as conn:
            state = staging.staging_state(conn, row["run_id"])
            if state is None or not state["elements_done"]:
                raise ExtractionError("extraction did not complete for this file")
            if state["chunks_done"]:
                return FileOutcome(row["run_id"], filename, runs.RUNNING, "chunks already staged")
            elements = staging.read_elements(conn, row["run_id"])
        start = time.perf_counter()
        target, hard_max = effective_budgets(
            self.settings.chunk.target_tokens, self.settings.chunk.max_tokens, self.embedder.token_counter
        )
        chunks = chunk_elements(elements, self.embedder.token_counter, target=target, hard_max=hard_max)
        if not chunks:
            raise ExtractionError("the file produced no text chunks")
        elapsed = _ms(start)
        stats = {"chunks": len(chunks), "tokens": sum(c.token_count for c in chunks), "max_chunk_tokens":
                 max(c.token_count for c in chunks)}
        with self.db.transaction() as conn:
            staging.write_chunks(conn, row["run_id"], chunks, stats)
            runs.heartbeat(conn, row["run_id"], {**stats, "timings_ms": _timings(row, chunk=elapsed)})
        return FileOutcome(row["run_id"], filename, runs.RUNNING, f"{len(chunks)} chunks", stats)

    # -- step 4: chunk_embeddings ----------------------------------------------------------------------
    def embed_batch(self, partition_key: str, dagster_run_id: str) -> list[FileOutcome]:
        return self._for_each(partition_key, dagster_run_id, self._embed_one)

    def _embed_one(self, row: dict) -> FileOutcome:
        filename = (row["config"] or {}).get("filename", "")
        run_id = row["run_id"]
        with self.db.connection() as conn:
            state = staging.staging_state(conn, run_id)
            if state is None or not state["chunks_done"]:
                raise ExtractionError("chunking did not complete for this file")
            reused = staging.reuse_stored_embeddings(conn, run_id, row["tenant_id"], self.model.name)
        start = time.perf_counter()
        embedded = 0
        model_ms = 0
        batch = self.settings.embedding.batch_size * 16  # one committed unit: enough texts to sort by length
        while True:
            with self.db.transaction() as conn:
                pending = staging.chunks_missing_embeddings(conn, run_id, batch)
                if not pending:
                    break
                model_start = time.perf_counter()
                vectors = self.embedder.embed([p["text"] for p in pending])
                model_ms += _ms(model_start)
                staging.write_embeddings(conn, run_id, [p["ordinal"] for p in pending], vectors)
                runs.heartbeat(conn, run_id)
            embedded += len(pending)
        stats = {"embedded": embedded, "embeddings_reused": reused, "model_ms": model_ms}
        with self.db.transaction() as conn:
            staging.mark_embeddings_done(conn, run_id, stats)
            runs.heartbeat(conn, run_id, {**stats, "timings_ms": _timings(row, embed=_ms(start))})
        return FileOutcome(run_id, filename, runs.RUNNING, f"{embedded} embedded, {reused} reused", stats)

    # -- step 5: promoted_documents ----------------------------------------------------------------------
    def promote_batch(self, partition_key: str, dagster_run_id: str) -> list[FileOutcome]:
        return self._for_each(partition_key, dagster_run_id, self._promote_one)

    def _promote_one(self, row: dict) -> FileOutcome:
        filename = (row["config"] or {}).get("filename", "")
        with self.db.transaction() as conn:
            state = staging.staging_state(conn, row["run_id"])
            if state is None or not state["embeddings_done"]:
                raise PromotionError("embedding did not complete for this file")
            version = promote_document_version(
                conn, row, fingerprint=self.fingerprint, model=self.model.name,
                timings_ms=dict((row["stats"] or {}).get("timings_ms") or {}),
            )
        self._release_raw(row)
        return FileOutcome(
            row["run_id"], filename, runs.SUCCEEDED,
            f"version {version.version_number}: {version.chunk_count} chunks",
            {"version_id": version.version_id, "chunks": version.chunk_count, "tokens": version.token_count},
        )

    def _release_raw(self, row: dict) -> None:
        """Drop the stored upload once no unfinished ledger row needs it."""
        if not row.get("raw_path"):
            return
        with self.db.connection() as conn:
            waiting = conn.execute(
                """SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN ('queued', 'running')
                      AND run_id <> %s LIMIT 1""",
                (row["raw_path"], row["run_id"]),
            ).fetchone()
        if waiting is None:
            self.store.release(row["raw_path"])


def batch_report(conn, partition_key: str) -> list[FileOutcome]:
    """Every file of the batch with its final ledger outcome."""
    outcomes = []
    for r in runs.partition_rows(conn, partition_key):
        stats = r["stats"] or {}
        if r["status"] == runs.FAILED:
            detail = r["error"] or ""
        elif stats.get("skipped"):
            detail = f"skipped: {stats['skipped']}"
        elif r["status"] == runs.SUCCEEDED:
            detail = f"version {stats.get('version_number')}: {stats.get('chunks')} chunks"
        else:
            detail = r["status"]
        outcomes.append(FileOutcome(r["run_id"], (r["config"] or {}).get("filename", ""), r["status"], detail, stats))
    return outcomes


def _timings(row: dict, **new: int) -> dict:
    """Merge a step's milliseconds into what the ledger row already holds."""
    return {**((row.get("stats") or {}).get("timings_ms") or {}), **new}

