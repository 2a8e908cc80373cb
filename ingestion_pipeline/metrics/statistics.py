"""Planner statistics after an upload is staged and after it is promoted.

Promotion's plans need to know how many rows an upload has and how big the promoted tables are: with
statistics that still said "empty", the planner once chose a 100,000 x 100,000 nested loop. So
``staging_rows`` is analysed after every upload (``refresh_staging``). The promoted tables are analysed
after a promotion only where it changed enough of them (``refresh_after_promotion``): ANALYZE samples 30,000
rows of a table however few rows changed, a noticeable part of a small upload's ``process`` time once the
tables hold millions of rows (benchmarks/metrics_load.py). A table is analysed when the promotion wrote at
least ``MIN_ROWS`` of its rows, or more than a tenth of it (autovacuum's own rule, applied now instead of up
to a minute later), or when it has never been analysed; autovacuum refreshes the rest as it always does.
"""

from __future__ import annotations

from collections.abc import Mapping

import psycopg

MIN_ROWS = 10_000
FRACTION = 0.1
BASE = 50  # autovacuum_analyze_threshold's default

# Each table with the columns the promotion's statements filter, join and group on (all of them would
# triple the cost of sampling staging_rows: its raw records and error lists are long).
STAGING = "staging_rows (upload_id, row_index, validation_status, entity_type, campaign_id, ad_set_id, ad_id, date)"
PROMOTED = {
    "campaigns": "campaigns",
    "ad_sets": "ad_sets",
    "ads": "ads",
    "daily_metrics": "daily_metrics (workspace_id, platform, ad_id, date, last_upload_id)",
}


def needs_analyze(changed: int, reltuples: float) -> bool:
    """Whether ``changed`` rows make a table's statistics (``reltuples`` rows, -1 if never analysed) stale."""
    if changed <= 0:
        return False
    return changed >= MIN_ROWS or reltuples < 0 or changed > FRACTION * reltuples + BASE


def _reltuples(conn: psycopg.Connection, tables: list[str]) -> dict[str, float]:
    rows = conn.execute("SELECT relname, reltuples FROM pg_class WHERE oid = ANY(%s::regclass[])", (tables,))
    return {row["relname"]: float(row["reltuples"]) for row in rows}


def refresh_staging(conn: psycopg.Connection) -> None:
    """ANALYZE staging_rows after every upload, however small. Without it the planner believes the new upload
    has one row (every earlier upload is in its most-common-values list) and joins its rows by scanning them all
    for each picked row: a 2,000-row promotion took many times as long, and the cost grows with the square of
    the rows (benchmarks/metrics_load.py)."""
    conn.execute(f"ANALYZE {STAGING}")


def refresh_after_promotion(conn: psycopg.Connection, upserted: Mapping[str, int]) -> list[str]:
    """ANALYZE the promoted tables the promotion changed enough (``upserted``: rows written per table);
    the tables analysed. Run after commit, outside the workspace's lock (module doc of ``promotion``)."""
    reltuples = _reltuples(conn, list(PROMOTED))
    stale = [table for table in PROMOTED if needs_analyze(upserted.get(table, 0), reltuples.get(table, -1.0))]
    if stale:
        conn.execute(f"ANALYZE {', '.join(PROMOTED[table] for table in stale)}")
    return stale
