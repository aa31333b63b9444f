-- WaitService's waits: one row per (namespace, turn_id, name). status is the
-- contract's WaitStatus number (1 PENDING, 2 RESOLVED, 3 CANCELLED, 4 EXPIRED).
-- due_at_ns is the earlier of resolve_at_ns and expire_at_ns, kept with them,
-- so that the timer finds what is due through one partial index of the
-- pending waits.
CREATE TABLE waits (
    namespace     TEXT    NOT NULL,
    turn_id       TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    status        INTEGER NOT NULL,
    metadata      TEXT,
    created_at_ns INTEGER NOT NULL,
    expire_at_ns  INTEGER,
    resolve_at_ns INTEGER,
    due_at_ns     INTEGER,
    settled_at_ns INTEGER,
    payload       BLOB    NOT NULL,
    content_type  TEXT    NOT NULL,
    settled_by    TEXT    NOT NULL,
    PRIMARY KEY (namespace, turn_id, name)
);

CREATE INDEX waits_due ON waits (due_at_ns) WHERE status = 1 AND due_at_ns IS NOT NULL;
