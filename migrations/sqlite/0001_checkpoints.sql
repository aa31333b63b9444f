-- The checkpoint log. `seq` is the rowid: insertion order, which breaks ties
-- between equal timestamps and is the implicit last column of every index.
CREATE TABLE checkpoints (
    seq              INTEGER PRIMARY KEY,
    namespace        TEXT    NOT NULL,
    turn_id          TEXT    NOT NULL,
    phase            TEXT    NOT NULL,
    ts_ns            INTEGER NOT NULL,
    session_id       TEXT    NOT NULL,
    state            BLOB    NOT NULL,
    terminal         INTEGER NOT NULL,
    workflow_version TEXT    NOT NULL,
    recorded_at_ns   INTEGER NOT NULL
);

-- The deduplication key: INSERT ... ON CONFLICT DO NOTHING relies on it.
CREATE UNIQUE INDEX checkpoints_dedup ON checkpoints (namespace, turn_id, phase, ts_ns);

-- Restore order: (ts_ns, seq) within a turn, in both directions.
CREATE INDEX checkpoints_order ON checkpoints (namespace, turn_id, ts_ns);

-- One summary row per turn, kept in the same transaction as each append, so
-- ListTurns reads an index instead of aggregating the log.
CREATE TABLE turns (
    namespace        TEXT    NOT NULL,
    turn_id          TEXT    NOT NULL,
    session_id       TEXT    NOT NULL,
    first_ts_ns      INTEGER NOT NULL,
    last_ts_ns       INTEGER NOT NULL,
    last_seq         INTEGER NOT NULL,
    last_phase       TEXT    NOT NULL,
    checkpoint_count INTEGER NOT NULL,
    terminal         INTEGER NOT NULL,
    workflow_version TEXT    NOT NULL,
    -- The timestamps of the checkpoints that named session_id and
    -- workflow_version, so a late checkpoint with an older timestamp does not
    -- replace them.
    session_ts_ns    INTEGER NOT NULL,
    version_ts_ns    INTEGER NOT NULL,
    PRIMARY KEY (namespace, turn_id)
) WITHOUT ROWID;

CREATE INDEX turns_session ON turns (namespace, session_id, turn_id);
