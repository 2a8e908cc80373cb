-- Identifiers compare byte by byte. The keys of the metric tables (workspace, platform and the platforms'
-- ids) took the database's collation, and under any collation but "C" Postgres compares text through
-- strcoll (the libc "C.UTF-8" of the embedded server included): every B-tree step of a promotion's 1M
-- fact inserts, and every sort of the upload's rows by id, paid for it. Ids have no linguistic order,
-- so "C" changes no result that means anything; staging's id columns change with them, because a join
-- of a "C" column with a column of another collation has no collation to compare in.
-- 1M sorted facts into a daily_metrics-shaped table of 2M rows: 9.0 / 10.2 s -> 8.3 / 7.9 s; 1M-row exports
-- through benchmarks/metrics_load.py, 4 interleaved pairs: 41.4 -> 39.4, 40.8 -> 39.7, 40.3 -> 39.8 (Meta),
-- 46.8 -> 45.4 s (Google) submit-to-completed. Rewrites these tables once, under an exclusive lock.
ALTER TABLE campaigns
    ALTER COLUMN workspace_id TYPE text COLLATE "C",
    ALTER COLUMN platform TYPE text COLLATE "C",
    ALTER COLUMN campaign_id TYPE text COLLATE "C";
ALTER TABLE ad_sets
    ALTER COLUMN workspace_id TYPE text COLLATE "C",
    ALTER COLUMN platform TYPE text COLLATE "C",
    ALTER COLUMN ad_set_id TYPE text COLLATE "C",
    ALTER COLUMN campaign_id TYPE text COLLATE "C";
ALTER TABLE ads
    ALTER COLUMN workspace_id TYPE text COLLATE "C",
    ALTER COLUMN platform TYPE text COLLATE "C",
    ALTER COLUMN ad_id TYPE text COLLATE "C",
    ALTER COLUMN ad_set_id TYPE text COLLATE "C";
ALTER TABLE daily_metrics
    ALTER COLUMN workspace_id TYPE text COLLATE "C",
    ALTER COLUMN platform TYPE text COLLATE "C",
    ALTER COLUMN ad_id TYPE text COLLATE "C";
ALTER TABLE staging_rows
    ALTER COLUMN campaign_id TYPE text COLLATE "C",
    ALTER COLUMN ad_set_id TYPE text COLLATE "C",
    ALTER COLUMN ad_id TYPE text COLLATE "C";
