"""One schema for every platform: column names mapped, values parsed, rows classified and validated.

Each row becomes ``NormalizedRow(entity_type, values, natural_key_hash, errors)``; an invalid row keeps
a reason per field ("spend: negative (-3.10)", "date: not a date ('31/02/2024')").
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from ingestion_pipeline.metrics.formats import PLATFORMS
from ingestion_pipeline.metrics.layouts import GENERIC, ColumnPlan, normalize_header

ENTITY_TYPES = ("campaign", "ad_set", "ad", "daily_metric")

# The generic layouts' tables (flat records with canonical or API field names); see layouts.py.
COLUMN_ALIASES: dict[str, dict[str, str]] = {p: dict(GENERIC[p].columns) for p in PLATFORMS}
_ID_FIELDS = ("campaign_id", "ad_set_id", "ad_id")
_METRIC_FIELDS = ("impressions", "clicks", "spend", "spend_micros", "conversions")
# The columns' ranges (sql/004_metrics.sql): counts are bigint, amounts numeric(20, 6).
MAX_COUNT = 2**63 - 1
MAX_AMOUNT = Decimal(10) ** 14
_CURRENCY = re.compile(r"^[A-Z]{3}$")
_AMOUNT_CURRENCY = re.compile(r"^amount_spent_([a-z]{3})$")


@dataclass
class NormalizedRow:
    entity_type: str | None
    values: dict
    natural_key_hash: str | None
    errors: list[dict] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return not self.errors


def _error(errors: list[dict], field_name: str, message: str) -> None:
    errors.append({"field": field_name, "error": message})


def _text(value) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _non_negative_number(raw, name: str, errors: list[dict], currency: bool) -> tuple[str, Decimal] | None:
    """The cell as a finite, non-negative Decimal (thousands separators and, for amounts, a leading
    currency sign allowed), with its original text for messages; None after recording why not."""
    text = _text(raw)
    if text is None:
        return None
    cleaned = text.replace(",", "").replace(" ", "")
    if currency:
        cleaned = cleaned.lstrip("$€£¥")
    try:
        number = Decimal(cleaned)
    except InvalidOperation:
        _error(errors, name, f"not a number ({text!r})")
        return None
    if not number.is_finite():
        _error(errors, name, f"not a finite number ({text!r})")
        return None
    if number < 0:
        _error(errors, name, f"negative ({text})")
        return None
    return text, number


def _integer(raw, name: str, errors: list[dict]) -> int | None:
    parsed = _non_negative_number(raw, name, errors, currency=False)
    if parsed is None:
        return None
    text, number = parsed
    if number > MAX_COUNT:
        _error(errors, name, f"out of range ({text}; at most {MAX_COUNT:,})")
        return None
    if number != number.to_integral_value():
        _error(errors, name, f"not a whole number ({text!r})")
        return None
    return int(number)


def _decimal(raw, name: str, errors: list[dict], maximum: Decimal = MAX_AMOUNT) -> Decimal | None:
    parsed = _non_negative_number(raw, name, errors, currency=True)
    if parsed is None:
        return None
    text, number = parsed
    if number >= maximum:
        _error(errors, name, f"out of range ({text}; below {maximum:,})")
        return None
    return number


_DATE_FORMATS = ("%Y-%m-%d", "%Y/%m/%d", "%Y%m%d", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%SZ")


def _date(raw, errors: list[dict]) -> date | None:
    text = _text(raw)
    if text is None:
        return None
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).date()
        except ValueError:
            continue
    _error(errors, "date", f"not a date ({text!r}); use YYYY-MM-DD")
    return None


def map_columns(raw: dict, platform: str) -> tuple[dict, list[str]]:
    """Raw record -> {canonical field: raw value}; also returns the headers nobody maps (kept in raw_data)."""
    aliases = COLUMN_ALIASES[platform]
    mapped: dict = {}
    unknown: list[str] = []
    for key, value in raw.items():
        name = normalize_header(str(key))
        canonical = aliases.get(name)
        if canonical is None:
            match = _AMOUNT_CURRENCY.match(name)
            if match:
                canonical = "spend"
                mapped.setdefault("currency", match.group(1).upper())
        if canonical is None:
            unknown.append(str(key))
            continue
        if canonical not in mapped or _text(mapped[canonical]) is None:
            mapped[canonical] = value
    return mapped, unknown


def classify(mapped: dict) -> str | None:
    explicit = (_text(mapped.get("entity_type")) or "").lower().replace(" ", "_").replace("adset", "ad_set")
    if explicit in ENTITY_TYPES:
        return explicit
    if explicit in ("adgroup", "ad_group"):
        return "ad_set"
    if explicit in ("metric", "metrics", "daily"):
        return "daily_metric"
    if _text(mapped.get("date")) is not None or any(_text(mapped.get(f)) is not None for f in _METRIC_FIELDS):
        return "daily_metric"
    for entity, key in (("ad", "ad_id"), ("ad_set", "ad_set_id"), ("campaign", "campaign_id")):
        if _text(mapped.get(key)) is not None:
            return entity
    return None


def natural_key(entity_type: str, workspace_id: str, platform: str, values: dict) -> str:
    if entity_type == "daily_metric":
        parts = [values.get("ad_id"), values.get("date")]
    else:
        parts = [values.get({"campaign": "campaign_id", "ad_set": "ad_set_id", "ad": "ad_id"}[entity_type])]
    text = "|".join([entity_type, workspace_id, platform, *[str(p) for p in parts]])
    return hashlib.sha256(text.encode()).hexdigest()


def normalize_row(raw: object, *, workspace_id: str, platform: str, plan: ColumnPlan | None = None) -> NormalizedRow:
    """One record -> a validated row. With a plan of a platform's own layout, a metric the export does not
    carry at all is NULL (the upload reports it once); without one (generic records) it is "missing"."""
    errors: list[dict] = []
    if not isinstance(raw, dict):
        return NormalizedRow(None, {}, None, [{"field": "row", "error": "not an object/record"}])
    if "__field_count_error__" in raw:
        _error(errors, "row", raw["__field_count_error__"])
    cleaned = {k: v for k, v in raw.items() if k != "__field_count_error__"}
    if plan is None or plan.layout.strict:
        mapped, _ = map_columns(cleaned, platform)
        not_carried: set[str] = set()
    else:
        mapped = plan.map(cleaned)
        not_carried = set(plan.missing_metrics())
    row_platform = (_text(mapped.get("platform")) or platform).lower()
    if row_platform not in PLATFORMS:
        _error(errors, "platform", f"unknown platform {row_platform!r}")
    elif row_platform != platform:
        _error(errors, "platform", f"row is for {row_platform!r} but the upload is for {platform!r}")
    entity = classify(mapped)
    values: dict = {}
    for key in _ID_FIELDS:
        text = _text(mapped.get(key))
        if text is not None:
            values[key] = text
    for key in ("campaign_name", "ad_set_name", "ad_name", "status"):
        text = _text(mapped.get(key))
        if text is not None:
            values[key] = text
    if entity is None:
        _error(errors, "row", "missing key: no campaign_id, ad_set_id or ad_id")
        return NormalizedRow(None, values, None, errors)

    required = {"campaign": ("campaign_id",), "ad_set": ("ad_set_id", "campaign_id"),
                "ad": ("ad_id", "ad_set_id"), "daily_metric": ("ad_id",)}[entity]
    for key in required:
        if key not in values:
            _error(errors, key, "missing key")

    if entity == "daily_metric":
        day = _date(mapped.get("date"), errors)
        if day is None and not any(e["field"] == "date" for e in errors):
            _error(errors, "date", "missing")
        impressions = _integer(mapped.get("impressions"), "impressions", errors)
        clicks = _integer(mapped.get("clicks"), "clicks", errors)
        spend = _decimal(mapped.get("spend"), "spend", errors)
        micros = _text(mapped.get("spend_micros"))
        if spend is None and micros is not None:  # Google's costMicros: validated in currency units
            try:
                in_units = format(Decimal(micros.replace(",", "")) / Decimal(1_000_000), "f")
            except InvalidOperation:
                in_units = micros
            spend = _decimal(in_units, "spend", errors)
        conversions = _decimal(mapped.get("conversions"), "conversions", errors)
        currency = (_text(mapped.get("currency")) or "").upper()
        for name, value in (("impressions", impressions), ("clicks", clicks), ("spend", spend)):
            if value is None and name not in not_carried and not any(e["field"] == name for e in errors):
                _error(errors, name, "missing")
        if impressions is not None and clicks is not None and clicks > impressions:
            _error(errors, "clicks", f"clicks ({clicks}) exceed impressions ({impressions})")
        if not currency:
            if "currency" not in not_carried:
                _error(errors, "currency", "missing")
        elif not _CURRENCY.match(currency):
            _error(errors, "currency", f"not an ISO 4217 code ({currency!r})")
        values.update({
            "date": day.isoformat() if day else None, "impressions": impressions, "clicks": clicks,
            "spend": str(spend) if spend is not None else None, "currency": currency or None,
            "conversions": str(conversions) if conversions is not None else None,
        })
    if errors:
        return NormalizedRow(entity, values, None, errors)
    return NormalizedRow(entity, values, natural_key(entity, workspace_id, platform, values), errors)
