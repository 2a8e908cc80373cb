"""Printing: JSON lines (``--json``) or aligned tables for people."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path


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


def print_rows(rows: list[dict], as_json: bool, columns: list[str]) -> None:
    """One JSON object per line with --json, else an aligned table of ``columns``."""
    if as_json:
        for row in rows:
            print_json(row)
    else:
        print_table(rows, columns)
