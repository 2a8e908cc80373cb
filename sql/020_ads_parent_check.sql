-- An ad's ad set is checked once per upload, set-based, instead of once per ad by a trigger (as 015 did
-- for a fact's ad). Promotion inserts an ad only from a group whose ad set is stored by then
-- (promotion._AD_PARENT_STORED) and marks every ad record under a missing ad set 'unpromotable' with the
-- reason, inside the transaction that holds the workspace's promotion lock; ad sets are never deleted.
-- The per-row trigger cost 1.28-1.44 s of a 1M-row export's promotion (EXPLAIN ANALYZE of the ads
-- statement: 100,000 calls of 3.3-3.8 s) and could only ever fire on a bug in that check
-- (metrics/test_promotion.py::test_an_ad_record_lands_under_a_stored_ad_set_and_never_under_a_missing_one).
-- An ad set's campaign keeps its foreign key: 10,000 checks per such export, ~0.1 s.
ALTER TABLE ads DROP CONSTRAINT IF EXISTS ads_workspace_id_platform_ad_set_id_fkey;
