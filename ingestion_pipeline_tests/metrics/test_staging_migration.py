"""An upload staged by the previous version (normalised values as jsonb) promotes after migration 010."""

from __future__ import annotations

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ingestion_pipeline.core.migrations import apply_migrations
from ingestion_pipeline.metrics.promotion import promote_upload
from ingestion_pipeline.metrics.uploads import MetricUpload
from ingestion_pipeline_tests.helpers import database_migrated_before


def test_rows_staged_as_jsonb_are_converted_and_promote(pg_server_url, tmp_path):
    url = database_migrated_before(pg_server_url, tmp_path, "010")
    with psycopg.connect(url, row_factory=dict_row) as conn:
        upload = conn.execute(
            """INSERT INTO data_uploads (workspace_id, platform, filename, file_format, content_hash, size_bytes,
                                         status, total_rows, valid_rows, invalid_rows)
               VALUES ('w', 'meta', 'old.csv', 'csv', 'h', 1, 'staging_complete', 2, 1, 1) RETURNING *""").fetchone()
        valid = {"campaign_id": "c1", "ad_set_id": "s1", "ad_id": "a1", "campaign_name": "Old", "date": "2024-03-01",
                 "impressions": 100, "clicks": 3, "spend": "1.50", "currency": "USD", "conversions": None}
        for index, (values, status) in enumerate(((valid, "valid"), ({"ad_id": "a2", "date": None}, "invalid")), 1):
            conn.execute(
                """INSERT INTO staging_rows (upload_id, row_index, entity_type, natural_key_hash, raw_data, normalized,
                                             validation_status) VALUES (%s, %s, 'daily_metric', 'k', '{}', %s, %s)""",
                (upload["upload_id"], index, Jsonb(values), status))
    apply_migrations(url)
    with psycopg.connect(url, row_factory=dict_row) as conn:
        staged = conn.execute(
            "SELECT ad_id, date::text, impressions, spend::text FROM staging_rows ORDER BY 1").fetchall()
        assert staged == [{"ad_id": "a1", "date": "2024-03-01", "impressions": 100, "spend": "1.50"},
                          {"ad_id": "a2", "date": None, "impressions": None, "spend": None}]
        result = promote_upload(conn, MetricUpload.from_row(upload), below_threshold=False)
        assert result.promoted_rows == 1
        metric = conn.execute("SELECT ad_id, date::text, clicks, spend::text FROM daily_metrics").fetchone()
        assert metric == {"ad_id": "a1", "date": "2024-03-01", "clicks": 3, "spend": "1.500000"}
