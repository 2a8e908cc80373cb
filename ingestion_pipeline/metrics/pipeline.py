"""The metric pipeline's steps over one upload (partition), as plain functions the assets call."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.hashing import file_sha256
from ingestion_pipeline.core.ledger import METRIC_UPLOADS
from ingestion_pipeline.metrics.promotion import PromotionResult, promote_upload
from ingestion_pipeline.metrics.readers import MalformedFileError
from ingestion_pipeline.metrics.staging import StagingCounts, stage_upload
from ingestion_pipeline.metrics.uploads import upload_for_partition


class UploadFailed(Exception):
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


def claim_upload(db: Database, partition_key: str, dagster_run_id: str) -> dict:
    """pending (or a rerun) -> processing; the stored file must still match its SHA-256."""
    with db.transaction() as conn:
        upload = upload_for_partition(conn, partition_key)
        if upload["status"] in ("completed", "partial"):
            return upload  # already promoted: the rerun is a no-op
        raw = Path(upload["raw_path"] or "")
        if not raw.is_file():
            ledger.fail(conn, METRIC_UPLOADS, upload["upload_id"], f"the stored file is missing ({raw})")
            raise UploadFailed(f"the stored file is missing ({raw}); submit it again")
        if file_sha256(raw) != upload["content_hash"]:
            ledger.fail(conn, METRIC_UPLOADS, upload["upload_id"], "the stored file does not match its SHA-256")
            raise UploadFailed("the stored file does not match its SHA-256 (corrupted in storage)")
        [claimed] = ledger.claim(conn, METRIC_UPLOADS, partition_key=partition_key, dagster_run_id=dagster_run_id)
        return claimed


def stage(db: Database, partition_key: str) -> tuple[dict, StagingCounts]:
    with db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    if upload["status"] in ("completed", "partial", "promoting"):  # staged already: a rerun reads the counts
        return upload, staged_counts(db, upload["upload_id"])
    start = time.perf_counter()
    try:
        counts = stage_upload(db, upload)
    except (MalformedFileError, UnicodeDecodeError) as exc:
        message = f"malformed file: {exc}"
        with db.transaction() as conn:
            ledger.fail(conn, METRIC_UPLOADS, upload["upload_id"], message)
        raise UploadFailed(message) from exc
    if counts.total == 0:
        with db.transaction() as conn:
            ledger.fail(conn, METRIC_UPLOADS, upload["upload_id"], "the file has no data rows", total_rows=0)
        raise UploadFailed("the file has no data rows")
    with db.transaction() as conn:
        upload = ledger.advance(
            conn, METRIC_UPLOADS, upload["upload_id"], "staging_complete",
            {"staging_ms": int((time.perf_counter() - start) * 1000), "resumed_after_row": counts.resumed_after},
            total_rows=counts.total, valid_rows=counts.valid, invalid_rows=counts.invalid,
        )
    return upload, counts


def staged_counts(db: Database, upload_id: int) -> StagingCounts:
    with db.connection() as conn:
        row = conn.execute(
            """SELECT count(*) AS total, count(*) FILTER (WHERE validation_status <> 'invalid') AS valid
                 FROM staging_rows WHERE upload_id = %s""", (upload_id,)).fetchone()
    return StagingCounts(row["total"], row["valid"], row["total"] - row["valid"], row["total"])


def evaluate_threshold(db: Database, partition_key: str) -> ThresholdResult:
    """The blocking check: valid rows >= threshold, unless the upload was sent with force-partial."""
    with db.connection() as conn:
        upload = upload_for_partition(conn, partition_key)
    counts = staged_counts(db, upload["upload_id"])
    row = {"total": counts.total, "valid": counts.valid}
    with db.transaction() as conn:
        ratio = row["valid"] / row["total"] if row["total"] else 0.0
        threshold = float(upload["valid_threshold"])
        passed = ratio >= threshold
        forced = not passed and upload["force_partial"] and row["valid"] > 0
        result = ThresholdResult(passed or forced, ratio, threshold, forced, row["total"], row["valid"])
        if not result.passed and upload["status"] not in ("completed", "partial"):
            ledger.fail(conn, METRIC_UPLOADS, upload["upload_id"], f"validation threshold missed: {result.describe()}")
        ledger.heartbeat(conn, METRIC_UPLOADS, upload["upload_id"],
                         {"valid_ratio": round(ratio, 6), "threshold": threshold, "forced": forced})
    return result


def promote(db: Database, partition_key: str) -> PromotionResult:
    with db.transaction() as conn:
        upload = upload_for_partition(conn, partition_key)
        if upload["status"] in ("completed", "partial"):  # a retried run or a second materialisation
            return PromotionResult(upload["status"], upload["promoted_rows"], upload["invalid_rows"],
                                   upload["unpromotable_rows"], {}, False)
        if upload["status"] not in ("staging_complete", "promoting"):
            raise UploadFailed(f"upload {upload['upload_id']} is {upload['status']}, not ready to promote")
        # visible while the promotion transaction runs
        ledger.advance(conn, METRIC_UPLOADS, upload["upload_id"], "promoting")
    with db.transaction() as conn:
        upload = upload_for_partition(conn, partition_key)
        ratio = upload["valid_rows"] / upload["total_rows"] if upload["total_rows"] else 0.0
        result = promote_upload(conn, upload, below_threshold=ratio < float(upload["valid_threshold"]))
    if result.status == "failed":
        raise UploadFailed("no valid row could be promoted (every parent reference is unresolved)")
    return result
