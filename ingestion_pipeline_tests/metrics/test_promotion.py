"""Promotion's choices, on staged rows written directly: which row names an entity, which duplicate fact
wins, what a newer upload updates, and that a fact without its ad never lands (no foreign key checks it
since sql/015; promotion's own check does)."""

from __future__ import annotations

import psycopg

from ingestion_pipeline.metrics.promotion import promote_upload
from ingestion_pipeline.metrics.uploads import MetricUpload

COLUMNS = ("entity_type", "campaign_id", "ad_set_id", "ad_id", "campaign_name", "ad_set_name", "ad_name", "status",
           "date", "impressions", "clicks", "spend", "currency")


def _upload(db: psycopg.Connection, rows: list[tuple], workspace: str = "w") -> MetricUpload:
    upload = db.execute(
        """INSERT INTO data_uploads (workspace_id, platform, filename, file_format, content_hash, size_bytes, status)
           VALUES (%s, 'meta', 'x.csv', 'csv', gen_random_uuid()::text, 1, 'staging_complete') RETURNING *""",
        (workspace,)).fetchone()
    for index, row in enumerate(rows, 1):
        db.execute(
            f"""INSERT INTO staging_rows (upload_id, row_index, natural_key_hash, raw_data, validation_status,
                                         {', '.join(COLUMNS)})
                VALUES (%s, %s, 'k', '{{}}', 'valid', {', '.join(['%s'] * len(COLUMNS))})""",
            (upload["upload_id"], index, *row))
    return MetricUpload.from_row(upload)


def _fact(ad: str, date: str, impressions: int, *, campaign_name: str | None = None,
          ad_name: str | None = None) -> tuple:
    return ("daily_metric", "c1", "s1", ad, campaign_name, "Set", ad_name, None, date, impressions, 1, "2.50", "USD")


def test_entity_names_come_from_their_own_record_else_the_latest_named_fact(db):
    upload = _upload(db, [
        ("campaign", "c1", None, None, "Campaign record", None, None, "ACTIVE", None, None, None, None, None),
        _fact("a1", "2024-03-01", 10, campaign_name="From a fact", ad_name="First"),
        _fact("a1", "2024-03-02", 10, ad_name="Latest"),
        _fact("a1", "2024-03-03", 10),  # no name: does not erase the latest one
        _fact("a2", "2024-03-01", 10),
    ])
    result = promote_upload(db, upload, below_threshold=False)
    assert result.upserted == {"campaigns": 1, "ad_sets": 1, "ads": 2, "daily_metrics": 4}
    assert db.execute("SELECT name, status FROM campaigns").fetchone() == {"name": "Campaign record",
                                                                            "status": "ACTIVE"}
    assert db.execute("SELECT ad_id, name FROM ads ORDER BY ad_id").fetchall() == [
        {"ad_id": "a1", "name": "Latest"}, {"ad_id": "a2", "name": None}]


def test_the_latest_of_duplicate_facts_wins_and_a_newer_upload_updates_only_what_changed(db):
    first = _upload(db, [_fact("a1", "2024-03-01", 10), _fact("a1", "2024-03-01", 30), _fact("a1", "2024-03-02", 5)])
    assert promote_upload(db, first, below_threshold=False).upserted["daily_metrics"] == 2
    second = _upload(db, [_fact("a1", "2024-03-01", 30), _fact("a1", "2024-03-02", 7), _fact("a1", "2024-03-03", 1)])
    assert promote_upload(db, second, below_threshold=False).upserted["daily_metrics"] == 2  # one update, one new
    rows = db.execute("SELECT date::text, impressions, last_upload_id FROM daily_metrics ORDER BY date").fetchall()
    assert rows == [
        {"date": "2024-03-01", "impressions": 30, "last_upload_id": first.upload_id},  # unchanged: not rewritten
        {"date": "2024-03-02", "impressions": 7, "last_upload_id": second.upload_id},
        {"date": "2024-03-03", "impressions": 1, "last_upload_id": second.upload_id},
    ]
    # the first upload promoted again (late) changes nothing
    assert promote_upload(db, first, below_threshold=False).upserted["daily_metrics"] == 0
    assert db.execute("SELECT impressions FROM daily_metrics WHERE date = '2024-03-02'").fetchone()["impressions"] == 7


def test_a_fact_whose_ad_is_missing_never_lands(db):
    orphan = ("daily_metric", None, None, "orphan", None, None, None, None, "2024-03-01", 1, 0, "1", "USD")
    upload = _upload(db, [_fact("a1", "2024-03-01", 10), orphan])
    result = promote_upload(db, upload, below_threshold=False)
    assert (result.status, result.promoted_rows, result.unpromotable_rows) == ("partial", 1, 1)
    assert db.execute("SELECT array_agg(ad_id) AS ads FROM daily_metrics").fetchone()["ads"] == ["a1"]
    reason = db.execute("SELECT validation_errors FROM staging_rows WHERE ad_id = 'orphan'").fetchone()
    assert reason["validation_errors"] == [{"field": "ad_id",
                                            "error": "ad orphan not found in this upload or the workspace"}]


def test_an_ad_record_lands_under_a_stored_ad_set_and_never_under_a_missing_one(db):
    promote_upload(db, _upload(db, [_fact("a1", "2024-03-01", 10)]), below_threshold=False)  # stores c1 / s1 / a1

    def ad(ad_id: str, ad_set: str) -> tuple:
        return ("ad", None, ad_set, ad_id, None, None, f"Ad {ad_id}", "ACTIVE", None, None, None, None, None)

    # s404 is neither stored nor promotable from this upload (its only row has no campaign)
    upload = _upload(db, [ad("a2", "s1"), ad("a3", "s404")])
    result = promote_upload(db, upload, below_threshold=False)
    assert (result.status, result.promoted_rows, result.unpromotable_rows) == ("partial", 1, 1)
    assert result.upserted["ads"] == 1
    assert db.execute("SELECT array_agg(ad_id ORDER BY ad_id) AS ads FROM ads").fetchone()["ads"] == ["a1", "a2"]
    reason = db.execute("SELECT validation_errors FROM staging_rows WHERE ad_id = 'a3'").fetchone()
    assert reason["validation_errors"] == [{"field": "ad_set_id",
                                            "error": "ad set s404 not found in this upload or the workspace"}]


def test_facts_are_looked_up_by_key_even_when_the_statistics_say_the_table_is_empty(db):
    """Statistics taken before the first upload (a VACUUM ANALYZE of a new database) once made the planner
    rescan daily_metrics, pages inserted by the same statement included, once per fact: quadratic."""
    db.execute("ANALYZE daily_metrics")  # empty
    upload = _upload(db, [_fact(f"a{i}", "2024-03-01", i) for i in range(300)])
    db.execute("ANALYZE staging_rows")
    with db.transaction():
        result = promote_upload(db, upload, below_threshold=False)
        scans = db.execute("SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'daily_metrics'").fetchone()
    assert result.upserted["daily_metrics"] == 300
    assert scans["seq_scan"] == 0
