"""Promotion of a staged metric upload: one transaction, set-based upserts on the natural keys.

Order: campaigns -> ad sets -> ads -> daily_metrics. Dimension rows come from dimension records and
from the ids carried by denormalised fact rows of the same upload. A record whose parent is neither in
the upload nor already stored becomes ``unpromotable`` with that reason. Upserts skip rows whose values
are unchanged, so promoting the same upload twice changes nothing. The completion event is written in
the same transaction, at most once per upload (unique upload_id).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

VALID = "validation_status = 'valid' AND upload_id = %(upload)s"
# A stored row is only overwritten by an upload newer than the one that wrote it (uploads are numbered
# in the order they were submitted): an older export promoted late never replaces newer figures.
NEWER = "(t.last_upload_id IS NULL OR t.last_upload_id <= EXCLUDED.last_upload_id)"

_CAMPAIGNS = f"""
INSERT INTO campaigns AS t (workspace_id, platform, campaign_id, name, status, last_upload_id)
SELECT DISTINCT ON (campaign_id) %(ws)s, %(platform)s, campaign_id,
       CASE WHEN entity_type IN ('campaign', 'daily_metric', 'ad', 'ad_set') THEN campaign_name END,
       CASE WHEN entity_type = 'campaign' THEN status END, %(upload)s
  FROM staging_rows WHERE {VALID} AND campaign_id IS NOT NULL
 ORDER BY campaign_id, (entity_type = 'campaign') DESC, (campaign_name IS NOT NULL) DESC,
          row_index DESC
