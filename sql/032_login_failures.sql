-- Failed logins, counted by every API process and host alike (core/login_failures.py): a flood spread over
-- several API replicas gets no more guesses than one. One row a failure; `subject` is a SHA-256 of the client
-- address or the lower-cased email, so a row is small whatever was sent and holds no address or email itself.
-- Rows older than the window are swept by the API (a flood's rows stay bounded by the hashes it may run).
CREATE TABLE login_failures (
    scope text NOT NULL CHECK (scope IN ('address', 'account')),
    subject bytea NOT NULL CHECK (length(subject) = 32),
    failed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX login_failures_subject ON login_failures (scope, subject, failed_at);
CREATE INDEX login_failures_age ON login_failures (failed_at);
