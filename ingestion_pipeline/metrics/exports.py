"""Reading an export as its platform wrote it: find the header (report titles and date ranges may come
first), match the layout, skip summary rows, and yield each data row with the plan that maps it.

CSV and JSON Lines stream; a platform's API response (one JSON object: Meta ``{"data": [...]}``,
TikTok ``{"code": 0, "data": {"list": [...]}}``, Google ``{"results": [...]}``) is read whole, as such
responses are paged and small; a Google search-stream file (an array of ``{"results": [...]}`` batches)
streams batch by batch.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from ingestion_pipeline.metrics.layouts import (
    META_INSIGHTS_API,
    ColumnPlan,
    Layout,
    UnknownLayout,
    match_layout,
    normalize_header,
)
from ingestion_pipeline.metrics.readers import (
    MalformedFileError,
    csv_record,
    csv_rows,
    is_blank,
    open_text,
    peek_json,
    read_json_array,
    read_json_lines,
)

HEADER_SEARCH_ROWS = 20  # a header is looked for in the first rows (after titles and date ranges)
# A platform's API response is one JSON object, parsed whole: bigger ones are refused, not swapped.
API_OBJECT_MAX_BYTES = 256 * 1024 * 1024


@dataclass
class ExportReader:
    """Iterate ``rows()``; afterwards ``plan`` (the first), ``summary_rows`` and ``notes`` describe the file."""

    stream: BinaryIO
    file_format: str
    platform: str | None
    size: int | None = None  # the file's bytes, for a stream that has no file descriptor (an S3 object)
    plan: ColumnPlan | None = None
    summary_rows: int = 0
    notes: list[str] = field(default_factory=list)
    _plans: dict[frozenset, ColumnPlan] = field(default_factory=dict)

    @property
    def layout(self) -> Layout | None:
        return self.plan.layout if self.plan else None

    def rows(self) -> Iterator[tuple[int, dict, ColumnPlan]]:
        text, _ = open_text(self.stream)
        if self.file_format == "csv":
            yield from self._csv(text)
            return
        first, rest = peek_json(text)
        if self.file_format == "json" and first == "{":
            size = self.size if self.size is not None else _size(self.stream)
            if size is not None and size > API_OBJECT_MAX_BYTES:
                raise MalformedFileError(None, f"a JSON object of {size:,} bytes: an API response is read whole, up to "
                                               f"{API_OBJECT_MAX_BYTES:,} bytes; send its rows as JSON Lines or a "
                                               "JSON array instead (they stream)")
            yield from self._api_object(rest)
        elif self.file_format == "json" and first == "[":
            yield from self._records(read_json_array(rest), kind=None)
        else:
            yield from self._records(read_json_lines(rest), kind=None)

    # -- CSV ------------------------------------------------------------------------------------------
    def _csv(self, text) -> Iterator[tuple[int, dict, ColumnPlan]]:
        rows = csv_rows(text)
        seen, header_at, plan = locate_header(rows, self.platform)
        header = seen[header_at][1]
        self._adopt(plan)

        def data() -> Iterator[tuple[int, list[str]]]:
            yield from seen[header_at + 1:]
            yield from rows

        for line, cells in data():
            if is_blank(cells):
                continue
            if is_summary(plan.layout, cells, header):
                self.summary_rows += 1
                continue
            yield line, csv_record(header, cells), plan

    # -- JSON -----------------------------------------------------------------------------------------
    def _api_object(self, text) -> Iterator[tuple[int, dict, ColumnPlan]]:
        try:
            document = json.load(text)
        except json.JSONDecodeError as exc:
            raise MalformedFileError(exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        if isinstance(document.get("code"), int) and document["code"] != 0:
            raise MalformedFileError(None, f"the file is an API error response (code {document['code']}: "
                                           f"{document.get('message', '')}), not a report")
        records = _records_in(document)
        if records is None:
            raise MalformedFileError(None, "a JSON object without rows: expected a list under 'data', "
                                           "'results' or 'data.list' (or a JSON array of records)")
        yield from self._records(((1, r) for r in records), kind="api")

    def _records(self, items, *, kind: str | None) -> Iterator[tuple[int, dict, ColumnPlan]]:
        for line, item in items:
            if isinstance(item, dict) and isinstance(item.get("results"), list) and kind is None:
                # a Google search-stream batch: its results are the rows
                for result in item["results"]:
                    yield from self._record(line, result, "api")
                continue
            yield from self._record(line, item, kind)

    def _record(self, line: int, item, kind: str | None) -> Iterator[tuple[int, dict, ColumnPlan]]:
        if not isinstance(item, dict):
            yield line, item, self.plan  # normalize_row reports "not an object/record"
            return
        nested = any(isinstance(v, dict) for v in item.values())
        record = flatten(item) if nested or kind == "api" else dict(item)
        api = nested or kind == "api"
        plan = self._plan_for(record, api)
        if plan.layout is META_INSIGHTS_API:
            # conversions are the `actions` of a purchase / lead type; Meta leaves `actions` out when none
            actions = item.get("actions") if isinstance(item.get("actions"), list) else []
            record["conversions"] = _conversions(actions, plan.layout.conversion_actions) or "0"
            plan = self._plan_for(record, api)
        self._adopt(plan)
        yield line, record, plan

    def _plan_for(self, record: dict, api: bool) -> ColumnPlan:
        keys = frozenset(record)
        if keys not in self._plans:
            self._plans[keys] = match_layout(list(record), self.platform, kind="api" if api else "csv")
        return self._plans[keys]

    def _adopt(self, plan: ColumnPlan) -> None:
        if self.plan is None:
            self.plan = plan
            self.notes.extend(plan_notes(plan))


def plan_notes(plan: ColumnPlan) -> list[str]:
    """What the upload reports once about its layout: the metrics the export does not carry at all."""
    if plan.layout.strict:
        return []
    return [f"{name}: column not present (NULL for every row)" for name in plan.missing_metrics()]


def locate_header(rows: Iterator[tuple[int, list[str]]],
                  platform: str | None) -> tuple[list[tuple[int, list[str]]], int, ColumnPlan]:
    """The CSV rows read up to the header, the header's index among them, and its plan.

    The header is the first of the first rows that matches a platform's own layout (report titles and
    date ranges may come first); failing that, the first row (a generic layout, or ``UnknownLayout``).
    """
    seen: list[tuple[int, list[str]]] = []
    for line, cells in rows:
        seen.append((line, cells))
        try:
            plan = match_layout(cells, platform, kind="csv")
        except UnknownLayout:
            plan = None
        if plan is not None and not plan.layout.strict:
            return seen, len(seen) - 1, plan
        if len(seen) >= HEADER_SEARCH_ROWS:
            break
    if not seen:
        raise MalformedFileError(None, "the file is empty (no header row)")
    header = seen[0][1]
    if not any(h.strip() for h in header):
        raise MalformedFileError(seen[0][0], "the header row is empty")
    return seen, 0, match_layout(header, platform, kind="csv")


def is_summary(layout: Layout, cells: list[str], header: list[str]) -> bool:
    """``Total: Account`` / ``Total of 12 results``: a totals row, not data (it has no ad id)."""
    if not layout.summary_prefix:
        return False
    first = next((c.strip() for c in cells if c.strip()), "")
    if not first.lower().startswith(layout.summary_prefix.lower()):
        return False
    ids = {i for i, h in enumerate(header) if normalize_header(h) in ("ad_id", "adgroup_id", "ad_group_id")}
    return not any(cells[i].strip() and cells[i].strip() not in ("--", "-") for i in ids if i < len(cells))


def _size(stream: BinaryIO) -> int | None:
    try:
        return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, io.UnsupportedOperation):
        return None


def flatten(value: dict, prefix: str = "") -> dict:
    """Nested objects -> one level, keys joined with '.' (lists other than rows are kept as they are)."""
    flat: dict = {}
    for key, item in value.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(item, dict):
            flat.update(flatten(item, name))
        else:
            flat[name] = item
    return flat


def _records_in(document: dict) -> list | None:
    for path in (("data", "list"), ("data",), ("results",)):
        node = document
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, list):
            return node
    return None


def _conversions(actions: list, types: tuple[str, ...]) -> str | None:
    """Meta's ``actions``: the value of the first conversion type present (they overlap; never summed)."""
    values = {a.get("action_type"): a.get("value") for a in actions if isinstance(a, dict)}
    for action_type in types:
        if action_type in values:
            return values[action_type]
    return None


def sniff_layout(source, file_format: str, platform: str | None = None, *, size: int | None = None) -> ColumnPlan:
    """The layout of a stored export (a path, or a binary stream of ``size`` bytes), from its first rows
    (``metrics submit`` without ``--platform``). Raises ``UnknownLayout`` (columns found, closest layout) or
    ``MalformedFileError``."""
    with contextlib.ExitStack() as stack:
        stream = source if hasattr(source, "read") else stack.enter_context(open(source, "rb"))
        reader = ExportReader(stream, file_format, platform, size)
        for _ in reader.rows():
            break
    if reader.plan is None:
        raise MalformedFileError(None, "the file has no data rows")
    return reader.plan
