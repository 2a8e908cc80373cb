"""Step 2, ``document_elements``: extract each file in a bounded worker process and stage its elements; a big PDF
in units read side by side (``documents/units.py``)."""

from __future__ import annotations

import functools
import logging
import os
import re
import socket
import threading
import time
from pathlib import Path

from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.core.progress import UnitProgress
from ingestion_pipeline.core.upload_store import StoredObjectMissing
from ingestion_pipeline.documents import file_ledger, staging, units
from ingestion_pipeline.documents.extraction import ExtractedDocument, ExtractionError, ReadPage, assemble_pdf, ocr
from ingestion_pipeline.documents.steps.page_images import keep_office_page_images, keep_page_images
from ingestion_pipeline.documents.steps.runner import (
    STEP_DONE,
    FileOutcome,
    StepRunner,
    filename,
    in_pool,
    ms,
    timings,
)

log = logging.getLogger("ingestion_pipeline.documents")


def extract_batch(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    """Every file of the batch; a big PDF's units on the step's lanes (the in-process shape)."""
    return run.for_each(partition_key, functools.partial(_extract_one, run), "extract", lanes=run.lanes)


def _reusable_pages(run: StepRunner, conn, row: dict, extension: str) -> list[ReadPage]:
    """A new version of a scanned PDF: its unchanged pages keep their text, only changed ones are read by OCR."""
    if extension.lower() != ".pdf" or row.get("doc_id") is None:
        return []
    return staging.reusable_ocr_pages(conn, row["tenant_id"], row["doc_id"])


def _extension(row: dict) -> str:
    return (row["config"] or {}).get("extension") or Path(filename(row)).suffix


def _units_of(run: StepRunner, path: Path, extension: str,
              reusable: list[ReadPage]) -> list[units.Unit] | None:
    """The units a PDF of more than a unit's work is read in (None: read whole). The extraction worker surveys
    the file (PDFium parses it: untrusted input): its pages, and which need OCR — not an earlier version's
    unchanged scanned pages, whose text is reused (a revision with 2 of 60 pages changed is 2 pages of work), nor
    blank ones. A PDF over the page or OCR budget fails here (``file_too_many_pages``), before any unit is planned."""
    survey = getattr(run.extract_file, "survey", None)
    if survey is None or extension.lower() != ".pdf":
        return None
    limits = run.settings.limits
    found = survey(path, limits.unit_pages, ocr.reusable_sources(reusable, limits.page_images))
    if found.scanned is None:  # no more pages than a unit
        return None
    planned = units.plan_units(found.page_count, limits.unit_pages, found.scanned, limits.unit_text_pages)
    return planned if len(planned) > 1 else None


def _extract_one(run: StepRunner, row: dict) -> FileOutcome:
    extension = _extension(row)
    with run.db.connection() as conn:
        state = staging.staging_state(conn, row["file_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome.of(row, STEP_DONE, "elements already staged")
        reusable = _reusable_pages(run, conn, row, extension)
    start = time.perf_counter()
    failpoint("extract.file")
    if not row["raw_path"]:
        raise StoredObjectMissing("no stored copy recorded")
    # an S3 store's object is downloaded once per attempt, here (hashed on the way); a local file is read in place
    with run.store.local_copy(row["raw_path"], row["content_hash"]) as raw:
        planned = _units_of(run, raw.path, extension, reusable)
        if planned:
            _read_units_on_lanes(run, row, raw.path, planned, reusable)
            return _assemble(run, row, planned[-1].last_page, ms(start), raw.fetched_bytes)
        document = run.extract_file(raw.path, extension, reusable)
        if extension.lower() == ".pdf" and document.page_count:
            keep_page_images(run, row, raw.path, 1, document.page_count, document.ocr_pages)
        else:
            keep_office_page_images(run, row, raw.path, extension)
    return _stage(run, row, document, ms(start), raw.fetched_bytes)


def _stage(run: StepRunner, row: dict, document: ExtractedDocument, elapsed: int, fetched_bytes: int,
           unit_stats: dict | None = None) -> FileOutcome:
    """Write the file's document to staging: its elements, the pages OCR read, the figures."""
    stats = {"elements": len(document.elements), "pages": document.page_count, "notes": document.notes,
             **(unit_stats or {})}
    if document.ocr_pages:
        reused = sum(page.reused for page in document.ocr_pages)
        stats.update(ocr_pages_read=len(document.ocr_pages) - reused, ocr_pages_reused=reused)
    if fetched_bytes:
        stats["raw_fetched_bytes"] = fetched_bytes
    with run.db.transaction() as conn:  # the heartbeat first: it holds the file (LeaseLost if not ours)
        file_ledger.heartbeat(conn, row["file_id"], run.owner,
                              {**stats, "timings_ms": timings(row, extract=elapsed)})
        staging.ensure_staging_row(conn, row["file_id"], row["tenant_id"])
        staging.write_ocr_pages(conn, row["file_id"], document.ocr_pages)
        staging.write_elements(conn, row["file_id"], document.elements, document.page_count, stats)
    return FileOutcome.of(row, STEP_DONE, f"{len(document.elements)} elements", stats)


# -- units of a big PDF ------------------------------------------------------------------------------------------

def _plan_units(run: StepRunner, row: dict, planned: list[units.Unit]) -> list[units.Unit]:
    """Record the file's units (done ones kept); the ones still to read."""
    with run.db.transaction() as conn:
        file_ledger.hold(conn, row["file_id"], run.owner)
        staging.ensure_staging_row(conn, row["file_id"], row["tenant_id"])
        units.plan(conn, row["file_id"], row["content_hash"], planned)
        todo = units.pending(conn, row["file_id"])
    if len(todo) < len(planned):
        log.info("%s: %d of %d units already read, %d to read", filename(row), len(planned) - len(todo),
                 len(planned), len(todo))
    return todo


def _take(run: StepRunner, row: dict, unit: units.Unit, holder: str) -> bool:
    """Lease the unit to this reader; False when it is read already. A unit another live reader holds (a second
    delivery of its step) is waited for: read by then, or handed on once that reader stops renewing its lease."""
    waited = False
    while True:
        with run.db.transaction() as conn:  # the file's hold first: a run that lost the file reads nothing
            file_ledger.hold(conn, row["file_id"], run.owner)
            taken = units.take(conn, row["file_id"], unit.number, holder)
        if taken != "busy":
            return taken == "taken"
        if not waited:
            log.info("%s: %s is being read by another worker: waiting for it", filename(row), unit.pages)
            waited = True
        time.sleep(1.0)


def _read_unit(run: StepRunner, row: dict, path: Path, unit: units.Unit, reusable: list[ReadPage]) -> units.Unit:
    """Read one unit under its lease and keep it (a unit someone else kept meanwhile is not written again)."""
    holder = f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
    if not _take(run, row, unit, holder):
        return unit
    start = time.perf_counter()
    with units.UnitLease(run.db, row["file_id"], unit.number, holder):
        try:
            pages = run.extract_file(path, ".pdf", reusable, (unit.first_page, unit.last_page))
        except ExtractionError as exc:  # the file's failure, saying where
            raise ExtractionError(f"{unit.pages}: {exc}", code=exc.code, suggestion=exc.suggestion) from exc
        keep_page_images(run, row, path, unit.first_page, unit.last_page, pages.read_pages)
        with run.db.transaction() as conn:  # the file's hold first: a run that lost the file writes nothing
            file_ledger.hold(conn, row["file_id"], run.owner)
            if units.finish(conn, row["file_id"], unit, pages, done_by=f"{socket.gethostname()}:{os.getpid()}",
                            extract_ms=ms(start)):
                done, total = units.counts(conn, row["file_id"])
                file_ledger.heartbeat(conn, row["file_id"], run.owner, {"units_done": done, "units_total": total})
    failpoint("extract.unit_done")
    return unit


def _read_units_on_lanes(run: StepRunner, row: dict, path: Path, planned: list[units.Unit],
                         reusable: list[ReadPage]) -> None:
    """Read a big PDF's units not done yet side by side on the step's lanes, each kept the moment it is read."""
    todo = _plan_units(run, row, planned)
    page_count = planned[-1].last_page
    pages_left = sum(unit.last_page - unit.first_page + 1 for unit in todo)
    progress = UnitProgress(f"extract {filename(row)}", len(planned), page_count, sinks=run.progress_sinks)
    progress.advance(len(planned) - len(todo), page_count - pages_left, read=False)
    in_pool([functools.partial(_read_unit, run, row, path, unit, reusable) for unit in todo], run.lanes,
            on_done=lambda unit: progress.advance(1, unit.last_page - unit.first_page + 1),
            on_interrupt=run.db.cancel_statements)
    progress.finish()


def _assemble(run: StepRunner, row: dict, page_count: int, elapsed: int | None = None,
              fetched_bytes: int = 0) -> FileOutcome:
    """The file's document from its units, once every one is done (counted); staged as a whole file's is."""
    with run.db.connection() as conn:
        count, parts, unit_ms = units.done(conn, row["file_id"])
        todo = units.pending(conn, row["file_id"])
    if len(parts) != count:
        raise TransientError("units_incomplete", f"{count - len(parts)} of {count} units of the file are not read: "
                             + ", ".join(unit.pages for unit in todo[:5]))
    document = assemble_pdf(parts, page_count, run.settings.limits)
    unit_stats = {"units": count, "unit_pages": run.settings.limits.unit_pages, **unit_ms}
    # the extract step's time: in units on other workers, from the first unit planned to the last one kept
    return _stage(run, row, document, unit_ms["units_wall_ms"] if elapsed is None else elapsed, fetched_bytes,
                  unit_stats)


# -- the fanned-out shape (INGESTION_EXECUTOR=celery: defs/documents/assets.py) ---------------------------------
# plan_extraction -> one step for the batch's whole files and one step per unit of a big PDF, on any worker ->
# assemble_units. State lives in staging_units, so each step may run on another host and run again.

WHOLE_FILES = "whole_files"
_UNIT_KEY = re.compile(r"^file_(\d+)_unit_(\d+)$")


def unit_key(file_id: int, unit: units.Unit) -> str:
    """The unit's name in the run (a Dagster mapping key: letters, digits and underscores)."""
    return f"file_{file_id}_unit_{unit.number}"


def plan_extraction(run: StepRunner, partition_key: str) -> tuple[list[str], list[FileOutcome]]:
    """Plan the units of the batch's big PDFs: the work items (``WHOLE_FILES`` first where a file is extracted
    whole, then every unit still to read) and each file's outcome (a file that cannot be opened fails here, with
    the reason)."""
    keys: list[str] = []

    def plan_one(row: dict) -> FileOutcome:
        with run.db.connection() as conn:
            state = staging.staging_state(conn, row["file_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome.of(row, STEP_DONE, "elements already staged")
        if _extension(row).lower() != ".pdf":  # only a PDF is read in units: the others are not even fetched
            return FileOutcome.of(row, STEP_DONE, "extracted whole")
        if not row["raw_path"]:
            raise StoredObjectMissing("no stored copy recorded")
        # from an S3 store, a big PDF is fetched here and by each unit's step (hosts share no disk)
        with run.db.connection() as conn:
            reusable = _reusable_pages(run, conn, row, ".pdf")
        with run.store.local_copy(row["raw_path"], row["content_hash"]) as raw:
            planned = _units_of(run, raw.path, ".pdf", reusable)
        if not planned:
            return FileOutcome.of(row, STEP_DONE, "extracted whole")
        todo = _plan_units(run, row, planned)
        keys.extend(unit_key(row["file_id"], unit) for unit in todo)
        pages = planned[-1].last_page
        return FileOutcome.of(row, STEP_DONE, f"{len(planned)} units of {pages} pages, {len(todo)} to read",
                              {"units": len(planned), "pages": pages})

    outcomes = run.for_each(partition_key, plan_one, "plan units")
    # no step for whole files when there are none (a big PDF's revision alone): Dagster assembles after no unit too
    whole = any(o.detail == "extracted whole" for o in outcomes)
    return [WHOLE_FILES] * whole + keys, outcomes


def _units_planned(run: StepRunner, file_id: int) -> bool:
    with run.db.connection() as conn:
        return conn.execute("SELECT 1 FROM staging_units WHERE file_id = %s LIMIT 1", (file_id,)).fetchone() is not None


def extract_whole_files(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    """The batch's files that are not read in units (each unit is a step of its own)."""

    def one(row: dict) -> FileOutcome:
        if _units_planned(run, row["file_id"]):
            return FileOutcome.of(row, STEP_DONE, "read in units")
        return _extract_one(run, row)

    return run.for_each(partition_key, one, "extract", lanes=run.lanes)


def extract_unit(run: StepRunner, partition_key: str, key: str) -> FileOutcome | None:
    """Read the unit ``key`` (``unit_key``) and keep it; None when its file is no longer this run's to work on."""
    found = _UNIT_KEY.match(key)
    if found is None:
        raise ValueError(f"not a unit: {key!r}")
    file_id, number = int(found.group(1)), int(found.group(2))
    with run.db.connection() as conn:
        rows = [r for r in file_ledger.held_rows(conn, partition_key, run.owner) if r["file_id"] == file_id]
        unit = next((u for u in units.pending(conn, file_id) if u.number == number), None)
        reusable = _reusable_pages(run, conn, rows[0], ".pdf") if rows else []
    if not rows:
        return None
    if unit is None:  # kept already: a second delivery of the step
        return FileOutcome.of(rows[0], STEP_DONE, f"unit {number} already read")

    def read(row: dict) -> FileOutcome:
        with run.store.local_copy(row["raw_path"], row["content_hash"]) as raw:
            _read_unit(run, row, raw.path, unit, reusable)
        return FileOutcome.of(row, STEP_DONE, f"{unit.pages} read")

    return run.guarded(rows[0], read)


def assemble_units(run: StepRunner, partition_key: str) -> list[FileOutcome]:
    """Each big PDF's document from its units, once all are done (a file with a unit missing is retried: its
    done units are kept); the batch's other files pass."""

    def one(row: dict) -> FileOutcome:
        with run.db.connection() as conn:
            state = staging.staging_state(conn, row["file_id"])
        if state is not None and state["elements_done"]:
            return FileOutcome.of(row, STEP_DONE, "elements already staged")
        if not _units_planned(run, row["file_id"]):
            raise TransientError("step_out_of_order", "the file was not extracted before its units were assembled")
        with run.db.connection() as conn:
            pages = conn.execute("SELECT max(last_page) AS n FROM staging_units WHERE file_id = %s",
                                 (row["file_id"],)).fetchone()["n"]
        return _assemble(run, row, pages)

    return run.for_each(partition_key, one, "assemble units")
