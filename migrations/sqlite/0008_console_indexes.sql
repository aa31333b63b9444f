-- The web console's reads, each from an index: turns by status and last
-- activity (the overview's counts of open, stalled and terminal turns, and
-- the turns page sorted by activity), keys by state and lease expiry (the
-- counts of keys in progress, expired and failed), and waits by status.
CREATE INDEX turns_activity ON turns (namespace, terminal, last_ts_ns);
-- A session's turns by last activity: the turns page filtered by session.
CREATE INDEX turns_session_activity ON turns (namespace, session_id, last_ts_ns);
CREATE INDEX idempotency_state ON idempotency (namespace, held, lease_expires_at_ns);
CREATE INDEX waits_status ON waits (namespace, status, resolve_at_ns);
