-- Is a stored upload still needed by a file not yet finished? Asked for every file promoted (before its
-- upload is released) and for every duplicate submitted. Without this index the question was answered by
-- reading every open ledger row (the partial index ingestion_runs_one_open_reindex, filtered on raw_path):
-- 0.44 ms a file with 300 open, and linear in the backlog, so a 10,000-file backlog paid ~15 ms a file.
CREATE INDEX IF NOT EXISTS ingestion_runs_open_raw_path_idx ON ingestion_runs (raw_path)
    WHERE status IN ('queued', 'running');
