-- A daily metric's ad is checked once per upload, set-based, instead of once per row by a trigger.
-- Promotion marks every fact whose ad is neither in the upload nor stored 'unpromotable' (with the reason)
-- before it inserts, inside the transaction that holds the workspace's promotion lock; ads are never
-- deleted. The per-row foreign-key trigger cost 5.8 s of a 1M-row promotion (benchmarks/metrics_load.py,
-- EXPLAIN ANALYZE: 1,000,000 calls) and could only ever fire on a bug in that check. The dimension keys
-- (an ad set's campaign, an ad's ad set) keep their foreign keys: they are checked per entity, not per row.
ALTER TABLE daily_metrics DROP CONSTRAINT IF EXISTS daily_metrics_workspace_id_platform_ad_id_fkey;
