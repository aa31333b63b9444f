-- One record per (namespace, key). `held`: 1 leased, 2 completed, 3 failed,
-- 4 released (see src/idempotency.rs). `error` is UTF-8 kept as bytes,
-- because a Release's error may hold NUL, which TEXT cannot.
CREATE TABLE idempotency (
    namespace           TEXT COLLATE "C" NOT NULL,
    key                 TEXT COLLATE "C" NOT NULL,
    held                BIGINT NOT NULL,
    fingerprint         BYTEA  NOT NULL,
    attempt             BIGINT NOT NULL,
    lease_token         BIGINT NOT NULL,
    lease_expires_at_ns BIGINT NOT NULL,
    result              BYTEA  NOT NULL,
    error               BYTEA  NOT NULL,
    retention_ns        BIGINT NOT NULL,
    created_at_ns       BIGINT NOT NULL,
    updated_at_ns       BIGINT NOT NULL,
    purge_after_ns      BIGINT NOT NULL,
    PRIMARY KEY (namespace, key)
);

-- The sweeper finds records past their retention through this index.
CREATE INDEX idempotency_purge ON idempotency (purge_after_ns);

-- The store-wide fencing-token sequence: tokens strictly increase and are
-- never reused, even after a record is purged and its key begun again.
CREATE SEQUENCE lease_tokens;
