-- People who call the HTTP API, and the presigned uploads they start.
CREATE TABLE users (
    user_id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id      text NOT NULL REFERENCES tenants (tenant_id),
    email          text NOT NULL,
    password_hash  text NOT NULL,             -- bcrypt, cost 12
    role           text NOT NULL CHECK (role IN ('admin', 'user')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    disabled       boolean NOT NULL DEFAULT false
);
-- Emails are compared case-insensitively: one account per address.
CREATE UNIQUE INDEX users_email_idx ON users (lower(email));
CREATE INDEX users_tenant_idx ON users (tenant_id);

-- A presigned PUT handed to a client; completing it queues the object like POST /v1/ingest.
CREATE TABLE api_uploads (
    upload_id     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id     text NOT NULL REFERENCES tenants (tenant_id),
    user_id       uuid REFERENCES users (user_id),
    filename      text NOT NULL,
    content_type  text NOT NULL,
    size_bytes    bigint NOT NULL CHECK (size_bytes > 0),
    bucket        text NOT NULL,
    object_key    text NOT NULL,
    title         text,
    doc_key       text,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'completed', 'rejected', 'expired')),
    result        jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    completed_at  timestamptz
);
CREATE INDEX api_uploads_pending_idx ON api_uploads (expires_at) WHERE status = 'pending';

-- What the last on-demand sync of a source (POST /v1/sources/{id}/sync) ended with.
ALTER TABLE ingestion_sources ADD COLUMN last_sync_at timestamptz, ADD COLUMN last_sync_error text;
