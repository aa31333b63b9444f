-- WaitService's waits: one row per (namespace, turn_id, name). status is the
-- contract's WaitStatus number (1 PENDING, 2 RESOLVED, 3 CANCELLED, 4 EXPIRED).
-- due_at_ns is the earlier of resolve_at_ns and expire_at_ns, kept with them,
-- so that the timer finds what is due through one partial index of the
-- pending waits.
CREATE TABLE waits (
    namespace     TEXT COLLATE "C" NOT NULL,
    turn_id       TEXT COLLATE "C" NOT NULL,
    name          TEXT COLLATE "C" NOT NULL,
    status        BIGINT           NOT NULL,
    metadata      TEXT,
    created_at_ns BIGINT           NOT NULL,
    expire_at_ns  BIGINT,
    resolve_at_ns BIGINT,
    due_at_ns     BIGINT,
    settled_at_ns BIGINT,
    payload       BYTEA            NOT NULL,
    content_type  TEXT             NOT NULL,
    settled_by    TEXT             NOT NULL,
    PRIMARY KEY (namespace, turn_id, name)
);

CREATE INDEX waits_due ON waits (due_at_ns) WHERE status = 1 AND due_at_ns IS NOT NULL;
