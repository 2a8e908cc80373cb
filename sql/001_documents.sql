-- Identity, ledger and content tables of the document pipeline.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE tenants (
    tenant_id   text PRIMARY KEY CHECK (tenant_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One row per logical document of a tenant; uploads are content-addressed (upload://sha256:<hex>),
-- S3 objects path-addressed (s3://bucket/key).
CREATE TABLE documents (
    doc_id      bigserial PRIMARY KEY,
    tenant_id   text NOT NULL REFERENCES tenants (tenant_id),
    source_uri  text NOT NULL,
    title       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, source_uri),
    UNIQUE (tenant_id, doc_id)
);

-- The run ledger: one row per file per submission.
CREATE TABLE ingestion_runs (
    run_id          bigserial PRIMARY KEY,
    tenant_id       text NOT NULL REFERENCES tenants (tenant_id),
    doc_id          bigint NOT NULL,
    run_type        text NOT NULL DEFAULT 'upload',
    status          text NOT NULL DEFAULT 'queued'
                    CHECK (status IN ('queued', 'running', 'succeeded', 'failed')),
    source_uri      text NOT NULL,
    raw_path        text,              -- where the bytes wait for processing
    content_hash    text NOT NULL,
    size_bytes      bigint NOT NULL,
    config          jsonb NOT NULL DEFAULT '{}'::jsonb,
    stats           jsonb NOT NULL DEFAULT '{}'::jsonb,
    error           text,
    attempts        integer NOT NULL DEFAULT 0,
    partition_key   text,
    dagster_run_id  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents (tenant_id, doc_id)
);
CREATE INDEX ingestion_runs_status_idx ON ingestion_runs (status, created_at);
CREATE INDEX ingestion_runs_partition_idx ON ingestion_runs (partition_key);
CREATE INDEX ingestion_runs_tenant_idx ON ingestion_runs (tenant_id, created_at DESC);

CREATE TABLE document_versions (
    version_id            bigserial PRIMARY KEY,
    tenant_id             text NOT NULL,
    doc_id                bigint NOT NULL,
    version_number        integer NOT NULL,
    content_hash          text NOT NULL,
    pipeline_fingerprint  text NOT NULL,
    is_active             boolean NOT NULL DEFAULT false,
    title                 text,
    filename              text,
    content_type          text,
    size_bytes            bigint NOT NULL,
    page_count            integer,
    chunk_count           integer NOT NULL CHECK (chunk_count > 0),
    token_count           integer NOT NULL,
    ingestion_run_id      bigint REFERENCES ingestion_runs (run_id),
    created_at            timestamptz NOT NULL DEFAULT now(),
    activated_at          timestamptz,
    deactivated_at        timestamptz,
    FOREIGN KEY (tenant_id, doc_id) REFERENCES documents (tenant_id, doc_id),
    UNIQUE (doc_id, version_number),
    UNIQUE (tenant_id, version_id)
);
-- Latest-only serving: at most one active version per document.
CREATE UNIQUE INDEX document_versions_one_active ON document_versions (tenant_id, doc_id) WHERE is_active;

CREATE TABLE chunks (
    chunk_id      bigserial PRIMARY KEY,
    tenant_id     text NOT NULL,
    version_id    bigint NOT NULL,
    doc_id        bigint NOT NULL,
    ordinal       integer NOT NULL,
    text          text NOT NULL,
    page_start    integer,
    page_end      integer,
    section_path  text[] NOT NULL DEFAULT '{}',
    element_types text[] NOT NULL DEFAULT '{}',
    token_count   integer NOT NULL,
    content_hash  text NOT NULL,
    FOREIGN KEY (tenant_id, version_id) REFERENCES document_versions (tenant_id, version_id),
    UNIQUE (version_id, ordinal)
);
CREATE INDEX chunks_reuse_idx ON chunks (tenant_id, content_hash);

CREATE TABLE chunk_embeddings (
    chunk_id   bigint PRIMARY KEY REFERENCES chunks (chunk_id),
    tenant_id  text NOT NULL,
    model      text NOT NULL,
    embedding  vector(384) NOT NULL
);
CREATE INDEX chunk_embeddings_hnsw ON chunk_embeddings USING hnsw (embedding vector_cosine_ops);

CREATE TABLE chunk_fts (
    chunk_id   bigint PRIMARY KEY REFERENCES chunks (chunk_id),
    tenant_id  text NOT NULL,
    tsv        tsvector NOT NULL
);
CREATE INDEX chunk_fts_gin ON chunk_fts USING gin (tsv);
