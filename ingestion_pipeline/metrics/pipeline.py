"""The metric pipeline's steps over one upload (partition), as plain functions the assets call.

The upload is claimed by a worker (``core.ledger``: owner, lease, attempts) and every write holds it,
so two runs of one upload never both stage or promote it. A data problem (malformed file, no rows,
threshold missed) fails the upload at once (``UploadFailed``, permanent); anything transient is
retried by the caller. Each step returns ``None`` when the upload is not this worker's to work on.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from psycopg.types.json import Jsonb

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import CodedError, classify
from ingestion_pipeline.core.ledger import METRIC_UPLOADS, LeaseLost, Worker
from ingestion_pipeline.core.progress import Sink
from ingestion_pipeline.core.settings import ReliabilitySettings
from ingestion_pipeline.core.tenants import is_paused
from ingestion_pipeline.core.upload_store import StoredObjectChanged, StoredObjectMissing, UploadStore, stored_in
from ingestion_pipeline.metrics.layouts import UnknownLayout
from ingestion_pipeline.metrics.promotion import PromotionResult, promote_upload
from ingestion_pipeline.metrics.readers import MalformedFileError
from ingestion_pipeline.metrics.staging import StagingCounts, stage_upload, verify_staged
from ingestion_pipeline.metrics.statistics import refresh_after_promotion, refresh_staging
from ingestion_pipeline.metrics.uploads import MetricUpload, upload_for_partition


class UploadFailed(CodedError):
    """The upload ended `failed`; the message is what the person who sent it needs to know."""


@dataclass(frozen=True)
class ThresholdResult:
    passed: bool
    valid_ratio: float
    threshold: float
    forced: bool
    total: int
    valid: int

    def describe(self) -> str:
        return (f"{self.valid} of {self.total} rows valid ({self.valid_ratio:.1%}); "
                f"threshold {self.threshold:.0%}" + ("; promoted anyway (force-partial)" if self.forced else ""))


def _fail(db: Database, upload: MetricUpload, owner: str, error: UploadFailed, policy: ReliabilitySettings,
          **fields) -> UploadFailed:
    with db.transaction() as conn:
        ledger.fail(conn, METRIC_UPLOADS, upload.upload_id, owner, error.info(), policy, **fields)
    return error


@contextmanager
def _failing_permanently(db: Database, upload: MetricUpload, owner: str, policy: ReliabilitySettings) -> Iterator[None]:
    """Whatever a step raises that ``classify`` does not call transient ends the upload ``failed`` at once.

    Without this an unexpected exception (a bug, or an input no rule foresaw) failed the Dagster run, and the
    run-failure path handed the upload back as transient: four attempts and a dead letter for the same cause.
    """
    try:
        yield
    except (UploadFailed, LeaseLost):  # recorded already, or not this worker's any more
        raise
    except Exception as exc:
        failure = classify(exc)
        if failure.transient:
            raise
        raise _fail(db, upload, owner, UploadFailed(failure.code, failure.message, suggestion=failure.suggestion),
                    policy) from exc


def _held(db: Database, partition_key: str, owner: str) -> MetricUpload | None:
    """The upload of the partition if ``owner`` holds it, else None. At this step boundary an upload of a
    paused workspace goes back to the queue (its staged rows are kept) and is not this run's any more."""
    with db.transaction() as conn:
        upload = upload_for_partition(conn, partition_key)
        if upload.owner != owner or upload.status not in METRIC_UPLOADS.working:
            return None
        if is_paused(conn, upload.workspace_id):
            ledger.release(conn, METRIC_UPLOADS, owner=owner, reason="paused", event="paused",
                           item_ids=[upload.upload_id])
            return None
    return upload


def holds(db: Database, partition_key: str, owner: str) -> bool:
    """Whether ``owner`` still holds the partition's upload (a re-execution continues it)."""
    with db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    return upload.owner == owner and upload.status in METRIC_UPLOADS.working


