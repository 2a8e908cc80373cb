-- How many of a tenant's served chunks hold each word (per text search configuration): the full-text arm's
-- document frequencies, kept as the full-text rows change instead of counted at search time. Counting read a common
-- word's matches from the heap up to the count's cap, most of the arm's first statement for a large tenant (at
-- 1,000,000 chunks the largest tenant's whole search p95 42 ms when its words had not been counted since its last
-- change, 25 ms when they had; docs/benchmarks.md); a count kept here is one index lookup, and always the count
-- now, so no process needs to remember any.
--
-- Kept as tenant_serving_totals is (sql/040): a trigger on chunk_fts appends signed rows to tenant_word_changes, so
-- no two promotions of a tenant ever wait on one word's row, and the tenant's fold (fold_tenant_serving_totals,
-- at the end of promotion, under the tenant's lock) moves them into tenant_word_counts, one row per word. A
-- search adds a word's folded count to its changes not folded yet.
CREATE TABLE tenant_word_counts (
    tenant_id           text NOT NULL,
    text_search_config  text NOT NULL,
    lexeme              text NOT NULL,
    chunks              bigint NOT NULL,
    PRIMARY KEY (tenant_id, text_search_config, lexeme)
);
-- the words no served chunk holds any more, removed by the fold that brings them to zero
CREATE INDEX tenant_word_counts_none ON tenant_word_counts (tenant_id) WHERE chunks = 0;

CREATE TABLE tenant_word_changes (
    tenant_id           text NOT NULL,
    text_search_config  text NOT NULL,
    lexeme              text NOT NULL,
    chunks              bigint NOT NULL
);
CREATE INDEX tenant_word_changes_word ON tenant_word_changes (tenant_id, text_search_config, lexeme);

-- A chunk holds a word once, whatever its positions: its rows' distinct lexemes, counted per tenant and language.
CREATE FUNCTION chunk_fts_word_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO tenant_word_changes (tenant_id, text_search_config, lexeme, chunks)
        SELECT r.tenant_id, r.text_search_config, w.lexeme, count(*)
          FROM added r, unnest(tsvector_to_array(r.tsv)) AS w(lexeme)
         GROUP BY 1, 2, 3;
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        INSERT INTO tenant_word_changes (tenant_id, text_search_config, lexeme, chunks)
        SELECT r.tenant_id, r.text_search_config, w.lexeme, -count(*)
          FROM removed r, unnest(tsvector_to_array(r.tsv)) AS w(lexeme)
         GROUP BY 1, 2, 3;
    END IF;
    RETURN NULL;
END $$;

-- statement-level, on the partitioned table: a statement's rows in every partition at once
CREATE TRIGGER chunk_fts_words_added AFTER INSERT ON chunk_fts
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION chunk_fts_word_changes();
CREATE TRIGGER chunk_fts_words_removed AFTER DELETE ON chunk_fts
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION chunk_fts_word_changes();
CREATE TRIGGER chunk_fts_words_changed AFTER UPDATE ON chunk_fts
    REFERENCING OLD TABLE AS removed NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION chunk_fts_word_changes();

-- The fold moves the words' changes too, under the same lock, so only one transaction at a time writes a tenant's
-- word counts (its rows in a fixed order). The change counter (sql/045) is still kept: a release before this one,
-- during a rolling upgrade, keys the counts it remembers by it.
CREATE OR REPLACE FUNCTION fold_tenant_serving_totals(tenant text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtextextended('tenant_serving_totals:' || tenant, 0)) THEN
        RETURN false;
    END IF;
    WITH folded AS (
        DELETE FROM tenant_serving_totals WHERE tenant_id = tenant RETURNING kind, name, versions, chunks
    )
    INSERT INTO tenant_serving_totals (tenant_id, kind, name, versions, chunks)
    SELECT tenant, kind, name, sum(versions), sum(chunks) FROM folded GROUP BY kind, name
    HAVING sum(versions) <> 0 OR sum(chunks) <> 0;
    WITH moved AS (
        DELETE FROM tenant_word_changes WHERE tenant_id = tenant RETURNING text_search_config, lexeme, chunks
    )
    INSERT INTO tenant_word_counts AS c (tenant_id, text_search_config, lexeme, chunks)
    SELECT tenant, text_search_config, lexeme, sum(chunks) FROM moved GROUP BY text_search_config, lexeme
    HAVING sum(chunks) <> 0
     ORDER BY text_search_config, lexeme
    ON CONFLICT (tenant_id, text_search_config, lexeme) DO UPDATE SET chunks = c.chunks + excluded.chunks;
    DELETE FROM tenant_word_counts WHERE tenant_id = tenant AND chunks = 0;
    RETURN true;
END $$;

-- What the tenants serve now, counted once (a minute or two for a million chunks; promotions wait for it).
INSERT INTO tenant_word_counts (tenant_id, text_search_config, lexeme, chunks)
SELECT f.tenant_id, f.text_search_config, w.lexeme, count(*)
  FROM chunk_fts f, unnest(tsvector_to_array(f.tsv)) AS w(lexeme)
 GROUP BY 1, 2, 3;
ANALYZE tenant_word_counts;
