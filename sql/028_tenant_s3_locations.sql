-- Which S3 locations belong to which tenant (sources/locations.py). A tenant's request may name only a
-- location bound to it here: a source, an SQS job's object, an S3 event's object. Bindings are the operator's
-- (`ingestion-pipeline tenant bind`); no API route writes them. endpoint_url '' is the AWS environment's.
CREATE TABLE tenant_s3_locations (
    tenant_id text NOT NULL REFERENCES tenants (tenant_id) ON DELETE CASCADE,
    endpoint_url text NOT NULL DEFAULT '',
    bucket text NOT NULL CHECK (bucket ~ '^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$'),
    prefix text NOT NULL DEFAULT '' CHECK (length(prefix) <= 1024),
    bound_by text NOT NULL,
    bound_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, endpoint_url, bucket, prefix)
);
CREATE INDEX tenant_s3_locations_bucket ON tenant_s3_locations (endpoint_url, bucket);

-- What was bound, unbound and refused, and where the refused request came from.
CREATE TABLE tenant_s3_location_audit (
    audit_id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    action text NOT NULL CHECK (action IN ('bound', 'unbound', 'refused')),
    entrance text NOT NULL,
    location text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX tenant_s3_location_audit_tenant ON tenant_s3_location_audit (tenant_id, at);
