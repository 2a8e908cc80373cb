-- Foreign keys to data_uploads on the rows a metric upload writes cost one trigger call per row (a 1M-row
-- upload: 1M checks while staging and 1M more while promoting, ~3.5 s each; benchmarks/metrics_load.py)
-- and protect nothing: every such row is written in a transaction that holds its upload row
-- (ledger.hold), and data_uploads rows are never deleted (they are the ledger's history). The checks
-- that carry meaning stay: an ad set needs its campaign, an ad its ad set, a daily metric its ad.
ALTER TABLE staging_rows  DROP CONSTRAINT IF EXISTS staging_rows_upload_id_fkey;
ALTER TABLE campaigns     DROP CONSTRAINT IF EXISTS campaigns_last_upload_id_fkey;
ALTER TABLE ad_sets       DROP CONSTRAINT IF EXISTS ad_sets_last_upload_id_fkey;
ALTER TABLE ads           DROP CONSTRAINT IF EXISTS ads_last_upload_id_fkey;
ALTER TABLE daily_metrics DROP CONSTRAINT IF EXISTS daily_metrics_last_upload_id_fkey;
