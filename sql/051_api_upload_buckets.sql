-- The buckets presigned uploads landed in are the project's own, whatever a process's environment says: every
-- process that checks a tenant's S3 location reads them here (a skip scan over this index), so a process
-- started without INGESTION_UPLOAD_BUCKET still refuses the upload bucket.
CREATE INDEX api_uploads_bucket_idx ON api_uploads (bucket);
