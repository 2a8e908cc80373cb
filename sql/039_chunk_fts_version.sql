-- Each full-text row names its chunk's version. The text arm keeps only chunks of active versions, and it asks
-- that of every chunk its rarest query words match: thousands for a common word in a large tenant. Answered
-- through chunks, that was an index lookup and a heap row per match, most of the arm's time at 200,000 chunks
-- (benchmarks/search_latency.py); the version read with the words is looked up among the tenant's active
-- versions, hashed once per search.
-- A chunk never changes version, so the copy cannot go stale. Upgrading rewrites every full-text row once.
-- Nullable: a release before this one, still promoting during a rolling upgrade, writes rows without it, and the
-- text arm reads such a row's version through its chunk (documents/text_ranking.py).
ALTER TABLE chunk_fts ADD COLUMN version_id bigint;
UPDATE chunk_fts f SET version_id = c.version_id FROM chunks c WHERE c.chunk_id = f.chunk_id;
ANALYZE chunk_fts;
