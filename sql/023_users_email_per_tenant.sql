-- E-mail addresses are unique per tenant, not across tenants: an admin adding a user must not learn that
-- the address belongs to a user of another tenant. A login finds the account by address and password
-- (core/users.authenticate), with the tenant when the same pair signs in to several.
DROP INDEX IF EXISTS users_email_idx;
CREATE UNIQUE INDEX users_tenant_email_idx ON users (tenant_id, lower(email));
CREATE INDEX users_email_lookup_idx ON users (lower(email));
