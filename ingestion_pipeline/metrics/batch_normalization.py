"""A batch of export rows normalised and validated with ``pyarrow.compute``, row results as ``normalize_row``'s.

The vectorised path accepts only the rows it can prove valid — every check ``normalize_row`` makes,
written as Arrow expressions over the whole batch (key present, ``YYYY-MM-DD`` date, whole counts,
amounts of at most 14 integer and 6 decimal digits, ISO currency, clicks <= impressions). Every other row
(an error, a summary or blank row, a refused row, a value with control characters, an unusual but valid
spelling such as ``12.0`` impressions) goes through ``normalize_row`` itself, so the reasons and values
are exactly the row-by-row ones; ``test_arrow_staging`` compares both paths on the same files.

Valid rows leave as text ready for ``COPY ... (FORMAT csv)``: the normalised values as the text of their
typed columns, the raw record as a JSON array of its values built with Arrow string kernels (the upload's
``raw_columns`` name them once for all its rows; ``staged_record()``, sql/016, makes the object again), the
natural key hashed with ``hashlib``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from operator import methodcaller

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingestion_pipeline.metrics.csv_batches import RowBatch, may_contain
from ingestion_pipeline.metrics.exports import is_summary
from ingestion_pipeline.metrics.layouts import ColumnPlan, Layout, normalize_header
from ingestion_pipeline.metrics.normalization import normalize_row
from ingestion_pipeline.metrics.readers import csv_record, is_blank

_ID_FIELDS = ("campaign_id", "ad_set_id", "ad_id")
_TEXT_FIELDS = ("campaign_name", "ad_set_name", "ad_name", "status")
_COUNT = r"^(0|[1-9][0-9]{0,17})$"  # below 2**63 - 1, no leading zeros: int(text) == Decimal(text)
# below 10**14 with at most 6 decimals: str(Decimal(text)) == text (no exponent form)
_AMOUNT = r"^(0|[1-9][0-9]{0,13})(\.[0-9]{1,6})?$"
_DATE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
_DATE_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}$"
_SUMMARY_IDS = ("ad_id", "adgroup_id", "ad_group_id")
# Python's str.strip() and Arrow's utf8_trim_whitespace agree except on these; such rows take the exact path.
_CONTROL_CHARS = r"[\x00-\x1f\x7f\x{85}]"

# The staging row as COPY takes it: the normalised values as text of their typed columns (sql/010).
VALUE_COLUMNS = ("campaign_id", "ad_set_id", "ad_id", "campaign_name", "ad_set_name", "ad_name", "status", "date",
                 "impressions", "clicks", "spend", "currency", "conversions")
STAGED = pa.schema([
    ("logical", pa.int64()), ("line_number", pa.int64()), ("entity_type", pa.string()),
    ("natural_key_hash", pa.string()), ("raw_data", pa.string()),
    *[(name, pa.string()) for name in VALUE_COLUMNS],
    ("validation_status", pa.string()), ("validation_errors", pa.string()),
])


def supports(plan: ColumnPlan) -> bool:
    """Whether a file of this plan can take the vectorised path (a platform's own CSV layout)."""
    return not plan.layout.strict and "spend_micros" not in plan.source


@dataclass
class BatchNormalizer:
    plan: ColumnPlan
    header: list[str]
    workspace_id: str
    platform: str
    dumps: object  # staging's JSON encoder for the rows of the exact path
    check_controls: bool = True
    summary_rows: int = 0
    fast_rows: int = 0
    exact_rows: int = 0
    raw_columns: list[str] = field(default_factory=list)  # the names of a valid row's raw values, in order

    def __post_init__(self) -> None:
        last: dict[str, int] = {}
        for index, name in enumerate(self.header):  # dict(zip(header, row)): the last duplicate wins
            last[name] = index
        self.raw_columns = list(last)
        self._raw_indexes = list(last.values())
        self._source = {canonical: last[header] for canonical, header in self.plan.source.items()}
        self._summary_ids = [i for i, h in enumerate(self.header) if normalize_header(h) in _SUMMARY_IDS]
        self._hash_prefix = f"daily_metric|{self.workspace_id}|{self.platform}|"

    # -- the whole batch --------------------------------------------------------------------------------
    def stage(self, batch: RowBatch) -> pa.Table:
        """Staged rows of the batch in file order (blank and summary rows dropped)."""
        parts: list[pa.Table] = []
        exact_rows: list[tuple[int, int, list[str]]] = [(r.logical, line, r.cells) for r, line in batch.refused]
        if len(batch.lines):
            ok, values = self._fast(batch.columns)
            if batch.raw_json is None:
                ok = pc.and_(ok, pa.array(batch.breaks == 0))  # a line break in a value needs JSON escaping
            ok_np = ok.to_numpy(zero_copy_only=False)
            if ok_np.any():
                parts.append(self._fast_table(batch, ok, values))
            slow = np.flatnonzero(~ok_np)
            if len(slow) and batch.records is not None:
                parts.append(exact_staged(
                    [(int(batch.logical[i]), int(batch.lines[i]), batch.records[i], self.plan) for i in slow],
                    workspace_id=self.workspace_id, platform=self.platform, dumps=self.dumps))
                self.exact_rows += len(slow)
            elif len(slow):
                rows = pa.table(batch.columns, names=[f"c{i}" for i in range(len(batch.columns))]).take(slow)
                cells = [list(r.values()) for r in rows.to_pylist()]
                exact_rows.extend(zip(batch.logical[slow].tolist(), batch.lines[slow].tolist(), cells, strict=True))
            self.fast_rows += int(ok_np.sum())
        if exact_rows:
            parts.append(self._exact_table(exact_rows))
        if not parts:
            return STAGED.empty_table()
        table = pa.concat_tables(parts)
        return table.sort_by("logical") if len(parts) > 1 else table

    # -- vectorised -------------------------------------------------------------------------------------
    def _cell(self, columns: list[pa.Array], canonical: str) -> pa.Array | None:
        """The mapped, trimmed value of a field (null when blank or an empty marker), as ColumnPlan.map."""
        index = self._source.get(canonical)
        if index is None:
            return None
        value = pc.utf8_trim_whitespace(columns[index])
        blank = pc.equal(value, "")
        markers = self.plan.empty_markers
        if markers:
            blank = pc.or_(blank, pc.is_in(value, value_set=pa.array(sorted(markers), pa.string())))
        if canonical in self.plan.layout.zero_when_blank:
            return pc.if_else(blank, pa.scalar("0"), value)
        return pc.if_else(blank, pa.scalar(None, pa.string()), value)

    def _fast(self, columns: list[pa.Array]) -> tuple[pa.Array, dict[str, pa.Array | None]]:
        n = len(columns[0])
        ok = pa.array(np.ones(n, dtype=bool))
        layout: Layout = self.plan.layout
        values: dict[str, pa.Array | None] = {}
        for name in (*_ID_FIELDS, *_TEXT_FIELDS):
            values[name] = self._cell(columns, name)
        ad_id = values["ad_id"]
        if ad_id is None:
            return pa.array(np.zeros(n, dtype=bool)), values
        ok = pc.and_kleene(ok, pc.is_valid(ad_id))
        # a summary row ("Total: …") is the exact path's to recognise: the first cell must be plain data
        first = pc.utf8_trim_whitespace(columns[0])
        ok = pc.and_kleene(ok, pc.not_equal(first, ""))
        if layout.summary_prefix:
            ok = pc.and_kleene(ok, pc.invert(pc.starts_with(pc.utf8_lower(first), layout.summary_prefix.lower())))
        for index in self._summary_ids:  # the summary check reads "-" and "--" ids as empty
            ok = pc.and_kleene(ok, pc.invert(pc.is_in(pc.utf8_trim_whitespace(columns[index]),
                                                      value_set=pa.array(["-", "--"]))))
        if self.check_controls:
            for column in columns:
                ok = pc.and_kleene(ok, pc.invert(pc.match_substring_regex(column, _CONTROL_CHARS)))
        date = self._cell(columns, "date")
        if date is None:
            return pa.array(np.zeros(n, dtype=bool)), values
        ok = pc.and_kleene(ok, _per_distinct(date, _real_dates))
        values["date"] = pc.utf8_slice_codeunits(date, 0, 10)
        for name in ("impressions", "clicks"):
            cell = self._cell(columns, name)
            if cell is not None:
                cell = pc.replace_substring(pc.replace_substring(cell, ",", ""), " ", "")
                ok = pc.and_kleene(ok, pc.match_substring_regex(cell, _COUNT))
            values[name] = cell
        for name in ("spend", "conversions"):
            cell = self._cell(columns, name)
            if cell is not None:
                cell = pc.replace_substring(pc.replace_substring(cell, ",", ""), " ", "")
                cell = pc.replace_substring_regex(cell, "^[$€£¥]+", "")
                matches = pc.match_substring_regex(cell, _AMOUNT)
                # conversions may be absent from a row; spend may not (a carried metric left blank is an error)
                ok = pc.and_kleene(ok, pc.fill_null(matches, name == "conversions"))
            values[name] = cell
        impressions, clicks = values["impressions"], values["clicks"]
        if impressions is not None and clicks is not None:
            fits = pc.less_equal(pc.cast(pc.if_else(ok, clicks, "0"), pa.int64()),
                                 pc.cast(pc.if_else(ok, impressions, "0"), pa.int64()))
            ok = pc.and_kleene(ok, fits)
        currency = self._cell(columns, "currency")
        if self.plan.header_currency:
            currency = pa.array([self.plan.header_currency] * n, pa.string()) if currency is None else \
                pc.fill_null(currency, self.plan.header_currency)
        if currency is not None:
            ok = pc.and_kleene(ok, pc.match_substring_regex(currency, "^[A-Za-z]{3}$"))
            currency = pc.utf8_upper(currency)
        values["currency"] = currency
        return pc.fill_null(ok, False), values

    def _fast_table(self, batch: RowBatch, ok: pa.Array, values: dict[str, pa.Array | None]) -> pa.Table:
        columns = [pc.filter(c, ok) for c in batch.columns]
        values = {k: (pc.filter(v, ok) if v is not None else None) for k, v in values.items()}
        n = len(columns[0])
        if batch.raw_json is not None:  # JSON records: stored as they were
            raw = pc.filter(pa.array(batch.raw_json, pa.string()), ok)
        else:
            # the values alone, in raw_columns' order (staged_record() in sql/016 names them again)
            raw_parts: list[pa.Array | str] = []
            for i, index in enumerate(self._raw_indexes):
                raw_parts.append("[\"" if i == 0 else "\",\"")
                raw_parts.append(_json_escape(columns[index]))
            raw_parts.append("\"]")
            raw = _join(raw_parts, n)
        # the key's bytes joined by Arrow, then hashed in map(): faster than joining them in Python
        # (benchmarks/metrics_load.py measures staging)
        keys = pc.binary_join_element_wise(pa.scalar(self._hash_prefix), values["ad_id"], pa.scalar("|"),
                                           values["date"], "").cast(pa.binary())
        hashes = list(map(methodcaller("hexdigest"), map(hashlib.sha256, keys.to_pylist())))
        mask = ok.to_numpy(zero_copy_only=False)
        nulls = pa.nulls(n, pa.string())
        return pa.table([
            pa.array(batch.logical[mask]), pa.array(batch.lines[mask]), pa.array(["daily_metric"] * n, pa.string()),
            pa.array(hashes, pa.string()), raw,
            *[values[name] if values.get(name) is not None else nulls for name in VALUE_COLUMNS],
            pa.array(["valid"] * n, pa.string()), pa.array(["[]"] * n, pa.string()),
        ], schema=STAGED)

    # -- exact ------------------------------------------------------------------------------------------
    def _exact_table(self, rows: list[tuple[int, int, list[str]]]) -> pa.Table:
        items = []
        for logical, line, cells in rows:
            if is_blank(cells):
                continue
            if is_summary(self.plan.layout, cells, self.header):
                self.summary_rows += 1
                continue
            items.append((logical, line, csv_record(self.header, cells), self.plan))
        self.exact_rows += len(items)
        return exact_staged(items, workspace_id=self.workspace_id, platform=self.platform, dumps=self.dumps)


def exact_staged(items: list[tuple[int, int, object, ColumnPlan | None]], *, workspace_id: str, platform: str,
                 dumps) -> pa.Table:
    """Rows (logical number, line, raw record, plan) normalised one by one, as staging rows."""
    out: dict[str, list] = {name: [] for name in STAGED.names}
    for logical, line, raw, plan in items:
        row = normalize_row(raw, workspace_id=workspace_id, platform=platform, plan=plan)
        for name, value in (("logical", logical), ("line_number", line), ("entity_type", row.entity_type),
                            ("natural_key_hash", row.natural_key_hash),
                            ("raw_data", dumps(raw if isinstance(raw, dict) else {"value": raw})),
                            *[(name, column_text(row.values.get(name))) for name in VALUE_COLUMNS],
                            ("validation_status", "valid" if row.valid else "invalid"),
                            ("validation_errors", dumps(row.errors))):
            out[name].append(value)
    return pa.table(out, schema=STAGED)


def _per_distinct(values: pa.Array, check) -> pa.Array:
    """``check`` run once per distinct value (an export's million rows hold a few hundred dates)."""
    encoded = pc.dictionary_encode(values)
    return pc.take(check(encoded.dictionary), encoded.indices)


def _real_dates(dates: pa.Array) -> pa.Array:
    """YYYY-MM-DD, or with a time (TikTok's stat_time_day): the first format normalize_row tries that fits."""
    short = pc.fill_null(pc.match_substring_regex(dates, _DATE), False)
    long = pc.fill_null(pc.match_substring_regex(dates, _DATE_TIME), False)
    return pc.and_(pc.or_(short, long),
                   pc.if_else(short, _reads_back(dates, short, "%Y-%m-%d", "2000-01-01"),
                              _reads_back(dates, long, "%Y-%m-%d %H:%M:%S", "2000-01-01 00:00:00")))


def _reads_back(text: pa.Array, shaped: pa.Array, fmt: str, filler: str) -> pa.Array:
    """Whether each text of the right shape is a real date/time: Arrow's parser rolls 2024-02-30 over to
    March, so a value is valid only if it formats back to the same text."""
    parsed = pc.strptime(pc.if_else(shaped, text, pa.scalar(filler)), format=fmt, unit="s", error_is_null=True)
    return pc.fill_null(pc.equal(pc.strftime(parsed, format=fmt), text), False)


def column_text(value) -> str | None:
    """A normalised value as the text of its staging column (Postgres text cannot hold NUL characters)."""
    return None if value is None else str(value).replace("\x00", "")


def _json_escape(values: pa.Array) -> pa.Array:
    """Text for inside a JSON string (rows with control characters never get here)."""
    for special, escaped in (("\\", "\\\\"), ("\"", "\\\"")):
        if may_contain(values, special.encode()):  # ids, dates and figures never hold one
            values = pc.replace_substring(values, special, escaped)
    return values


def _join(parts: list[pa.Array | str], n: int) -> pa.Array:
    arrays = [p if isinstance(p, pa.Array | pa.ChunkedArray) else pa.scalar(p, pa.string()) for p in parts]
    if not any(isinstance(a, pa.Array | pa.ChunkedArray) for a in arrays):
        return pa.array(["".join(parts)] * n, pa.string())
    return pc.binary_join_element_wise(*arrays, "")
