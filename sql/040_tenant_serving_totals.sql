-- What every search asks of a tenant before it ranks: the models its active versions' vectors come from (with
-- their chunk counts), the languages they were indexed in, and how many chunks they hold. Aggregated from
-- document_versions, that is a scan of every active version of the tenant on every search: a tenant of 162,584
-- one-chunk documents spent 125 of a 210 ms search there (benchmarks/search_latency.py --chunks-per-version 1).
-- Here the totals are kept as signed rows that a trigger appends whenever a version's counted columns change,
-- so no two promotions of a tenant ever wait on one counter row; promotion folds the tenant's rows back into
-- one per model and language at its end (fold_tenant_serving_totals), so a search sums a handful of rows.
CREATE TABLE tenant_serving_totals (
    tenant_id  text NOT NULL,
    kind       text NOT NULL CHECK (kind IN ('model', 'language')),
    name       text,  -- the model (NULL: versions promoted before their model was recorded), or the text search configuration
    versions   bigint NOT NULL,
    chunks     bigint NOT NULL
);
CREATE INDEX tenant_serving_totals_tenant ON tenant_serving_totals (tenant_id, kind);

CREATE FUNCTION tenant_serving_totals_add(v document_versions, sign integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO tenant_serving_totals (tenant_id, kind, name, versions, chunks)
    SELECT v.tenant_id, 'model', v.embedding_model, sign, sign * v.chunk_count
    UNION ALL
    SELECT v.tenant_id, 'language', cfg, sign, 0 FROM unnest(v.text_search_configs) AS cfg
$$;

CREATE FUNCTION document_versions_serving_totals() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.is_active AND NEW.is_active AND NEW.tenant_id = OLD.tenant_id
       AND NEW.embedding_model IS NOT DISTINCT FROM OLD.embedding_model AND NEW.chunk_count = OLD.chunk_count
       AND NEW.text_search_configs = OLD.text_search_configs THEN
        RETURN NULL;  -- nothing a search counts has changed
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.is_active THEN
        PERFORM tenant_serving_totals_add(OLD, -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.is_active THEN
        PERFORM tenant_serving_totals_add(NEW, 1);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER document_versions_serving_totals
    AFTER INSERT OR DELETE OR UPDATE OF is_active, tenant_id, embedding_model, chunk_count, text_search_configs
    ON document_versions FOR EACH ROW EXECUTE FUNCTION document_versions_serving_totals();

-- One row per model and language again. Whoever folds holds the tenant's lock until it commits; a transaction
-- that finds it held leaves its rows to the next fold instead of waiting (rows are only ever appended otherwise,
-- and a fold deletes exactly the rows it sums).
CREATE FUNCTION fold_tenant_serving_totals(tenant text) RETURNS boolean
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
    RETURN true;
END $$;

INSERT INTO tenant_serving_totals (tenant_id, kind, name, versions, chunks)
SELECT tenant_id, 'model', embedding_model, count(*), sum(chunk_count)
  FROM document_versions WHERE is_active GROUP BY tenant_id, embedding_model;
INSERT INTO tenant_serving_totals (tenant_id, kind, name, versions, chunks)
SELECT v.tenant_id, 'language', cfg, count(*), 0
  FROM document_versions v, unnest(v.text_search_configs) AS cfg WHERE v.is_active GROUP BY v.tenant_id, cfg;