ON CONFLICT (workspace_id, platform, campaign_id) DO UPDATE
   SET name = coalesce(EXCLUDED.name, t.name), status = coalesce(EXCLUDED.status, t.status),
       last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.name, t.status) IS DISTINCT FROM (coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""

_AD_SETS = f"""
INSERT INTO ad_sets AS t (workspace_id, platform, ad_set_id, campaign_id, name, status, last_upload_id)
SELECT DISTINCT ON (ad_set_id) %(ws)s, %(platform)s, ad_set_id,
       campaign_id, ad_set_name,
       CASE WHEN entity_type = 'ad_set' THEN status END, %(upload)s
  FROM staging_rows WHERE {VALID} AND ad_set_id IS NOT NULL AND campaign_id IS NOT NULL
 ORDER BY ad_set_id, (entity_type = 'ad_set') DESC, (ad_set_name IS NOT NULL) DESC, row_index DESC
ON CONFLICT (workspace_id, platform, ad_set_id) DO UPDATE
   SET campaign_id = EXCLUDED.campaign_id, name = coalesce(EXCLUDED.name, t.name),
       status = coalesce(EXCLUDED.status, t.status), last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.campaign_id, t.name, t.status) IS DISTINCT FROM
       (EXCLUDED.campaign_id, coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""

# Ads need their ad set: from this upload (inserted above) or already stored.
_UNRESOLVED_AD_PARENTS = f"""
UPDATE staging_rows s SET validation_status = 'unpromotable',
       validation_errors = validation_errors || jsonb_build_array(jsonb_build_object(
           'field', 'ad_set_id', 'error', 'ad set ' || ad_set_id ||
           ' not found in this upload or the workspace'))
 WHERE {VALID.replace('upload_id', 's.upload_id')} AND s.entity_type = 'ad'
   AND NOT EXISTS (SELECT 1 FROM ad_sets a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                      AND a.ad_set_id = s.ad_set_id)
"""

_ADS = f"""
INSERT INTO ads AS t (workspace_id, platform, ad_id, ad_set_id, name, status, last_upload_id)
SELECT DISTINCT ON (s.ad_id) %(ws)s, %(platform)s, s.ad_id, s.ad_set_id,
       s.ad_name, CASE WHEN s.entity_type = 'ad' THEN s.status END, %(upload)s
  FROM staging_rows s
 WHERE {VALID.replace('upload_id', 's.upload_id')} AND s.ad_id IS NOT NULL AND s.ad_set_id IS NOT NULL
   AND EXISTS (SELECT 1 FROM ad_sets a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                  AND a.ad_set_id = s.ad_set_id)
 ORDER BY s.ad_id, (s.entity_type = 'ad') DESC, (s.ad_name IS NOT NULL) DESC, s.row_index DESC
ON CONFLICT (workspace_id, platform, ad_id) DO UPDATE
   SET ad_set_id = EXCLUDED.ad_set_id, name = coalesce(EXCLUDED.name, t.name),
       status = coalesce(EXCLUDED.status, t.status), last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.ad_set_id, t.name, t.status) IS DISTINCT FROM
       (EXCLUDED.ad_set_id, coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""

_UNRESOLVED_FACTS = f"""
UPDATE staging_rows s SET validation_status = 'unpromotable',
       validation_errors = validation_errors || jsonb_build_array(jsonb_build_object(
           'field', 'ad_id', 'error', 'ad ' || ad_id || ' not found in this upload or the workspace'))
 WHERE {VALID.replace('upload_id', 's.upload_id')} AND s.entity_type = 'daily_metric'
   AND NOT EXISTS (SELECT 1 FROM ads a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                      AND a.ad_id = s.ad_id)
"""

_DAILY_METRICS = f"""
INSERT INTO daily_metrics AS t (workspace_id, platform, ad_id, date, impressions, clicks, spend, currency, conversions,
                                last_upload_id)
SELECT DISTINCT ON (ad_id, date) %(ws)s, %(platform)s, ad_id,
       date, impressions, clicks, spend, currency, conversions, %(upload)s
  FROM staging_rows WHERE {VALID} AND entity_type = 'daily_metric'
 ORDER BY ad_id, date, row_index DESC
ON CONFLICT (workspace_id, platform, ad_id, date) DO UPDATE
   SET impressions = coalesce(EXCLUDED.impressions, t.impressions), clicks = coalesce(EXCLUDED.clicks, t.clicks),
       spend = coalesce(EXCLUDED.spend, t.spend), currency = coalesce(EXCLUDED.currency, t.currency),
       conversions = coalesce(EXCLUDED.conversions, t.conversions), last_upload_id = EXCLUDED.last_upload_id,
       updated_at = now()
 WHERE {NEWER}
   AND (t.impressions, t.clicks, t.spend, t.currency, t.conversions) IS DISTINCT FROM
       (coalesce(EXCLUDED.impressions, t.impressions), coalesce(EXCLUDED.clicks, t.clicks),
        coalesce(EXCLUDED.spend, t.spend), coalesce(EXCLUDED.currency, t.currency),
        coalesce(EXCLUDED.conversions, t.conversions))
"""

_SUMMARY = """
SELECT count(*) AS total,
       count(*) FILTER (WHERE validation_status = 'valid') AS promoted,
       count(*) FILTER (WHERE validation_status = 'invalid') AS invalid,
       count(*) FILTER (WHERE validation_status = 'unpromotable') AS unpromotable,
       count(*) FILTER (WHERE validation_status = 'valid' AND entity_type = 'campaign') AS campaign_rows,
       count(*) FILTER (WHERE validation_status = 'valid' AND entity_type = 'ad_set') AS ad_set_rows,
       count(*) FILTER (WHERE validation_status = 'valid' AND entity_type = 'ad') AS ad_rows,
       count(*) FILTER (WHERE validation_status = 'valid' AND entity_type = 'daily_metric') AS daily_metric_rows,
       min(date) FILTER (WHERE validation_status = 'valid') AS first_date,
       max(date) FILTER (WHERE validation_status = 'valid') AS last_date,
       coalesce(array_agg(DISTINCT date::text) FILTER (
           WHERE validation_status = 'valid' AND entity_type = 'daily_metric'), '{}') AS dates
  FROM staging_rows WHERE upload_id = %(upload)s
"""


@dataclass(frozen=True)
class PromotionResult:
    status: str  # completed | partial
    promoted_rows: int
    invalid_rows: int
    unpromotable_rows: int
    upserted: dict[str, int]
    event_created: bool
    counts: dict[str, int] = field(default_factory=dict)  # the upload's row counts, for the ledger


def promote_upload(conn: psycopg.Connection, upload: dict, *, below_threshold: bool) -> PromotionResult:
    """Promote the upload's valid staged rows. The caller's transaction (which holds the upload in the
    ledger and records the outcome) commits it all.

    Promotions of one workspace are serialised (an advisory lock per workspace), and a stored row is
    only overwritten by a newer upload; statistics are refreshed by the caller after commit, outside
    the lock (ANALYZE in here would serialise promotions across all workspaces).
    """
    params = {"ws": upload["workspace_id"], "platform": upload["platform"], "upload": upload["upload_id"]}
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                 (f"metrics:promote:{upload['workspace_id']}",))
    conn.execute("SET LOCAL work_mem = '256MB'")
    upserted = {"campaigns": conn.execute(_CAMPAIGNS, params).rowcount,
                "ad_sets": conn.execute(_AD_SETS, params).rowcount}
    conn.execute(_UNRESOLVED_AD_PARENTS, params)
    upserted["ads"] = conn.execute(_ADS, params).rowcount
    conn.execute(_UNRESOLVED_FACTS, params)
    upserted["daily_metrics"] = conn.execute(_DAILY_METRICS, params).rowcount
    summary = conn.execute(_SUMMARY, params).fetchone()
    status = "partial" if summary["unpromotable"] or below_threshold else "completed"
    if summary["promoted"] == 0:
        status = "failed"
    event_created = False
    if status != "failed":
        payload = {
            "upload_id": upload["upload_id"], "workspace_id": upload["workspace_id"], "platform": upload["platform"],
            "client_id": upload["client_id"], "status": status, "promoted_rows": summary["promoted"],
            "invalid_rows": summary["invalid"], "unpromotable_rows": summary["unpromotable"],
            "rows_by_entity": {k: summary[f"{k}_rows"] for k in ("campaign", "ad_set", "ad", "daily_metric")},
            "affected_dates": sorted(summary["dates"]),
            "date_range": [str(summary["first_date"]) if summary["first_date"] else None,
                           str(summary["last_date"]) if summary["last_date"] else None],
        }
        event_created = conn.execute(
            """INSERT INTO ingestion_events (upload_id, workspace_id, event_type, payload)
               VALUES (%s, %s, %s, %s) ON CONFLICT (upload_id) DO NOTHING""",
            (upload["upload_id"], upload["workspace_id"], f"upload.{status}", Jsonb(payload)),
        ).rowcount == 1
    counts = {"promoted_rows": summary["promoted"], "invalid_rows": summary["invalid"],
              "unpromotable_rows": summary["unpromotable"], "valid_rows": summary["promoted"] + summary["unpromotable"],
              "total_rows": summary["total"]}
    return PromotionResult(status, summary["promoted"], summary["invalid"], summary["unpromotable"], upserted,
                           event_created, counts)
