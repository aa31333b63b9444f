-- Records (RecordService): addressed, updatable records within a turn.
-- A record's address is (namespace, turn_id, kind, scope, id); ids compare
-- bytewise (SQLite's BINARY collation), which is the order lists use.
-- metadata is a JSON object as text (NULL for none); refs a JSON array of
-- the ids this record uses.
CREATE TABLE records (
    namespace      TEXT    NOT NULL,
    turn_id        TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    scope          TEXT    NOT NULL,
    id             TEXT    NOT NULL,
    parent_id      TEXT    NOT NULL,
    content_type   TEXT    NOT NULL,
    payload        BLOB    NOT NULL,
    metadata       TEXT,
    refs           TEXT    NOT NULL,
    recorded_at_ns INTEGER NOT NULL,
    PRIMARY KEY (namespace, turn_id, kind, scope, id)
) WITHOUT ROWID;

-- A record's children (its kind's records whose parent_id is its id).
CREATE INDEX records_children ON records (namespace, turn_id, kind, scope, parent_id);
-- Listing a kind across the turns of a namespace, newest id first.
CREATE INDEX records_by_id ON records (namespace, kind, id);
