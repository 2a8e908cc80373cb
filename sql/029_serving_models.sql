-- Which model's vectors each version holds, so that search embeds the query under every model still serving a
-- tenant's active versions (documents/serving_models.py): while a re-index under a new model is under way, the
-- versions not yet re-embedded keep their old vectors and stay in the vector half of search.
ALTER TABLE document_versions ADD COLUMN embedding_model text;
UPDATE document_versions v SET embedding_model = m.model
  FROM (SELECT DISTINCT ON (c.version_id) c.version_id, e.model
          FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.chunk_id
         ORDER BY c.version_id, c.chunk_id) m
 WHERE m.version_id = v.version_id;
-- read by every search: the models of a tenant's active versions and their chunk counts, from the index alone
CREATE INDEX document_versions_serving_models ON document_versions (tenant_id, embedding_model)
    INCLUDE (chunk_count) WHERE is_active;

-- Every model that promoted versions, and where its files were on the host that promoted them: a search host
-- loads an older model from there to embed the query for the versions still holding its vectors.
CREATE TABLE embedding_models (
    model_name        text NOT NULL,
    model_digest      text NOT NULL CHECK (model_digest ~ '^[0-9a-f]{64}$'),
    dimension         integer NOT NULL CHECK (dimension BETWEEN 1 AND 2000),
    model_path        text NOT NULL,
    first_promoted_at timestamptz NOT NULL DEFAULT now(),
    last_promoted_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (model_name, model_digest)
);
INSERT INTO embedding_models (model_name, model_digest, dimension, model_path)
SELECT DISTINCT ON (e.model) e.model, split_part(e.model_digest, '+', 1), vector_dims(e.embedding), ''
  FROM chunk_embeddings e
 WHERE e.model_digest ~ '^[0-9a-f]{64}'
 ORDER BY e.model, e.chunk_id DESC;
