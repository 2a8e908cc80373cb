"""Step 2, ``document_elements``: extract each file in the bounded worker process and stage its elements."""

from __future__ import annotations

import time
from pathlib import Path

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.upload_store import StoredObjectMissing
from ingestion_pipeline.documents import file_ledger, staging
from ingestion_pipeline.documents.steps.runner import STEP_DONE, FileOutcome, StepRunner, filename, ms, timings


class ExtractStep(StepRunner):
    def extract_batch(self, partition_key: str) -> list[FileOutcome]:
        return self._for_each(partition_key, self._extract_one, "extract", lanes=self._lanes)

    def _extract_one(self, row: dict) -> FileOutcome:
        config = row["config"] or {}
        with self.db.connection() as conn:
            state = staging.staging_state(conn, row["run_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome.of(row, STEP_DONE, "elements already staged")
        start = time.perf_counter()
        failpoint("extract.file")
        if not row["raw_path"]:
            raise StoredObjectMissing("no stored copy recorded")
        # an S3 store's object is downloaded once per attempt, here (hashed on the way); a local file is read in place
        # one extraction worker (the lock): the other lane writes a file's elements meanwhile
        with self.store.local_copy(row["raw_path"], row["content_hash"]) as raw, self._extract_lock:
            document = self._extract(raw.path, config.get("extension") or Path(filename(row)).suffix)
        elapsed = ms(start)
        stats = {"elements": len(document.elements), "pages": document.page_count, "notes": document.notes}
        if raw.fetched_bytes:
            stats["raw_fetched_bytes"] = raw.fetched_bytes
        with self.db.transaction() as conn:  # the heartbeat first: it holds the file (LeaseLost if not ours)
            file_ledger.heartbeat(conn, row["run_id"], self.owner,
                                  {**stats, "timings_ms": timings(row, extract=elapsed)})
            staging.ensure_staging_row(conn, row["run_id"], row["tenant_id"])
            staging.write_elements(conn, row["run_id"], document.elements, document.page_count, stats)
        return FileOutcome.of(row, STEP_DONE, f"{len(document.elements)} elements", stats)
