-- The web console's reads, each from an index: turns by last activity,
-- alone and by status (the overview's counts of open, stalled and terminal
-- turns, and the turns page sorted by activity), keys by state and lease
-- expiry (the counts of keys in progress, expired and failed), and waits by
-- status. SQLite's turns_updated already holds (namespace, last_ts_ns).
CREATE INDEX turns_recent ON turns (namespace, last_ts_ns, turn_id);
CREATE INDEX turns_activity ON turns (namespace, terminal, last_ts_ns, turn_id);
-- A session's turns by last activity: the turns page filtered by session.
CREATE INDEX turns_session_activity ON turns (namespace, session_id, last_ts_ns, turn_id);
CREATE INDEX idempotency_state ON idempotency (namespace, held, lease_expires_at_ns);
CREATE INDEX waits_status ON waits (namespace, status, resolve_at_ns);