def claim_upload(db: Database, partition_key: str, worker: Worker, policy: ReliabilitySettings, *,
                 replay_finished: bool = False, replay_failed: bool = False,
                 store: UploadStore | None = None) -> MetricUpload | None:
    """pending (or held by this owner, or abandoned) -> processing; the stored file must match its SHA-256.

    Returns None when the upload is not this run's: already promoted, held by a live run, waiting
    for its next attempt, or paused. ``replay_finished`` (a person's launch; ``ledger.claim`` says what it
    replays) raises ``NothingToDo`` instead, with the upload's state and what to run instead.
    """
    with db.transaction() as conn:
        claimed = ledger.claim(conn, METRIC_UPLOADS, worker, partition_key=partition_key,
                               replay_finished=replay_finished, replay_failed=replay_failed)
        if replay_finished and not claimed:
            raise ledger.nothing_to_do(conn, METRIC_UPLOADS, partition_key, noun="upload",
                                       retry_hint="ingestion-pipeline retry --upload UPLOAD_ID")
    if not claimed:
        return None
    upload = MetricUpload.from_row(claimed[0])
    store = store or stored_in(upload.raw_path)
    with _failing_permanently(db, upload, worker.owner, policy):
        try:
            if not upload.raw_path:
                raise StoredObjectMissing("no stored copy recorded")
            store.verify(upload.raw_path, upload.content_hash)
        except StoredObjectMissing as exc:
            raise _fail(db, upload, worker.owner, UploadFailed("file_missing", f"{exc}"), policy) from exc
        except StoredObjectChanged as exc:
            raise _fail(db, upload, worker.owner, UploadFailed("checksum_mismatch", f"{exc}"), policy) from exc
    return upload


def stage(db: Database, partition_key: str, owner: str, policy: ReliabilitySettings,
          progress_log: Sink | None = None, store: UploadStore | None = None,
          ) -> tuple[MetricUpload, StagingCounts] | None:
    upload = _held(db, partition_key, owner)
    if upload is None:
        return None
    if upload.status in ("staging_complete", "promoting"):  # staged already: a rerun reads the counts
        return upload, staged_counts(db, upload.upload_id)
    start = time.perf_counter()
    with _failing_permanently(db, upload, owner, policy):
        try:
            counts = stage_upload(db, upload, owner=owner, progress_log=progress_log, store=store)
        except StoredObjectMissing as exc:
            raise _fail(db, upload, owner, UploadFailed("file_missing", f"{exc}"), policy) from exc
        except StoredObjectChanged as exc:
            raise _fail(db, upload, owner, UploadFailed("checksum_mismatch", f"{exc}"), policy) from exc
        except (MalformedFileError, UnicodeDecodeError) as exc:
            raise _fail(db, upload, owner, UploadFailed("malformed_file", f"malformed file: {exc}"), policy) from exc
        except UnknownLayout as exc:
            raise _fail(db, upload, owner, UploadFailed("unknown_layout", str(exc)), policy) from exc
    if counts.total == 0:
        raise _fail(db, upload, owner, UploadFailed("no_data_rows", "the file has no data rows"), policy,
                    total_rows=0)
    with db.connection() as conn:  # the promotion's plans see this upload's rows
        refresh_staging(conn)
    with db.transaction() as conn:
        verify_staged(conn, upload.upload_id, counts.total)  # no batch lost to a crash (staging's doc)
        upload = MetricUpload.from_row(ledger.advance(
            conn, METRIC_UPLOADS, upload.upload_id, owner, "staging_complete",
            {"staging_ms": int((time.perf_counter() - start) * 1000), "resumed_after_row": counts.resumed_after,
             "reader": counts.reader, "vectorised_rows": counts.vectorised},
            total_rows=counts.total, valid_rows=counts.valid, invalid_rows=counts.invalid,
            layout=counts.layout, skipped_rows=counts.skipped, notes=Jsonb(counts.notes),
        ))
    return upload, counts


