-- A staged row's raw record is kept as the JSON text it was written with: a JSON object, or (a valid row of
-- a platform CSV) an array of values named by data_uploads.raw_columns (sql/016). As jsonb, the server
-- parsed every row's record while staging: ~1.5 s of COPY per million rows, for a record that is only
-- read back for the rows an error listing shows.
ALTER TABLE staging_rows ALTER COLUMN raw_data TYPE text USING raw_data::text;

-- The raw record as the export had it (the text read as jsonb; an array named by its upload's columns).
CREATE OR REPLACE FUNCTION staged_record(raw text, columns jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT staged_record(raw::jsonb, columns)
$$;
