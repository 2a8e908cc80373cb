-- Ad-platform metric exports: uploads, validated staging rows, production tables, completion events.
CREATE TABLE data_uploads (
    upload_id        bigserial PRIMARY KEY,
    workspace_id     text NOT NULL CHECK (workspace_id ~ '^[a-z0-9][a-z0-9_-]{0,62}$'),
    platform         text NOT NULL CHECK (platform IN ('meta', 'google', 'tiktok')),
    client_id        text,
    filename         text NOT NULL,
    file_format      text NOT NULL CHECK (file_format IN ('csv', 'json', 'jsonl')),
    raw_path         text,
    content_hash     text NOT NULL,
    size_bytes       bigint NOT NULL,
    status           text NOT NULL DEFAULT 'pending' CHECK (status IN
                     ('pending', 'processing', 'staging_complete', 'promoting', 'completed', 'partial', 'failed')),
    force_partial    boolean NOT NULL DEFAULT false,
    valid_threshold  numeric NOT NULL DEFAULT 0.90 CHECK (valid_threshold BETWEEN 0 AND 1),
    total_rows       integer,
    valid_rows       integer,
    invalid_rows     integer,
    promoted_rows    integer,
    unpromotable_rows integer,
    error            text,
    stats            jsonb NOT NULL DEFAULT '{}'::jsonb,
    partition_key    text UNIQUE,
    dagster_run_id   text,
    source_id        bigint REFERENCES ingestion_sources (source_id),
    source_key       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX data_uploads_dedup ON data_uploads (workspace_id, platform, content_hash);
CREATE INDEX data_uploads_status ON data_uploads (status, created_at);

CREATE TABLE staging_rows (
    upload_id          bigint NOT NULL REFERENCES data_uploads (upload_id),
    row_index          integer NOT NULL,           -- 1-based data row (CSV: after the header)
    line_number        integer,                    -- where the row starts in the file
    entity_type        text,                       -- campaign | ad_set | ad | daily_metric
    natural_key_hash   text,
    raw_data           jsonb NOT NULL,
    normalized         jsonb,
    validation_status  text NOT NULL CHECK (validation_status IN ('valid', 'invalid', 'unpromotable')),
    validation_errors  jsonb NOT NULL DEFAULT '[]'::jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (upload_id, row_index)
);
CREATE INDEX staging_rows_created ON staging_rows (created_at);

CREATE TABLE campaigns (
    workspace_id   text NOT NULL,
    platform       text NOT NULL,
    campaign_id    text NOT NULL,
    name           text,
    status         text,
    last_upload_id bigint REFERENCES data_uploads (upload_id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, platform, campaign_id)
);

CREATE TABLE ad_sets (
    workspace_id   text NOT NULL,
    platform       text NOT NULL,
    ad_set_id      text NOT NULL,
    campaign_id    text NOT NULL,
    name           text,
    status         text,
    last_upload_id bigint REFERENCES data_uploads (upload_id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, platform, ad_set_id),
    FOREIGN KEY (workspace_id, platform, campaign_id) REFERENCES campaigns (workspace_id, platform, campaign_id)
);

CREATE TABLE ads (
    workspace_id   text NOT NULL,
    platform       text NOT NULL,
    ad_id          text NOT NULL,
    ad_set_id      text NOT NULL,
    name           text,
    status         text,
    last_upload_id bigint REFERENCES data_uploads (upload_id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, platform, ad_id),
    FOREIGN KEY (workspace_id, platform, ad_set_id) REFERENCES ad_sets (workspace_id, platform, ad_set_id)
);

-- Facts at the ad x day grain.
CREATE TABLE daily_metrics (
    workspace_id   text NOT NULL,
    platform       text NOT NULL,
    ad_id          text NOT NULL,
    date           date NOT NULL,
    impressions    bigint NOT NULL,
    clicks         bigint NOT NULL,
    spend          numeric(20, 6) NOT NULL,
    currency       text NOT NULL,
    conversions    numeric(20, 6),
    last_upload_id bigint REFERENCES data_uploads (upload_id),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, platform, ad_id, date),
    FOREIGN KEY (workspace_id, platform, ad_id) REFERENCES ads (workspace_id, platform, ad_id)
);

-- Outbox: at most one completion event per upload.
CREATE TABLE ingestion_events (
    event_id      bigserial PRIMARY KEY,
    upload_id     bigint NOT NULL UNIQUE REFERENCES data_uploads (upload_id),
    workspace_id  text NOT NULL,
    event_type    text NOT NULL CHECK (event_type IN ('upload.completed', 'upload.partial')),
    payload       jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE ingestion_sources ADD COLUMN platform text CHECK (platform IN ('meta', 'google', 'tiktok'));
