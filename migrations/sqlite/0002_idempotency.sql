-- One record per (namespace, key). A rowid table rather than WITHOUT ROWID,
-- because results can be large. `held`: 1 leased, 2 completed, 3 failed,
-- 4 released (see src/idempotency.rs).
CREATE TABLE idempotency (
    namespace           TEXT    NOT NULL,
    key                 TEXT    NOT NULL,
    held                INTEGER NOT NULL,
    fingerprint         BLOB    NOT NULL,
    attempt             INTEGER NOT NULL,
    lease_token         INTEGER NOT NULL,
    lease_expires_at_ns INTEGER NOT NULL,
    result              BLOB    NOT NULL,
    error               TEXT    NOT NULL,
    retention_ns        INTEGER NOT NULL,
    created_at_ns       INTEGER NOT NULL,
    updated_at_ns       INTEGER NOT NULL,
    purge_after_ns      INTEGER NOT NULL,
    UNIQUE (namespace, key)
);

-- The sweeper finds records past their retention through this index.
CREATE INDEX idempotency_purge ON idempotency (purge_after_ns);

-- The store-wide fencing-token sequence: tokens strictly increase and are
-- never reused, even after a record is purged and its key begun again.
CREATE TABLE lease_tokens (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
);
INSERT INTO lease_tokens (id, last) VALUES (1, 0);
