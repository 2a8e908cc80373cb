-- A unit being read is leased to its reader, which renews the lease every few seconds (documents/units.py:
-- UnitLease). A second delivery of the unit waits for it instead of reading it again, and a unit whose reader
-- died (a worker SIGKILLed, its host gone) is handed back once the lease goes stale — by the next reader or by
-- the janitor — so a crash costs that unit only. The lease saves work; a unit is still written once because
-- it is written only while pending.
ALTER TABLE staging_units ADD COLUMN leased_by text, ADD COLUMN heartbeat_at timestamptz;
