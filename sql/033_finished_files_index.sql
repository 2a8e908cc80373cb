-- The files that finished lately, read for the backlog's rate (documents/backlog.py) without scanning the
-- whole ledger.
CREATE INDEX ingestion_runs_finished_idx ON ingestion_runs (finished_at) WHERE finished_at IS NOT NULL;
