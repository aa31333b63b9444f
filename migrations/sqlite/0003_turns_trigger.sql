-- The turn summary is kept by the database: every inserted checkpoint
-- updates its turn's row in the same statement, so an append is one
-- statement. The latest checkpoint (greatest timestamp, then seq) decides
-- last_phase and terminal; session_id and workflow_version are those of the
-- latest checkpoint that named one. In SET, `turns` is the old row.
CREATE TRIGGER checkpoints_keep_turns AFTER INSERT ON checkpoints
BEGIN
    INSERT INTO turns (namespace, turn_id, session_id, first_ts_ns, last_ts_ns, last_seq, last_phase,
                       checkpoint_count, terminal, workflow_version, session_ts_ns, version_ts_ns)
    VALUES (NEW.namespace, NEW.turn_id, NEW.session_id, NEW.ts_ns, NEW.ts_ns, NEW.seq, NEW.phase, 1, NEW.terminal,
            NEW.workflow_version,
            CASE WHEN NEW.session_id = '' THEN -9223372036854775808 ELSE NEW.ts_ns END,
            CASE WHEN NEW.workflow_version = '' THEN -9223372036854775808 ELSE NEW.ts_ns END)
    ON CONFLICT (namespace, turn_id) DO UPDATE SET
        checkpoint_count = turns.checkpoint_count + 1,
        first_ts_ns = min(turns.first_ts_ns, excluded.first_ts_ns),
        last_phase = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq)
                     THEN excluded.last_phase ELSE turns.last_phase END,
        terminal = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq)
                   THEN excluded.terminal ELSE turns.terminal END,
        last_seq = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq)
                   THEN excluded.last_seq ELSE turns.last_seq END,
        last_ts_ns = max(turns.last_ts_ns, excluded.last_ts_ns),
        session_id = CASE WHEN excluded.session_id <> '' AND excluded.session_ts_ns >= turns.session_ts_ns
                     THEN excluded.session_id ELSE turns.session_id END,
        session_ts_ns = CASE WHEN excluded.session_id <> '' AND excluded.session_ts_ns >= turns.session_ts_ns
                        THEN excluded.session_ts_ns ELSE turns.session_ts_ns END,
        workflow_version = CASE WHEN excluded.workflow_version <> '' AND excluded.version_ts_ns >= turns.version_ts_ns
                           THEN excluded.workflow_version ELSE turns.workflow_version END,
        version_ts_ns = CASE WHEN excluded.workflow_version <> '' AND excluded.version_ts_ns >= turns.version_ts_ns
                        THEN excluded.version_ts_ns ELSE turns.version_ts_ns END;
END;
