"""The runner every step of a document batch shares: held rows, lanes, a file's failure kept its own, progress.

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
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failures import FailureInfo, classify
from ingestion_pipeline.core.ledger import LeaseLost, Worker
from ingestion_pipeline.core.progress import Progress, Sink
from ingestion_pipeline.core.settings import Settings
from ingestion_pipeline.core.upload_store import StoredFile, UploadStore
from ingestion_pipeline.documents import file_ledger, reindex
from ingestion_pipeline.documents.embedding import Embedder
from ingestion_pipeline.documents.extraction import EXTRACTOR_VERSION, InProcessExtractor, ReadPage
from ingestion_pipeline.documents.fingerprint import fingerprint_for

log = logging.getLogger("ingestion_pipeline.documents")

# endpoint URL (None: the default) -> a boto3 S3 client
S3ClientFor = Callable[[str | None], Any]
# (path, extension, reusable_ocr) -> ExtractedDocument; runs use bounded worker processes
# (extraction/isolation.py: ExtractorPool, which also reads a PDF's units and counts its pages)
Extractor = Callable[[Path, str, Sequence[ReadPage]], Any]

# The step's trouble, not a file's: the step fails and its files stay held (a host that cannot embed as the
# deployment decided, or on the device it is set to, leaves them for one that can: documents/model_decision.py,
# documents/devices.py)
STEP_ERRORS = ("db_unavailable", "db_conflict", "model_decision_unmet", "cuda_unavailable")

T = TypeVar("T")

# outcome statuses besides the ledger's: the step is done and more follow; the file was handed back;
# nothing to do (identical content already active / the version is already at the current fingerprint)
STEP_DONE, RETRY, LOST, RELEASED, SKIPPED, CURRENT = "running", "retry", "lost", "released", "skipped", "current"
# a file whose ledger state is final once the outcome is returned (its commit is done)
FINAL = frozenset({file_ledger.SUCCEEDED, SKIPPED, file_ledger.FAILED, file_ledger.DEAD_LETTER})
# told the ledger row ids of files that just finished, on the file's lane, after the commit
FinishListener = Callable[[list[int]], None]


@dataclass
class FileOutcome:
    file_id: int  # the file's ledger row (ingestion_runs.file_id)
    filename: str
    status: str  # running (step done, more to come) | succeeded | skipped | failed | retry | dead_letter | lost …
    detail: str = ""
    stats: dict = field(default_factory=dict)

    @classmethod
    def of(cls, row: dict, status: str, detail: str = "", stats: dict | None = None) -> FileOutcome:
        """The outcome of the file of ledger row ``row``."""
        return cls(row["file_id"], filename(row), status, detail, stats or {})

    @classmethod
    def lost(cls, row: dict, reason: str) -> FileOutcome:
        """The file's claim was taken from this run (``LeaseLost``): logged, and left alone."""
        log.warning("file %s (file_id %s): %s", filename(row), row["file_id"], reason)
        return cls.of(row, LOST, reason)


def in_pool(tasks: list[Callable[[], T]], lanes: int, *, on_done: Callable[[T], None],
            on_interrupt: Callable[[], object] | None = None) -> list[T]:
    """Run ``tasks`` on up to ``lanes`` threads ("file-lane"), ``on_done`` for each result as it finishes (on
    the calling thread); results in the tasks' order. An error stops the lanes: tasks not begun are cancelled
    and the error is raised once the running ones end. An interruption (Ctrl-C, SIGTERM, Dagster's interrupt:
    what is not an ``Exception``) calls ``on_interrupt`` first, which ends the running ones sooner (the
    database's ``cancel_statements``)."""
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
        except BaseException as exc:
            for future in futures:
                future.cancel()
            if on_interrupt is not None and not isinstance(exc, Exception):
                cancelled = on_interrupt()
                log.warning("interrupted: %s statement(s) of the running lanes cancelled", cancelled)
            raise
    return [results_at[i] for i in range(len(tasks))]


def ms(start: float) -> int:
    return int((time.perf_counter() - start) * 1000)


def filename(row: dict) -> str:
    return (row.get("config") or {}).get("filename") or row["source_uri"]


def timings(row: dict, **new: int) -> dict:
    """Merge a step's milliseconds into what the ledger row already holds."""
    return {**((row.get("stats") or {}).get("timings_ms") or {}), **new}


