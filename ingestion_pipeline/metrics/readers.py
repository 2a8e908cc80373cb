"""Streaming readers for metric exports: CSV, JSON arrays and JSON Lines, one row at a time.

No reader holds the file: CSV goes through ``csv.reader``, JSON arrays through an incremental decoder
over a bounded buffer. A file that cannot be parsed raises ``MalformedFileError`` with the line.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
import sys
from collections.abc import Iterator
from typing import BinaryIO

from charset_normalizer import from_bytes

SAMPLE_BYTES = 64 * 1024
READ_CHARS = 64 * 1024
csv.field_size_limit(1024 * 1024)  # a 1 MiB field is already absurd in an export
# A line of a CSV or JSON Lines file, or one record of a JSON array, is at most this many characters (a row of a
# wide Meta export is ~2,000). A longer one fails the file at once: read whole, a 2 GiB line held twice that in
# memory, and a 20 MB record of a JSON array took seconds of decoding retried as its buffer grew
# (benchmarks/hostile_inputs.py).
MAX_RECORD_CHARS = 4 * 1024 * 1024
# A count or an amount in an export has at most ~20 digits; Python's own limit (4,300) raises a bare
# ValueError, and a longer run costs quadratic time to convert.
MAX_INTEGER_DIGITS = 30


class MalformedFileError(Exception):
    def __init__(self, line: int | None, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line, self.reason = line, message


_WIDE_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)


def refuse_binary(path) -> None:
    """Raise ``MalformedFileError`` if NUL bytes make up more than 1 % of the file's first 64 KiB outside a
    UTF-16/32 text: a binary file (a 1 GB file of NULs took twice its size in memory to fail as an "unbalanced
    quote": benchmarks/hostile_inputs.py). A stray NUL in a text export is a row error, as before."""
    with open(path, "rb") as stream:
        refuse_binary_sample(stream.read(SAMPLE_BYTES))


def refuse_binary_sample(sample: bytes) -> None:
    """``refuse_binary`` on the file's first ``SAMPLE_BYTES`` (a stream's, read by the caller)."""
    if sample.startswith(_WIDE_BOMS):
        return
    nuls, first = sample.count(b"\x00"), sample.find(b"\x00")
    if nuls and nuls * 100 > len(sample):
        kind = ("all NUL bytes" if nuls == len(sample) else
                f"binary data ({nuls:,} NUL bytes in its first {len(sample):,}, the first at offset {first:,})")
        raise MalformedFileError(None, f"the file is not CSV or JSON text: it holds {kind}")


def detect_encoding(sample: bytes) -> str:
    """BOM, then strict UTF-8 on the sample, then charset detection (cp1252/latin-1 exports exist)."""
    if sample.startswith(codecs.BOM_UTF8):
        return "utf-8-sig"
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    try:
        codecs.getincrementaldecoder("utf-8")().decode(sample, final=False)
        return "utf-8"
    except UnicodeDecodeError:
        pass
    best = from_bytes(sample).best()
    return best.encoding if best is not None and best.encoding else "cp1252"


def open_text(stream: BinaryIO) -> tuple[io.TextIOBase, str]:
    buffered = stream if isinstance(stream, io.BufferedReader) else io.BufferedReader(stream, SAMPLE_BYTES)
    encoding = detect_encoding(buffered.peek(SAMPLE_BYTES)[:SAMPLE_BYTES])
    return io.TextIOWrapper(buffered, encoding=encoding, errors="strict", newline=""), encoding


def csv_rows(text: io.TextIOBase) -> Iterator[tuple[int, list[str]]]:
    """(line number where the row starts, cells) for every row, the header included."""
    reader = csv.reader(bounded_lines(text), strict=True)
    while True:
        start_line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            message = str(exc)
            if "unexpected end of data" in message or "field larger than field limit" in message:
                message = "a quoted field is never closed (unbalanced quote)"
            raise MalformedFileError(start_line, f"malformed CSV: {message}") from exc
        except UnicodeDecodeError as exc:
            raise MalformedFileError(start_line, f"text is not valid in the detected encoding: {exc}") from exc
        yield start_line, row


def read_csv(text: io.TextIOBase) -> Iterator[tuple[int, dict[str, str]]]:
    """(line number where the row starts, {header: value}); header names as written."""
    rows = csv_rows(text)
    try:
        _, header = next(rows)
    except StopIteration:
        raise MalformedFileError(None, "the file is empty (no header row)") from None
    except MalformedFileError as exc:
        raise MalformedFileError(exc.line, f"malformed CSV header: {exc.reason}") from exc
    if not any(h.strip() for h in header):
        raise MalformedFileError(1, "the header row is empty")
    for start_line, row in rows:
        if not is_blank(row):
            yield start_line, csv_record(header, row)


def is_blank(row: list[str]) -> bool:
    return not row or all(not v.strip() for v in row)


def csv_record(header: list[str], row: list[str]) -> dict:
    """{header: value}; a row with another number of fields says so (a row error, not a file error)."""
    record: dict = dict(zip(header, row, strict=False))
    if len(row) != len(header):
        record["__field_count_error__"] = f"row has {len(row)} fields, the header has {len(header)}"
    return record


class _DataLimit(Exception):
    """A JSON value past a bound (nesting, ``MAX_INTEGER_DIGITS``), raised while decoding."""


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _DataLimit(f"an integer longer than {MAX_INTEGER_DIGITS} digits")
    return int(digits)


_DECODER = json.JSONDecoder(parse_int=_bounded_int)
_WHITESPACE = re.compile(r"[ \t\n\r]*")  # JSON's own whitespace (json.decoder.WHITESPACE)


def _decode(text: str, pos: int = 0) -> tuple[object, int]:
    """``raw_decode`` within the bounds. Python's decoder recurses once per level of nesting, so a value nested
    deeper than the interpreter's recursion limit (~1,000 levels) raises ``RecursionError`` at once; a metric
    record is a flat object, so that is bad data, said as such."""
    try:
        return _DECODER.raw_decode(text, pos)
    except RecursionError as exc:
        raise _DataLimit(f"values nested deeper than {sys.getrecursionlimit():,} levels") from exc


def bounded_lines(text: io.TextIOBase) -> Iterator[str]:
    """The text's lines (line breaks kept), none longer than ``MAX_RECORD_CHARS``: a longer one raises
    ``MalformedFileError`` before more than that is read."""
    number = 0
    while line := text.readline(MAX_RECORD_CHARS + 1):
        number += 1
        if len(line) > MAX_RECORD_CHARS and not line.endswith(("\n", "\r")):
            raise MalformedFileError(number, f"a line longer than {MAX_RECORD_CHARS:,} characters: not a metric "
                                             "export (a row is a few thousand at most)")
        yield line


def read_json_lines(text: io.TextIOBase) -> Iterator[tuple[int, object]]:
    for number, line in enumerate(bounded_lines(text), start=1):
        if not line.strip():
            continue
        try:
            value, end = _decode(line, _WHITESPACE.match(line).end())
            if _WHITESPACE.match(line, end).end() != len(line):
                raise json.JSONDecodeError("Extra data", line, end)
        except json.JSONDecodeError as exc:
            raise MalformedFileError(number, f"invalid JSON Lines record: {exc.msg} (column {exc.colno})") from exc
        except _DataLimit as exc:
            raise MalformedFileError(number, f"invalid JSON Lines record: {exc}") from exc
        yield number, value


def read_json_array(text: io.TextIOBase) -> Iterator[tuple[int, object]]:
    """Elements of a top-level JSON array, decoded one by one from a bounded buffer."""
    buffer = ""
    pos = 0
    lines_before = 0  # newlines in text already dropped from the buffer
    eof = False

    def line_at(index: int) -> int:
        return lines_before + buffer.count("\n", 0, index) + 1

    def fill(at_least: int = READ_CHARS) -> bool:
        nonlocal buffer, pos, lines_before, eof
        if eof:
            return False
        chunk = text.read(at_least)
        if not chunk:
            eof = True
            return False
        lines_before += buffer.count("\n", 0, pos)
        buffer = buffer[pos:] + chunk
        pos = 0
        return True

    def skip_ws() -> str | None:
        nonlocal pos
        while True:
            while pos < len(buffer) and buffer[pos] in " \t\r\n":
                pos += 1
            if pos < len(buffer):
                return buffer[pos]
            if not fill():
                return None

    if skip_ws() != "[":
        raise MalformedFileError(line_at(pos), "expected a JSON array or JSON Lines")
    pos += 1
    expect_value = True
    first = True
    while True:
        char = skip_ws()
        if char is None:
            raise MalformedFileError(line_at(pos), "truncated JSON: the array is never closed")
        if char == "]" and (first or not expect_value):
            return
        if not expect_value:
            if char != ",":
                raise MalformedFileError(line_at(pos), f"invalid JSON: expected ',' or ']' but found {char!r}")
            pos += 1
            expect_value = True
            continue
        while True:  # pos is where the record starts: a fill moves the buffer's start there
            try:
                value, end = _decode(buffer, pos)
                break
            except json.JSONDecodeError as exc:
                held = len(buffer) - pos  # the record so far: read as much again, so decoding stays linear
                if held > MAX_RECORD_CHARS:
                    raise MalformedFileError(line_at(pos), f"the record starting here is longer than "
                                                           f"{MAX_RECORD_CHARS:,} characters") from exc
                if fill(min(max(READ_CHARS, held), MAX_RECORD_CHARS)):
                    continue
                where = line_at(min(exc.pos, len(buffer)))
                raise MalformedFileError(
                    line_at(pos), f"truncated or invalid JSON in the record starting here: {exc.msg} (line {where})"
                ) from exc
            except _DataLimit as exc:
                raise MalformedFileError(line_at(pos), f"the record starting here has {exc}") from exc
        yield line_at(pos), value
        pos = end
        expect_value = False
        first = False


def read_rows(stream: BinaryIO, file_format: str) -> Iterator[tuple[int, object]]:
    text, _ = open_text(stream)
    if file_format == "csv":
        yield from read_csv(text)
        return
    if file_format == "jsonl":
        yield from read_json_lines(text)
        return
    # .json: an array, or JSON Lines saved with a .json name
    first, rest = peek_json(text)
    yield from (read_json_array(rest) if first == "[" else read_json_lines(rest))


def peek_json(text: io.TextIOBase) -> tuple[str, io.TextIOBase]:
    """The first non-space character of a JSON file ('[', '{', …) and the stream with it put back."""
    first = text.read(1)
    while first and first.isspace():
        first = text.read(1)
    return first, _Prefixed(first, text)


class _Prefixed(io.TextIOBase):
    """A text stream with a few characters pushed back in front."""

    def __init__(self, prefix: str, text: io.TextIOBase) -> None:
        self._prefix = prefix
        self._text = text

    def read(self, size: int | None = -1) -> str:
        head, self._prefix = self._prefix, ""
        if size is None or size < 0:
            return head + self._text.read()
        return head + self._text.read(max(0, size - len(head)))

    def readline(self, size: int | None = -1) -> str:
        head, self._prefix = self._prefix, ""
        if size is None or size < 0:
            return head + self._text.readline()
        return head + self._text.readline(max(0, size - len(head)))
