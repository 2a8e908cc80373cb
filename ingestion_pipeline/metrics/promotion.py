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

from ingestion_pipeline.metrics.uploads import MetricUpload

VALID = "validation_status = 'valid' AND upload_id = %(upload)s"
# A stored row is only overwritten by an upload newer than the one that wrote it (uploads are numbered
# in the order they were submitted): an older export promoted late never replaces newer figures.
NEWER = "(t.last_upload_id IS NULL OR t.last_upload_id <= EXCLUDED.last_upload_id)"


# The staging row each dimension key takes its fields from, found for all three dimensions in one scan of the
# upload (it was one scan each, three reads of the upload: benchmarks/metrics_load.py). A key's row is the
# latest of the entity's own type with a name, else the latest of its type, else the latest with a name, else
# the latest: p0..p3 hold those four candidates per group, and the first level that has one wins.
# Groups, told apart by grouping():
#   campaign  (campaign_id)          rows with a campaign
#   ad_set    (ad_set_id)            rows with an ad set *and* a campaign (an ad set needs its campaign)
#   ad        (ad_id, ad_set_id)     every valid row: an ad is promoted only under a stored ad set, a
#                                    condition tested per (ad, parent) group, not per row; p1 also says
#                                    whether the group holds rows of type 'ad' (the parent check below),
#                                    ``fact`` whether it holds daily_metric rows (the fact check below)
_PICKS = f"""
CREATE TEMP TABLE promotion_picks ON COMMIT DROP AS
SELECT CASE g WHEN 3 THEN 'campaign' WHEN 5 THEN 'ad_set' ELSE 'ad' END AS kind,
       campaign_id, ad_set_id, ad_id,
       CASE g WHEN 3 THEN camp0 WHEN 5 THEN set0 ELSE ad0 END AS p0,
       CASE g WHEN 3 THEN camp1 WHEN 5 THEN set1 ELSE ad1 END AS p1,
       CASE g WHEN 3 THEN camp2 WHEN 5 THEN set2 ELSE ad2 END AS p2,
       CASE g WHEN 3 THEN latest WHEN 5 THEN set3 ELSE latest END AS p3,
       CASE g WHEN 4 THEN fact END AS fact
  FROM (SELECT grouping(campaign_id, ad_set_id, ad_id) AS g, campaign_id, ad_set_id, ad_id,
               max(row_index) FILTER (WHERE entity_type = 'campaign' AND campaign_name IS NOT NULL) AS camp0,
               max(row_index) FILTER (WHERE entity_type = 'campaign') AS camp1,
               max(row_index) FILTER (WHERE campaign_name IS NOT NULL) AS camp2,
               max(row_index) FILTER (WHERE campaign_id IS NOT NULL AND entity_type = 'ad_set'
                                        AND ad_set_name IS NOT NULL) AS set0,
               max(row_index) FILTER (WHERE campaign_id IS NOT NULL AND entity_type = 'ad_set') AS set1,
               max(row_index) FILTER (WHERE campaign_id IS NOT NULL AND ad_set_name IS NOT NULL) AS set2,
               max(row_index) FILTER (WHERE campaign_id IS NOT NULL) AS set3,
               max(row_index) FILTER (WHERE entity_type = 'ad' AND ad_name IS NOT NULL) AS ad0,
               max(row_index) FILTER (WHERE entity_type = 'ad') AS ad1,
               max(row_index) FILTER (WHERE ad_name IS NOT NULL) AS ad2,
               max(row_index) FILTER (WHERE entity_type = 'daily_metric') AS fact,
               max(row_index) AS latest
          FROM staging_rows WHERE {VALID}
         GROUP BY GROUPING SETS ((campaign_id), (ad_set_id), (ad_id, ad_set_id))) g
"""


def _picked(kind: str, key: str, parent_stored: str = "") -> str:
    """The picked staging row ``s`` of each ``key`` of a kind of dimension.

    ``parent_stored``: a condition on ``g.parent`` (the group's ad set) a group must meet to count.
    """
    if parent_stored:
        return f"""(SELECT k, coalesce(max(p0), max(p1), max(p2), max(p3)) AS row_index
              FROM (SELECT {key} AS k, ad_set_id AS parent, p0, p1, p2, p3 FROM promotion_picks
                     WHERE kind = '{kind}' AND {key} IS NOT NULL AND ad_set_id IS NOT NULL) g
             WHERE {parent_stored}
             GROUP BY k) p
       JOIN staging_rows s ON s.upload_id = %(upload)s AND s.row_index = p.row_index"""
    return f"""(SELECT {key} AS k, coalesce(p0, p1, p2, p3) AS row_index FROM promotion_picks
             WHERE kind = '{kind}' AND {key} IS NOT NULL) p
       JOIN staging_rows s ON s.upload_id = %(upload)s AND s.row_index = p.row_index"""


