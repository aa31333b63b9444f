//! Postgres's statements for memory (MemoryService): a batch's puts,
//! deletes and refreshes inside the writer's transaction, each kind one
//! statement over arrays (`UNNEST`), whatever the batch's size; and the
//! reads, in pages of `READ_CHUNK` items in key order, which a
//! `search::Collector` takes one by one, so that a search holds no more than
//! its page and a chunk. Expiry runs on the database server's clock plus the
//! store clock's offset, as leases do.

use sqlx::Row;
use sqlx::postgres::{PgConnection, PgRow};

use super::DB_NOW_NS;
use super::vectors::{self, VectorIndex};
use crate::domain::memory::search::{Collector, Scan, Searched};
use crate::domain::memory::{Final, ItemPut, ItemsQuery, ItemsTouch, Order, Path, StoredItem, Vector};
use crate::domain::model::UnixNanos;

/// Items one read statement returns at most.
const READ_CHUNK: i64 = 512;

/// An item's columns, as `item` reads them.
const COLUMNS: &str = "i.path, i.key, i.value::text AS value, i.created_at_ns, i.updated_at_ns, i.expires_at_ns, \
     i.ttl_ns, i.path_ns, i.path_place, i.item_ns, i.item_place";

/// An item `i`'s vectors, each its bytes.
const VECTORS: &str = "ARRAY(SELECT v.vector FROM memory_vectors v \
     WHERE v.namespace = i.namespace AND v.path = i.path AND v.key = i.key) AS vectors";

/// A live item `i` (not expired at the store's time, `$4` its offset)
/// under the prefix `[$2, $3)` of namespace `$1` (no upper bound when `$3`
/// is NULL).
fn under() -> String {
    format!(
        "i.namespace = $1 AND i.path >= $2 AND ($3::text IS NULL OR i.path < $3) \
         AND (i.expires_at_ns IS NULL OR i.expires_at_ns > {DB_NOW_NS} + $4)"
    )
}

fn item(row: &PgRow) -> Result<StoredItem, sqlx::Error> {
    Ok(StoredItem {
        path: Path::from_stored(row.try_get("path")?),
        key: row.try_get("key")?,
        value: row.try_get("value")?,
        created_at: row.try_get("created_at_ns")?,
        updated_at: row.try_get("updated_at_ns")?,
        expires_at: row.try_get("expires_at_ns")?,
        ttl: row.try_get("ttl_ns")?,
        order: Order {
            path_ns: row.try_get("path_ns")?,
            path_place: row.try_get("path_place")?,
            item_ns: row.try_get("item_ns")?,
            item_place: row.try_get("item_place")?,
        },
    })
}

/// Writes a batch's final writes (`memory::final_writes`): the deletions
/// (and the expired items a put replaces, and the vectors a put drops),
/// then the paths, the items and their vectors; four statements at most.
/// With `embedding`, the vectors also fill pgvector's column.
pub async fn write<'a>(
    conn: &mut PgConnection,
    finals: &[Final<'a>],
    recorded_at: UnixNanos,
    offset: i64,
    embedding: bool,
) -> Result<(), sqlx::Error> {
    // One order of rows for every statement, so concurrent batches lock alike.
    let mut finals = finals.to_vec();
    finals.sort_by(|a, b| (a.namespace, &a.write.path, &a.write.key).cmp(&(b.namespace, &b.write.path, &b.write.key)));
    let column = |f: for<'x> fn(&'x Final<'a>) -> &'x str| finals.iter().map(f).collect::<Vec<&str>>();
    let clear: Vec<bool> = finals.iter().map(|f| f.write.put.as_ref().is_none_or(|p| p.replace_vectors)).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH w AS (SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bool[], $5::bool[]) AS u(n, p, k, del, clear)), \
         gone AS (DELETE FROM memory_items m USING w \
                  WHERE m.namespace = w.n AND m.path = w.p AND m.key = w.k \
                    AND (w.del OR m.expires_at_ns <= {DB_NOW_NS} + $6) \
                  RETURNING m.namespace, m.path, m.key) \
         DELETE FROM memory_vectors v WHERE (v.namespace, v.path, v.key) IN \
           (SELECT n, p, k FROM w WHERE del OR clear UNION ALL SELECT namespace, path, key FROM gone)"
    )))
    .bind(column(|f| f.namespace))
    .bind(column(|f| f.write.path.as_str()))
    .bind(column(|f| &f.write.key))
    .bind(finals.iter().map(|f| f.write.put.is_none()).collect::<Vec<bool>>())
    .bind(clear)
    .bind(offset)
    .execute(&mut *conn)
    .await?;
    let puts: Vec<&Final<'_>> = finals.iter().filter(|f| f.write.put.is_some()).collect();
    if puts.is_empty() {
        return Ok(());
    }
    put_items(conn, &puts, recorded_at, offset).await?;
    put_vectors(conn, &puts, embedding).await
}

