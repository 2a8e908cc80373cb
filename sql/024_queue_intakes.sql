-- Queue intakes (queues/): jobs that arrive on the Redis job queue or on SQS.
--
-- rag_sources maps a Redis job's rag_id to a tenant and the folder its files must lie under; an unknown
-- rag_id is refused, never a new tenant.
CREATE TABLE rag_sources (
    rag_id      text PRIMARY KEY CHECK (rag_id ~ '^[A-Za-z0-9][A-Za-z0-9_]{0,63}$'),
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    root        text NOT NULL CHECK (root LIKE '/%'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per accepted queue job, written in the transaction that writes its ledger row (file_id), so a job
-- delivered twice (a consumer died after the commit, before its acknowledgment) is recognised and not
-- submitted again. A job refused at intake has no file_id and is finished at once.
CREATE TABLE queue_jobs (
    job_id       text PRIMARY KEY,
    intake       text NOT NULL CHECK (intake IN ('redis', 'sqs')),
    rag_id       text,
    tenant_id    text NOT NULL,
    file_id      bigint REFERENCES ingestion_runs (run_id),
    source_path  text,
    filename     text NOT NULL,
    message      jsonb NOT NULL,
    status       text NOT NULL CHECK (status IN ('queued', 'processing', 'done', 'failed')),
    outcome      jsonb NOT NULL DEFAULT '{}'::jsonb,
    accepted_at  timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    reported_at  timestamptz  -- the terminal status written to the queue (status hash, file moved): NULL until then
);
CREATE INDEX queue_jobs_unreported_idx ON queue_jobs (accepted_at) WHERE reported_at IS NULL;
CREATE INDEX queue_jobs_file_idx ON queue_jobs (file_id);

-- The newest S3 event notification applied per object: an event whose sequencer is not greater (a
-- redelivery, or an older event arriving late) changes nothing.
CREATE TABLE s3_event_sequencers (
    source_id   bigint NOT NULL REFERENCES ingestion_sources (source_id),
    key         text NOT NULL,
    sequencer   text NOT NULL,
    event_name  text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, key)
);
