-- Memory (MemoryService): items that outlive a turn, at (namespace, path,
-- key). A path is its labels each followed by U+001F, so that the items
-- under a prefix of labels are a range of the primary key; the text columns
-- use the "C" collation, so that range is one of bytes whatever the
-- database's collation. value is the item's JSON object. Item order is the
-- path's first put (memory_paths), then the item's own: each a batch's time
-- and a place within the batch, copied into the item so that one index
-- reads a namespace's items in order. Times are Unix nanoseconds;
-- expires_at_ns and ttl_ns are NULL for an item that never expires.
CREATE TABLE memory_items (
    namespace     TEXT COLLATE "C" NOT NULL,
    path          TEXT COLLATE "C" NOT NULL,
    key           TEXT COLLATE "C" NOT NULL,
    value         JSONB            NOT NULL,
    created_at_ns BIGINT           NOT NULL,
    updated_at_ns BIGINT           NOT NULL,
    expires_at_ns BIGINT,
    ttl_ns        BIGINT,
    path_ns       BIGINT           NOT NULL,
    path_place    BIGINT           NOT NULL,
    item_ns       BIGINT           NOT NULL,
    item_place    BIGINT           NOT NULL,
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
    namespace  TEXT COLLATE "C" NOT NULL,
    path       TEXT COLLATE "C" NOT NULL,
    path_ns    BIGINT           NOT NULL,
    path_place BIGINT           NOT NULL,
    PRIMARY KEY (namespace, path)
);

-- An item's vectors, one per field, each little-endian 32-bit floats.
CREATE TABLE memory_vectors (
    namespace TEXT COLLATE "C" NOT NULL,
    path      TEXT COLLATE "C" NOT NULL,
    key       TEXT COLLATE "C" NOT NULL,
    field     TEXT COLLATE "C" NOT NULL,
    vector    BYTEA            NOT NULL,
    PRIMARY KEY (namespace, path, key, field)
);
