-- Memory (MemoryService): items that outlive a turn, at (namespace, path,
-- key). A path is its labels each followed by U+001F, so that the items
-- under a prefix of labels are a range of the primary key (BINARY
-- collation: bytes). value is the item's JSON object as text. Item order is
-- the path's first put (memory_paths), then the item's own: each a batch's
-- time and a place within the batch, copied into the item so that one index
-- reads a namespace's items in order. Times are Unix nanoseconds;
-- expires_at_ns and ttl_ns are NULL for an item that never expires.
CREATE TABLE memory_items (
    namespace     TEXT    NOT NULL,
    path          TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    value         TEXT    NOT NULL,
    created_at_ns INTEGER NOT NULL,
    updated_at_ns INTEGER NOT NULL,
    expires_at_ns INTEGER,
    ttl_ns        INTEGER,
    path_ns       INTEGER NOT NULL,
    path_place    INTEGER NOT NULL,
    item_ns       INTEGER NOT NULL,
    item_place    INTEGER NOT NULL,
    PRIMARY KEY (namespace, path, key)
);
-- A namespace's items in item order: searches without a query read it and
-- stop once their page is full.
CREATE INDEX memory_items_order ON memory_items (namespace, path_ns, path_place, item_ns, item_place);
-- The sweeper's expired items.
CREATE INDEX memory_items_expiry ON memory_items (expires_at_ns) WHERE expires_at_ns IS NOT NULL;

-- When each path was first put: it keeps its place in item order while
-- its items come and go, until DeleteItems deletes under it.
CREATE TABLE memory_paths (
    namespace  TEXT    NOT NULL,
    path       TEXT    NOT NULL,
    path_ns    INTEGER NOT NULL,
    path_place INTEGER NOT NULL,
    PRIMARY KEY (namespace, path)
) WITHOUT ROWID;

-- An item's vectors, one per field, each little-endian 32-bit floats.
CREATE TABLE memory_vectors (
    namespace TEXT NOT NULL,
    path      TEXT NOT NULL,
    key       TEXT NOT NULL,
    field     TEXT NOT NULL,
    vector    BLOB NOT NULL,
    PRIMARY KEY (namespace, path, key, field)
);
