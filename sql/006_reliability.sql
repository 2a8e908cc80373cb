-- Reliability: exclusive claims with leases, attempts and backoff, error codes, dead letters,
-- cancel and pause, the history of every attempt, and a heartbeat per run worker.
-- Both ledgers (ingestion_runs: one row per file; data_uploads: one per metric upload) get the same
-- columns; core/ledger.py is the only code that moves them between states.

ALTER TABLE ingestion_runs DROP CONSTRAINT ingestion_runs_status_check;
ALTER TABLE ingestion_runs ADD CONSTRAINT ingestion_runs_status_check
    CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'dead_letter', 'canceled'));

ALTER TABLE data_uploads DROP CONSTRAINT data_uploads_status_check;
ALTER TABLE data_uploads ADD CONSTRAINT data_uploads_status_check
    CHECK (status IN ('pending', 'processing', 'staging_complete', 'promoting', 'completed', 'partial', 'failed',
                      'dead_letter', 'canceled'));

ALTER TABLE ingestion_runs
    ADD COLUMN owner text,                          -- the root Dagster run that holds the claim
    ADD COLUMN lease_expires_at timestamptz,        -- extended by the owner's heartbeat
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),  -- a queued row waits until then
    ADD COLUMN attempts_before_replay integer NOT NULL DEFAULT 0,   -- the retry budget counts from here
    ADD COLUMN launch_gen integer NOT NULL DEFAULT 0,  -- bumped when the row needs a new run of its batch
    ADD COLUMN error_code text,
    ADD COLUMN suggestion text,
    ADD COLUMN canceled_at timestamptz,
    ADD COLUMN canceled_by text;

ALTER TABLE data_uploads
    ADD COLUMN owner text,
    ADD COLUMN lease_expires_at timestamptz,
    ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN attempts_before_replay integer NOT NULL DEFAULT 0,
    ADD COLUMN launch_gen integer NOT NULL DEFAULT 0,
    ADD COLUMN error_code text,
    ADD COLUMN suggestion text,
    ADD COLUMN canceled_at timestamptz,
    ADD COLUMN canceled_by text;

CREATE INDEX ingestion_runs_owner_idx ON ingestion_runs (owner) WHERE status = 'running';
CREATE INDEX ingestion_runs_lease_idx ON ingestion_runs (lease_expires_at) WHERE status = 'running';
CREATE INDEX ingestion_runs_due_idx ON ingestion_runs (next_attempt_at) WHERE status = 'queued';
CREATE INDEX data_uploads_owner_idx ON data_uploads (owner)
    WHERE status IN ('processing', 'staging_complete', 'promoting');

-- Pausing a tenant stops new work from being launched and parks its in-flight files.
ALTER TABLE tenants ADD COLUMN paused boolean NOT NULL DEFAULT false, ADD COLUMN paused_at timestamptz;

-- Every transition of a unit of work, appended in the transaction that makes it.
CREATE TABLE ledger_history (
    history_id      bigserial PRIMARY KEY,
    kind            text NOT NULL CHECK (kind IN ('document', 'metric_upload')),
    item_id         bigint NOT NULL,
    attempt         integer NOT NULL,
    event           text NOT NULL,
    status          text NOT NULL,        -- the status after the event
    error_code      text,
    message         text,
    owner           text,
    dagster_run_id  text,
    actor           text,                 -- who asked (cancel, retry, pause), when a person did
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ledger_history_item_idx ON ledger_history (kind, item_id, history_id);

-- One row per live run worker; the janitor fails runs whose worker stopped beating.
CREATE TABLE run_heartbeats (
    dagster_run_id  text PRIMARY KEY,
    owner           text NOT NULL,
    pid             integer NOT NULL,
    hostname        text NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    beat_at         timestamptz NOT NULL DEFAULT now()
);

-- Metric facts and dimensions remember the upload that wrote them: an older upload never overwrites
-- a newer one (last_upload_id exists on all four tables since 004).
CREATE INDEX daily_metrics_upload_idx ON daily_metrics (last_upload_id);
