-- Any model's dimension: vectors are stored untyped (`vector`, not `vector(384)`) and each dimension has
-- its own HNSW index over `embedding::vector(dim)`, partial on `vector_dims(embedding) = dim`. Switching
-- to a model of another dimension is then `reindex`, with no SQL by hand: the pipeline creates the index
-- of a new dimension (documents/vector_index.py) before it promotes the first vector of it. Search reads
-- the current model's vectors through its dimension's index.
-- Upgrading rebuilds the 384-dimension index once (minutes for millions of chunks).
DROP INDEX IF EXISTS chunk_embeddings_hnsw;
ALTER TABLE chunk_embeddings ALTER COLUMN embedding TYPE vector;
ALTER TABLE staging_chunks ALTER COLUMN embedding TYPE vector;
CREATE INDEX chunk_embeddings_hnsw_384 ON chunk_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE vector_dims(embedding) = 384;
