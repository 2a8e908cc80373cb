-- Staged rows keep their normalised values in typed columns instead of a jsonb document: COPY no longer
-- parses a JSON document per row and the promotion reads columns instead of extracting jsonb fields
-- (1M-row staging and promotion measured in benchmarks/metrics_load.py). Rows staged before this
-- migration are converted, so an upload staged by the previous version still promotes.
ALTER TABLE staging_rows
    ADD COLUMN campaign_id   text,
    ADD COLUMN ad_set_id     text,
    ADD COLUMN ad_id         text,
    ADD COLUMN campaign_name text,
    ADD COLUMN ad_set_name   text,
    ADD COLUMN ad_name       text,
    ADD COLUMN status        text,
    ADD COLUMN date          date,
    ADD COLUMN impressions   bigint,
    ADD COLUMN clicks        bigint,
    ADD COLUMN spend         numeric,
    ADD COLUMN currency      text,
    ADD COLUMN conversions   numeric;

UPDATE staging_rows
   SET campaign_id = normalized->>'campaign_id', ad_set_id = normalized->>'ad_set_id',
       ad_id = normalized->>'ad_id', campaign_name = normalized->>'campaign_name',
       ad_set_name = normalized->>'ad_set_name', ad_name = normalized->>'ad_name', status = normalized->>'status',
       date = (normalized->>'date')::date, impressions = (normalized->>'impressions')::bigint,
       clicks = (normalized->>'clicks')::bigint, spend = (normalized->>'spend')::numeric,
       currency = normalized->>'currency', conversions = (normalized->>'conversions')::numeric
 WHERE normalized IS NOT NULL AND normalized <> '{}'::jsonb;

ALTER TABLE staging_rows DROP COLUMN normalized;