/// The paths, items and vectors of a batch's puts.
async fn put_items<'a>(
    conn: &mut PgConnection,
    puts: &[&Final<'a>],
    recorded_at: UnixNanos,
    offset: i64,
) -> Result<(), sqlx::Error> {
    let column = |f: for<'x> fn(&'x Final<'a>) -> &'x str| puts.iter().map(|p| f(p)).collect::<Vec<&str>>();
    let places: Vec<i64> = puts.iter().map(|f| f.place).collect();
    sqlx::query(
        "INSERT INTO memory_paths (namespace, path, path_ns, path_place) \
         SELECT DISTINCT ON (n, p) n, p, $3, pl FROM UNNEST($1::text[], $2::text[], $4::bigint[]) AS u(n, p, pl) \
         ORDER BY n, p, pl \
         ON CONFLICT (namespace, path) DO NOTHING",
    )
    .bind(column(|f| f.namespace))
    .bind(column(|f| f.write.path.as_str()))
    .bind(recorded_at)
    .bind(&places)
    .execute(&mut *conn)
    .await?;
    let bodies: Vec<&ItemPut> = puts.iter().filter_map(|f| f.write.put.as_ref()).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO memory_items (namespace, path, key, value, created_at_ns, updated_at_ns, expires_at_ns, ttl_ns, \
                                   path_ns, path_place, item_ns, item_place) \
         SELECT u.n, u.p, u.k, CAST(u.v AS jsonb), $6, $6, {DB_NOW_NS} + $7 + u.ttl, u.ttl, \
                mp.path_ns, mp.path_place, $6, u.pl \
         FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[], $8::bigint[]) AS u(n, p, k, v, ttl, pl) \
         JOIN memory_paths mp ON mp.namespace = u.n AND mp.path = u.p \
         ON CONFLICT (namespace, path, key) DO UPDATE SET value = excluded.value, \
           updated_at_ns = excluded.updated_at_ns, expires_at_ns = excluded.expires_at_ns, ttl_ns = excluded.ttl_ns"
    )))
    .bind(column(|f| f.namespace))
    .bind(column(|f| f.write.path.as_str()))
    .bind(column(|f| &f.write.key))
    .bind(bodies.iter().map(|p| p.value.as_str()).collect::<Vec<&str>>())
    .bind(bodies.iter().map(|p| p.ttl).collect::<Vec<Option<i64>>>())
    .bind(recorded_at)
    .bind(offset)
    .bind(&places)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Upserts the vectors of a batch's puts, field by field; with
