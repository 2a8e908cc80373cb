-- Each full-text row names its chunk's version. The text arm keeps only chunks of active versions, and it asks
-- that of every chunk its rarest query words match: thousands for a common word in a large tenant. Answered
-- through chunks, that was an index lookup and a heap row per match, most of the arm's time at 200,000 chunks
-- (benchmarks/search_latency.py); the version read with the words is one lookup in document_versions.
-- A chunk never changes version, so the copy cannot go stale. Upgrading rewrites every full-text row once.
ALTER TABLE chunk_fts ADD COLUMN version_id bigint;
UPDATE chunk_fts f SET version_id = c.version_id FROM chunks c WHERE c.chunk_id = f.chunk_id;
ALTER TABLE chunk_fts ALTER COLUMN version_id SET NOT NULL;
ANALYZE chunk_fts;
