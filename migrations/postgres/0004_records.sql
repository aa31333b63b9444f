-- Records (RecordService): addressed, updatable records within a turn.
-- A record's address is (namespace, turn_id, kind, scope, id). The text
-- columns use the "C" collation, so ids compare bytewise, which is the
-- order lists use, whatever the database's collation. metadata is a JSON
-- object (NULL for none); refs a JSON array of the ids this record uses.
CREATE TABLE records (
    namespace      TEXT COLLATE "C" NOT NULL,
    turn_id        TEXT COLLATE "C" NOT NULL,
    kind           TEXT COLLATE "C" NOT NULL,
    scope          TEXT COLLATE "C" NOT NULL,
    id             TEXT COLLATE "C" NOT NULL,
    parent_id      TEXT COLLATE "C" NOT NULL,
    content_type   TEXT             NOT NULL,
    payload        BYTEA            NOT NULL,
    metadata       JSONB,
    refs           JSONB            NOT NULL,
    recorded_at_ns BIGINT           NOT NULL,
    PRIMARY KEY (namespace, turn_id, kind, scope, id)
);

-- A record's children (its kind's records whose parent_id is its id).
CREATE INDEX records_children ON records (namespace, turn_id, kind, scope, parent_id);
-- Listing a kind across the turns of a namespace, newest id first.
CREATE INDEX records_by_id ON records (namespace, kind, id);
-- Metadata filters (containment, @>).
CREATE INDEX records_metadata ON records USING gin (metadata jsonb_path_ops);
