-- Which model made a vector, by what it is: the SHA-256 of its weights, configuration and tokenizer (the
-- pipeline fingerprint's model digest), beside its folder name. A vector is reused for unchanged chunk
-- text only under the same digest, so changed weights under the same folder name re-embed everything.
-- Vectors stored before this are never reused (their digest is unknown); search reads them by name.
ALTER TABLE chunk_embeddings ADD COLUMN model_digest text;
