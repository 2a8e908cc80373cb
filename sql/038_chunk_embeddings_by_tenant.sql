-- The vectors in 16 partitions by hash of the tenant, as the full-text rows are (sql/031), each partition with its
-- own HNSW index per dimension (documents/vector_index.py creates a new dimension's on the parent, which makes one
-- per partition). In one graph over every tenant, a tenant's query walks the graph through other tenants'
-- neighbourhoods and a mid-size tenant's rows are too few of those the scan visits: at 1M chunks in 50 tenants its
-- recall@10 fell to 0.88, and each promoted vector cost 7 ms of maintenance in a graph of a million
-- (benchmarks/search_latency.py). Every statement on chunk_embeddings names its tenant, so a search and a
-- promotion touch one partition. Promotion's insert and its transaction are unchanged.
-- Upgrading copies the vectors and builds the indexes once (minutes for millions of chunks).
ALTER TABLE chunk_embeddings RENAME TO chunk_embeddings_unpartitioned;
ALTER TABLE chunk_embeddings_unpartitioned RENAME CONSTRAINT chunk_embeddings_pkey
    TO chunk_embeddings_unpartitioned_pkey;
CREATE TABLE chunk_embeddings (
    chunk_id     bigint NOT NULL REFERENCES chunks (chunk_id),
    tenant_id    text NOT NULL,
    model        text NOT NULL,
    embedding    vector NOT NULL,
    model_digest text,
    PRIMARY KEY (tenant_id, chunk_id)
) PARTITION BY HASH (tenant_id);
CREATE TABLE chunk_embeddings_p00 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 0);
CREATE TABLE chunk_embeddings_p01 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 1);
CREATE TABLE chunk_embeddings_p02 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 2);
CREATE TABLE chunk_embeddings_p03 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 3);
CREATE TABLE chunk_embeddings_p04 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 4);
CREATE TABLE chunk_embeddings_p05 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 5);
CREATE TABLE chunk_embeddings_p06 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 6);
CREATE TABLE chunk_embeddings_p07 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 7);
CREATE TABLE chunk_embeddings_p08 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 8);
CREATE TABLE chunk_embeddings_p09 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 9);
CREATE TABLE chunk_embeddings_p10 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 10);
CREATE TABLE chunk_embeddings_p11 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 11);
CREATE TABLE chunk_embeddings_p12 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 12);
CREATE TABLE chunk_embeddings_p13 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 13);
CREATE TABLE chunk_embeddings_p14 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 14);
CREATE TABLE chunk_embeddings_p15 PARTITION OF chunk_embeddings FOR VALUES WITH (MODULUS 16, REMAINDER 15);
INSERT INTO chunk_embeddings (chunk_id, tenant_id, model, embedding, model_digest)
SELECT chunk_id, tenant_id, model, embedding, model_digest FROM chunk_embeddings_unpartitioned;
-- One HNSW index per dimension present (384 always: the packaged model's), as sql/013 made them: on the parent
-- alone, one per partition named by the partition and the dimension, attached (as documents/vector_index.py does).
DO $$
DECLARE
    dim integer;
    part text;
BEGIN
    FOR dim IN SELECT DISTINCT vector_dims(embedding) FROM chunk_embeddings_unpartitioned
               WHERE vector_dims(embedding) BETWEEN 1 AND 2000 UNION SELECT 384 LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', 'chunk_embeddings_hnsw_' || dim);
        EXECUTE format('CREATE INDEX %I ON ONLY chunk_embeddings USING hnsw ((embedding::vector(%s)) '
                       'vector_cosine_ops) WHERE vector_dims(embedding) = %s', 'chunk_embeddings_hnsw_' || dim, dim, dim);
        FOR part IN SELECT relid::regclass::text FROM pg_partition_tree('chunk_embeddings') WHERE isleaf LOOP
            EXECUTE format('CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE vector_dims(embedding) = %s', part || '_hnsw_' || dim, part, dim, dim);
            EXECUTE format('ALTER INDEX %I ATTACH PARTITION %I', 'chunk_embeddings_hnsw_' || dim, part || '_hnsw_' || dim);
        END LOOP;
    END LOOP;
END $$;
DROP TABLE chunk_embeddings_unpartitioned;
ANALYZE chunk_embeddings;
