-- daily_metrics_upload_idx (006) is read by no query: the rule that an older upload never overwrites a
-- newer one compares last_upload_id on each row after the primary-key lookup, and the foreign key to
-- data_uploads it could have served was dropped in 011. Every promoted fact paid for it: 1M facts
-- inserted in 7.11 s with it, 5.45 s without (benchmarks/fact_insert.py, medians of 3 alternating rounds).
DROP INDEX IF EXISTS daily_metrics_upload_idx;
