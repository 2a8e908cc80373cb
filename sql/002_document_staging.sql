-- Intermediate state of the document assets, keyed by ledger row. Scratch space: rows are removed
-- once their file is promoted; content tables are never written from here except by promotion.
CREATE TABLE staging_documents (
    run_id          bigint PRIMARY KEY REFERENCES ingestion_runs (run_id),
    tenant_id       text NOT NULL,
    page_count      integer,
    elements_done   boolean NOT NULL DEFAULT false,
    chunks_done     boolean NOT NULL DEFAULT false,
    embeddings_done boolean NOT NULL DEFAULT false,
    stats           jsonb NOT NULL DEFAULT '{}'::jsonb,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE staging_elements (
    run_id        bigint NOT NULL REFERENCES staging_documents (run_id) ON DELETE CASCADE,
    ordinal       integer NOT NULL,
    element_type  text NOT NULL,
    text          text NOT NULL,
    page_number   integer,
    section_path  text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (run_id, ordinal)
);

CREATE TABLE staging_chunks (
    run_id        bigint NOT NULL REFERENCES staging_documents (run_id) ON DELETE CASCADE,
    ordinal       integer NOT NULL,
    text          text NOT NULL,
    page_start    integer,
    page_end      integer,
    section_path  text[] NOT NULL DEFAULT '{}',
    element_types text[] NOT NULL DEFAULT '{}',
    token_count   integer NOT NULL,
    content_hash  text NOT NULL,
    embedding     vector(384),          -- NULL until embedded: the resume marker of the embedding step
    embedding_reused boolean NOT NULL DEFAULT false,
    PRIMARY KEY (run_id, ordinal)
);
