"""The document pipeline's steps over one batch (partition), as plain functions the assets call.

Each step works file by file on the rows its worker holds (``core.ledger``): every write first holds
the row, so a worker that lost a file (lease taken over, canceled, paused) stops touching it. A file
that fails is failed (permanent), retried later with backoff (transient: S3 throttling, a worker out
of memory …) or dead-lettered, and the step goes on with the others; an error of the database itself
is the step's, and the step is retried. State between steps lives in the staging tables, so any
retry — Dagster's re-execution, a relaunch, a replay — resumes instead of starting over.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import FailureInfo, classify
from ingestion_pipeline.core.hashing import file_sha256
from ingestion_pipeline.core.ledger import LeaseLost, Worker
from ingestion_pipeline.core.progress import Progress, Sink
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import LocalUploadStore, StoredFile
from ingestion_pipeline.documents import reindex, runs, staging
from ingestion_pipeline.documents.chunking import Chunk, chunk_elements, effective_budgets
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION, extract
from ingestion_pipeline.documents.extraction.elements import Element
from ingestion_pipeline.documents.extraction.errors import ExtractionError
from ingestion_pipeline.documents.fingerprint import fingerprint_for
from ingestion_pipeline.documents.promotion import (
    PromotionError,
    Superseded,
    promote_document_version,
    superseded_reason,
)
from ingestion_pipeline.documents.vector_index import ensure_vector_index

_log = logging.getLogger("ingestion_pipeline.documents")

# endpoint URL (None: the default) -> a boto3 S3 client
S3ClientFor = Callable[[str | None], Any]
# (path, extension) -> ExtractedDocument; runs use a bounded worker process (extraction/isolation.py)
Extractor = Callable[[Path, str], Any]

# S3 objects downloaded at once by the fetch step (boto3 clients are thread-safe)
_FETCH_CONCURRENCY = 4

# Errors of the database itself: not a file's fault, so the step (not the file) is retried.
_STEP_ERRORS = ("db_unavailable", "db_conflict")

T = TypeVar("T")

# files the chunk step reads, chunks and writes together (one transaction of five statements a group), and
# the bytes of their uploads a group holds at most (its elements are in memory at once; a larger file goes
# alone; a re-index, whose upload is gone, counts as 1 MB)
CHUNK_GROUP_FILES = 25
CHUNK_GROUP_BYTES = 16 << 20

# outcome statuses besides the ledger's: the step is done and more follow; the file was handed back;
# nothing to do (identical content already active / the version is already at the current fingerprint)
STEP_DONE, RETRY, LOST, RELEASED, SKIPPED, CURRENT = "running", "retry", "lost", "released", "skipped", "current"


@dataclass
class FileOutcome:
    run_id: int
    filename: str
    status: str  # running (step done, more to come) | succeeded | skipped | failed | retry | dead_letter | lost …
    detail: str = ""
    stats: dict = field(default_factory=dict)


@dataclass
class _Embedding:
    """A file in the embed step: its ledger row and the figures it will record."""

    row: dict
    stats: dict


def _chunk_groups(rows: list[dict]) -> list[list[dict]]:
    """``rows`` in order, cut into groups of at most CHUNK_GROUP_FILES files and CHUNK_GROUP_BYTES."""
    groups: list[list[dict]] = []
    size = 0
    for row in rows:
        n = row.get("size_bytes") or (1 << 20)
        if not groups or len(groups[-1]) == CHUNK_GROUP_FILES or size + n > CHUNK_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(row)
        size += n
    return groups


def _in_pool(tasks: list[Callable[[], T]], lanes: int, *, on_done: Callable[[T], None]) -> list[T]:
    """Run ``tasks`` on up to ``lanes`` threads ("file-lane"), ``on_done`` for each result as it finishes (on
    the calling thread); results in the tasks' order. An error stops the lanes: tasks not begun are cancelled
    and the error is raised."""
    if min(lanes, len(tasks)) <= 1:
        results = []
        for task in tasks:
            results.append(task())
            on_done(results[-1])
        return results
    results_at: dict[int, T] = {}
    with ThreadPoolExecutor(lanes, thread_name_prefix="file-lane") as pool:
        futures = {pool.submit(task): i for i, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                results_at[futures[future]] = future.result()
                on_done(results_at[futures[future]])
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return [results_at[i] for i in range(len(tasks))]


def _ms(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


def _filename(row: dict) -> str:
    return (row.get("config") or {}).get("filename") or row["source_uri"]


class DocumentPipeline:
    """The steps of one batch, with what they need handed in: database, raw store, embedder, S3, and
    the worker (owner, Dagster run, lease) on whose behalf it claims and writes."""

    def __init__(
        self, db: Database, store: LocalUploadStore, embedder: Embedder, settings: Settings,
        s3_client_for: S3ClientFor | None = None, *, worker: Worker | None = None, extractor: Extractor | None = None,
        progress_log: Sink | None = None,
    ) -> None:
        self.db = db
        self._progress_sinks = [progress_log] if progress_log is not None else []
        self._progress = Progress("idle", 0)
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.model = embedder.info
        self.worker = worker
        self._s3_client_for = s3_client_for
        self._downloads: dict[int, Future[StoredFile]] = {}  # run_id -> S3 download started ahead
        self._extract = extractor or (lambda path, extension: extract(path, extension, settings.limits))
        self._extract_lock = threading.Lock()

    def close(self) -> None:
        """Stop the extraction worker, if this pipeline started one."""
        close = getattr(self._extract, "close", None)
        if close is not None:
            close()

    # -- shared ---------------------------------------------------------------------------------
    @property
    def _lanes(self) -> int:
        """Files a step works on at once (``INGESTION_BATCH_LANES``, 2): much of a file's time is the
        server's (a promotion's HNSW and text-index inserts) or the extraction worker's, so a second lane
        keeps the second core busy (compare_peers.py)."""
        return self.settings.batch.lanes

    @property
    def fingerprint_for(self) -> reindex.FingerprintFor:
        """extractor version of a file's elements -> the fingerprint this pipeline gives them."""
        return fingerprint_for(self.model, self.settings.chunk.target_tokens, self.settings.chunk.max_tokens)

    @property
    def fingerprint(self) -> str:
        """The fingerprint of a file extracted now."""
        return self.fingerprint_for(EXTRACTOR_VERSION)

    @property
    def owner(self) -> str:
        if self.worker is None:
            raise RuntimeError("this pipeline has no worker: it can only be used to read")
        return self.worker.owner

    def _for_each(self, partition_key: str, work: Callable[[dict], FileOutcome], step: str, *,
                  lanes: int = 1) -> list[FileOutcome]:
        """Run ``work`` on every file of the partition this worker holds; one file's failure is its own.
        Progress (files, chunks, rate, ETA) is reported as it goes.

        ``lanes`` > 1: that many files are worked on at once, each in its own transaction on its own
        connection (for work whose time is the server's: one lane leaves a core idle). The files of one
        document stay in one lane, in their order, so its later version is still promoted last.
        """
        outcomes = self._release_paused(partition_key)
        with self.db.connection() as conn:
            rows = runs.held_rows(conn, partition_key, self.owner)
        self._progress = Progress(step, len(rows), sinks=self._progress_sinks)
        outcomes += self._in_lanes(rows, work, lanes)
        if rows:
            self._progress.finish()
        return outcomes

    def _in_lanes(self, rows: list[dict], work: Callable[[dict], FileOutcome | None],
                  lanes: int) -> list[FileOutcome | None]:
        """``_guarded(row, work)`` for every row, ``lanes`` documents at a time; outcomes in the rows' order.

        Progress is advanced here, on the step's thread. An error of the step (the database) stops the
        lanes: files not begun stay held for the step's retry, as in one lane. There are never more lanes
        than pooled connections (a lane waiting for one could time out).
        """
        lanes = min(lanes, self.db.max_size)
        if lanes <= 1 or len(rows) <= 1:
            outcomes = []
            for row in rows:
                outcomes.append(self._guarded(row, work))
                self._progress.advance(files=1)
            return outcomes
        by_document: dict[Any, list[dict]] = {}
        for row in rows:
            by_document.setdefault(row.get("doc_id", row["run_id"]), []).append(row)

        def document_files(files: list[dict]) -> list[tuple[int, FileOutcome | None]]:
            return [(row["run_id"], self._guarded(row, work)) for row in files]

        finished = _in_pool([functools.partial(document_files, files) for files in by_document.values()], lanes,
                            on_done=lambda done: self._progress.advance(files=len(done)))
        by_run = dict(pair for document in finished for pair in document)
        return [by_run[row["run_id"]] for row in rows]

    def _guarded(self, row: dict, work: Callable[[dict], FileOutcome | None]) -> FileOutcome | None:
        """``work(row)``, with a file's failure (or lost claim) turned into that file's outcome."""
        try:
            return work(row)
        except LeaseLost as exc:
            _log.warning("file %s (run %s): %s", _filename(row), row["run_id"], exc)
            return FileOutcome(row["run_id"], _filename(row), LOST, str(exc))
        except Exception as exc:
            failure = classify(exc)
            if failure.code in _STEP_ERRORS:
                raise  # the database, not the file: the step is retried, the file stays held
            return self._fail(row, failure)

    def _fail(self, row: dict, failure: FailureInfo) -> FileOutcome:
        _log.warning("file %s (run %s) failed: %s: %s", _filename(row), row["run_id"], failure.code, failure.message)
        try:
            with self.db.transaction() as conn:
                failed = runs.mark_failed(conn, row["run_id"], self.owner, failure, self.settings.reliability)
        except LeaseLost as exc:
            return FileOutcome(row["run_id"], _filename(row), LOST, str(exc))
        if failed["status"] == runs.QUEUED:
            detail = f"retry at {failed['next_attempt_at']:%H:%M:%S} ({failure.code}): {failure.message}"
            return FileOutcome(row["run_id"], _filename(row), RETRY, detail)
        return FileOutcome(row["run_id"], _filename(row), failed["status"], failure.message)

    def _release_paused(self, partition_key: str) -> list[FileOutcome]:
        """At a step boundary, files of a paused tenant or source go back to the queue (staging kept)."""
        with self.db.transaction() as conn:
            paused = conn.execute(
                """SELECT r.run_id FROM ingestion_runs r
                     JOIN tenants t ON t.tenant_id = r.tenant_id
                     LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
                    WHERE r.partition_key = %s AND r.owner = %s AND r.status = 'running'
                      AND (t.paused OR coalesce(s.paused, false))""",
                (partition_key, self.owner),
            ).fetchall()
            if not paused:
                return []
            released = ledger.release(conn, ledger.DOCUMENT_RUNS, owner=self.owner, reason="paused",
                                      event="paused", item_ids=[r["run_id"] for r in paused])
        return [FileOutcome(r["run_id"], _filename(r), RELEASED, "paused: back in the queue") for r in released]

    # -- step 1: raw_documents ----------------------------------------------------------------------
    def claim_batch(self, partition_key: str, *, replay_finished: bool = False) -> list[FileOutcome]:
        """Claim the batch's files, fetch S3 objects, verify each stored file, skip what is already current.

        ``replay_finished``: a person re-materialised the batch, so failed and dead-lettered files are
        tried again too (automatic runs leave them to ``retry``).
        """
        assert self.worker is not None
        with self.db.transaction() as conn:
            if replay_finished:  # a person's backfill re-indexes the batch's stale versions
                reindex.queue_stale_in_partition(conn, partition_key, self.fingerprint_for)
            claimed = {r["run_id"] for r in runs.claim(conn, self.worker, partition_key,
                                                       replay_finished=replay_finished)}
            others = [r for r in runs.partition_rows(conn, partition_key) if r["run_id"] not in claimed]
            done = [r["doc_id"] for r in others if r["status"] == runs.SUCCEEDED]
            active = {v["doc_id"]: v for v in conn.execute(  # one query for the batch, not one per file
                """SELECT doc_id, version_number, pipeline_fingerprint FROM document_versions
                    WHERE doc_id = ANY(%s) AND is_active""", (done,)).fetchall()} if done else {}
        with ThreadPoolExecutor(_FETCH_CONCURRENCY, thread_name_prefix="s3-fetch") as pool:
            self._prefetch_s3_objects(partition_key, pool)
            try:
                outcomes = self._for_each(partition_key, self._verify_raw, "fetch")
            finally:
                self._discard_unused_downloads()
        if any(o.status == STEP_DONE for o in outcomes):
            self.embedder.warm_up()  # files go on to be embedded: the model loads while they are extracted
        return [self._not_claimed(r, active.get(r["doc_id"])) for r in others] + outcomes

    def _not_claimed(self, row: dict, active: dict | None) -> FileOutcome:
        """Why a file of the batch is not this run's to work on (``active``: its document's active version)."""
        status = row["status"]
        if status == runs.SUCCEEDED:
            if active is not None and active["pipeline_fingerprint"] == self.fingerprint:
                return FileOutcome(row["run_id"], _filename(row), CURRENT,
                                   f"version {active['version_number']} is current")
            detail = "already done" if active is not None else "already done; the document is no longer active"
        elif status == runs.RUNNING:
            detail = f"held by run {row['owner']} (lease until {row['lease_expires_at']:%H:%M:%S})"
        elif status == runs.QUEUED:
            detail = f"waiting: next attempt at {row['next_attempt_at']:%H:%M:%S}"
            with self.db.connection() as conn:
                paused = conn.execute(
                    """SELECT t.paused OR coalesce(s.paused, false) AS paused FROM tenants t
                         LEFT JOIN ingestion_sources s ON s.source_id = %s WHERE t.tenant_id = %s""",
                    (row["source_id"], row["tenant_id"]),
                ).fetchone()
            if paused and paused["paused"]:
                detail = "paused"
        elif status == runs.CANCELED:
            detail = f"canceled by {row['canceled_by']}"
        else:
            detail = row["error"] or status
        return FileOutcome(row["run_id"], _filename(row), status, detail)

    def _verify_raw(self, row: dict) -> FileOutcome:
        start = time.perf_counter()
        if row["run_type"] == reindex.REINDEX and (row["config"] or {}).get("from") != "s3":
            return self._stage_stored_elements(row, start)
        if row.get("source_id") is not None and not (row["raw_path"] and Path(row["raw_path"]).is_file()):
            row = self._fetch_s3_object(row)
        raw = Path(row["raw_path"] or "")
        if not raw.is_file():
            raise ExtractionError(f"stored upload is missing ({raw}); submit the file again", code="raw_missing")
        if file_sha256(raw) != row["content_hash"]:
            raise ExtractionError("stored upload does not match its SHA-256 (corrupted in storage); submit again",
                                  code="raw_checksum_mismatch")
        with self.db.transaction() as conn:
            runs.hold(conn, row["run_id"], self.owner)
            current = conn.execute(
                """SELECT version_id FROM document_versions
                    WHERE tenant_id = %s AND doc_id = %s AND is_active AND content_hash = %s
                      AND pipeline_fingerprint = %s""",
                (row["tenant_id"], row["doc_id"], row["content_hash"], self.fingerprint),
            ).fetchone()
            if current is None:
                staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
                runs.heartbeat(conn, row["run_id"], self.owner, {"timings_ms": {"verify": _ms(start)}})
                return FileOutcome(row["run_id"], _filename(row), STEP_DONE, "verified")
            runs.mark_succeeded(conn, row["run_id"], self.owner,
                                {"skipped": "already the active version", "version_id": current["version_id"]})
            if row.get("source_id") is not None:  # new ETag, same bytes: the object is current
                conn.execute(
                    """UPDATE source_objects SET status = 'active', updated_at = now()
                        WHERE source_id = %s AND key = %s AND last_run_id = %s""",
                    (row["source_id"], row["source_key"], row["run_id"]),
                )
            staging.discard(conn, row["run_id"])
        self._release_raw(row)
        return FileOutcome(row["run_id"], _filename(row), SKIPPED, "already the active version")

    def _stage_stored_elements(self, row: dict, start: float) -> FileOutcome:
        """A re-index starts from the elements stored with the version (the extract step then has
        nothing to do); unless the version is no longer active, or already current."""
        config = row["config"] or {}
        with self.db.transaction() as conn:
            runs.hold(conn, row["run_id"], self.owner)
            version = conn.execute(
                """SELECT version_id, version_number, is_active, pipeline_fingerprint, page_count, extractor_version
                     FROM document_versions WHERE version_id = %s""", (row["reindex_of_version_id"],)).fetchone()
            skipped = outcome = None
            if not version["is_active"]:
                skipped, outcome = superseded_reason(conn, row["doc_id"], version["version_number"]), SKIPPED
            elif (version["pipeline_fingerprint"] == self.fingerprint_for(version["extractor_version"])
                  and not config.get("force")):
                skipped, outcome = f"version {version['version_number']} is current", CURRENT
            if skipped is not None:
                runs.mark_succeeded(conn, row["run_id"], self.owner, {"skipped": skipped})
                staging.discard(conn, row["run_id"])
                return FileOutcome(row["run_id"], _filename(row), outcome, skipped)
            staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
            n = staging.stage_version_elements(conn, row["run_id"], version["version_id"], version["page_count"])
            if n == 0:
                raise ExtractionError(f"version {version['version_number']} has no stored elements; submit the "
                                      "file again to re-index it", code="reindex_needs_file")
            runs.heartbeat(conn, row["run_id"], self.owner, {"elements": n, "timings_ms": {"verify": _ms(start)}})
        return FileOutcome(row["run_id"], _filename(row), STEP_DONE,
                           f"re-indexing version {version['version_number']} from {n} stored elements")

    def _prefetch_s3_objects(self, partition_key: str, pool: ThreadPoolExecutor) -> None:
        """Start downloading the batch's S3 objects, a few at a time, while the files before them are
        verified; each file's download (or its error) is taken up by its own turn in ``_verify_raw``."""
        with self.db.connection() as conn:
            rows = runs.held_rows(conn, partition_key, self.owner)
        self._downloads = {
            r["run_id"]: pool.submit(self._download_s3_object, r) for r in rows
            if r.get("source_id") is not None and not (r["raw_path"] and Path(r["raw_path"]).is_file())
            and not (r["run_type"] == reindex.REINDEX and (r["config"] or {}).get("from") != "s3")
        }

    def _discard_unused_downloads(self) -> None:
        """Objects downloaded for files that did not get their turn (paused, or the step failed) leave the
        store, unless a waiting ledger row names the same bytes."""
        downloads, self._downloads = self._downloads, {}
        for download in downloads.values():
            try:
                stored = download.result()
            except Exception:  # noqa: BLE001 - the file's turn did not come: its error is nobody's to report
                continue
            with self.db.connection() as conn:
                needed = conn.execute("SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN "
                                      "('queued', 'running') LIMIT 1", (str(stored.path),)).fetchone()
            if stored.created and needed is None:
                self.store.release(stored.path)

    def _fetch_s3_object(self, row: dict) -> dict:
        """The listed object version in the raw store (downloaded ahead, or now); its hash and size recorded."""
        download = self._downloads.pop(row["run_id"], None)
        stored = download.result() if download is not None else self._download_s3_object(row)
        with self.db.transaction() as conn:
            return runs.record_fetched_object(conn, row["run_id"], self.owner, raw_path=str(stored.path),
                                              sha256=stored.sha256, size=stored.size)

    def _download_s3_object(self, row: dict) -> StoredFile:
        """Stream the listed object version into the raw store, hashing on the way."""
        if self._s3_client_for is None:
            raise ExtractionError("no S3 connection configured for this run", code="s3_not_configured")
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
                raise ExtractionError(f"{location} no longer exists (deleted after it was listed)",
                                      code="s3_object_deleted") from exc
            if code in ("PreconditionFailed", "412"):
                raise ExtractionError(
                    f"{location} changed after it was listed (ETag {row['source_etag']}); the next sync queues it",
                    code="s3_precondition_failed", suggestion="nothing to do: the next sync queues the new version",
                ) from exc
            raise  # classified: throttling, 5xx and timeouts are retried with backoff
        body = response["Body"]
        try:
            return self.store.put(row["tenant_id"], body, max_bytes=self.settings.upload.max_bytes)
        finally:
            body.close()

    # -- step 2: document_elements ------------------------------------------------------------------
    def extract_batch(self, partition_key: str) -> list[FileOutcome]:
        return self._for_each(partition_key, self._extract_one, "extract", lanes=self._lanes)

    def _extract_one(self, row: dict) -> FileOutcome:
        config = row["config"] or {}
        with self.db.connection() as conn:
            state = staging.staging_state(conn, row["run_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome(row["run_id"], _filename(row), STEP_DONE, "elements already staged")
        start = time.perf_counter()
        failpoint("extract.file")
        with self._extract_lock:  # one extraction worker: the other lane writes a file's elements meanwhile
            document = self._extract(Path(row["raw_path"]), config.get("extension") or Path(_filename(row)).suffix)
        elapsed = _ms(start)
        stats = {"elements": len(document.elements), "pages": document.page_count, "notes": document.notes}
        with self.db.transaction() as conn:  # the heartbeat first: it holds the file (LeaseLost if not ours)
            runs.heartbeat(conn, row["run_id"], self.owner, {**stats, "timings_ms": _timings(row, extract=elapsed)})
            staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
            staging.write_elements(conn, row["run_id"], document.elements, document.page_count, stats)
        return FileOutcome(row["run_id"], _filename(row), STEP_DONE, f"{len(document.elements)} elements", stats)

    # -- step 3: document_chunks ----------------------------------------------------------------------
    def chunk_batch(self, partition_key: str) -> list[FileOutcome]:
        """The batch's files in groups of ``CHUNK_GROUP_FILES``: a group's staged elements are read in one
        statement, chunked file by file, and written in one transaction (hold, DELETE, COPY, UPDATE,
        heartbeat) instead of seven round trips a file. Groups go in lanes: the tokenizer of one runs while
        another's statements are the server's. A file that cannot be chunked fails alone; a group whose
        write fails on a file's data is written file by file, so only that file fails."""
        outcomes = self._release_paused(partition_key)
        with self.db.connection() as conn:
            rows = runs.held_rows(conn, partition_key, self.owner)
        self._progress = Progress("chunk", len(rows), sinks=self._progress_sinks)
        groups = _chunk_groups(rows)

        def counted(done: list[FileOutcome]) -> None:
            self._progress.advance(files=len(done), chunks=sum(o.stats.get("chunks", 0) for o in done
                                                                 if o.status == STEP_DONE))

        for done in _in_pool([functools.partial(self._chunk_group, group) for group in groups],
                             min(self._lanes, self.db.max_size), on_done=counted):
            outcomes += done
        if rows:
            self._progress.finish()
        return outcomes

    def _chunk_group(self, rows: list[dict]) -> list[FileOutcome]:
        run_ids = [r["run_id"] for r in rows]
        with self.db.connection() as conn:
            states = staging.staging_states(conn, run_ids)
            elements = staging.read_elements(conn, [i for i in run_ids if i in states
                                                    and states[i]["elements_done"] and not states[i]["chunks_done"]])
        outcomes: dict[int, FileOutcome] = {}
        chunked: dict[int, tuple[dict, list[Chunk], dict, int]] = {}  # run id: row, chunks, stats, ms
        for row in rows:
            run_id = row["run_id"]
            state = states.get(run_id)
            if state is not None and state["elements_done"] and state["chunks_done"]:
                outcomes[run_id] = FileOutcome(run_id, _filename(row), STEP_DONE, "chunks already staged")
                continue
            try:
                chunked[run_id] = (row, *self._chunk_file(state, elements.get(run_id, [])))
            except Exception as exc:
                failure = classify(exc)
                if failure.code in _STEP_ERRORS:
                    raise
                outcomes[run_id] = self._fail(row, failure)
        if chunked:
            try:
                outcomes |= self._write_chunks(chunked)
            except Exception as exc:
                if classify(exc).code in _STEP_ERRORS:
                    raise
                _log.warning("a group's chunks failed to write (%s): writing its files one by one", exc)
                for run_id, (row, *_) in chunked.items():
                    outcomes[run_id] = self._guarded(
                        row, lambda r: self._write_chunks({r["run_id"]: chunked[r["run_id"]]})[r["run_id"]])
        return [outcomes[run_id] for run_id in run_ids]

    def _chunk_file(self, state: dict | None, elements: list[Element]) -> tuple[list[Chunk], dict, int]:
        """One file's chunks, their figures, and the milliseconds chunking took."""
        if state is None or not state["elements_done"]:
            raise ExtractionError("extraction did not complete for this file", code="step_out_of_order")
        start = time.perf_counter()
        counter = self.embedder.token_counter
        target, hard_max = effective_budgets(self.settings.chunk.target_tokens, self.settings.chunk.max_tokens,
                                             counter)
        chunks = chunk_elements(elements, counter, target=target, hard_max=hard_max)
        if not chunks:
            raise ExtractionError("the file produced no text chunks", code="no_chunks")
        stats = {"chunks": len(chunks), "tokens": sum(c.token_count for c in chunks),
                 "max_chunk_tokens": max(c.token_count for c in chunks)}
        return chunks, stats, _ms(start)

    def _write_chunks(self, chunked: dict[int, tuple[dict, list[Chunk], dict, int]]) -> dict[int, FileOutcome]:
        """Stage the chunks of the files this run still holds, in one transaction; the others are lost."""
        with self.db.transaction() as conn:
            lost = runs.hold_many(conn, list(chunked), self.owner)
            kept = {run_id: item for run_id, item in chunked.items() if run_id not in lost}
            if kept:
                staging.write_chunks(conn, {run_id: (chunks, stats) for run_id, (_, chunks, stats, _) in kept.items()})
                runs.heartbeat_many(conn, {run_id: {**stats, "timings_ms": _timings(row, chunk=ms)}
                                           for run_id, (row, _, stats, ms) in kept.items()}, self.owner)
        outcomes = {}
        for run_id, (row, chunks, stats, _) in chunked.items():
            if run_id in lost:
                _log.warning("file %s (run %s): %s", _filename(row), run_id, lost[run_id])
                outcomes[run_id] = FileOutcome(run_id, _filename(row), LOST, lost[run_id])
            else:
                outcomes[run_id] = FileOutcome(run_id, _filename(row), STEP_DONE, f"{len(chunks)} chunks", stats)
        return outcomes

    # -- step 4: chunk_embeddings ----------------------------------------------------------------------
    def embed_batch(self, partition_key: str) -> list[FileOutcome]:
        """Vectors for every staged chunk of the batch's files, encoded *across* files.

        Each file first reuses the stored vectors of its unchanged chunk texts. The chunks still without
        a vector, of all the files together, are then encoded in committed units sorted by token count
        (a small file no longer pays its own ``encode`` call, and similar lengths pad little). If a unit
        fails to encode, its files are encoded one by one so that only the file at fault fails.
        """
        outcomes = self._release_paused(partition_key)
        with self.db.connection() as conn:
            rows = runs.held_rows(conn, partition_key, self.owner)
            ahead = staging.count_missing_embeddings(conn, [r["run_id"] for r in rows]) if rows else None
        self._progress = Progress("embed", len(rows), total_chunks=ahead, sinks=self._progress_sinks)
        start = time.perf_counter()
        work: dict[int, _Embedding] = {}
        if rows:
            outcomes += self._reuse_embeddings(rows, work)
        unit = self.settings.embedding.batch_size * 16  # one committed unit: enough texts to sort by length
        while work:
            with self.db.connection() as conn:
                pending = staging.pending_embeddings(conn, list(work), unit)
            if not pending:
                break
            outcomes += self._embed_unit(pending, work)
            failpoint("embed.unit")  # one unit committed, the next not yet
        for item in work.values():
            item.stats["timings_ms"] = _timings(item.row, embed=_ms(start))
        outcomes += self._finish_embedding(work)
        if rows:
            self._progress.finish()
        return outcomes

    def _reuse_embeddings(self, rows: list[dict], work: dict[int, _Embedding]) -> list[FileOutcome]:
        """The batch's files take the stored vectors of their unchanged chunk texts, in one transaction of
        three statements; each file held (and chunked) joins ``work``, the others leave with their outcome."""
        run_ids = [r["run_id"] for r in rows]
        with self.db.transaction() as conn:
            lost = runs.hold_many(conn, run_ids, self.owner)
            chunked = staging.files_with_chunks(conn, [r for r in run_ids if r not in lost])
            reused = staging.reuse_stored_embeddings(conn, sorted(chunked), self.model.name, self.model.digest)
        outcomes = []
        for row in rows:
            run_id = row["run_id"]
            if run_id in lost:
                _log.warning("file %s (run %s): %s", _filename(row), run_id, lost[run_id])
                outcomes.append(FileOutcome(run_id, _filename(row), LOST, lost[run_id]))
            elif run_id not in chunked:
                outcomes.append(self._fail(row, classify(ExtractionError(
                    "chunking did not complete for this file", code="step_out_of_order"))))
            else:
                work[run_id] = _Embedding(row, {"embedded": 0, "embeddings_reused": reused.get(run_id, 0),
                                                "model_ms": 0})
        # vectors of identical chunk text, not encoded again
        self._progress.advance(chunks=sum(reused.values()), files=len(outcomes))
        return outcomes

    def _embed_unit(self, pending: list[dict], work: dict[int, _Embedding]) -> list[FileOutcome]:
        """Encode one unit (chunks of one or more files) and commit its vectors; files that lost their
        claim, or whose text cannot be encoded, leave the work with their outcome."""
        model_start = time.perf_counter()
        try:
            vectors = self.embedder.embed([p["text"] for p in pending])  # outside any transaction
        except Exception as exc:
            if classify(exc).code in _STEP_ERRORS:
                raise
            return self._embed_files_alone(pending, work)
        model_ms = _ms(model_start)
        by_file: dict[int, list[int]] = {}
        for i, p in enumerate(pending):
            by_file.setdefault(p["run_id"], []).append(i)
        outcomes = []
        with self.db.transaction() as conn:  # the unit's files: one statement holds them, one executemany writes
            lost = runs.hold_many(conn, list(by_file), self.owner)
            for run_id, reason in lost.items():  # a file that lost its claim leaves the others' vectors
                item = work.pop(run_id)
                _log.warning("file %s (run %s): %s", _filename(item.row), run_id, reason)
                outcomes.append(FileOutcome(run_id, _filename(item.row), LOST, reason))
            kept = [i for i, p in enumerate(pending) if p["run_id"] not in lost]
            if kept:
                staging.write_embeddings(conn, [pending[i]["run_id"] for i in kept],
                                         [pending[i]["ordinal"] for i in kept], vectors[kept])
        for run_id, indexes in by_file.items():
            if run_id not in lost:
                stats = work[run_id].stats
                stats["embedded"] += len(indexes)
                stats["model_ms"] += model_ms * len(indexes) // len(pending)
        self._progress.advance(chunks=len(pending), files=len(outcomes))
        return outcomes

    def _embed_files_alone(self, pending: list[dict], work: dict[int, _Embedding]) -> list[FileOutcome]:
        """A unit failed to encode: encode each of its files' texts alone, failing only the one at fault."""
        outcomes = []
        for run_id in dict.fromkeys(p["run_id"] for p in pending):
            texts = [p["text"] for p in pending if p["run_id"] == run_id]
            try:
                self.embedder.embed(texts)
            except Exception as exc:
                failure = classify(exc)
                if failure.code in _STEP_ERRORS:
                    raise
                outcomes.append(self._fail(work.pop(run_id).row, failure))
                self._progress.advance(files=1)
        if not outcomes:  # it failed together but not alone: the model's trouble, not a file's
            raise RuntimeError("a unit of chunks failed to encode, yet each of its files encodes alone")
        return outcomes

    def _finish_embedding(self, work: dict[int, _Embedding]) -> list[FileOutcome]:
        """Every file left in ``work`` has all its vectors: mark them done, with their figures, in one
        transaction of three statements."""
        stats = {run_id: work[run_id].stats for run_id in sorted(work)}
        if not stats:
            return []
        with self.db.transaction() as conn:
            lost = runs.hold_many(conn, list(stats), self.owner)
            done = {run_id: figures for run_id, figures in stats.items() if run_id not in lost}
            if done:
                staging.mark_embeddings_done(conn, done)
                runs.heartbeat_many(conn, done, self.owner)  # held by the statement above: none is lost here
        outcomes = []
        for run_id, figures in stats.items():
            row = work[run_id].row
            if run_id in lost:
                _log.warning("file %s (run %s): %s", _filename(row), run_id, lost[run_id])
                outcomes.append(FileOutcome(run_id, _filename(row), LOST, lost[run_id]))
            else:
                outcomes.append(FileOutcome(run_id, _filename(row), STEP_DONE,
                                            f"{figures['embedded']} embedded, {figures['embeddings_reused']} reused",
                                            figures))
        self._progress.advance(files=len(outcomes))
        return outcomes

    # -- step 5: promoted_documents ----------------------------------------------------------------------
    def promote_batch(self, partition_key: str) -> list[FileOutcome]:
        with self.db.connection() as conn:  # the first vectors of a new model dimension get their index
            ensure_vector_index(conn, self.model.dimension)
        return self._for_each(partition_key, self._promote_one, "promote", lanes=self._lanes)

    def _promote_one(self, row: dict) -> FileOutcome:
        # a re-index keeps the extractor that made the stored elements
        extractor = (row["config"] or {}).get("extractor_version") if row["reindex_of_version_id"] else None
        extractor = extractor or EXTRACTOR_VERSION
        try:
            with self.db.transaction() as conn:
                state = staging.staging_state(conn, row["run_id"])
                if state is None or not state["embeddings_done"]:
                    raise PromotionError("embedding did not complete for this file", code="step_out_of_order")
                version = promote_document_version(
                    conn, row, owner=self.owner, fingerprint=self.fingerprint_for(extractor), model=self.model.name,
                    model_digest=self.model.digest,
                    extractor_version=extractor, timings_ms=dict((row["stats"] or {}).get("timings_ms") or {}),
                )
        except Superseded as exc:  # a newer version (or a deletion) came first: nothing to promote
            with self.db.transaction() as conn:
                runs.mark_succeeded(conn, row["run_id"], self.owner, {"skipped": str(exc)})
                staging.discard(conn, row["run_id"])
            return FileOutcome(row["run_id"], _filename(row), SKIPPED, str(exc))
        self._release_raw(row)
        return FileOutcome(
            row["run_id"], _filename(row), runs.SUCCEEDED,
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
    """Every file of the batch with its ledger outcome."""
    outcomes = []
    for r in runs.partition_rows(conn, partition_key):
        stats = r["stats"] or {}
        if r["status"] in (runs.FAILED, runs.DEAD_LETTER):
            detail = r["error"] or ""
        elif r["status"] == runs.CANCELED:
            detail = f"canceled by {r['canceled_by']}"
        elif r["status"] == runs.QUEUED and r["error"]:
            detail = f"retry at {r['next_attempt_at']:%H:%M:%S} ({r['error_code']}): {r['error']}"
        elif stats.get("skipped"):
            detail = f"skipped: {stats['skipped']}"
        elif r["status"] == runs.SUCCEEDED:
            detail = f"version {stats.get('version_number')}: {stats.get('chunks')} chunks"
        else:
            detail = r["status"]
        outcomes.append(FileOutcome(r["run_id"], _filename(r), r["status"], detail, stats))
    return outcomes


def _timings(row: dict, **new: int) -> dict:
    """Merge a step's milliseconds into what the ledger row already holds."""
    return {**((row.get("stats") or {}).get("timings_ms") or {}), **new}
