-- S3 sources: each keeps a tenant's knowledge base in sync with a bucket prefix.
CREATE TABLE ingestion_sources (
    source_id        bigserial PRIMARY KEY,
    tenant_id        text NOT NULL REFERENCES tenants (tenant_id),
    name             text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    kind             text NOT NULL DEFAULT 'documents' CHECK (kind IN ('documents', 'metrics')),
    bucket           text NOT NULL,
    prefix           text NOT NULL DEFAULT '',
    endpoint_url     text,
    paused           boolean NOT NULL DEFAULT false,
    removed_at       timestamptz,
    -- listing state: a pass lists the whole prefix across ticks; list_cursor is the last key listed.
    list_cursor      text,
    pass_number      bigint NOT NULL DEFAULT 1,
    last_pass_completed_at timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX ingestion_sources_location ON ingestion_sources (tenant_id, bucket, prefix) WHERE removed_at IS NULL;

CREATE TABLE source_objects (
    source_id      bigint NOT NULL REFERENCES ingestion_sources (source_id),
    key            text NOT NULL,
    etag           text NOT NULL,
    size_bytes     bigint NOT NULL,
    last_modified  timestamptz,
    status         text NOT NULL CHECK (status IN ('queued', 'active', 'deleted', 'skipped', 'failed')),
    skip_reason    text,
    doc_id         bigint REFERENCES documents (doc_id),
    last_run_id    bigint REFERENCES ingestion_runs (run_id),
    seen_in_pass   bigint NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_id, key)
);
CREATE INDEX source_objects_sweep ON source_objects (source_id, seen_in_pass) WHERE status <> 'deleted';

-- S3 rows are queued before their bytes are fetched: the hash and size are known after download.
ALTER TABLE ingestion_runs
    ALTER COLUMN content_hash DROP NOT NULL,
    ADD COLUMN source_id bigint REFERENCES ingestion_sources (source_id),
    ADD COLUMN source_key text,
    ADD COLUMN source_etag text;
CREATE INDEX ingestion_runs_source_idx ON ingestion_runs (source_id, created_at DESC);
