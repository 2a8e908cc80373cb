-- The full-text rows in 16 partitions by hash of the tenant, each with its own GIN index. In one GIN index a
-- query word's posting list holds every tenant's chunks, so counting and finding a common word cost a search of a
-- 200-chunk tenant as much as one of the largest (benchmarks/search_latency.py at 200,000 chunks: the text arm
-- was 50 of a search's 52 ms, whatever the tenant's size). Every statement on chunk_fts names its tenant, so a
-- search reads one partition. Promotion's insert and its transaction are unchanged.
ALTER TABLE chunk_fts RENAME TO chunk_fts_unpartitioned;
ALTER INDEX chunk_fts_gin RENAME TO chunk_fts_unpartitioned_gin;
CREATE TABLE chunk_fts (
    chunk_id           bigint NOT NULL REFERENCES chunks (chunk_id),
    tenant_id          text NOT NULL,
    tsv                tsvector NOT NULL,
    text_search_config text NOT NULL DEFAULT 'english',
    PRIMARY KEY (tenant_id, chunk_id)
) PARTITION BY HASH (tenant_id);
CREATE TABLE chunk_fts_p00 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 0);
CREATE TABLE chunk_fts_p01 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 1);
CREATE TABLE chunk_fts_p02 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 2);
CREATE TABLE chunk_fts_p03 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 3);
CREATE TABLE chunk_fts_p04 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 4);
CREATE TABLE chunk_fts_p05 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 5);
CREATE TABLE chunk_fts_p06 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 6);
CREATE TABLE chunk_fts_p07 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 7);
CREATE TABLE chunk_fts_p08 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 8);
CREATE TABLE chunk_fts_p09 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 9);
CREATE TABLE chunk_fts_p10 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 10);
CREATE TABLE chunk_fts_p11 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 11);
CREATE TABLE chunk_fts_p12 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 12);
CREATE TABLE chunk_fts_p13 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 13);
CREATE TABLE chunk_fts_p14 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 14);
CREATE TABLE chunk_fts_p15 PARTITION OF chunk_fts FOR VALUES WITH (MODULUS 16, REMAINDER 15);
INSERT INTO chunk_fts (chunk_id, tenant_id, tsv, text_search_config)
SELECT chunk_id, tenant_id, tsv, text_search_config FROM chunk_fts_unpartitioned;
DROP TABLE chunk_fts_unpartitioned;
CREATE INDEX chunk_fts_gin ON chunk_fts USING gin (tsv);
ANALYZE chunk_fts;
