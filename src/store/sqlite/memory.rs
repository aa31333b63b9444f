//! SQLite's statements for memory (MemoryService): a batch's puts, deletes
//! and refreshes inside the writer's transaction, one cached statement per
//! row (SQLite runs them in process, so a row costs no round trip); and the
//! reads on a read connection, whose rows a `search::Collector` takes one by
//! one, so that a search holds no more than its page.

use rusqlite::types::ToSql;
use rusqlite::{Connection, Row};

use super::exec::{execute_numbered, query_numbered};
use crate::domain::memory::search::{Collector, Scan, Searched};
use crate::domain::memory::{Final, ItemPut, ItemsQuery, ItemsTouch, Order, Path, StoredItem, Vector};
use crate::domain::model::UnixNanos;

/// An item's columns, in the order `item` reads them.
const COLUMNS: &str = "path, key, value, created_at_ns, updated_at_ns, expires_at_ns, ttl_ns, \
     path_ns, path_place, item_ns, item_place";

/// The condition of a live item (not expired at `$4`) under the prefix
/// `[$2, $3)` of namespace `$1` (no upper bound when `$3` is NULL).
const UNDER: &str = "namespace = $1 AND path >= $2 AND ($3 IS NULL OR path < $3) \
     AND (expires_at_ns IS NULL OR expires_at_ns > $4)";

/// `UNDER` for the items of a join, as `i`.
const UNDER_I: &str = "i.namespace = $1 AND i.path >= $2 AND ($3 IS NULL OR i.path < $3) \
     AND (i.expires_at_ns IS NULL OR i.expires_at_ns > $4)";

/// `COLUMNS` of the items of a join, as `i`.
const COLUMNS_I: &str = "i.path, i.key, i.value, i.created_at_ns, i.updated_at_ns, i.expires_at_ns, i.ttl_ns, \
     i.path_ns, i.path_place, i.item_ns, i.item_place";

const ADDRESS: &str = "namespace = $1 AND path = $2 AND key = $3";

/// An item from a row that begins with `COLUMNS`.
fn item(row: &Row<'_>) -> rusqlite::Result<StoredItem> {
    Ok(StoredItem {
        path: Path::from_stored(row.get(0)?),
        key: row.get(1)?,
        value: row.get(2)?,
        created_at: row.get(3)?,
        updated_at: row.get(4)?,
        expires_at: row.get(5)?,
        ttl: row.get(6)?,
        order: Order { path_ns: row.get(7)?, path_place: row.get(8)?, item_ns: row.get(9)?, item_place: row.get(10)? },
    })
}

