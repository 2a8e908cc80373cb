-- Failed logins keyed with the deployment's secret and counted per client address and per (address, account)
-- pair (core/login_failures.py): `subject` is now an HMAC-SHA256 under a key derived from JWT_SECRET, where it
-- was a plain SHA-256 of the address or the email (undone by hashing every IPv4 address or a list of emails).
-- The old rows are dropped: they are counters of a few minutes, and no new key matches them anyway.
DELETE FROM login_failures;
ALTER TABLE login_failures DROP CONSTRAINT login_failures_scope_check;
ALTER TABLE login_failures ADD CONSTRAINT login_failures_scope_check CHECK (scope IN ('address', 'pair'));