def _child_upsert(table: str, key: str, parent: str, name_column: str, kind: str, parent_stored: str = "") -> str:
    """Upsert an ad set or an ad (a dimension under a parent) from its picked rows; a newer upload wins."""
    return f"""
INSERT INTO {table} AS t (workspace_id, platform, {key}, {parent}, name, status, last_upload_id)
SELECT %(ws)s, %(platform)s, s.{key}, s.{parent}, s.{name_column},
       CASE WHEN s.entity_type = '{kind}' THEN s.status END, %(upload)s
  FROM {_picked(kind, key, parent_stored)}
 ORDER BY s.{key}
ON CONFLICT (workspace_id, platform, {key}) DO UPDATE
   SET {parent} = EXCLUDED.{parent}, name = coalesce(EXCLUDED.name, t.name),
       status = coalesce(EXCLUDED.status, t.status), last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.{parent}, t.name, t.status) IS DISTINCT FROM
       (EXCLUDED.{parent}, coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""


def _unresolved(entity_type: str, parent_key: str, parent_table: str, parent_label: str) -> str:
    """Mark valid rows whose parent is neither in this upload nor stored as unpromotable, with the reason."""
    return f"""
UPDATE staging_rows s SET validation_status = 'unpromotable',
       validation_errors = validation_errors || jsonb_build_array(jsonb_build_object(
           'field', '{parent_key}', 'error', '{parent_label} ' || {parent_key} ||
           ' not found in this upload or the workspace'))
 WHERE {VALID.replace('upload_id', 's.upload_id')} AND s.entity_type = '{entity_type}'
   AND NOT EXISTS (SELECT 1 FROM {parent_table} a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                      AND a.{parent_key} = s.{parent_key})
"""


_CAMPAIGNS = f"""
INSERT INTO campaigns AS t (workspace_id, platform, campaign_id, name, status, last_upload_id)
SELECT %(ws)s, %(platform)s, s.campaign_id,
       CASE WHEN s.entity_type IN ('campaign', 'daily_metric', 'ad', 'ad_set') THEN s.campaign_name END,
       CASE WHEN s.entity_type = 'campaign' THEN s.status END, %(upload)s
  FROM {_picked('campaign', 'campaign_id')}
 ORDER BY s.campaign_id
ON CONFLICT (workspace_id, platform, campaign_id) DO UPDATE
   SET name = coalesce(EXCLUDED.name, t.name), status = coalesce(EXCLUDED.status, t.status),
       last_upload_id = EXCLUDED.last_upload_id, updated_at = now()
 WHERE {NEWER}
   AND (t.name, t.status) IS DISTINCT FROM (coalesce(EXCLUDED.name, t.name), coalesce(EXCLUDED.status, t.status))
"""

_AD_SETS = _child_upsert("ad_sets", "ad_set_id", "campaign_id", "ad_set_name", "ad_set")

# Ads need their ad set: from this upload (inserted above) or already stored.
_UNRESOLVED_AD_PARENTS = _unresolved("ad", "ad_set_id", "ad_sets", "ad set")

# Whether that update has anything to do: an ad of this upload under an ad set that is not stored. A set
# difference, not NOT EXISTS: the rows this transaction just wrote are not in the planner's statistics,
# and an anti join it believes has one row on its inner side became a 100,000 x 100,000 nested loop.
_AD_PARENTS_MISSING = """
SELECT EXISTS (SELECT ad_set_id FROM promotion_picks WHERE kind = 'ad' AND p1 IS NOT NULL
               EXCEPT
               SELECT ad_set_id FROM ad_sets WHERE workspace_id = %(ws)s AND platform = %(platform)s)
"""

_AD_PARENT_STORED = """EXISTS (SELECT 1 FROM ad_sets a WHERE a.workspace_id = %(ws)s AND a.platform = %(platform)s
                        AND a.ad_set_id = g.parent)"""

_ADS = _child_upsert("ads", "ad_id", "ad_set_id", "ad_name", "ad", _AD_PARENT_STORED)

_UNRESOLVED_FACTS = _unresolved("daily_metric", "ad_id", "ads", "ad")

# Whether that update has anything to do: a fact of this upload whose ad is not stored.
_FACT_ADS_MISSING = """
SELECT EXISTS (SELECT ad_id FROM promotion_picks WHERE kind = 'ad' AND fact IS NOT NULL
               EXCEPT
               SELECT ad_id FROM ads WHERE workspace_id = %(ws)s AND platform = %(platform)s)
