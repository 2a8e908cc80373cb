-- Both ledgers (document files, metric uploads) go through one mechanism (core/ledger.py), so they
-- carry the same bookkeeping columns: metric uploads now count their attempts too.
ALTER TABLE data_uploads ADD COLUMN attempts integer NOT NULL DEFAULT 0;
CREATE INDEX data_uploads_run_idx ON data_uploads (dagster_run_id);
CREATE INDEX ingestion_runs_dagster_run_idx ON ingestion_runs (dagster_run_id);
