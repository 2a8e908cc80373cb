"""Step 2, ``document_elements``: extract each file in the bounded worker process and stage its elements."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.upload_store import StoredObjectMissing
from ingestion_pipeline.documents import file_ledger, staging
from ingestion_pipeline.documents.steps.runner import STEP_DONE, FileOutcome, StepRunner, filename, ms, timings


def extract_batch(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    return run.for_each(partition_key, functools.partial(_extract_one, run), "extract", lanes=run.lanes)


def _extract_one(run: StepRunner, row: dict) -> FileOutcome:
    config = row["config"] or {}
    extension = config.get("extension") or Path(filename(row)).suffix
    with run.db.connection() as conn:
        state = staging.staging_state(conn, row["run_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome.of(row, STEP_DONE, "elements already staged")
        # a new version of a scanned PDF: its unchanged pages keep their text, only changed ones are read by OCR
        reusable = (staging.reusable_ocr_pages(conn, row["tenant_id"], row["doc_id"])
                    if extension.lower() == ".pdf" and row.get("doc_id") is not None else [])
    start = time.perf_counter()
    failpoint("extract.file")
    if not row["raw_path"]:
        raise StoredObjectMissing("no stored copy recorded")
    # an S3 store's object is downloaded once per attempt, here (hashed on the way); a local file is read in place
    # one extraction worker (the lock): the other lane writes a file's elements meanwhile
    with run.store.local_copy(row["raw_path"], row["content_hash"]) as raw, run.extract_lock:
        document = run.extract_file(raw.path, extension, reusable)
    elapsed = ms(start)
    stats = {"elements": len(document.elements), "pages": document.page_count, "notes": document.notes}
    if document.ocr_pages:
        reused = sum(page.reused for page in document.ocr_pages)
        stats.update(ocr_pages_read=len(document.ocr_pages) - reused, ocr_pages_reused=reused)
    if raw.fetched_bytes:
        stats["raw_fetched_bytes"] = raw.fetched_bytes
    with run.db.transaction() as conn:  # the heartbeat first: it holds the file (LeaseLost if not ours)
        file_ledger.heartbeat(conn, row["run_id"], run.owner,
                              {**stats, "timings_ms": timings(row, extract=elapsed)})
        staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
        staging.write_ocr_pages(conn, row["run_id"], document.ocr_pages)
        staging.write_elements(conn, row["run_id"], document.elements, document.page_count, stats)
    return FileOutcome.of(row, STEP_DONE, f"{len(document.elements)} elements", stats)
