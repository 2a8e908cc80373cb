"""Printing: JSON lines (``--json``) or aligned tables for people."""

from __future__ import annotations

import argparse
import io
import json
import re
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

# Characters that move the cursor, recolour or rewrite the terminal, or reorder what it shows: C0 controls
# but tab and newline, DEL, C1 controls, and the bidirectional overrides and isolates.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every terminal-controlling character written as its escape (``\\u001b``): file names,
    e-mails and error messages come from users."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)


class EscapingWriter(io.TextIOBase):
    """A text stream that writes ``printable(text)`` to the stream it wraps (the CLI's stdout): whatever a
    command prints, a name cannot drive the reader's terminal. Valid inside JSON strings too."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def fileno(self) -> int:
        return self._stream.fileno()

    def isatty(self) -> bool:
        return self._stream.isatty()

    @property
    def encoding(self) -> str:
        return self._stream.encoding


def print_json(obj) -> None:
    print(json.dumps(obj, default=json_default, ensure_ascii=False))


def json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def print_table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        print("(none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [min(60, max(len(c), *(len(row[i]) for row in cells))) for i, c in enumerate(columns)]
    print("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        print("  ".join(v[:w].ljust(w) for v, w in zip(row, widths, strict=True)))


def print_rows(args: argparse.Namespace, rows: list[dict], columns: list[str]) -> None:
    """One JSON object per line with --json, else an aligned table of ``columns``."""
    emit(args, rows, lambda records: print_table(records, columns))


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON object per line instead of text for people (every command has it)."""
    # SUPPRESS: a subcommand's flag must not reset one given to its parent command (argparse quirk).
    parser.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print one JSON object per line")


def wants_json(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "json", False))


def emit(args: argparse.Namespace, records: list[dict], render: Callable[[list[dict]], None]) -> None:
    """JSON lines with --json, else ``render(records)`` for people."""
    if wants_json(args):
        for record in records:
            print_json(record)
    else:
        render(records)


def count_line(statuses: list[str]) -> str:
    """'3 queued, 1 rejected' in a stable order."""
    return ", ".join(f"{n} {status}" for status, n in sorted(Counter(statuses).items())) or "nothing"
