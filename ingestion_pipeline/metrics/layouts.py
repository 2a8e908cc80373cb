"""The export layouts the platforms really write, as data: one table per platform and format.

A layout maps normalised header names (lower-case, every run of punctuation or space -> "_", so
``Amount spent (USD)`` is ``amount_spent_usd`` and ``Impr.`` is ``impr``) to canonical fields. When a
file has several headers for one field, the one listed first wins (Meta: ``Link clicks`` before
``Clicks (all)``). JSON responses are flattened first (``adGroupAd.ad.id`` -> ``adgroupad_ad_id``).

A file is matched to the layout of its platform whose ``signature`` headers are all present and that
maps the most of its columns; the generic layouts (the canonical column names every platform's sample
export uses) come last. ``plan_for`` turns a layout and a concrete header into a ``ColumnPlan``: which
header feeds which field, the currency a header carries, and which metrics the file does not carry at
all (NULL, reported once per upload, never a row error).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_HEADER_CLEAN = re.compile(r"[^a-z0-9]+")
METRIC_FIELDS = ("impressions", "clicks", "spend", "currency", "conversions")


def normalize_header(name: str) -> str:
    return _HEADER_CLEAN.sub("_", str(name).replace("\ufeff", "").strip().lower()).strip("_")


@dataclass(frozen=True)
class Layout:
    name: str
    platform: str
    kind: str  # "csv" (also for JSON Lines / arrays of flat records) or "api" (a platform's JSON response)
    columns: Mapping[str, str]  # normalised header -> canonical field; the first present header wins
    signature: frozenset[str]  # all of these headers are present in a file of this layout
    currency_headers: tuple[str, ...] = ()  # regexes over normalised headers; group 1 is the currency
    summary_prefix: str | None = None  # a row whose first cell starts with this is a total, not data
    empty_markers: tuple[str, ...] = ()  # cell values that mean "no value" ("--")
    conversion_actions: tuple[str, ...] = ()  # Meta API: the action types counted as conversions
    zero_when_blank: tuple[str, ...] = ()  # fields the platform leaves blank when there were none
    strict: bool = False  # generic layouts: a missing metric column is a row error, as before


# -- Meta ---------------------------------------------------------------------------------------------
META_ADS_MANAGER_CSV = Layout(
    name="meta.ads_manager_csv", platform="meta", kind="csv",
    columns={
        "campaign_id": "campaign_id", "campaign_name": "campaign_name",
        "ad_set_id": "ad_set_id", "ad_set_name": "ad_set_name", "ad_id": "ad_id", "ad_name": "ad_name",
        "day": "date", "reporting_starts": "date",
        "impressions": "impressions",
        "link_clicks": "clicks", "clicks_all": "clicks",
        "results": "conversions", "purchases": "conversions",
        "currency": "currency",
        "campaign_delivery": "status", "ad_delivery": "status",
    },
    signature=frozenset({"campaign_name", "ad_id", "impressions"}),
    currency_headers=(r"^amount_spent_([a-z]{3})$",),
    summary_prefix="Total",
    zero_when_blank=("clicks", "conversions"),
)
META_INSIGHTS_API = Layout(
    name="meta.insights_api_json", platform="meta", kind="api",
    columns={
        "campaign_id": "campaign_id", "campaign_name": "campaign_name", "adset_id": "ad_set_id",
        "adset_name": "ad_set_name", "ad_id": "ad_id", "ad_name": "ad_name", "date_start": "date",
        "impressions": "impressions", "inline_link_clicks": "clicks", "clicks": "clicks", "spend": "spend",
        "account_currency": "currency", "conversions": "conversions",
    },
    signature=frozenset({"ad_id", "date_start", "impressions"}),
    conversion_actions=("offsite_conversion.fb_pixel_purchase", "purchase", "omni_purchase", "lead",
                        "offsite_conversion.fb_pixel_lead"),
)

# -- Google Ads ---------------------------------------------------------------------------------------
GOOGLE_UI_REPORT_CSV = Layout(
    name="google.ui_report_csv", platform="google", kind="csv",
    columns={
        "campaign_id": "campaign_id", "campaign": "campaign_name", "ad_group_id": "ad_set_id",
        "ad_group": "ad_set_name", "ad_id": "ad_id", "ad_name": "ad_name", "ad": "ad_name", "day": "date",
        "impr": "impressions", "impressions": "impressions", "clicks": "clicks", "cost": "spend",
        "currency_code": "currency", "conversions": "conversions", "campaign_status": "status",
    },
    signature=frozenset({"day", "campaign_id", "ad_id", "cost"}),
    summary_prefix="Total",
    empty_markers=("--",),
    zero_when_blank=("conversions",),
)
GOOGLE_SEARCH_STREAM_API = Layout(
    name="google.search_stream_api_json", platform="google", kind="api",
    columns={
        "campaign_id": "campaign_id", "campaign_name": "campaign_name", "adgroup_id": "ad_set_id",
        "adgroup_name": "ad_set_name", "adgroupad_ad_id": "ad_id", "adgroupad_ad_name": "ad_name",
        "segments_date": "date", "metrics_impressions": "impressions", "metrics_clicks": "clicks",
        "metrics_costmicros": "spend_micros", "metrics_conversions": "conversions",
        "customer_currencycode": "currency", "campaign_status": "status",
    },
    signature=frozenset({"adgroupad_ad_id", "segments_date"}),
)

# -- TikTok -------------------------------------------------------------------------------------------
TIKTOK_ADS_MANAGER_CSV = Layout(
    name="tiktok.ads_manager_csv", platform="tiktok", kind="csv",
    columns={
        "campaign_id": "campaign_id", "campaign_name": "campaign_name", "ad_group_id": "ad_set_id",
        "ad_group_name": "ad_set_name", "ad_id": "ad_id", "ad_name": "ad_name", "by_day": "date",
        "date": "date", "impressions": "impressions", "clicks_destination": "clicks", "clicks": "clicks",
        "cost": "spend", "currency": "currency", "conversions": "conversions",
    },
    signature=frozenset({"ad_group_name", "ad_id", "cost"}),
    summary_prefix="Total",
    empty_markers=("-", "--"),
    zero_when_blank=("conversions",),
)
TIKTOK_REPORTING_API = Layout(
    name="tiktok.reporting_api_json", platform="tiktok", kind="api",
    columns={
        "dimensions_ad_id": "ad_id", "dimensions_stat_time_day": "date", "metrics_campaign_id": "campaign_id",
        "metrics_campaign_name": "campaign_name", "metrics_adgroup_id": "ad_set_id",
        "metrics_adgroup_name": "ad_set_name", "metrics_ad_name": "ad_name", "metrics_impressions": "impressions",
        "metrics_clicks": "clicks", "metrics_spend": "spend", "metrics_currency": "currency",
        "metrics_conversion": "conversions",
    },
    signature=frozenset({"dimensions_ad_id", "dimensions_stat_time_day"}),
)

# -- generic: the canonical column names (and the platforms' API field names) of flat records ----------
_COMMON = {
    "campaign_id": "campaign_id", "campaign_name": "campaign_name", "ad_id": "ad_id", "ad_name": "ad_name",
    "date": "date", "day": "date", "impressions": "impressions", "clicks": "clicks", "spend": "spend",
    "currency": "currency", "conversions": "conversions", "status": "status", "platform": "platform",
    "entity_type": "entity_type", "level": "entity_type", "ad_set_id": "ad_set_id", "ad_set_name": "ad_set_name",
}
GENERIC = {
    "meta": Layout(
        "meta.generic", "meta", "csv",
        {**_COMMON, "adset_id": "ad_set_id", "adset_name": "ad_set_name", "date_start": "date",
         "reporting_starts": "date", "amount_spent": "spend", "account_currency": "currency",
         "results": "conversions", "effective_status": "status", "campaign": "campaign_name",
         "ad_set": "ad_set_name", "ad": "ad_name"},
        frozenset(), currency_headers=(r"^amount_spent_([a-z]{3})$",), strict=True),
    "google": Layout(
        "google.generic", "google", "csv",
        {**_COMMON, "campaign": "campaign_name", "ad_group_id": "ad_set_id", "ad_group": "ad_set_name",
         "ad_group_name": "ad_set_name", "segments_date": "date", "impr": "impressions", "cost": "spend",
         "cost_micros": "spend_micros", "currency_code": "currency", "campaign_status": "status",
         "ad_group_status": "status"},
        frozenset(), strict=True),
    "tiktok": Layout(
        "tiktok.generic", "tiktok", "csv",
        {**_COMMON, "adgroup_id": "ad_set_id", "adgroup_name": "ad_set_name", "stat_time_day": "date",
         "cost": "spend", "conversion": "conversions", "operation_status": "status"},
        frozenset(), strict=True),
}

LAYOUTS: tuple[Layout, ...] = (
    META_ADS_MANAGER_CSV, META_INSIGHTS_API, GOOGLE_UI_REPORT_CSV, GOOGLE_SEARCH_STREAM_API,
    TIKTOK_ADS_MANAGER_CSV, TIKTOK_REPORTING_API, *GENERIC.values(),
)
BY_NAME = {layout.name: layout for layout in LAYOUTS}
_KEY_FIELDS = {"campaign_id", "ad_set_id", "ad_id"}


class UnknownLayout(ValueError):
    """No known layout fits the file's columns; the message lists them and the closest layout."""


