-- A presigned upload may declare its SHA-256: the PUT is signed with it (S3 checks the bytes against it), and
-- with the S3 upload store the completion is a server-side copy to <tenant>/<sha256> (documents/presigned.py).
ALTER TABLE api_uploads ADD COLUMN sha256 text CHECK (sha256 ~ '^[0-9a-f]{64}$');
