-- The web console's reads, each from an index: turns by status and last
-- activity (the overview's counts of open, stalled and terminal turns, and
-- the turns page sorted by activity), keys by state and lease expiry (the
-- counts of keys in progress, expired and failed), and waits by status.
CREATE INDEX turns_activity ON turns (namespace, terminal, last_ts_ns);
CREATE INDEX idempotency_state ON idempotency (namespace, held, lease_expires_at_ns);
CREATE INDEX waits_status ON waits (namespace, status, resolve_at_ns);