@dataclass
class ColumnPlan:
    """How one header (a CSV header row, or the keys of flattened JSON records) maps to canonical fields."""

    layout: Layout
    source: dict[str, str]  # canonical field -> header as written
    header_currency: str | None = None
    carried: frozenset[str] = frozenset()  # canonical fields the file has a column for
    unknown: tuple[str, ...] = ()
    empty_markers: frozenset[str] = field(default_factory=frozenset)

    def missing_metrics(self) -> list[str]:
        """Metric fields the export does not carry at all (NULL for every row, reported once)."""
        carried = set(self.carried) | ({"spend"} if "spend_micros" in self.carried else set())
        if self.header_currency:
            carried.add("currency")
        return [f for f in METRIC_FIELDS if f not in carried]

    def map(self, raw: Mapping[str, object]) -> dict:
        mapped: dict = {}
        for canonical, header in self.source.items():
            value = raw.get(header)
            if isinstance(value, str) and value.strip() in self.empty_markers:
                value = None
            if not _filled(value) and canonical in self.layout.zero_when_blank:
                value = "0"
            mapped[canonical] = value
        if self.header_currency and not _filled(mapped.get("currency")):
            mapped["currency"] = self.header_currency
        return mapped


def _filled(value) -> bool:
    return value is not None and str(value).strip() != ""