def staged_counts(db: Database, upload_id: int) -> StagingCounts:
    with db.connection() as conn:
        row = conn.execute(
            """SELECT count(*) AS total, count(*) FILTER (WHERE validation_status <> 'invalid') AS valid
                 FROM staging_rows WHERE upload_id = %s""", (upload_id,)).fetchone()
    return StagingCounts(row["total"], row["valid"], row["total"] - row["valid"], row["total"])


def evaluate_threshold(db: Database, partition_key: str, owner: str,
                       policy: ReliabilitySettings) -> ThresholdResult | None:
    """The blocking check: valid rows >= threshold, unless the upload was sent with force-partial."""
    upload = _held(db, partition_key, owner)
    if upload is None:
        return None
    if upload.total_rows is not None and upload.valid_rows is not None:  # recorded when staging completed
        counts = StagingCounts(upload.total_rows, upload.valid_rows,
                               upload.total_rows - upload.valid_rows, upload.total_rows)
    else:
        counts = staged_counts(db, upload.upload_id)
    ratio = counts.valid / counts.total if counts.total else 0.0
    threshold = upload.valid_threshold
    passed = ratio >= threshold
    forced = not passed and upload.force_partial and counts.valid > 0
    result = ThresholdResult(passed or forced, ratio, threshold, forced, counts.total, counts.valid)
    with db.transaction() as conn:
        ledger.heartbeat(conn, METRIC_UPLOADS, upload.upload_id, owner,
                         {"valid_ratio": round(ratio, 6), "threshold": threshold, "forced": forced})
        if not result.passed:
            ledger.fail(conn, METRIC_UPLOADS, upload.upload_id, owner, UploadFailed(
                "threshold_missed", f"validation threshold missed: {result.describe()}",
                suggestion="fix the invalid rows (`ingestion-pipeline metrics errors`) and submit again, or submit "
                           "with --force-partial").info(), policy)
    return result


def promote(db: Database, partition_key: str, owner: str,
            policy: ReliabilitySettings | None = None) -> PromotionResult | None:
    policy = policy or ReliabilitySettings()
    with db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    if upload.status in METRIC_UPLOADS.succeeded:  # a retried run or a second materialisation
        return PromotionResult(upload.status, upload.promoted_rows, upload.invalid_rows,
                               upload.unpromotable_rows, {}, False)
    if _held(db, partition_key, owner) is None:
        return None
    with db.transaction() as conn:  # visible while the promotion transaction runs
        upload = MetricUpload.from_row(ledger.advance(conn, METRIC_UPLOADS, upload.upload_id, owner, "promoting"))
    start = time.perf_counter()
    unpromotable = UploadFailed("no_promotable_rows",
                                "no valid row could be promoted (every parent reference is unresolved)")
    with _failing_permanently(db, upload, owner, policy), db.transaction() as conn:
        ledger.hold(conn, METRIC_UPLOADS, upload.upload_id, owner)  # first: a run that lost it promotes nothing
        ratio = upload.valid_rows / upload.total_rows if upload.total_rows else 0.0
        result = promote_upload(conn, upload, below_threshold=ratio < upload.valid_threshold)
        failpoint("metrics.promote")  # everything written, nothing committed
        if result.status == "failed":
            ledger.fail(conn, METRIC_UPLOADS, upload.upload_id, owner, unpromotable.info(), policy, **result.counts)
        else:
            ledger.finish(conn, METRIC_UPLOADS, upload.upload_id, owner, result.status,
                          {"promotion_ms": int((time.perf_counter() - start) * 1000)}, **result.counts)
    with db.connection() as conn:  # statistics for the next promotions, after commit and outside the lock
        refresh_after_promotion(conn, result.upserted)
    if result.status == "failed":
        raise unpromotable
    return result
