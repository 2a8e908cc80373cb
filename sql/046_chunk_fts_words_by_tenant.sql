-- The full-text index keyed by the tenant as well as by the words. A partition of chunk_fts holds several tenants (16
-- by hash of the tenant, sql/031), and a GIN index over the words alone gave a search every row of its partition
-- holding the word, every tenant's, each read from the heap before the tenant filter dropped it: at 1,000,000 chunks
-- the largest tenant's partition held 77,000 rows of three other tenants, and a 1,095-chunk tenant's search read the
-- matches among the 152,000 other rows of its partition to rank its own (its text arm p95 13.9 ms against 4.2 with this
-- index; docs/benchmarks.md). The indexed value is the chunk's words and one lexeme that names its tenant: chr(1) and
-- the tenant id, which no text search parser can produce (to each a control character is a blank), so no query word can
-- match it. A statement asks for (its words) AND (the tenant's lexeme), the index intersects the two, and the heap is
-- read for the tenant's matches only (documents/text_ranking.py: _WORDS_OF_TENANT). Ranking still reads tsv itself.
-- Upgrading builds the index once (seconds a million rows; promotions wait, searches go on until the old index is
-- dropped at the end, a moment before the migration commits).
CREATE INDEX chunk_fts_words_of_tenant ON chunk_fts
    USING gin ((tsv || array_to_tsvector(ARRAY[chr(1) || tenant_id])));
-- The planner's estimate of a statement's matches comes from the indexed expression's own statistics.
ANALYZE chunk_fts;
DROP INDEX chunk_fts_gin;
