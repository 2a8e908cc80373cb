-- One word for one thing: the ledger's row is a file, and its id is `file_id` wherever it is kept; `run` means a
-- Dagster run only (`dagster_run_id`, `owner`, `dagster_step_values.run_id` keep their names). The CLI and the
-- API already print `file_id` (and their deprecated `run_id`); the columns now say the same.
ALTER TABLE ingestion_runs RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_documents RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_elements RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_chunks RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_ocr_pages RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_units RENAME COLUMN run_id TO file_id;
ALTER TABLE staging_chunk_parts RENAME COLUMN run_id TO file_id;
ALTER TABLE document_versions RENAME COLUMN ingestion_run_id TO file_id;
ALTER TABLE source_objects RENAME COLUMN last_run_id TO last_file_id;

-- Their foreign keys, named after the columns when they were made.
ALTER TABLE staging_documents RENAME CONSTRAINT staging_documents_run_id_fkey TO staging_documents_file_id_fkey;
ALTER TABLE staging_elements RENAME CONSTRAINT staging_elements_run_id_fkey TO staging_elements_file_id_fkey;
ALTER TABLE staging_chunks RENAME CONSTRAINT staging_chunks_run_id_fkey TO staging_chunks_file_id_fkey;
ALTER TABLE staging_ocr_pages RENAME CONSTRAINT staging_ocr_pages_run_id_fkey TO staging_ocr_pages_file_id_fkey;
ALTER TABLE staging_units RENAME CONSTRAINT staging_units_run_id_fkey TO staging_units_file_id_fkey;
ALTER TABLE staging_chunk_parts RENAME CONSTRAINT staging_chunk_parts_run_id_fkey TO staging_chunk_parts_file_id_fkey;
ALTER TABLE document_versions RENAME CONSTRAINT document_versions_ingestion_run_id_fkey TO document_versions_file_id_fkey;
ALTER TABLE source_objects RENAME CONSTRAINT source_objects_last_run_id_fkey TO source_objects_last_file_id_fkey;

-- A function's body names columns as text, read when it runs: a rename does not reach it (053's trigger function).
CREATE OR REPLACE FUNCTION notify_file_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('file_events', json_build_object('tenant_id', NEW.tenant_id, 'file_id', NEW.file_id)::text);
    RETURN NULL;
END
$$;
