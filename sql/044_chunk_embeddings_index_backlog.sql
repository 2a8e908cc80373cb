-- A promoted vector enters its partition's HNSW graph after its version's transaction, not inside it
-- (documents/vector_backlog.py): inserting into the graph was nearly all of a promotion (0.6 ms a vector in a
-- small graph, 1.5-2.8 ms at a million; 251 vectors: 160 ms of a 161 ms insert), held the version's transaction
-- and locks that long, and ran on the pipeline's own lanes. A row is promoted with indexed = false, which the
-- HNSW indexes' predicate leaves out; search ranks a tenant's not-yet-indexed rows exactly beside the index's
-- answer (documents/search.py), so a version is searchable the moment it commits. Indexing sets indexed = true,
-- which is the graph insertion, in batches of its own on as many connections as the database has cores for it.
ALTER TABLE chunk_embeddings ADD COLUMN indexed boolean NOT NULL DEFAULT true;
CREATE INDEX chunk_embeddings_backlog ON chunk_embeddings (tenant_id) WHERE NOT indexed;
-- Each dimension's HNSW index again with the new predicate (on the parent alone, one per partition, attached, as
-- documents/vector_index.py makes them). Upgrading rebuilds the indexes once: minutes for millions of chunks.
DO $$
DECLARE
    dim integer;
    part text;
BEGIN
    FOR dim IN SELECT unnest(ARRAY(
                   SELECT substring(indexname FROM 'chunk_embeddings_hnsw_([0-9]+)$')::integer FROM pg_indexes
                    WHERE tablename = 'chunk_embeddings' AND indexname ~ '^chunk_embeddings_hnsw_[0-9]+$')) LOOP
        EXECUTE format('DROP INDEX %I', 'chunk_embeddings_hnsw_' || dim);
        EXECUTE format('CREATE INDEX %I ON ONLY chunk_embeddings USING hnsw ((embedding::vector(%s)) '
                       'vector_cosine_ops) WHERE vector_dims(embedding) = %s AND indexed',
                       'chunk_embeddings_hnsw_' || dim, dim, dim);
        FOR part IN SELECT relid::regclass::text FROM pg_partition_tree('chunk_embeddings') WHERE isleaf LOOP
            EXECUTE format('CREATE INDEX %I ON %I USING hnsw ((embedding::vector(%s)) vector_cosine_ops) '
                           'WHERE vector_dims(embedding) = %s AND indexed', part || '_hnsw_' || dim, part, dim, dim);
            EXECUTE format('ALTER INDEX %I ATTACH PARTITION %I', 'chunk_embeddings_hnsw_' || dim,
                           part || '_hnsw_' || dim);
        END LOOP;
    END LOOP;
END $$;
