"""Staged rows as COPY input: the text COPY reads, encoded with Arrow compute by the thread that validates a
batch, and the one background thread that sends batches while the next is validated (``metrics/staging``)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingestion_pipeline.metrics.batch_normalization import VALUE_COLUMNS
from ingestion_pipeline.metrics.csv_batches import may_contain

COLUMNS = ("upload_id", "row_index", "line_number", "entity_type", "natural_key_hash", "raw_data", *VALUE_COLUMNS,
           "validation_status", "validation_errors")
COPY = f"COPY staging_rows ({', '.join(COLUMNS)}) FROM STDIN"
# A row without errors leaves validation_errors to its default, '[]': parsing that jsonb on every row was a
# measurable part of the server's COPY time (benchmarks/staging_copy.py).
COLUMNS_NO_ERRORS = COLUMNS[:-1]
COPY_NO_ERRORS = f"COPY staging_rows ({', '.join(COLUMNS_NO_ERRORS)}) FROM STDIN"

class BackgroundWriter:
    """Runs ``write`` over the items put, in order, on one thread; at most one item waits.

    An error in the thread is raised in the caller at its next ``put`` or at ``close``; leaving the
    ``with`` block on an error stops the thread after the item it is writing.
    """

    def __init__(self, write) -> None:
        self._write = write
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="staging-copy", daemon=True)
        self._thread.start()
        self._closed = False

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._write(item)
                except BaseException as exc:  # noqa: BLE001 - handed to the caller
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def put(self, item) -> None:
        self._raise()
        self._queue.put(item)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._stop()
        self._raise()

    def _stop(self) -> None:
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> BackgroundWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        self._error = self._error or exc  # stop writing what is still queued
        if not self._closed:
            self._closed = True
            self._stop()


@dataclass
class EncodedBatch:
    """Staged rows as the text COPY reads, encoded by the thread that validates them: the writing thread
    only sends, so the server parses one batch while the next is validated and encoded."""
    first: int  # row_index of the first row
    rows: int
    valid: int
    text: memoryview  # the rows without errors, for COPY_NO_ERRORS
    with_errors: memoryview | None = None  # the rows with errors (invalid rows), for COPY


# COPY's text format, not CSV: the server tracks CSV's quotes byte by byte, and every raw_data value is full
# of them (benchmarks/staging_copy.py compares the two on a 1M-row Meta export). These characters of a value
# are written as escapes; NULL is \N.
_TEXT_ESCAPES = (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r"))  # the backslash first
_TEXT_SPECIALS = tuple(special.encode() for special, _ in _TEXT_ESCAPES)


def _text_values(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    if not pa.types.is_string(values.type):  # numbers, dates, large strings: as text, then escaped alike
        values = pc.cast(values, pa.string())
    if may_contain(values, *_TEXT_SPECIALS):  # one read of the column's bytes; rarely true
        for special, escaped in _TEXT_ESCAPES:
            values = pc.replace_substring(values, special, escaped)
    return values


def copy_text(columns: Sequence[pa.ChunkedArray | pa.Array]) -> memoryview:
    """Rows of equally long columns as ``COPY … FROM STDIN`` reads them in its text format."""
    lines = pc.binary_join_element_wise(*map(_text_values, columns), "\t", null_handling="replace",
                                        null_replacement="\\N")
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    lines = pc.binary_join_element_wise(lines, "", "\n")  # each line ends in a newline
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=len(lines) + 1, offset=lines.offset * 4)
    return memoryview(lines.buffers()[2])[offsets[0]:offsets[-1]]


def copy_lines(upload_id: int, rows: pa.Table, indexes: pa.Array, columns: Sequence[str]) -> memoryview:
    return copy_text([pa.array([upload_id] * len(indexes), pa.int64()), indexes, *[rows[name] for name in columns[2:]]])


def encode_batch(upload_id: int, staged: pa.Table, indexes: pa.Array) -> EncodedBatch:
    first, rows = indexes[0].as_py(), staged.num_rows
    invalid = pc.sum(pc.equal(staged["validation_status"], "invalid")).as_py() or 0
    no_errors = pc.equal(staged["validation_errors"], "[]")
    with_errors = None
    if not pc.all(no_errors).as_py():  # rows with errors go through a second COPY, with the column
        has_errors = pc.invert(no_errors)
        with_errors = copy_lines(upload_id, staged.filter(has_errors), pc.filter(indexes, has_errors), COLUMNS)
        staged, indexes = staged.filter(no_errors), pc.filter(indexes, no_errors)
    return EncodedBatch(first, rows, rows - invalid, copy_lines(upload_id, staged, indexes, COLUMNS_NO_ERRORS),
                         with_errors)