/// `embedding`, each also as pgvector's `vector`.
async fn put_vectors<'a>(conn: &mut PgConnection, puts: &[&Final<'a>], embedding: bool) -> Result<(), sqlx::Error> {
    let vectors: Vec<(&Final<'a>, &Vector)> =
        puts.iter().flat_map(|f| f.write.put.iter().flat_map(|p| p.vectors.iter()).map(move |v| (*f, v))).collect();
    if vectors.is_empty() {
        return Ok(());
    }
    let column =
        |f: for<'x> fn(&'x (&'x Final<'a>, &'x Vector)) -> &'x str| vectors.iter().map(f).collect::<Vec<&str>>();
    let sql = if embedding { INSERT_VECTORS_EMBEDDED } else { INSERT_VECTORS };
    let insert = sqlx::query(sql)
        .bind(column(|(f, _)| f.namespace))
        .bind(column(|(f, _)| f.write.path.as_str()))
        .bind(column(|(f, _)| &f.write.key))
        .bind(column(|(_, v)| &v.field))
        .bind(vectors.iter().map(|(_, v)| v.to_bytes()).collect::<Vec<Vec<u8>>>());
    let insert = match embedding {
        true => {
            insert.bind(vectors.iter().map(|(_, v)| vectors::embedding(&v.values)).collect::<Vec<Option<String>>>())
        }
        false => insert,
    };
    insert.execute(&mut *conn).await?;
    Ok(())
}

/// The vectors of a batch's puts.
const INSERT_VECTORS: &str = "INSERT INTO memory_vectors (namespace, path, key, field, vector) \
     SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[]) \
     ON CONFLICT (namespace, path, key, field) DO UPDATE SET vector = excluded.vector";

/// The same, filling pgvector's column from `$6`, each vector's text (NULL
/// for one too long for pgvector).
const INSERT_VECTORS_EMBEDDED: &str = "INSERT INTO memory_vectors (namespace, path, key, field, vector, embedding) \
     SELECT n, p, k, f, b, CAST(e AS vector) \
     FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[]) AS u(n, p, k, f, b, e) \
     ON CONFLICT (namespace, path, key, field) DO UPDATE SET vector = excluded.vector, embedding = excluded.embedding";

/// Moves the expiry of the live items named that have a time to live.
pub async fn touch(conn: &mut PgConnection, touch: &ItemsTouch, offset: i64) -> Result<(), sqlx::Error> {
    let mut items: Vec<&(Path, String)> = touch.items.iter().collect();
    items.sort();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH now AS (SELECT {DB_NOW_NS} + $4 AS ns) \
         UPDATE memory_items m SET expires_at_ns = (SELECT ns FROM now) + m.ttl_ns \
         FROM UNNEST($2::text[], $3::text[]) AS u(p, k) \
         WHERE m.namespace = $1 AND m.path = u.p AND m.key = u.k AND m.ttl_ns IS NOT NULL \
           AND m.expires_at_ns > (SELECT ns FROM now)"
    )))
    .bind(&touch.namespace)
    .bind(items.iter().map(|(p, _)| p.as_str()).collect::<Vec<&str>>())
    .bind(items.iter().map(|(_, k)| k.as_str()).collect::<Vec<&str>>())
    .bind(offset)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Deletes every item under `prefix`, with their vectors and paths, in one
/// statement (a data-modifying CTE runs whether or not it is read);
/// answers how many items went.
pub async fn delete_under(conn: &mut PgConnection, namespace: &str, prefix: &Path) -> Result<u64, sqlx::Error> {
    let range = "namespace = $1 AND path >= $2 AND ($3::text IS NULL OR path < $3)";
    let (deleted,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH items AS (DELETE FROM memory_items WHERE {range} RETURNING 1), \
              vectors AS (DELETE FROM memory_vectors WHERE {range} RETURNING 1), \
              paths AS (DELETE FROM memory_paths WHERE {range} RETURNING 1) \
         SELECT count(*) FROM items"
    )))
    .bind(namespace)
    .bind(prefix.as_str())
    .bind(prefix.upper())
    .fetch_one(&mut *conn)
    .await?;
    Ok(deleted as u64)
}