/// Writes a batch's final writes (`memory::final_writes`), each at its place.
pub fn write(conn: &Connection, finals: &[Final<'_>], recorded_at: UnixNanos, now: UnixNanos) -> rusqlite::Result<()> {
    for f in finals {
        let (namespace, path, key) = (f.namespace, f.write.path.as_str(), f.write.key.as_str());
        // An expired item is gone: a put makes a new one, with no old vectors.
        let expired = format!("DELETE FROM memory_items WHERE {ADDRESS} AND expires_at_ns <= $4 RETURNING 1");
        let was_expired = !query_numbered(conn, &expired, &[&namespace, &path, &key, &now], |_| Ok(()))?.is_empty();
        match &f.write.put {
            None => {
                execute_numbered(
                    conn,
                    &format!("DELETE FROM memory_items WHERE {ADDRESS}"),
                    &[&namespace, &path, &key],
                )?;
                delete_vectors(conn, namespace, path, key)?;
            }
            Some(put) => {
                if was_expired || put.replace_vectors {
                    delete_vectors(conn, namespace, path, key)?;
                }
                put_item(conn, f, put, recorded_at, now)?;
            }
        }
    }
    Ok(())
}

fn delete_vectors(conn: &Connection, namespace: &str, path: &str, key: &str) -> rusqlite::Result<()> {
    execute_numbered(conn, &format!("DELETE FROM memory_vectors WHERE {ADDRESS}"), &[&namespace, &path, &key])?;
    Ok(())
}

/// Upserts one item (its path's place first) and merges its vectors.
fn put_item(
    conn: &Connection,
    f: &Final<'_>,
    put: &ItemPut,
    recorded_at: UnixNanos,
    now: UnixNanos,
) -> rusqlite::Result<()> {
    let (namespace, path, key) = (f.namespace, f.write.path.as_str(), f.write.key.as_str());
    execute_numbered(
        conn,
        "INSERT INTO memory_paths (namespace, path, path_ns, path_place) VALUES ($1, $2, $3, $4) \
         ON CONFLICT (namespace, path) DO NOTHING",
        &[&namespace, &path, &recorded_at, &f.place],
    )?;
    let expires_at = put.ttl.map(|ttl| now.saturating_add(ttl));
    execute_numbered(
        conn,
        "INSERT INTO memory_items (namespace, path, key, value, created_at_ns, updated_at_ns, expires_at_ns, ttl_ns, \
                                   path_ns, path_place, item_ns, item_place) \
         SELECT $1, $2, $3, $4, $5, $5, $6, $7, p.path_ns, p.path_place, $5, $8 \
           FROM memory_paths p WHERE p.namespace = $1 AND p.path = $2 \
         ON CONFLICT (namespace, path, key) DO UPDATE SET value = excluded.value, \
           updated_at_ns = excluded.updated_at_ns, expires_at_ns = excluded.expires_at_ns, ttl_ns = excluded.ttl_ns",
        &[&namespace, &path, &key, &put.value, &recorded_at, &expires_at, &put.ttl, &f.place],
    )?;
    for vector in &put.vectors {
        let bytes = vector.to_bytes();
        execute_numbered(
            conn,
            "INSERT INTO memory_vectors (namespace, path, key, field, vector) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (namespace, path, key, field) DO UPDATE SET vector = excluded.vector",
            &[&namespace, &path, &key, &vector.field, &bytes],
        )?;
    }
    Ok(())
}

/// Moves the expiry of the live items named that have a time to live.
pub fn touch(conn: &Connection, touch: &ItemsTouch, now: UnixNanos) -> rusqlite::Result<()> {
    for (path, key) in &touch.items {
        execute_numbered(
            conn,
            &format!(
                "UPDATE memory_items SET expires_at_ns = $4 + ttl_ns \
                 WHERE {ADDRESS} AND ttl_ns IS NOT NULL AND expires_at_ns > $4"
            ),
            &[&touch.namespace, &path.as_str(), key, &now],
        )?;
    }
    Ok(())
}

/// Deletes every item under `prefix`, with their vectors and paths; answers
/// how many items went.
pub fn delete_under(conn: &Connection, namespace: &str, prefix: &Path) -> rusqlite::Result<u64> {
    let (low, high) = (prefix.as_str(), prefix.upper());
    let range = "namespace = $1 AND path >= $2 AND ($3 IS NULL OR path < $3)";
    let values: [&dyn ToSql; 3] = [&namespace, &low, &high];
    let deleted = execute_numbered(conn, &format!("DELETE FROM memory_items WHERE {range}"), &values)?;
    execute_numbered(conn, &format!("DELETE FROM memory_vectors WHERE {range}"), &values)?;
    execute_numbered(conn, &format!("DELETE FROM memory_paths WHERE {range}"), &values)?;
    Ok(deleted as u64)
}

/// The live items at `addresses`, each once, in the order first named.
pub fn get(
    conn: &Connection,
    namespace: &str,
    addresses: &[(Path, String)],
    now: UnixNanos,
) -> rusqlite::Result<Vec<StoredItem>> {
    let sql =
        format!("SELECT {COLUMNS} FROM memory_items WHERE {ADDRESS} AND (expires_at_ns IS NULL OR expires_at_ns > $4)");
    let mut found: Vec<StoredItem> = Vec::new();
    for (path, key) in addresses {
        if found.iter().any(|item| &item.path == path && &item.key == key) {
            continue;
        }
        found.extend(query_numbered(conn, &sql, &[&namespace, &path.as_str(), key, &now], item)?);
    }
    Ok(found)
}

/// A search's page: without a query, the live items under the prefix in
/// item order until the page is full; with one, every such item with its
/// vectors, in address order (the collector orders them).
pub fn search(conn: &Connection, q: &ItemsQuery, now: UnixNanos) -> rusqlite::Result<Searched> {
    let mut collector = Collector::new(q);
    let (low, high) = (q.prefix.as_str(), q.prefix.upper());
    let values: [&dyn ToSql; 4] = [&q.namespace, &low, &high, &now];
    if !collector.wants_vectors() {
        let sql = format!(
            "SELECT {COLUMNS} FROM memory_items WHERE {UNDER} ORDER BY path_ns, path_place, item_ns, item_place, path, key"
        );
        let mut statement = conn.prepare_cached(&sql)?;
        super::exec::bind_numbered(&mut statement, &values)?;
        let mut rows = statement.raw_query();
        while !collector.is_full() {
            let Some(row) = rows.next()? else { break };
            collector.offer(item(row)?, std::iter::empty());
        }
        return Ok(Searched { hits: collector.page(), scan: Scan::Ordered });
    }
    let sql = format!(
        "SELECT {COLUMNS_I}, v.vector FROM memory_items i LEFT JOIN memory_vectors v \
           ON v.namespace = i.namespace AND v.path = i.path AND v.key = i.key \
         WHERE {UNDER_I} ORDER BY i.path, i.key"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    super::exec::bind_numbered(&mut statement, &values)?;
    let mut rows = statement.raw_query();
    let mut current: Option<(StoredItem, Vec<Vec<f32>>)> = None;
    while let Some(row) = rows.next()? {
        let next = item(row)?;
        let vector: Option<Vec<u8>> = row.get(11)?;
        let same = current.as_ref().is_some_and(|(held, _)| held.path == next.path && held.key == next.key);
        if !same && let Some((held, vectors)) = current.take() {
            collector.offer(held, vectors.iter().map(Vec::as_slice));
        }
        let (_, vectors) = current.get_or_insert_with(|| (next, Vec::new()));
        vectors.extend(vector.map(|bytes| Vector::values_of(&bytes)));
    }
    if let Some((held, vectors)) = current {
        collector.offer(held, vectors.iter().map(Vec::as_slice));
    }
    Ok(Searched { hits: collector.page(), scan: Scan::Exact })
}

/// The distinct paths under `prefix` that hold live items.
pub fn paths(conn: &Connection, namespace: &str, prefix: &Path, now: UnixNanos) -> rusqlite::Result<Vec<Path>> {
    let (low, high) = (prefix.as_str(), prefix.upper());
    let sql = format!("SELECT DISTINCT path FROM memory_items WHERE {UNDER}");
    query_numbered(conn, &sql, &[&namespace, &low, &high, &now], |row| Ok(Path::from_stored(row.get(0)?)))
}

/// Deletes up to `limit` items expired at `now`, with their vectors;
/// answers how many went.
pub fn purge_expired(conn: &Connection, now: UnixNanos, limit: u32) -> rusqlite::Result<u64> {
    let gone = query_numbered(
        conn,
        "DELETE FROM memory_items WHERE rowid IN \
           (SELECT rowid FROM memory_items WHERE expires_at_ns <= $1 LIMIT $2) RETURNING namespace, path, key",
        &[&now, &i64::from(limit)],
        |row| Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?, row.get::<_, String>(2)?)),
    )?;
    for (namespace, path, key) in &gone {
        delete_vectors(conn, namespace, path, key)?;
    }
    Ok(gone.len() as u64)
}
