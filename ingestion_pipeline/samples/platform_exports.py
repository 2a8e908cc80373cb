"""Exports as each platform writes them (column names, order and quirks from their documentation), for
the tests and benchmarks: Meta Ads Manager CSV and Marketing API insights JSON, Google Ads UI report CSV
and search-stream JSON, TikTok Ads Manager CSV and reporting API JSON.

Every writer takes rows from ``metric_exports.daily_rows`` (canonical fields) and writes them its way.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from pathlib import Path


def _money(value) -> str:
    return f"{Decimal(str(value)):.2f}"


def meta_ads_manager_csv(path: Path, rows: Iterable[dict], *, with_clicks: bool = True) -> Path:
    """Ads Manager > Export > CSV, ad level, broken down by day: UTF-8 with a BOM, currency in headers."""
    header = ["Reporting starts", "Reporting ends", "Day", "Campaign name", "Ad set name", "Ad name", "Campaign ID",
              "Ad set ID", "Ad ID", "Impressions", "Reach", "Frequency", "Amount spent (USD)",
              *(["Link clicks", "Clicks (all)"] if with_clicks else []), "CTR (link click-through rate)",
              "CPC (cost per link click) (USD)", "Results", "Result indicator"]
    with path.open("w", newline="", encoding="utf-8-sig") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for r in rows:
            impressions, clicks = int(r["impressions"]), int(r["clicks"])
            reach = max(1, impressions * 4 // 5)
            ctr = f"{100 * clicks / impressions:.6f}" if impressions else ""
            cpc = _money(Decimal(str(r["spend"])) / clicks) if clicks else ""
            writer.writerow([
                "2024-03-01", "2024-03-31", r["date"], r["campaign_name"], r["ad_set_name"], r["ad_name"],
                r["campaign_id"], r["ad_set_id"], r["ad_id"], impressions, reach, f"{impressions / reach:.6f}",
                r["spend"], *([clicks or "", clicks + 3] if with_clicks else []), ctr, cpc,
                r["conversions"] or "", "actions:offsite_conversion.fb_pixel_purchase",
            ])
    return path


def meta_insights_json(path: Path, rows: Iterable[dict]) -> Path:
    """GET /act_<id>/insights?level=ad&time_increment=1: numbers as strings, actions as a list."""
    data = []
    for r in rows:
        record = {
            "account_currency": "USD", "campaign_id": r["campaign_id"], "campaign_name": r["campaign_name"],
            "adset_id": r["ad_set_id"], "adset_name": r["ad_set_name"], "ad_id": r["ad_id"], "ad_name": r["ad_name"],
            "date_start": r["date"], "date_stop": r["date"], "impressions": str(r["impressions"]),
            "inline_link_clicks": str(r["clicks"]), "clicks": str(int(r["clicks"]) + 3), "spend": str(r["spend"]),
        }
        if r["conversions"]:
            record["actions"] = [{"action_type": "link_click", "value": str(r["clicks"])},
                                 {"action_type": "offsite_conversion.fb_pixel_purchase",
                                  "value": str(r["conversions"])}]
        data.append(record)
    path.write_text(json.dumps({"data": data, "paging": {"cursors": {"before": "MAZDZD", "after": "MjQZD"}}},
                               indent=1), encoding="utf-8")
    return path


def google_ui_report_csv(path: Path, rows: Iterable[dict], *, title: str = "Ad report") -> Path:
    """Reports > Download > CSV: a title and a date-range line first, thousands separators, '--' for none,
    and 'Total: …' rows at the end."""
    rows = list(rows)
    header = ["Day", "Campaign", "Campaign ID", "Ad group", "Ad group ID", "Ad ID", "Currency code", "Impr.",
              "Clicks", "Cost", "Conversions"]
    days = sorted(r["date"] for r in rows if _is_date(r["date"])) or [date(2024, 3, 1).isoformat()]
    with path.open("w", newline="", encoding="utf-8") as out:
        out.write(f"{title}\n")
        out.write(f"{_long_date(days[0])} - {_long_date(days[-1])}\n")
        writer = csv.writer(out)
        writer.writerow(header)
        for r in rows:
            conversions = f"{r['conversions']:.2f}" if r["conversions"] else "--"
            writer.writerow([r["date"], r["campaign_name"], r["campaign_id"], r["ad_set_name"], r["ad_set_id"],
                             r["ad_id"], "USD", f"{int(r['impressions']):,}", f"{int(r['clicks']):,}",
                             f"{Decimal(str(r['spend'])):,.2f}", conversions])
        total_impr = sum(int(r["impressions"]) for r in rows)
        for label in ("Total: Account", "Total: Search", "Total: Campaigns"):
            writer.writerow([label, "--", "--", "--", "--", "--", "USD", f"{total_impr:,}", "--", "--", "--"])
    return path


def _is_date(text: str) -> bool:
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _long_date(iso: str) -> str:
    d = date.fromisoformat(iso)
    return f"{d.strftime('%B')} {d.day}, {d.year}"


def google_search_stream_json(path: Path, rows: Iterable[dict], *, batch: int = 50) -> Path:
    """GoogleAdsService.SearchStream, saved as JSON: an array of batches of nested camelCase results."""
    rows = list(rows)
    batches = []
    for start in range(0, len(rows), batch):
        results = [{
            "customer": {"resourceName": "customers/1234567890", "currencyCode": "USD"},
            "campaign": {"resourceName": f"customers/1234567890/campaigns/{r['campaign_id']}",
                         "id": r["campaign_id"], "name": r["campaign_name"]},
            "adGroup": {"resourceName": f"customers/1234567890/adGroups/{r['ad_set_id']}", "id": r["ad_set_id"],
                        "name": r["ad_set_name"]},
            "adGroupAd": {"resourceName": f"customers/1234567890/adGroupAds/{r['ad_set_id']}~{r['ad_id']}",
                          "ad": {"id": r["ad_id"], "name": r["ad_name"]}},
            "metrics": {"impressions": str(r["impressions"]), "clicks": str(r["clicks"]),
                        "costMicros": str(int(Decimal(str(r["spend"])) * 1_000_000)),
                        "conversions": float(r["conversions"] or 0)},
            "segments": {"date": r["date"]},
        } for r in rows[start:start + batch]]
        batches.append({"results": results, "fieldMask": "customer.currencyCode,campaign.id,campaign.name,"
                        "adGroup.id,adGroup.name,adGroupAd.ad.id,adGroupAd.ad.name,metrics.impressions,"
                        "metrics.clicks,metrics.costMicros,metrics.conversions,segments.date",
                        "requestId": f"req{start}"})
    path.write_text(json.dumps(batches, indent=1), encoding="utf-8")
    return path


def tiktok_ads_manager_csv(path: Path, rows: Iterable[dict]) -> Path:
    """Ads Manager > Export, ad level by day; a 'Total of N results' row closes the file."""
    rows = list(rows)
    header = ["By Day", "Campaign name", "Campaign ID", "Ad group name", "Ad group ID", "Ad name", "Ad ID", "Cost",
              "Impressions", "Clicks (destination)", "Conversions", "Currency"]
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for r in rows:
            writer.writerow([r["date"], r["campaign_name"], r["campaign_id"], r["ad_set_name"], r["ad_set_id"],
                             r["ad_name"], r["ad_id"], r["spend"], r["impressions"], r["clicks"],
                             r["conversions"] if r["conversions"] else "-", "USD"])
        writer.writerow([f"Total of {len(rows)} results", "-", "-", "-", "-", "-", "-",
                         _money(sum(Decimal(str(r["spend"])) for r in rows)),
                         sum(int(r["impressions"]) for r in rows), "-", "-", "USD"])
    return path


def tiktok_reporting_json(path: Path, rows: Iterable[dict]) -> Path:
    """GET /open_api/v1.3/report/integrated/get/ (AUCTION_AD, stat_time_day): dimensions and metrics."""
    rows = list(rows)
    items = [{
        "dimensions": {"ad_id": r["ad_id"], "stat_time_day": f"{r['date']} 00:00:00"},
        "metrics": {"campaign_id": r["campaign_id"], "campaign_name": r["campaign_name"],
                    "adgroup_id": r["ad_set_id"], "adgroup_name": r["ad_set_name"], "ad_name": r["ad_name"],
                    "spend": str(r["spend"]), "impressions": str(r["impressions"]), "clicks": str(r["clicks"]),
                    "conversion": str(r["conversions"]), "currency": "USD"},
    } for r in rows]
    path.write_text(json.dumps({
        "code": 0, "message": "OK", "request_id": "2024030112000001",
        "data": {"list": items, "page_info": {"page": 1, "page_size": 1000, "total_number": len(items),
                                              "total_page": 1}},
    }, indent=1), encoding="utf-8")
    return path


WRITERS = {
    "meta.ads_manager_csv": (meta_ads_manager_csv, "csv"),
    "meta.insights_api_json": (meta_insights_json, "json"),
    "google.ui_report_csv": (google_ui_report_csv, "csv"),
    "google.search_stream_api_json": (google_search_stream_json, "json"),
    "tiktok.ads_manager_csv": (tiktok_ads_manager_csv, "csv"),
    "tiktok.reporting_api_json": (tiktok_reporting_json, "json"),
}
