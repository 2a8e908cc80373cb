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


def _picked(key: str, entity_type: str, name: str, extra: str = "", parent_stored: str = "") -> str:
    """The staging row each ``key`` takes its fields from: the latest row of the entity's own type with a
    name, else the latest of its type, else the latest with a name, else the latest. A hash aggregate
    over the upload (then a lookup of each picked row) costs a fraction of sorting every row by key.

    ``parent_stored``: a condition on ``g.parent`` (the row's ad set) that a row must meet to count. It
    is tested once per (key, parent) pair, not once per row: the rows are first grouped by both.
    """
    candidates = f"""FROM staging_rows s
             WHERE {VALID.replace('upload_id', 's.upload_id')} AND {key} IS NOT NULL {extra}"""
    latest = (f"max(row_index) FILTER (WHERE entity_type = '{entity_type}' AND {name} IS NOT NULL)",
              f"max(row_index) FILTER (WHERE entity_type = '{entity_type}')",
              f"max(row_index) FILTER (WHERE {name} IS NOT NULL)", "max(row_index)")
    if parent_stored:
        grouped = f"""(SELECT {key} AS k, ad_set_id AS parent, {', '.join(f'{m} AS m{i}' for i, m in enumerate(latest))}
              {candidates}
             GROUP BY {key}, ad_set_id) g
             WHERE {parent_stored}"""
        pick = f"coalesce({', '.join(f'max(m{i})' for i in range(len(latest)))})"
        return f"""(SELECT k, {pick} AS row_index FROM {grouped} GROUP BY k) p
       JOIN staging_rows s ON s.upload_id = %(upload)s AND s.row_index = p.row_index"""
    return f"""(SELECT {key} AS k, coalesce({', '.join(latest)}) AS row_index
              {candidates}
             GROUP BY {key}) p
       JOIN staging_rows s ON s.upload_id = %(upload)s AND s.row_index = p.row_index"""


_CAMPAIGNS = f"""
INSERT INTO campaigns AS t (workspace_id, platform, campaign_id, name, status, last_upload_id)
SELECT %(ws)s, %(platform)s, s.campaign_id,
       CASE WHEN s.entity_type IN ('campaign', 'daily_metric', 'ad', 'ad_set') THEN s.campaign_name END,
       CASE WHEN s.entity_type = 'campaign' THEN s.status END, %(upload)s
  FROM {_picked('campaign_id', 'campaign', 'campaign_name')}
 ORDER BY s.campaign_id
ON CONFLICT (workspace_id, platform, campaign_id) DO UPDATE
   SET name = coalesce(EXCLUDED.name, t.name), status = coalesce(EXCLUDED.status, t.status),
       last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.name, t.status) IS DISTINCT FROM (coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""

_AD_SETS = f"""
INSERT INTO ad_sets AS t (workspace_id, platform, ad_set_id, campaign_id, name, status, last_upload_id)
SELECT %(ws)s, %(platform)s, s.ad_set_id, s.campaign_id, s.ad_set_name,
       CASE WHEN s.entity_type = 'ad_set' THEN s.status END, %(upload)s
  FROM {_picked('ad_set_id', 'ad_set', 'ad_set_name', 'AND campaign_id IS NOT NULL')}
 ORDER BY s.ad_set_id
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

_AD_PARENT_STORED = """EXISTS (SELECT 1 FROM ad_sets a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                        AND a.ad_set_id = g.parent)"""

_ADS = f"""
INSERT INTO ads AS t (workspace_id, platform, ad_id, ad_set_id, name, status, last_upload_id)
SELECT %(ws)s, %(platform)s, s.ad_id, s.ad_set_id, s.ad_name, CASE WHEN s.entity_type = 'ad' THEN s.status END,
       %(upload)s
  FROM {_picked('ad_id', 'ad', 'ad_name', 'AND ad_set_id IS NOT NULL', _AD_PARENT_STORED)}
 ORDER BY s.ad_id
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

# Facts: the stored rows this upload changes are updated, then the rest inserted with a plain INSERT.
# INSERT ... ON CONFLICT costs a speculative insertion per row (~4 s per million); the split is safe
# because promotions of a workspace hold its advisory lock, and nothing else writes daily_metrics.
_DAILY_METRICS = f"""
WITH picked AS MATERIALIZED (
  SELECT DISTINCT ON (ad_id, date) ad_id, date, impressions, clicks, spend, currency, conversions
    FROM staging_rows WHERE {VALID} AND entity_type = 'daily_metric'
   ORDER BY ad_id, date, row_index DESC),
updated AS (
  UPDATE daily_metrics t
     SET impressions = coalesce(p.impressions, t.impressions), clicks = coalesce(p.clicks, t.clicks),
         spend = coalesce(p.spend, t.spend), currency = coalesce(p.currency, t.currency),
         conversions = coalesce(p.conversions, t.conversions), last_upload_id = %(upload)s, updated_at = now()
    FROM picked p
   WHERE t.workspace_id = %(ws)s AND t.platform = %(platform)s AND t.ad_id = p.ad_id AND t.date = p.date
     AND (t.last_upload_id IS NULL OR t.last_upload_id <= %(upload)s)
     AND (t.impressions, t.clicks, t.spend, t.currency, t.conversions) IS DISTINCT FROM
         (coalesce(p.impressions, t.impressions), coalesce(p.clicks, t.clicks), coalesce(p.spend, t.spend),
          coalesce(p.currency, t.currency), coalesce(p.conversions, t.conversions))
  RETURNING 1),
inserted AS (
  INSERT INTO daily_metrics (workspace_id, platform, ad_id, date, impressions, clicks, spend, currency, conversions,
                             last_upload_id)
  SELECT %(ws)s, %(platform)s, p.ad_id, p.date, p.impressions, p.clicks, p.spend, p.currency, p.conversions,
         %(upload)s
    FROM picked p
   WHERE NOT EXISTS (SELECT 1 FROM daily_metrics d WHERE d.workspace_id = %(ws)s AND d.platform = %(platform)s
                        AND d.ad_id = p.ad_id AND d.date = p.date)
  RETURNING 1)
SELECT (SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted) AS n,
       -- the affected dates, hashed apart from the rows already in memory (a second scan of the upload
       -- cost ~0.5 s per million rows; array_agg(DISTINCT ...) would sort them all)
       coalesce((SELECT array_agg(d::text ORDER BY d) FROM (SELECT DISTINCT date AS d FROM picked) x), '{{}}') AS dates
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
       max(date) FILTER (WHERE validation_status = 'valid') AS last_date
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
    facts = conn.execute(_DAILY_METRICS, params).fetchone()
    upserted["daily_metrics"] = facts["n"]
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
            "affected_dates": sorted(facts["dates"]),
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
