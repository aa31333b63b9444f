-- Records (RecordService): addressed, updatable records within a turn.
-- A record's address is (namespace, turn_id, kind, scope, id), unique;
-- ids compare bytewise (SQLite's BINARY collation), which is the order
-- lists use. metadata is a JSON object as text (NULL for none); refs a JSON
-- array of the ids this record uses. A rowid table, not WITHOUT ROWID: a
-- record's payload (often a kilobyte or more) then lives in the table's own
-- b-tree, apart from the address index, whose entries stay small.
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
    recorded_at_ns INTEGER NOT NULL
);

-- The address, which puts upsert on and lists within a turn read.
CREATE UNIQUE INDEX records_address ON records (namespace, turn_id, kind, scope, id);
-- A record's children (its kind's records whose parent_id is its id).
CREATE INDEX records_children ON records (namespace, turn_id, kind, scope, parent_id);
-- Listing a kind across the turns of a namespace, newest id first.
CREATE INDEX records_by_id ON records (namespace, kind, id);
