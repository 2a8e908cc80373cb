"""Staging a metric upload: stream the file, normalise and validate each row, COPY in bounded chunks.

A CSV export in a platform's own layout is read as Arrow record batches and validated per batch with
``pyarrow.compute`` (``batch_normalization``); JSON records are read incrementally by ``ExportReader``
and validated the same way in batches of one layout. A CSV file in a generic layout, whose quotes do not
balance, or that Arrow cannot decode goes row by row through ``ExportReader`` and ``normalize_row``.
All paths number rows alike and give the same reasons, so a file that stops being readable by Arrow
half-way continues row by row after the rows already staged.

Memory stays bounded by one batch (``chunk_rows`` rows on the row path) whatever the file size. A rerun
resumes after the last staged ``row_index`` (rows already staged are parsed but not written again).

Batches of the Arrow and JSON paths commit without waiting for their WAL to reach disk
(``synchronous_commit = off``). A server crash can then lose the last batches an attempt committed,
and an attempt that outlives a restart would write the next batch above the hole. So each batch first
checks, in its own transaction, that the upload's last staged row is the one just before it, and
``staging_complete`` checks that every row counted is there (``verify_staged``): a lost batch fails the
attempt with ``StagedRowsLost`` (transient), and the retry resumes after the rows that survived. The
``staging_complete`` commit is synchronous, so it flushes every batch before it.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from psycopg.types.json import Jsonb

from ingestion_pipeline.core import ledger
from ingestion_pipeline.core.db import Database
from ingestion_pipeline.core.failpoints import failpoint
from ingestion_pipeline.core.failures import TransientError
from ingestion_pipeline.core.ledger import METRIC_UPLOADS
from ingestion_pipeline.core.progress import RowProgress, Sink
from ingestion_pipeline.core.upload_store import StoredObjectMissing, UploadStore, stored_in
from ingestion_pipeline.metrics.batch_normalization import (
    VALUE_COLUMNS,
    BatchNormalizer,
    column_text,
    exact_staged,
    supports,
)
from ingestion_pipeline.metrics.csv_batches import RowBatch, read_batches, scan_bytes, text_breaks
from ingestion_pipeline.metrics.exports import ExportReader, locate_header, plan_notes
from ingestion_pipeline.metrics.normalization import normalize_row
from ingestion_pipeline.metrics.readers import csv_rows, open_text, refuse_binary
from ingestion_pipeline.metrics.staging_copy import (
    COPY,
    COPY_NO_ERRORS,
    BackgroundWriter,
    EncodedBatch,
    encode_batch,
)
from ingestion_pipeline.metrics.uploads import MetricUpload

JSON_BATCH_ROWS = 5_000


class StagedRowsLost(TransientError):
    """The upload's staged rows are not the ones this attempt committed: a crash lost commits that had not
    reached disk yet (or, were the ledger's hold ever bypassed, another attempt wrote rows after them)."""

    def __init__(self, upload_id: int, expected_last: int, found_last: int) -> None:
        if found_last < expected_last:
            message = (f"rows {found_last + 1}-{expected_last} were committed but are no longer staged (the "
                       f"database restarted before they reached disk); the retry stages them again from row "
                       f"{found_last + 1}")
        else:
            message = (f"rows {expected_last + 1}-{found_last} are staged but this attempt did not write them; "
                       f"the retry resumes after row {found_last}")
        super().__init__("staged_rows_lost", f"upload {upload_id}: {message}")


def discard(conn, upload_ids: Sequence[int]) -> None:
    """Drop the staged rows of uploads that will never be promoted (canceled work)."""
    conn.execute("DELETE FROM staging_rows WHERE upload_id = ANY(%s)", (list(upload_ids),))


def _last_staged(conn, upload_id: int) -> int:
    return conn.execute("SELECT coalesce(max(row_index), 0) AS n FROM staging_rows WHERE upload_id = %s",
                        (upload_id,)).fetchone()["n"]


def verify_staged(conn, upload_id: int, expected_last: int) -> None:
    """Raise ``StagedRowsLost`` unless the upload's last staged row is ``expected_last`` (rows are numbered
    without gaps, so rows below it are there too: each batch checked its predecessor)."""
    found = _last_staged(conn, upload_id)
    if found != expected_last:
        raise StagedRowsLost(upload_id, expected_last, found)


class ArrowPathUnavailable(Exception):
    """The file cannot (or can no longer) be read as Arrow batches; the row path takes over."""


@dataclass
class StagingCounts:
    total: int
    valid: int
    invalid: int
    resumed_after: int  # rows found already staged by an earlier attempt
    skipped: int = 0  # summary / total rows of the export: not data, not invalid
    layout: str | None = None
    notes: list[str] = field(default_factory=list)
    reader: str = "rows"  # "arrow": read as record batches; "rows": row by row
    vectorised: int = 0  # rows the Arrow path validated without normalize_row

    @property
    def valid_ratio(self) -> float:
        return self.valid / self.total if self.total else 0.0


def _json_default(value):
    return str(value)


@dataclass
class _Written:
    """Rows this attempt committed, counted as each batch commits (recounting 1M staged rows is a cost of its own:
    benchmarks/metrics_load.py)."""
    total: int = 0
    valid: int = 0

    def copy(self, db: Database, upload_id: int, owner: str, batch: EncodedBatch) -> None:
        _copy_batch(db, upload_id, owner, batch)
        self.total += batch.rows
        self.valid += batch.valid

    def counts(self, db: Database, upload_id: int, already: int) -> tuple[int, int]:
        """(total, valid) of the upload: an earlier attempt's rows (up to ``already``) from the table."""
        total, valid = _counts(db, upload_id, through=already) if already else (0, 0)
        return total + self.total, valid + self.valid


def _staged_rows(db: Database, upload_id: int) -> int:
    with db.connection() as conn:
        return _last_staged(conn, upload_id)


def stage_upload(db: Database, upload: MetricUpload, *, owner: str, chunk_rows: int = 10_000,
                 arrow: bool = True, progress_log: Sink | None = None,
                 store: UploadStore | None = None) -> StagingCounts:
    """Stage every row of the upload's file; raises MalformedFileError (with the line) on a broken file.

    Each chunk is written only while ``owner`` still holds the upload (``LeaseLost`` otherwise).
    ``arrow=False`` forces the row path (the tests compare both). Progress (rows, rows/s, bytes read,
    ETA) goes to the progress logger and to ``progress_log``.
    """
    if not upload.raw_path:
        raise StoredObjectMissing("no stored copy recorded")
    store = store or stored_in(upload.raw_path)
    with store.local_copy(upload.raw_path, upload.content_hash) as raw:  # an S3 object: downloaded once, here
        return _stage_file(db, upload, raw.path, owner, chunk_rows, arrow, progress_log)


def _stage_file(db: Database, upload: MetricUpload, raw_path: Path, owner: str, chunk_rows: int, arrow: bool,
                progress_log: Sink | None) -> StagingCounts:
    refuse_binary(raw_path)  # before any reader buffers it (an upload recorded before submit checked)
    progress = RowProgress(f"staging upload {upload.upload_id}", raw_path.stat().st_size,
                           sinks=[progress_log] if progress_log else [])
    if arrow and upload.file_format == "csv":
        try:
            counts = _stage_arrow(db, upload, raw_path, owner, progress)
        except ArrowPathUnavailable:
            counts = _stage_rows(db, upload, raw_path, owner, chunk_rows, progress)
    elif arrow:
        counts = _stage_json(db, upload, raw_path, owner, progress)
    else:
        counts = _stage_rows(db, upload, raw_path, owner, chunk_rows, progress)
    progress.finish()
    return counts


def _stage_json(db: Database, upload: MetricUpload, raw_path: Path, owner: str, progress: RowProgress) -> StagingCounts:
    """JSON arrays, JSON Lines and API responses: records read incrementally, validated in batches of
    consecutive records of one layout (a batch of anything the Arrow path does not support, one by one)."""
    upload_id = upload.upload_id
    already = _staged_rows(db, upload_id)
    written = _Written()
    normalizers: dict[tuple, BatchNormalizer] = {}
    group: list[tuple[int, object]] = []
    group_plan = None
    row_index = 0

    def flush(writer: BackgroundWriter) -> None:
        nonlocal row_index
        if not group:
            return
        first = row_index + 1
        logical = np.arange(first, first + len(group), dtype=np.int64)
        lines = np.array([line for line, _ in group], dtype=np.int64)
        records = [raw for _, raw in group]
        if group_plan is not None and supports(group_plan) and all(isinstance(r, dict) for r in records):
            header = list(records[0])
            key = (id(group_plan), tuple(header))
            if key not in normalizers:
                normalizers[key] = BatchNormalizer(group_plan, header, upload.workspace_id, upload.platform,
                                                   _dumps)
            columns = [pa.array([_cell(r.get(name)) for r in records], pa.string()) for name in header]
            batch = RowBatch(columns, lines, np.zeros(len(group), dtype=np.int64), logical, [], records,
                             [_dumps(r) for r in records])
            staged = normalizers[key].stage(batch)
        else:
            staged = exact_staged([(int(n), int(line), raw, group_plan) for n, (line, raw) in zip(logical, group,
                                                                                                   strict=True)],
                                  workspace_id=upload.workspace_id, platform=upload.platform, dumps=_dumps)
        _put_unstaged(writer, upload_id, staged, row_index, already)
        row_index += len(group)
        progress.advance(len(group), _position(stream))
        group.clear()

    with raw_path.open("rb") as stream, \
            BackgroundWriter(lambda item: written.copy(db, upload_id, owner, item)) as writer:
        export = ExportReader(stream, upload.file_format, upload.platform)
        for line, raw, plan in export.rows():
            if group and (plan is not group_plan or len(group) >= JSON_BATCH_ROWS):
                flush(writer)
            group.append((line, raw))
            group_plan = plan
        flush(writer)
    fast = sum(n.fast_rows for n in normalizers.values())
    total, valid = written.counts(db, upload_id, already)
    return StagingCounts(total, valid, total - valid, already, export.summary_rows,
                         export.layout.name if export.layout else None, export.notes, "arrow", fast)


def _position(stream) -> int:
    """How far into the file the reading got (the readers' text wrappers close it once it is read through:
    then all of it; ``RowProgress`` caps the position at the file's size)."""
    return 2**62 if stream.closed else stream.tell()


def _cell(value) -> str:
    """A JSON value as the text normalize_row reads (``_text``: str(value)); null as blank."""
    return "" if value is None else str(value)


def _stage_arrow(db: Database, upload: MetricUpload, raw_path: Path, owner: str,
                 progress: RowProgress) -> StagingCounts:
    upload_id = upload.upload_id
    already = _staged_rows(db, upload_id)
    scan = scan_bytes(raw_path)
    if not scan.quotes_balanced:  # maybe an unclosed quote: the row reader finds its line
        raise ArrowPathUnavailable("quotes do not balance")
    with raw_path.open("rb") as stream:
        text, encoding = open_text(stream)
        seen, header_at, plan = locate_header(csv_rows(text), upload.platform)
    if not supports(plan):
        raise ArrowPathUnavailable(f"layout {plan.layout.name}")
    header_line, header = seen[header_at]
    header_breaks = sum(text_breaks(cell) for cell in header)
    normalizer = BatchNormalizer(plan, header, upload.workspace_id, upload.platform, _dumps,
                                 check_controls=scan.has_controls)
    with db.transaction() as conn:
        ledger.hold(conn, METRIC_UPLOADS, upload_id, owner)
        conn.execute("UPDATE data_uploads SET raw_columns = %s WHERE upload_id = %s",
                     (Jsonb(normalizer.raw_columns), upload_id))
    row_index = 0
    written = _Written()
    # Postgres parses and indexes one batch while this process validates the next (both cores busy).
    with BackgroundWriter(lambda item: written.copy(db, upload_id, owner, item)) as writer:
        try:
            for batch in read_batches(raw_path, encoding=encoding, width=len(header), header_rows=header_at + 1,
                                      first_data_line=header_line + 1 + header_breaks, with_cr=scan.has_cr):
                staged = normalizer.stage(batch)
                _put_unstaged(writer, upload_id, staged, row_index, already)
                row_index += staged.num_rows
                # Arrow reads far ahead of the rows it hands out: how far in the file is the batch's last line
                line = int(batch.lines[-1]) if len(batch.lines) else 0
                progress.advance(staged.num_rows,
                                 min(progress.total_bytes, progress.total_bytes * line // max(scan.line_breaks, 1)))
        except (pa.ArrowInvalid, csv.Error, UnicodeDecodeError) as exc:  # undecodable text, malformed refused row
            writer.close()  # what was read before the problem is staged; the row path continues after it
            raise ArrowPathUnavailable(str(exc)) from exc
    total, valid = written.counts(db, upload_id, already)
    return StagingCounts(total, valid, total - valid, already, normalizer.summary_rows, plan.layout.name,
                         plan_notes(plan), "arrow", normalizer.fast_rows)


def _put_unstaged(writer: BackgroundWriter, upload_id: int, staged: pa.Table, before: int,
                  already: int) -> None:
    """Hand the writer the rows of ``staged`` (numbered from ``before + 1``) that an earlier attempt has not
    staged yet (``already``: the last row it staged)."""
    n = staged.num_rows
    if n == 0 or before + n <= already:
        return
    indexes = pa.array(range(before + 1, before + n + 1), pa.int64())
    keep = pc.greater(indexes, already)
    writer.put(encode_batch(upload_id, staged.filter(keep), pc.filter(indexes, keep)))


def _copy_batch(db: Database, upload_id: int, owner: str, batch: EncodedBatch) -> None:
    with db.transaction() as conn:
        ledger.hold(conn, METRIC_UPLOADS, upload_id, owner)
        # no wait for the WAL flush (benchmarks/metrics_load.py); safe only with the check below (module doc)
        conn.execute("SET LOCAL synchronous_commit = off")
        verify_staged(conn, upload_id, batch.first - 1)
        if batch.text:
            with conn.cursor().copy(COPY_NO_ERRORS) as copy:
                copy.write(batch.text)
        if batch.with_errors:
            with conn.cursor().copy(COPY) as copy:
                copy.write(batch.with_errors)
    failpoint("metrics.stage")  # one batch committed, the rest not yet


def _counts(db: Database, upload_id: int, *, through: int | None = None) -> tuple[int, int]:
    """(total, valid) staged rows of the upload, all or those numbered up to ``through``."""
    with db.connection() as conn:
        counts = conn.execute(
            """SELECT count(*) AS total, count(*) FILTER (WHERE validation_status <> 'invalid') AS valid
                 FROM staging_rows WHERE upload_id = %s AND (%s::int IS NULL OR row_index <= %s::int)""",
            (upload_id, through, through),
        ).fetchone()
    return counts["total"], counts["valid"]


def _stage_rows(db: Database, upload: MetricUpload, raw_path: Path, owner: str, chunk_rows: int,
                progress: RowProgress) -> StagingCounts:
    upload_id = upload.upload_id
    already = _staged_rows(db, upload_id)
    pending: list[tuple] = []
    row_index = reported = 0  # progress counts rows read, an earlier attempt's included (as the Arrow path)

    def flush() -> None:
        if not pending:
            return
        with db.transaction() as conn:
            ledger.hold(conn, METRIC_UPLOADS, upload_id, owner)
            with conn.cursor().copy(COPY) as copy:
                for record in pending:
                    copy.write_row(record)
        pending.clear()
        failpoint("metrics.stage")  # one chunk committed, the rest not yet

    with raw_path.open("rb") as stream:
        export = ExportReader(stream, upload.file_format, upload.platform)
        for line_number, raw, plan in export.rows():
            row_index += 1
            if row_index <= already:
                continue
            row = normalize_row(raw, workspace_id=upload.workspace_id, platform=upload.platform, plan=plan)
            pending.append((
                upload_id, row_index, line_number, row.entity_type, row.natural_key_hash,
                Jsonb(raw if isinstance(raw, dict) else {"value": raw}, dumps=_dumps),
                *[column_text(row.values.get(name)) for name in VALUE_COLUMNS],
                "valid" if row.valid else "invalid", Jsonb(row.errors, dumps=_dumps),
            ))
            if len(pending) >= chunk_rows:
                progress.advance(row_index - reported, _position(stream))
                reported = row_index
                flush()
        progress.advance(row_index - reported, _position(stream))
        flush()
    total, valid = _counts(db, upload_id)
    return StagingCounts(total, valid, total - valid, already, export.summary_rows,
                         export.layout.name if export.layout else None, export.notes)


def _finite(value):
    """jsonb has no Infinity or NaN: keep them as the strings the file held."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _dumps(value) -> str:
    # jsonb cannot hold NUL characters; exports occasionally carry them
    return json.dumps(_finite(value), default=_json_default, ensure_ascii=False).replace("\\u0000", "")