/// The live items at `addresses`, each once, in the order first named.
pub async fn get(
    conn: &mut PgConnection,
    namespace: &str,
    addresses: &[(Path, String)],
    offset: i64,
) -> Result<Vec<StoredItem>, sqlx::Error> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM memory_items i \
         JOIN UNNEST($2::text[], $3::text[]) WITH ORDINALITY AS u(p, k, o) ON i.path = u.p AND i.key = u.k \
         WHERE i.namespace = $1 AND (i.expires_at_ns IS NULL OR i.expires_at_ns > {DB_NOW_NS} + $4) \
         ORDER BY u.o"
    )))
    .bind(namespace)
    .bind(addresses.iter().map(|(p, _)| p.as_str()).collect::<Vec<&str>>())
    .bind(addresses.iter().map(|(_, k)| k.as_str()).collect::<Vec<&str>>())
    .bind(offset)
    .fetch_all(&mut *conn)
    .await?;
    let mut found: Vec<StoredItem> = Vec::with_capacity(rows.len());
    for row in &rows {
        let next = item(row)?;
        if !found.iter().any(|held| held.path == next.path && held.key == next.key) {
            found.push(next);
        }
    }
    Ok(found)
}

/// A search's page: without a query, the live items under the prefix in
/// item order, chunk by chunk until the page is full; with one, the items
/// pgvector's index finds nearest (`index`, when it covers the query's
/// length) if they fill the page, else every such item with its vectors,
/// in address order (the collector orders them).
pub async fn search(
    conn: &mut PgConnection,
    q: &ItemsQuery,
    offset: i64,
    index: Option<&VectorIndex>,
) -> Result<Searched, sqlx::Error> {
    let mut collector = Collector::new(q);
    if !collector.wants_vectors() {
        ordered(conn, q, offset, &mut collector).await?;
        return Ok(Searched { hits: collector.page(), scan: Scan::Ordered });
    }
    let len = q.query.as_ref().map_or(0, Vec::len);
    if index.is_some_and(|index| index.covers(len))
        && let Some(candidates) = vectors::candidates(conn, q, collector.room()).await?
    {
        offer_items(conn, &q.namespace, &candidates, offset, &mut collector).await?;
        if collector.holds_page() {
            return Ok(Searched { hits: collector.page(), scan: Scan::Index });
        }
        collector = Collector::new(q);
    }
    scored(conn, q, offset, &mut collector).await?;
    Ok(Searched { hits: collector.page(), scan: Scan::Exact })
}

/// Offers the live items at `addresses` with their vectors.
async fn offer_items(
    conn: &mut PgConnection,
    namespace: &str,
    addresses: &[(Path, String)],
    offset: i64,
    collector: &mut Collector<'_>,
) -> Result<(), sqlx::Error> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS}, {VECTORS} FROM memory_items i \
         JOIN UNNEST($2::text[], $3::text[]) AS u(p, k) ON i.path = u.p AND i.key = u.k \
         WHERE i.namespace = $1 AND (i.expires_at_ns IS NULL OR i.expires_at_ns > {DB_NOW_NS} + $4)"
    )))
    .bind(namespace)
    .bind(addresses.iter().map(|(p, _)| p.as_str()).collect::<Vec<&str>>())
    .bind(addresses.iter().map(|(_, k)| k.as_str()).collect::<Vec<&str>>())
    .bind(offset)
    .fetch_all(&mut *conn)
    .await?;
    for row in &rows {
        let (next, vectors) = scored_item(row)?;
        collector.offer(next, vectors.iter().map(Vec::as_slice));
    }
    Ok(())
}

/// An item row with its vectors (`VECTORS`).
fn scored_item(row: &PgRow) -> Result<(StoredItem, Vec<Vec<f32>>), sqlx::Error> {
    let vectors = row.try_get::<Vec<Vec<u8>>, _>("vectors")?.iter().map(|b| Vector::values_of(b)).collect();
    Ok((item(row)?, vectors))
}

