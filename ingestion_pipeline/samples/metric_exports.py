"""Generated ad-platform exports (CSV, JSON array, JSON Lines) for the demo, tests and the metrics benchmark."""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Iterable, Iterator
from datetime import date, timedelta
from pathlib import Path

HEADERS = {
    "meta": ["campaign_id", "campaign_name", "adset_id", "adset_name", "ad_id", "ad_name", "date_start",
             "impressions", "clicks", "spend", "account_currency", "conversions"],
    "google": ["Campaign ID", "Campaign", "Ad group ID", "Ad group", "Ad ID", "Ad name", "Day", "Impressions",
               "Clicks", "Cost", "Currency code", "Conversions"],
    "tiktok": ["campaign_id", "campaign_name", "adgroup_id", "adgroup_name", "ad_id", "ad_name", "stat_time_day",
               "impressions", "clicks", "spend", "currency", "conversion"],
}
CANONICAL = ["campaign_id", "campaign_name", "ad_set_id", "ad_set_name", "ad_id", "ad_name", "date", "impressions",
             "clicks", "spend", "currency", "conversions"]
INVALID_KINDS = ("negative_spend", "bad_date", "clicks_over_impressions", "missing_ad_id")


def daily_rows(campaigns: int, ad_sets_per_campaign: int, ads_per_ad_set: int, days: int, *,
               start: date = date(2024, 3, 1), seed: int = 7, id_prefix: str = "") -> Iterator[dict]:
    rng = random.Random(seed)
    for c in range(campaigns):
        for s in range(ad_sets_per_campaign):
            for a in range(ads_per_ad_set):
                for d in range(days):
                    impressions = rng.randint(100, 50_000)
                    clicks = rng.randint(0, impressions // 20)
                    yield {
                        "campaign_id": f"{id_prefix}c{c}", "campaign_name": f"Campaign {c}",
                        "ad_set_id": f"{id_prefix}c{c}s{s}", "ad_set_name": f"Ad set {c}.{s}",
                        "ad_id": f"{id_prefix}c{c}s{s}a{a}", "ad_name": f"Ad {c}.{s}.{a}",
                        "date": (start + timedelta(days=d)).isoformat(), "impressions": impressions,
                        "clicks": clicks, "spend": f"{rng.uniform(0, 500):.2f}", "currency": "USD",
                        "conversions": rng.randint(0, max(clicks // 10, 0)),
                    }


def corrupt(row: dict, kind: str) -> dict:
    row = dict(row)
    if kind == "negative_spend":
        row["spend"] = "-12.50"
    elif kind == "bad_date":
        row["date"] = "2024-02-31"
    elif kind == "clicks_over_impressions":
        row["clicks"] = int(row["impressions"]) + 5
    elif kind == "missing_ad_id":
        row["ad_id"] = ""
    return row


def with_invalid_share(rows: Iterable[dict], share: float) -> Iterator[dict]:
    """Corrupt an evenly spread ``share`` of the rows (exactly floor(n * share)), cycling the kinds of error."""
    corrupted = 0
    for i, row in enumerate(rows):
        if int((i + 1) * share) > int(i * share):
            yield corrupt(row, INVALID_KINDS[corrupted % len(INVALID_KINDS)])
            corrupted += 1
        else:
            yield row


def _values(row: dict) -> list:
    """The row's values in CANONICAL order, which every platform's HEADERS follow."""
    return [row.get(k, "") for k in CANONICAL]


def write_export(path: Path, platform: str, rows: Iterable[dict], *, fmt: str | None = None,
                 encoding: str = "utf-8") -> Path:
    """Write rows with the platform's own column names; fmt from the suffix (csv, json, jsonl)."""
    fmt = fmt or path.suffix.lstrip(".")
    header = HEADERS[platform]
    with path.open("w", newline="", encoding=encoding) as out:
        if fmt == "csv":
            writer = csv.writer(out)
            writer.writerow(header)
            for row in rows:
                writer.writerow(_values(row))
        elif fmt in ("json", "jsonl"):
            if fmt == "json":
                out.write("[\n")
            for i, row in enumerate(rows):
                record = json.dumps(dict(zip(header, _values(row), strict=True)))
                if fmt == "json":
                    out.write(("" if i == 0 else ",\n") + record)
                else:
                    out.write(record + "\n")
            if fmt == "json":
                out.write("\n]\n")
        else:
            raise ValueError(fmt)
    return path
