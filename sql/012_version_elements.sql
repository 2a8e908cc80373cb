-- Re-indexing without the raw file: each promoted version keeps the elements it was chunked from
-- (text, kind, page, section path), so a change of chunker or model re-chunks and re-embeds from
-- here (`ingestion-pipeline reindex`, a backfill from the UI). The raw upload is deleted after
-- promotion, so without these rows there would be nothing to re-process.
CREATE TABLE version_elements (
    version_id    bigint NOT NULL REFERENCES document_versions (version_id),
    tenant_id     text NOT NULL,
    ordinal       integer NOT NULL,
    element_type  text NOT NULL,
    text          text NOT NULL,
    page_number   integer,
    section_path  text[] NOT NULL DEFAULT '{}',
    PRIMARY KEY (version_id, ordinal)
);

-- Which extractor produced a version's elements (NULL: promoted before elements were kept). Re-indexing
-- from stored elements keeps it; only a new extraction from the raw bytes changes it.
ALTER TABLE document_versions ADD COLUMN extractor_version text;

-- A re-index is a unit of work in the ledger like an upload: run_type 'reindex', and the version it
-- re-indexes. At most one unfinished re-index per version.
ALTER TABLE ingestion_runs ADD COLUMN reindex_of_version_id bigint REFERENCES document_versions (version_id);
CREATE UNIQUE INDEX ingestion_runs_one_open_reindex ON ingestion_runs (reindex_of_version_id)
    WHERE status IN ('queued', 'running');
