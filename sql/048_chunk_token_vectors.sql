-- Each chunk's token vectors, for search's late interaction (documents/late_interaction.py): the signs of every
-- token's vector the model computed to pool the chunk's ([CLS] and [SEP] aside), one bit a dimension, packed
-- row after row. Written with the chunk's vector, by promotion, and reused with it for a chunk whose exact text
-- is already embedded under the same model; a chunk promoted before they were kept has none, and a search whose
-- candidates lack some keeps its fused order (a re-index gives them theirs: the pipeline fingerprint names them).
-- Read only by (tenant, chunk): the few candidates of one search.
CREATE TABLE chunk_token_vectors (
    chunk_id   bigint NOT NULL REFERENCES chunks (chunk_id),
    tenant_id  text NOT NULL,
    model      text NOT NULL,
    tokens     bytea NOT NULL,
    PRIMARY KEY (tenant_id, chunk_id)
);
-- sign bits do not compress: stored out of line without trying
ALTER TABLE chunk_token_vectors ALTER COLUMN tokens SET STORAGE EXTERNAL;
ALTER TABLE staging_chunks ADD COLUMN token_vectors bytea;
