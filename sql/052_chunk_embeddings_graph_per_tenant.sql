-- One HNSW graph per tenant (and dimension) instead of one per partition (sql/038, sql/044). A partition holds several
-- tenants, and in their shared graph a large tenant's query in a neighbour's vocabulary walked the neighbour's vectors,
-- dropped by the tenant filter one by one: ~10 ms slower, which told the tenant what its neighbour holds. A tenant's
-- own graph holds its own rows only (documents/vector_index.py). A tenant of at most 5,000 served chunks
-- (search.EXACT_SEARCH_MAX_CHUNKS) is ranked exactly and gets no graph; a larger one gets its graph here, and a tenant
-- that grows past the size later gets it from the promotion that took it there. Index names are the dimension and a
-- digest of the tenant id, as vector_index.graph_name derives them. Upgrading builds each large tenant's graph once
-- (minutes for millions of chunks).
CREATE TEMP TABLE tenant_graphs_to_build ON COMMIT DROP AS
SELECT t.tenant_id, m.dimension,
       (SELECT e.tableoid::regclass::text FROM chunk_embeddings e WHERE e.tenant_id = t.tenant_id LIMIT 1) AS partition
  FROM tenant_serving_totals t
  JOIN (SELECT DISTINCT model_name, dimension FROM embedding_models) m ON m.model_name = t.name
 WHERE t.kind = 'model' AND m.dimension BETWEEN 1 AND 2000
 GROUP BY t.tenant_id, m.dimension
HAVING sum(t.chunks) > 5000;
DO $$
DECLARE
    shared text;
    large record;
BEGIN
    FOR shared IN SELECT indexname FROM pg_indexes
                   WHERE tablename = 'chunk_embeddings' AND indexname ~ '^chunk_embeddings_hnsw_[0-9]+$' LOOP
        EXECUTE format('DROP INDEX %I', shared);  -- the partitions' indexes attached to it go with it
    END LOOP;
    -- read from a table of its own: a loop over chunk_embeddings itself would hold the partition the index is on
    FOR large IN SELECT * FROM tenant_graphs_to_build WHERE partition IS NOT NULL LOOP
        EXECUTE format('CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
                       'WHERE tenant_id = %L AND vector_dims(embedding) = %s AND indexed',
                       'chunk_embeddings_hnsw_' || large.dimension || '_'
                           || left(encode(sha256(convert_to(large.tenant_id, 'UTF8')), 'hex'), 24),
                       large.partition, large.dimension, large.tenant_id, large.dimension);
    END LOOP;
END $$;