def plan_for(layout: Layout, headers: Iterable[str]) -> ColumnPlan:
    headers = [str(h) for h in headers]
    by_normal: dict[str, str] = {}
    for header in headers:
        by_normal.setdefault(normalize_header(header), header)
    source: dict[str, str] = {}
    used: set[str] = set()
    for normal, canonical in layout.columns.items():  # listed order is priority order
        if normal in by_normal and canonical not in source:
            source[canonical] = by_normal[normal]
            used.add(normal)
    header_currency = None
    for pattern in layout.currency_headers:
        for normal, header in by_normal.items():
            match = re.match(pattern, normal)
            if match and normal not in used:
                if "spend" not in source:
                    source["spend"] = header
                header_currency = header_currency or match.group(1).upper()
                used.add(normal)
    unknown = tuple(h for n, h in by_normal.items() if n not in used)
    return ColumnPlan(layout, source, header_currency, frozenset(source), unknown,
                      frozenset(layout.empty_markers))


def _score(layout: Layout, normals: set[str]) -> tuple[bool, int]:
    matched = sum(1 for n in normals if n in layout.columns)
    return layout.signature <= normals, matched


def match_layout(headers: Iterable[str], platform: str | None, *, kind: str = "csv") -> ColumnPlan:
    """The best layout of ``platform`` (or of any platform) for these headers; ``UnknownLayout`` if none."""
    headers = list(headers)
    normals = {normalize_header(h) for h in headers}
    candidates = [layout for layout in LAYOUTS
                  if (platform is None or layout.platform == platform) and (layout.kind == kind or layout.strict)]
    specific = [layout for layout in candidates if not layout.strict and _score(layout, normals)[0]]
    generic = GENERIC.get(platform) if platform is not None else None
    if specific:
        best = max(specific, key=lambda layout: _score(layout, normals)[1])
        # flat records with the canonical names may share a platform layout's signature: the layout that
        # maps more of the file's columns is the file's (a tie goes to the platform's own layout)
        if generic is None or _score(best, normals)[1] >= _score(generic, normals)[1]:
            return plan_for(best, headers)
    generic_keys = {h for h, canonical in GENERIC[platform].columns.items() if canonical in _KEY_FIELDS} \
        if platform is not None else set()
    if normals & generic_keys:  # flat records with the canonical names: validated row by row, as always
        return plan_for(GENERIC[platform], headers)
    closest = max((layout for layout in LAYOUTS if not layout.strict),
                  key=lambda layout: (len(layout.signature & normals), _score(layout, normals)[1]))
    missing = sorted(closest.signature - normals)
    where = f"for {platform} " if platform else ""
    raise UnknownLayout(
        f"no known {where}export layout has these columns: {', '.join(headers) or '(none)'}; "
        f"the closest is {closest.name}, which also needs {', '.join(missing) or 'its platform'}")


def detect_platform(headers: Iterable[str], *, kind: str = "csv") -> ColumnPlan:
    """For a submit without ``--platform``: the platform whose specific layout the headers match."""
    return match_layout(headers, None, kind=kind)

