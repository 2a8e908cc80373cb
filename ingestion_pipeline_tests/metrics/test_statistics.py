"""Planner statistics after a promotion: refreshed when it changed enough of a table, left to autovacuum when
it changed a few rows of a large one (metrics/statistics.py)."""

from __future__ import annotations

import pytest

from ingestion_pipeline.metrics.statistics import (
    MIN_ROWS,
    needs_analyze,
    refresh_after_promotion,
)


@pytest.mark.parametrize(("changed", "reltuples", "expected"), [
    (0, -1, False),  # nothing changed
    (1, -1, True),  # never analysed
    (60, 0, True),  # an empty table gained more than autovacuum's 50 rows
    (40, 0, False),
    (150, 1_000, False),  # a tenth plus 50 is the limit
    (151, 1_000, True),
    (MIN_ROWS - 1, 1e9, False),
    (MIN_ROWS, 1e9, True),  # enough rows for a plan choice to matter, however large the table
])
def test_a_table_is_analysed_when_the_change_is_large_for_it_or_large_in_itself(changed, reltuples, expected):
    assert needs_analyze(changed, reltuples) is expected


def _reltuples(db, table: str) -> float:
    return db.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", (table,)).fetchone()["reltuples"]


def _add_campaigns(db, first: int, last: int) -> None:
    db.execute("""INSERT INTO campaigns (workspace_id, platform, campaign_id)
                  SELECT 'w', 'meta', 'c' || i FROM generate_series(%s::int, %s::int) i""", (first, last))


def test_promotion_refreshes_only_the_tables_it_changed_enough(db):
    _add_campaigns(db, 1, 1000)
    assert refresh_after_promotion(db, {"campaigns": 1000, "ads": 0}) == ["campaigns"]
    assert _reltuples(db, "campaigns") == 1000
    _add_campaigns(db, 1001, 1100)
    assert refresh_after_promotion(db, {"campaigns": 100}) == []  # 100 of 1,000: the statistics stand
    assert _reltuples(db, "campaigns") == 1000
    _add_campaigns(db, 1101, 1300)
    assert refresh_after_promotion(db, {"campaigns": 200, "daily_metrics": 0}) == ["campaigns"]
    assert _reltuples(db, "campaigns") == 1300