"""

# Facts: the stored rows this upload changes are updated, then the rest inserted with a plain INSERT.
# INSERT ... ON CONFLICT costs a speculative insertion per row (benchmarks/metrics_load.py); the split is safe
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
       -- would cost time in proportion to its rows; array_agg(DISTINCT ...) would sort them all)
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


def promote_upload(conn: psycopg.Connection, upload: MetricUpload, *, below_threshold: bool) -> PromotionResult:
    """Promote the upload's valid staged rows. The caller's transaction (which holds the upload in the
    ledger and records the outcome) commits it all.

    Promotions of one workspace are serialised (an advisory lock per workspace), and a stored row is
    only overwritten by a newer upload; statistics are refreshed by the caller after commit, outside
    the lock (ANALYZE in here would serialise promotions across all workspaces).
    """
    # a savepoint in the caller's transaction; its own transaction on an autocommit connection (the
    # advisory lock, SET LOCAL and the ON COMMIT DROP picks table all need one)
    with conn.transaction():
        return _promote(conn, upload, below_threshold)


def _promote(conn: psycopg.Connection, upload: MetricUpload, below_threshold: bool) -> PromotionResult:
    params = {"ws": upload.workspace_id, "platform": upload.platform, "upload": upload.upload_id}
    conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                 (f"metrics:promote:{upload.workspace_id}",))
    conn.execute("SET LOCAL work_mem = '256MB'")
    conn.execute("DROP TABLE IF EXISTS pg_temp.promotion_picks")
    conn.execute(_PICKS, params)
    conn.execute("ANALYZE promotion_picks")  # a temporary table has no statistics until asked
    upserted = {"campaigns": conn.execute(_CAMPAIGNS, params).rowcount,
                "ad_sets": conn.execute(_AD_SETS, params).rowcount}
    # each check below reads the small picks table; the update it guards scans the whole upload
    if conn.execute(_AD_PARENTS_MISSING, params).fetchone()["exists"]:
        conn.execute(_UNRESOLVED_AD_PARENTS, params)
    upserted["ads"] = conn.execute(_ADS, params).rowcount
    if conn.execute(_FACT_ADS_MISSING, params).fetchone()["exists"]:
        conn.execute(_UNRESOLVED_FACTS, params)
    # The facts statement reads daily_metrics while it inserts into it. With statistics taken while the table was
    # empty (a VACUUM ANALYZE before the first upload), the planner made a sequential scan of it the inner side of
    # the anti join: every fact rescanned every page inserted so far, and a 100,000-row promotion took most of a
    # minute (a million would take hours; benchmarks/metrics_load.py). Its key index answers every lookup the
    # statement makes.
    conn.execute("SET LOCAL enable_seqscan = off")
    facts = conn.execute(_DAILY_METRICS, params).fetchone()
    conn.execute("SET LOCAL enable_seqscan TO DEFAULT")
    upserted["daily_metrics"] = facts["n"]
    summary = conn.execute(_SUMMARY, params).fetchone()
    status = "partial" if summary["unpromotable"] or below_threshold else "completed"
    if summary["promoted"] == 0:
        status = "failed"
    event_created = False
    if status != "failed":
        payload = {
            "upload_id": upload.upload_id, "workspace_id": upload.workspace_id, "platform": upload.platform,
            "client_id": upload.client_id, "status": status, "promoted_rows": summary["promoted"],
            "invalid_rows": summary["invalid"], "unpromotable_rows": summary["unpromotable"],
            "rows_by_entity": {k: summary[f"{k}_rows"] for k in ("campaign", "ad_set", "ad", "daily_metric")},
            "affected_dates": sorted(facts["dates"]),
            "date_range": [str(summary["first_date"]) if summary["first_date"] else None,
                           str(summary["last_date"]) if summary["last_date"] else None],
        }
        event_created = conn.execute(
            """INSERT INTO ingestion_events (upload_id, workspace_id, event_type, payload)
               VALUES (%s, %s, %s, %s) ON CONFLICT (upload_id) DO NOTHING""",
            (upload.upload_id, upload.workspace_id, f"upload.{status}", Jsonb(payload)),
        ).rowcount == 1
    counts = {"promoted_rows": summary["promoted"], "invalid_rows": summary["invalid"],
              "unpromotable_rows": summary["unpromotable"], "valid_rows": summary["promoted"] + summary["unpromotable"],
              "total_rows": summary["total"]}
    return PromotionResult(status, summary["promoted"], summary["invalid"], summary["unpromotable"], upserted,
                           event_created, counts)
