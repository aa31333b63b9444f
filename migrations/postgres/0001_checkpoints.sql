-- The checkpoint log. `seq` is insertion order, which breaks ties between
-- equal timestamps. Text columns use the "C" collation so turn ids order
-- byte by byte, as on SQLite, whatever the database's locale.
CREATE TABLE checkpoints (
    seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    namespace        TEXT COLLATE "C" NOT NULL,
    turn_id          TEXT COLLATE "C" NOT NULL,
    phase            TEXT COLLATE "C" NOT NULL,
    ts_ns            BIGINT  NOT NULL,
    session_id       TEXT COLLATE "C" NOT NULL,
    state            BYTEA   NOT NULL,
    terminal         BOOLEAN NOT NULL,
    workflow_version TEXT COLLATE "C" NOT NULL,
    recorded_at_ns   BIGINT  NOT NULL
);

-- The deduplication key: INSERT ... ON CONFLICT DO NOTHING relies on it.
CREATE UNIQUE INDEX checkpoints_dedup ON checkpoints (namespace, turn_id, phase, ts_ns);

-- Restore order: (ts_ns, seq) within a turn, in both directions.
CREATE INDEX checkpoints_order ON checkpoints (namespace, turn_id, ts_ns, seq);

-- One summary row per turn, kept in the same transaction as each append.
CREATE TABLE turns (
    namespace        TEXT COLLATE "C" NOT NULL,
    turn_id          TEXT COLLATE "C" NOT NULL,
    session_id       TEXT COLLATE "C" NOT NULL,
    first_ts_ns      BIGINT  NOT NULL,
    last_ts_ns       BIGINT  NOT NULL,
    last_seq         BIGINT  NOT NULL,
    last_phase       TEXT COLLATE "C" NOT NULL,
    checkpoint_count BIGINT  NOT NULL,
    terminal         BOOLEAN NOT NULL,
    workflow_version TEXT COLLATE "C" NOT NULL,
    -- The timestamps of the checkpoints that named session_id and
    -- workflow_version, so a late checkpoint with an older timestamp does not
    -- replace them.
    session_ts_ns    BIGINT  NOT NULL,
    version_ts_ns    BIGINT  NOT NULL,
    PRIMARY KEY (namespace, turn_id)
);

CREATE INDEX turns_session ON turns (namespace, session_id, turn_id);