/// Offers the items under the prefix in item order until the page is full.
async fn ordered(
    conn: &mut PgConnection,
    q: &ItemsQuery,
    offset: i64,
    collector: &mut Collector<'_>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS} FROM memory_items i WHERE {} \
           AND (i.path_ns, i.path_place, i.item_ns, i.item_place, i.path, i.key) > ($5, $6, $7, $8, $9, $10) \
         ORDER BY i.path_ns, i.path_place, i.item_ns, i.item_place, i.path, i.key LIMIT $11",
        under()
    );
    let mut after = (Order { path_ns: i64::MIN, ..Order::default() }, String::new(), String::new());
    loop {
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&q.namespace)
            .bind(q.prefix.as_str())
            .bind(q.prefix.upper())
            .bind(offset)
            .bind(after.0.path_ns)
            .bind(after.0.path_place)
            .bind(after.0.item_ns)
            .bind(after.0.item_place)
            .bind(&after.1)
            .bind(&after.2)
            .bind(READ_CHUNK)
            .fetch_all(&mut *conn)
            .await?;
        let last = rows.len() < READ_CHUNK as usize;
        for row in &rows {
            let next = item(row)?;
            after = (next.order, next.path.as_str().to_owned(), next.key.clone());
            collector.offer(next, std::iter::empty());
            if collector.is_full() {
                return Ok(());
            }
        }
        if last {
            return Ok(());
        }
    }
}

/// Offers every item under the prefix with its vectors, in key order.
async fn scored(
    conn: &mut PgConnection,
    q: &ItemsQuery,
    offset: i64,
    collector: &mut Collector<'_>,
) -> Result<(), sqlx::Error> {
    let sql = format!(
        "SELECT {COLUMNS}, {VECTORS} FROM memory_items i WHERE {} AND (i.path, i.key) > ($5, $6) \
         ORDER BY i.path, i.key LIMIT $7",
        under()
    );
    let mut after = (String::new(), String::new());
    loop {
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(&q.namespace)
            .bind(q.prefix.as_str())
            .bind(q.prefix.upper())
            .bind(offset)
            .bind(&after.0)
            .bind(&after.1)
            .bind(READ_CHUNK)
            .fetch_all(&mut *conn)
            .await?;
        for row in &rows {
            let (next, vectors) = scored_item(row)?;
            after = (next.path.as_str().to_owned(), next.key.clone());
            collector.offer(next, vectors.iter().map(Vec::as_slice));
        }
        if rows.len() < READ_CHUNK as usize {
            return Ok(());
        }
    }
}

/// The distinct paths under `prefix` that hold live items.
pub async fn paths(
    conn: &mut PgConnection,
    namespace: &str,
    prefix: &Path,
    offset: i64,
) -> Result<Vec<Path>, sqlx::Error> {
    let paths: Vec<(String,)> =
        sqlx::query_as(sqlx::AssertSqlSafe(format!("SELECT DISTINCT i.path FROM memory_items i WHERE {}", under())))
            .bind(namespace)
            .bind(prefix.as_str())
            .bind(prefix.upper())
            .bind(offset)
            .fetch_all(&mut *conn)
            .await?;
    Ok(paths.into_iter().map(|(p,)| Path::from_stored(p)).collect())
}

/// Deletes up to `limit` items expired at the store's time, with their
/// vectors, in one statement; answers how many went. The outer condition is
/// checked again on a row put again meanwhile, which is then kept.
pub async fn purge_expired(conn: &mut PgConnection, limit: u32, offset: i64) -> Result<u64, sqlx::Error> {
    let (purged,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH now AS (SELECT {DB_NOW_NS} + $1 AS ns), \
         gone AS (DELETE FROM memory_items WHERE expires_at_ns <= (SELECT ns FROM now) AND (namespace, path, key) IN \
                    (SELECT namespace, path, key FROM memory_items WHERE expires_at_ns <= (SELECT ns FROM now) LIMIT $2) \
                  RETURNING namespace, path, key), \
         vectors AS (DELETE FROM memory_vectors v USING gone \
                     WHERE v.namespace = gone.namespace AND v.path = gone.path AND v.key = gone.key RETURNING 1) \
         SELECT count(*) FROM gone"
    )))
    .bind(offset)
    .bind(i64::from(limit))
    .fetch_one(&mut *conn)
    .await?;
    Ok(purged as u64)
}