class StepRunner:
    """What the steps of one batch share: database, raw store, embedder, S3, the worker (owner, Dagster run,
    lease) on whose behalf they claim and write, and the lanes and guard every step runs its files through."""

    def __init__(
        self, db: Database, store: UploadStore, embedder: Embedder, settings: Settings,
        s3_client_for: S3ClientFor | None = None, *, worker: Worker | None = None, extractor: Extractor | None = None,
        progress_log: Sink | None = None, finish_listeners: list[FinishListener] | None = None,
    ) -> None:
        self.db = db
        # who is told the moment a file's state is final (the Redis status of its job: queues/redis_contract.py)
        self.finish_listeners = list(finish_listeners or [])
        self.progress_sinks = [progress_log] if progress_log is not None else []
        self.progress = Progress("idle", 0)
        self.store = store
        self.embedder = embedder
        self.settings = settings
        self.model = embedder.info
        self.worker = worker
        self.s3_client_for = s3_client_for
        self.downloads: dict[int, Future[StoredFile]] = {}  # file_id -> S3 download started ahead
        # a pool of bounded workers in a run (defs/resources.py): the lanes extract files, or units of a big
        # file, side by side
        self.extract_file = extractor or InProcessExtractor(settings.limits)

    def close(self) -> None:
        """Stop the extraction worker, if this pipeline started one."""
        close = getattr(self.extract_file, "close", None)
        if close is not None:
            close()

    # -- shared ---------------------------------------------------------------------------------
    @property
    def lanes(self) -> int:
        """Files a step works on at once (``INGESTION_BATCH_LANES``, 2): much of a file's time is the
        server's (a promotion's HNSW and text-index inserts) or the extraction worker's, so a second lane
        keeps the second core busy (compare_peers.py)."""
        return self.settings.batch.lanes

    @property
    def fingerprint_for(self) -> reindex.FingerprintFor:
        """extractor version of a file's elements -> the fingerprint this pipeline gives them."""
        return fingerprint_for(self.model, self.settings.chunk.target_tokens, self.settings.chunk.max_tokens)

    @property
    def extractor_version(self) -> str:
        """The version of the extractor a file extracted now goes through."""
        return EXTRACTOR_VERSION

    @property
    def fingerprint(self) -> str:
        """The fingerprint of a file extracted now."""
        return self.fingerprint_for(self.extractor_version)

    @property
    def owner(self) -> str:
        if self.worker is None:
            raise RuntimeError("this pipeline has no worker: it can only be used to read")
        return self.worker.owner

    def holds_files(self, partition_key: str) -> bool:
        """Whether this worker's owner still holds files of the batch (a re-execution continues them)."""
        with self.db.connection() as conn:
            return bool(file_ledger.held_rows(conn, partition_key, self.owner))

    def for_each(self, partition_key: str, work: Callable[[dict], FileOutcome], step: str, *,
                  lanes: int = 1) -> list[FileOutcome]:
        """Run ``work`` on every file of the partition this worker holds; one file's failure is its own.
        Progress (files, chunks, rate, ETA) is reported as it goes.

        ``lanes`` > 1: that many files are worked on at once, each in its own transaction on its own
        connection (for work whose time is the server's: one lane leaves a core idle). The files of one
        document stay in one lane, in their order, so its later version is still promoted last.
        """
        outcomes = self.release_paused(partition_key)
        with self.db.connection() as conn:
            rows = file_ledger.held_rows(conn, partition_key, self.owner)
        self.progress = Progress(step, len(rows), sinks=self.progress_sinks)
        self.mark_step(rows, step)
        outcomes += self.in_lanes(rows, work, lanes)
        if rows:
            self.progress.finish()
        return outcomes

    def mark_step(self, rows: list[dict], step: str) -> None:
        """Each file's step now, in its stats (what the web app's live history shows of a running file); a file
        this worker no longer holds is left as it is (its work finds that out)."""
        with self.db.connection() as conn:
            for row in sorted(rows, key=lambda r: r["file_id"]):
                try:
                    file_ledger.heartbeat(conn, row["file_id"], self.owner, {"step": step})
                except LeaseLost:
                    continue

    def in_lanes(self, rows: list[dict], work: Callable[[dict], FileOutcome | None],
                  lanes: int) -> list[FileOutcome | None]:
        """``guarded(row, work)`` for every row, ``lanes`` documents at a time; outcomes in the rows' order.

        Progress is advanced here, on the step's thread. An error of the step (the database) stops the
        lanes: files not begun stay held for the step's retry, as in one lane. There are never more lanes
        than pooled connections (a lane waiting for one could time out).
        """
        lanes = min(lanes, self.db.max_size)
        if lanes <= 1 or len(rows) <= 1:
            outcomes = []
            for row in rows:
                outcomes.append(self.guarded(row, work))
                self.progress.advance(files=1)
            return outcomes
        by_document: dict[Any, list[dict]] = {}
        for row in rows:
            by_document.setdefault(row.get("doc_id", row["file_id"]), []).append(row)

        def document_files(files: list[dict]) -> list[tuple[int, FileOutcome | None]]:
            return [(row["file_id"], self.guarded(row, work)) for row in files]

        finished = in_pool([functools.partial(document_files, files) for files in by_document.values()], lanes,
                            on_done=lambda done: self.progress.advance(files=len(done)),
                            on_interrupt=self.db.cancel_statements)
        by_file = dict(pair for document in finished for pair in document)
        return [by_file[row["file_id"]] for row in rows]

    def guarded(self, row: dict, work: Callable[[dict], FileOutcome | None]) -> FileOutcome | None:
        """``work(row)``, with a file's failure (or lost claim) turned into that file's outcome; a final one is
        told to the finish listeners at once."""
        try:
            outcome = work(row)
        except LeaseLost as exc:
            log.warning("file %s (file_id %s): %s", filename(row), row["file_id"], exc)
            return FileOutcome.of(row, LOST, str(exc))
        except Exception as exc:
            failure = classify(exc)
            if failure.code in STEP_ERRORS:
                raise  # the database, not the file: the step is retried, the file stays held
            outcome = self.fail(row, failure)
        if outcome is not None and outcome.status in FINAL:
            self.tell_finished([outcome.file_id])
        return outcome

    def tell_finished(self, file_ids: list[int]) -> None:
        """Tell the listeners; a listener's error is logged, never the file's or the step's."""
        for listener in self.finish_listeners:
            try:
                listener(file_ids)
            except Exception:
                log.warning("telling that files %s finished failed", file_ids, exc_info=True)

    def fail(self, row: dict, failure: FailureInfo) -> FileOutcome:
        log.warning("file %s (file_id %s) failed: %s: %s", filename(row), row["file_id"], failure.code, failure.message)
        try:
            with self.db.transaction() as conn:
                failed = file_ledger.mark_failed(conn, row["file_id"], self.owner, failure, self.settings.reliability)
        except LeaseLost as exc:
            return FileOutcome.of(row, LOST, str(exc))
        if failed["status"] == file_ledger.QUEUED:
            detail = f"retry at {failed['next_attempt_at']:%H:%M:%S} ({failure.code}): {failure.message}"
            return FileOutcome.of(row, RETRY, detail)
        return FileOutcome.of(row, failed["status"], failure.message)

    def release_paused(self, partition_key: str) -> list[FileOutcome]:
        """At a step boundary, files of a paused tenant or source go back to the queue (staging kept)."""
        with self.db.transaction() as conn:
            paused = conn.execute(
                """SELECT r.file_id FROM ingestion_runs r
                     JOIN tenants t ON t.tenant_id = r.tenant_id
                     LEFT JOIN ingestion_sources s ON s.source_id = r.source_id
                    WHERE r.partition_key = %s AND r.owner = %s AND r.status = 'running'
                      AND (t.paused OR coalesce(s.paused, false))""",
                (partition_key, self.owner),
            ).fetchall()
            if not paused:
                return []
            released = ledger.release(conn, ledger.DOCUMENT_FILES, owner=self.owner, reason="paused",
                                      event="paused", item_ids=[r["file_id"] for r in paused])
        return [FileOutcome.of(r, RELEASED, "paused: back in the queue") for r in released]

    def release_raw(self, row: dict) -> None:
        """Drop the stored upload once no unfinished ledger row needs it."""
        if not row.get("raw_path"):
            return
        with self.db.connection() as conn:
            waiting = conn.execute(
                """SELECT 1 FROM ingestion_runs WHERE raw_path = %s AND status IN ('queued', 'running')
                      AND file_id <> %s LIMIT 1""",
                (row["raw_path"], row["file_id"]),
            ).fetchone()
        if waiting is None and self.store.owns(row["raw_path"]):
            self.store.release(row["raw_path"])


def batch_report(conn, partition_key: str) -> list[FileOutcome]:
    """Every file of the batch with its ledger outcome."""
    outcomes = []
    for r in file_ledger.partition_rows(conn, partition_key):
        stats = r["stats"] or {}
        if r["status"] in (file_ledger.FAILED, file_ledger.DEAD_LETTER):
            detail = r["error"] or ""
        elif r["status"] == file_ledger.CANCELED:
            detail = f"canceled by {r['canceled_by']}"
        elif r["status"] == file_ledger.QUEUED and r["error"]:
            detail = f"retry at {r['next_attempt_at']:%H:%M:%S} ({r['error_code']}): {r['error']}"
        elif stats.get("skipped"):
            detail = f"skipped: {stats['skipped']}"
        elif r["status"] == file_ledger.SUCCEEDED:
            detail = f"version {stats.get('version_number')}: {stats.get('chunks')} chunks"
        else:
            detail = r["status"]
        outcomes.append(FileOutcome.of(r, r["status"], detail, stats))
    return outcomes
