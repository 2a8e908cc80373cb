"""A CSV export read as Arrow record batches (``pyarrow.csv.open_csv``), with each row's line number.

Every column is read as text (nothing is guessed). Arrow does not know where a row starts in the file,
so the line is reconstructed: rows are counted from the header, plus the line breaks inside quoted
values of the rows before. Rows Arrow refuses (another number of fields than the header) come back
through ``refused`` with their text, parsed by the ``csv`` module, so they are staged as invalid rows
in their place, as the row-by-row reader does.

Arrow's parser is more lenient than ``csv`` in strict mode: it reads an unclosed quote to the end of
the file as one value. ``scan_bytes`` counts the quote characters first; an odd count means the file may
be malformed and the caller reads it with the exact reader, which reports the line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

SCAN_BYTES = 8 * 1024 * 1024
# About 5,000 rows of a wide export per batch: 4 MiB batches were a little faster but held over twice the
# memory at 1M rows (the intermediate arrays of a batch live until it is written; benchmarks/metrics_load.py).
BLOCK_BYTES = 1024 * 1024
# Bytes of characters a JSON string must escape (line breaks are counted apart), and the C1 "next line"
# (U+0085) that Python's str.strip() treats as space: bytes.translate keeps only these, at memory speed.
_NOT_CONTROL = bytes(b for b in range(256) if b not in (*range(0x0A), 0x0B, 0x0C, *range(0x0E, 0x20)))
_NEXT_LINE = b"\xc2\x85"


@dataclass(frozen=True)
class ByteScan:
    quotes: int
    has_controls: bool  # control characters other than line breaks (values that need JSON escaping)
    has_cr: bool
    line_breaks: int = 0  # as rows' line numbers count them, "\r\n" once (progress: see scan_bytes)

    @property
    def quotes_balanced(self) -> bool:
        return self.quotes % 2 == 0


def scan_bytes(path: Path) -> ByteScan:
    """One pass over the raw bytes (a few hundred MB/s): quote parity, control characters, carriage returns,
    line breaks.

    Line breaks are the file's ``\n`` bytes, plus its ``\r`` bytes when its first carriage return is not
    followed by a line feed (a file with carriage returns only): in a ``\r\n`` file they are counted no
    further than that first one, the common case costing nothing. (A file that mixes both styles gets an
    estimate; only progress reads it.)"""
    quotes = newlines = returns = 0
    controls = cr = False
    crlf: bool | None = None  # the line-end style, from the first carriage return
    tail = b""
    with path.open("rb") as stream:
        while chunk := stream.read(SCAN_BYTES):
            quotes += chunk.count(b'"')
            newlines += chunk.count(b"\n")
            controls = (controls or bool(chunk.translate(None, _NOT_CONTROL))
                        # the one-byte look first: the two-byte search cost as much as the other passes together
                        or (b"\x85" in chunk and _NEXT_LINE in chunk)
                        or tail + chunk[:1] == _NEXT_LINE)  # split across two reads
            if crlf is None and tail == b"\r":  # the first carriage return ended the last read
                crlf = chunk[:1] == b"\n"
            if crlf is not True and b"\r" in chunk:
                cr = True
                returns += chunk.count(b"\r")
                first = chunk.find(b"\r")
                if crlf is None and first + 1 < len(chunk):
                    crlf = chunk[first + 1:first + 2] == b"\n"
            tail = chunk[-1:]
    return ByteScan(quotes, controls, cr, newlines if crlf in (None, True) else newlines + returns)


@dataclass
class RefusedRow:
    logical: int  # 1-based row number in the file, counted as CSV rows (titles and header included)
    text: str

    @property
    def cells(self) -> list[str]:
        return next(csv.reader([self.text]), [])


@dataclass
class RowBatch:
    """Rows as text columns. From a CSV file; or from JSON records (``records``: the records themselves,
    which the exact path normalises and ``raw_json`` stores as they were)."""

    columns: list[pa.Array]  # one string array per header column
    lines: np.ndarray  # the line each row starts on
    breaks: np.ndarray  # line breaks inside each row's values
    logical: np.ndarray  # each row's logical number (orders rows and refused rows together)
    refused: list[tuple[RefusedRow, int]]  # rows Arrow refused in this stretch of the file, with their line
    records: list[dict] | None = None
    raw_json: list[str] | None = None


def may_contain(values: pa.Array | pa.ChunkedArray, *needles: bytes) -> bool:
    """Whether any of ``needles`` may occur in a string column: a search of its data buffers (memchr speed;
    ``pc.match_substring`` costs a kernel pass per needle and column). Bytes of a buffer outside a sliced
    array can only answer yes where the answer is no, which costs the caller its slower path, not a mistake."""
    for chunk in values.chunks if isinstance(values, pa.ChunkedArray) else (values,):
        data = chunk.buffers()[2]
        if data is not None and data.size:
            text = data.to_pybytes()
            if any(needle in text for needle in needles):
                return True
    return False


def line_breaks(values: pa.Array, with_cr: bool) -> np.ndarray:
    """Line breaks (\n, \r\n, or a lone \r) inside each value."""
    if not may_contain(values, *((b"\n", b"\r") if with_cr else (b"\n",))):
        return np.zeros(len(values), dtype=np.int64)  # the usual column
    counts = pc.count_substring(values, "\n").to_numpy(zero_copy_only=False).astype(np.int64)
    if with_cr:
        counts += pc.count_substring(values, "\r").to_numpy(zero_copy_only=False)
        counts -= pc.count_substring(values, "\r\n").to_numpy(zero_copy_only=False)
    return counts


def text_breaks(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def read_batches(path: Path, *, encoding: str, width: int, header_rows: int, first_data_line: int,
                 with_cr: bool) -> Iterator[RowBatch]:
    """Batches of the rows after the header (``header_rows`` rows: titles, date ranges, the header).

    ``first_data_line`` is the line the first row after the header starts on.
    """
    refused: list[RefusedRow] = []

    def refuse(row) -> str:
        refused.append(RefusedRow(int(row.number), row.text))
        return "skip"

    names = [f"c{i}" for i in range(width)]
    reader = pa_csv.open_csv(
        path,
        read_options=pa_csv.ReadOptions(
            use_threads=False, block_size=BLOCK_BYTES, skip_rows=header_rows, column_names=names,
            encoding="utf8" if encoding in ("utf-8", "utf-8-sig") else encoding),
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False,
                                          invalid_row_handler=refuse),
        convert_options=pa_csv.ConvertOptions(column_types={n: pa.string() for n in names}, strings_can_be_null=False,
                                              quoted_strings_can_be_null=False),
    )
    next_logical = header_rows + 1
    next_line = first_data_line
    for batch in reader:
        n = batch.num_rows
        if n == 0:
            continue
        refused.sort(key=lambda r: r.logical)
        logical = _assign(next_logical, n, [r.logical for r in refused])
        mine = [r for r in refused if r.logical <= logical[-1]]
        del refused[:len(mine)]
        breaks = np.zeros(n, dtype=np.int64)
        for column in batch.columns:
            breaks += line_breaks(column, with_cr)
        lines, refused_lines, next_line = _lines(next_line, next_logical, logical, breaks, mine)
        next_logical = int(logical[-1]) + 1
        yield RowBatch(list(batch.columns), lines, breaks, logical, list(zip(mine, refused_lines, strict=True)))
    if refused:  # refused rows after the last batch
        refused.sort(key=lambda r: r.logical)
        empty = np.zeros(0, dtype=np.int64)
        _, refused_lines, _ = _lines(next_line, next_logical, empty, empty, refused)
        yield RowBatch([pa.array([], pa.string()) for _ in range(width)], empty, empty, empty,
                       list(zip(refused, refused_lines, strict=True)))


def _assign(start: int, n: int, taken: list[int]) -> np.ndarray:
    """The first ``n`` logical numbers from ``start`` that are not refused rows."""
    taken_set = {t for t in taken if t >= start}
    end = start + n
    while end - start - sum(1 for t in taken_set if t < end) < n:
        end += 1
    numbers = np.arange(start, end, dtype=np.int64)
    if taken_set:
        numbers = numbers[~np.isin(numbers, np.fromiter(taken_set, dtype=np.int64))]
    return numbers[:n]


def _lines(next_line: int, next_logical: int, logical: np.ndarray, breaks: np.ndarray,
           refused: list[RefusedRow]) -> tuple[np.ndarray, list[int], int]:
    """Start lines of the batch's rows and of the refused rows among them; and the line after them all."""
    all_logical = np.concatenate([logical, np.array([r.logical for r in refused], dtype=np.int64)])
    all_breaks = np.concatenate([breaks, np.array([text_breaks(r.text) for r in refused], dtype=np.int64)])
    order = np.argsort(all_logical, kind="stable")
    sorted_logical = all_logical[order]
    sorted_breaks = all_breaks[order]
    # every row takes one line plus the breaks inside its values; rows are consecutive from next_logical
    before = np.concatenate([[0], np.cumsum(sorted_breaks)[:-1]]) if len(order) else np.zeros(0, dtype=np.int64)
    starts = next_line + (sorted_logical - next_logical) + before
    result = np.empty_like(starts)
    result[order] = starts
    after = int(starts[-1] + 1 + sorted_breaks[-1]) if len(order) else next_line
    return result[:len(logical)], [int(x) for x in result[len(logical):]], after
