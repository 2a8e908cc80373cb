-- One HNSW graph per tenant (and dimension) instead of one per partition (sql/038, sql/044). A partition holds several
-- tenants, and in their shared graph a large tenant's query in a neighbour's vocabulary walked the neighbour's vectors,
-- dropped by the tenant filter one by one: slower, which told the tenant what its neighbour holds. A tenant's own graph
-- holds its own rows only (documents/vector_index.py). A tenant of at most 5,000 served chunks
-- (search.EXACT_SEARCH_MAX_CHUNKS) is ranked exactly and gets no graph.
--
-- This drops the shared graphs and nothing more: dropping a partitioned index locks the table until the migration
-- commits, so the large tenants' graphs are built after it, concurrently (`ingestion-pipeline db migrate` builds
-- them once the migrations are applied; so do the intake service's janitor and each tenant's next promotion). Until
-- its graph is built a large tenant is ranked exactly: correct, slower.
--
-- An empty index keeps each dropped graph's name on the parent alone (ON ONLY, no partition attached, so it is
-- never valid and never used): a worker of the release before, still promoting during the rollout, finds its
-- dimension's index present and does not build the shared graph again.
DO $$
DECLARE
    shared text;
    dim integer;
BEGIN
    FOR shared IN SELECT indexname FROM pg_indexes
                   WHERE tablename = 'chunk_embeddings' AND indexname ~ '^chunk_embeddings_hnsw_[0-9]+$' LOOP
        dim := substring(shared FROM '([0-9]+)$')::integer;
        EXECUTE format('DROP INDEX %I', shared);  -- the partitions' indexes attached to it go with it
        EXECUTE format('CREATE INDEX %I ON ONLY chunk_embeddings USING hnsw ((embedding::vector(%s)) '
                       'vector_cosine_ops) WHERE vector_dims(embedding) = %s AND indexed AND false',
                       shared, dim, dim);
    END LOOP;
END $$;
