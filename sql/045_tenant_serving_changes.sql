-- Every change to what a tenant serves (a version activated, deactivated, deleted, or its counted columns
-- changed) also appends a 'changes' row of +1, so the sum of a tenant's 'changes' rows only ever grows: search
-- keys the document frequencies it remembers of the tenant's words by it (documents/term_frequencies.py), and
-- the full-text rows those count change only with a served version (sql/041). The fold keeps the sum.
ALTER TABLE tenant_serving_totals DROP CONSTRAINT tenant_serving_totals_kind_check;
ALTER TABLE tenant_serving_totals ADD CONSTRAINT tenant_serving_totals_kind_check
    CHECK (kind IN ('model', 'language', 'changes'));

CREATE OR REPLACE FUNCTION tenant_serving_totals_add(v document_versions, sign integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO tenant_serving_totals (tenant_id, kind, name, versions, chunks)
    SELECT v.tenant_id, 'model', v.embedding_model, sign, sign * v.chunk_count
    UNION ALL
    SELECT v.tenant_id, 'language', cfg, sign, 0 FROM unnest(v.text_search_configs) AS cfg
    UNION ALL
    SELECT v.tenant_id, 'changes', NULL, 1, 0
$$;
