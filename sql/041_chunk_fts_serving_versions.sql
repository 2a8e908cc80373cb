-- The full-text rows are the words of the versions being served, only. Every version a document ever had keeps
-- its content (chunks, vectors, elements: deletion is deactivation), but its full-text rows are an index of what
-- search may return: kept for inactive versions, they were matched, scored and thrown away by every search, and
-- counted into the words' document frequencies, which rank against the active chunks only. A tenant whose
-- documents had five versions each (81,293 active chunks, 406,465 in all) searched in p50 30 / p95 163 ms, 19 / 43
-- without them (benchmarks/search_latency.py --revisions 5).
-- A trigger keeps it so, whoever deactivates a version (promotion of the next one, a deleted S3 object, the API,
-- a release before this one during a rolling upgrade): the rows go in the same transaction; a version made active
-- again gets its rows back, made as promotion makes them (documents/promotion.py).
CREATE FUNCTION document_versions_full_text() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.is_active AND NOT NEW.is_active THEN
        DELETE FROM chunk_fts f USING chunks c
         WHERE c.version_id = OLD.version_id AND c.tenant_id = OLD.tenant_id
           AND f.tenant_id = OLD.tenant_id AND f.chunk_id = c.chunk_id;
    ELSIF NEW.is_active AND NOT OLD.is_active THEN
        INSERT INTO chunk_fts (chunk_id, tenant_id, version_id, text_search_config, tsv)
        SELECT c.chunk_id, c.tenant_id, c.version_id, c.text_search_config,
               setweight(to_tsvector(c.text_search_config::regconfig, array_to_string(c.section_path, ' ')), 'B')
               || setweight(to_tsvector(c.text_search_config::regconfig, c.text), 'A')
          FROM chunks c
         WHERE c.version_id = NEW.version_id AND c.tenant_id = NEW.tenant_id
        ON CONFLICT (tenant_id, chunk_id) DO NOTHING;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER document_versions_full_text
    AFTER UPDATE OF is_active ON document_versions
    FOR EACH ROW EXECUTE FUNCTION document_versions_full_text();

DELETE FROM chunk_fts f USING chunks c, document_versions v
 WHERE f.chunk_id = c.chunk_id AND c.version_id = v.version_id AND NOT v.is_active;
ANALYZE chunk_fts;
