-- A valid row staged from a platform CSV keeps its raw values as a JSON array; the upload names them once
-- (raw_columns, the header with duplicates resolved as dict(zip(header, row)) resolves them). A 1M-row
-- Meta export repeated its 19 column names in every row's object: 833 MB of COPY text and a jsonb object
-- parsed per row, the larger part of staging's time in the server (benchmarks/metrics_load.py).
-- Rows staged one by one (invalid rows, JSON records, generic layouts) keep their object.
ALTER TABLE data_uploads ADD COLUMN IF NOT EXISTS raw_columns jsonb;

-- The raw record as the export had it: an array staged with its upload's column names made an object again.
CREATE OR REPLACE FUNCTION staged_record(raw jsonb, columns jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN jsonb_typeof(raw) = 'array' AND jsonb_typeof(columns) = 'array' THEN
                (SELECT coalesce(jsonb_object_agg(c.name, v.value), '{}'::jsonb)
                   FROM jsonb_array_elements_text(columns) WITH ORDINALITY AS c(name, n)
                   JOIN jsonb_array_elements(raw) WITH ORDINALITY AS v(value, n) ON v.n = c.n)
           ELSE raw END
$$;
