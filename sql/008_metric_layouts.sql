-- Exports as the platforms write them: which layout a file matched, the summary rows skipped, and the
-- notes made once per upload (a metric column the export does not carry).
ALTER TABLE data_uploads ADD COLUMN layout text, ADD COLUMN skipped_rows integer, ADD COLUMN notes jsonb;

-- A metric an export does not carry is NULL, not an error on every row (promotion keeps a value an
-- earlier export gave).
ALTER TABLE daily_metrics ALTER COLUMN impressions DROP NOT NULL, ALTER COLUMN clicks DROP NOT NULL,
    ALTER COLUMN spend DROP NOT NULL, ALTER COLUMN currency DROP NOT NULL;
