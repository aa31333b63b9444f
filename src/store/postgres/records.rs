//! Postgres's statements for records (RecordService): a batch's puts as
//! `UNNEST`ed arrays (one statement for the upserts, one for the inserts),
//! deleting and copying inside the writer's transaction, and a page of a
//! list in one statement that returns each record with its children and
//! refs. Metadata filters are jsonb's `@>`, read through the
//! `records_metadata` index.
//!
//! Every write to records first takes a transaction-scoped advisory lock
//! on each turn it writes, in one sorted order (`lock_turns`), after any
//! idempotency keys its batch locks: two batches that write the same turns
//! then take their row locks one after the other, never crosswise, however
//! their upserts and inserts interleave.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::{Arguments, Connection, Encode, Postgres, Row, Type};

use crate::domain::model::UnixNanos;
use crate::domain::records::{
    self, Address, NewRecord, Part, PutMode, RecordCursor, RecordDelete, RecordEntry, RecordQuery, RelatedCursor,
    RelatedSize, Selection, StoredRecord,
};
use crate::store::IdleQuery;

/// A record's columns as a list reads them: jsonb as its text.
const COLUMNS: &str = "r.turn_id, r.scope, r.kind, r.id, r.parent_id, r.content_type, r.payload, \
                       CAST(r.metadata AS text) AS metadata, CAST(r.refs AS text) AS refs, r.recorded_at_ns";

fn stored(row: &PgRow) -> Result<StoredRecord, sqlx::Error> {
    Ok(StoredRecord {
        record: NewRecord {
            turn_id: row.try_get("turn_id")?,
            scope: row.try_get("scope")?,
            kind: row.try_get("kind")?,
            id: row.try_get("id")?,
            parent_id: row.try_get("parent_id")?,
            content_type: row.try_get("content_type")?,
            payload: row.try_get("payload")?,
            metadata: row.try_get("metadata")?,
            refs: row.try_get("refs")?,
            mode: PutMode::Upsert,
        },
        recorded_at: row.try_get("recorded_at_ns")?,
    })
}

/// Writes `rows` (one per address, sorted): the upserts replace what is
/// stored, the inserts keep it. One round trip per mode present.
pub async fn put(
    conn: &mut PgConnection,
    rows: &[(&str, &NewRecord)],
    recorded_at: UnixNanos,
) -> Result<(), sqlx::Error> {
    // Every turn of the batch, both modes', locked by the first statement.
    let mut turns: Vec<(&str, &str)> = rows.iter().map(|(namespace, r)| (*namespace, r.turn_id.as_str())).collect();
    turns.sort_unstable();
    turns.dedup();
    let (lock_namespaces, lock_turns): (Vec<&str>, Vec<&str>) = turns.into_iter().unzip();
    let mut locked = false;
    for mode in [PutMode::Upsert, PutMode::InsertIfAbsent] {
        let chosen: Vec<&(&str, &NewRecord)> = rows.iter().filter(|(_, r)| r.mode.on_conflict() == mode).collect();
        if chosen.is_empty() {
            continue;
        }
        let on_conflict = match mode {
            PutMode::Upsert => {
                "DO UPDATE SET parent_id = excluded.parent_id, content_type = excluded.content_type, \
                 payload = excluded.payload, metadata = excluded.metadata, refs = excluded.refs, \
                 recorded_at_ns = excluded.recorded_at_ns"
            }
            PutMode::InsertIfAbsent | PutMode::Create | PutMode::Update => "DO NOTHING",
        };
        // The turn locks ride in the first statement (no round trip of
        // their own): its one-row `locks` is read before any row is written.
        let (with_locks, join_locks) = if locked { ("", "") } else { (LOCK_TURNS_CTE, ", locks") };
        let text = |f: fn(&NewRecord) -> &str| chosen.iter().map(|(_, r)| f(r)).collect::<Vec<&str>>();
        let mut query = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{with_locks}INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, \
                                  metadata, refs, recorded_at_ns) \
             SELECT n, t, k, s, i, p, c, b, CAST(m AS jsonb), CAST(f AS jsonb), $11 \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                         $8::bytea[], $9::text[], $10::text[]) AS u(n, t, k, s, i, p, c, b, m, f){join_locks} \
             ON CONFLICT (namespace, turn_id, kind, scope, id) {on_conflict}"
        )))
        .bind(chosen.iter().map(|(namespace, _)| *namespace).collect::<Vec<&str>>())
        .bind(text(|r| &r.turn_id))
        .bind(text(|r| &r.kind))
        .bind(text(|r| &r.scope))
        .bind(text(|r| &r.id))
        .bind(text(|r| &r.parent_id))
        .bind(text(|r| &r.content_type))
        .bind(chosen.iter().map(|(_, r)| &r.payload[..]).collect::<Vec<&[u8]>>())
        .bind(chosen.iter().map(|(_, r)| r.metadata.as_deref()).collect::<Vec<Option<&str>>>())
        .bind(text(|r| &r.refs))
        .bind(recorded_at);
        if !locked {
            query = query.bind(&lock_namespaces).bind(&lock_turns);
        }
        query.execute(&mut *conn).await?;
        locked = true;
    }
    Ok(())
}

/// Which of `wanted` hold a record, read after the advisory locks of
/// `turns` (those a put's first statement would take, taken here first, in
/// the same order): a create or update then finds its address as no other
/// writer (a deletion included, which takes the same locks) can
/// change it until the transaction ends. Two round trips.
pub async fn stored_addresses(
    conn: &mut PgConnection,
    turns: &[(&str, &str)],
    wanted: &[Address],
) -> Result<HashSet<Address>, sqlx::Error> {
    lock_turns(conn, turns.iter().copied()).await?;
    let column = |f: fn(&Address) -> &str| wanted.iter().map(f).collect::<Vec<&str>>();
    let rows = sqlx::query(
        "SELECT r.namespace, r.turn_id, r.scope, r.kind, r.id FROM records r \
         JOIN UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]) AS u(n, t, s, k, i) \
           ON r.namespace = u.n AND r.turn_id = u.t AND r.kind = u.k AND r.scope = u.s AND r.id = u.i",
    )
    .bind(column(|a| &a.namespace))
    .bind(column(|a| &a.turn_id))
    .bind(column(|a| &a.scope))
    .bind(column(|a| &a.kind))
    .bind(column(|a| &a.id))
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|row| {
            Ok(Address {
                namespace: row.try_get(0)?,
                turn_id: row.try_get(1)?,
                scope: row.try_get(2)?,
                kind: row.try_get(3)?,
                id: row.try_get(4)?,
            })
        })
        .collect()
}

/// The turn locks of `lock_turns` as the head of a put's first statement,
/// over its parameters `$12` (namespaces) and `$13` (turns).
const LOCK_TURNS_CTE: &str = "WITH locks AS MATERIALIZED (\
       SELECT count(*) AS turns_locked FROM (SELECT pg_advisory_xact_lock(h) FROM ( \
         SELECT DISTINCT hashtextextended(n || '/' || t, 1) AS h \
         FROM UNNEST($12::text[], $13::text[]) AS u(n, t) ORDER BY h) sorted) taken) ";

/// Deletes what `d` selects; answers how many records went. The turns it
/// touches are locked first (`within_turns`); retention's turn is kept if
/// written since it was chosen; then either whole turns go, or a selection
/// (`delete_selected`).
pub async fn delete(conn: &mut PgConnection, d: &RecordDelete) -> Result<u64, sqlx::Error> {
    let Some(d) = within_turns(conn, d).await? else { return Ok(0) };
    let d = d.as_ref();
    if !d.turn_ids.is_empty() {
        lock_turns(conn, d.turn_ids.iter().map(|turn| (d.namespace.as_str(), turn.as_str()))).await?;
    }
    if let Some(idle_before) = d.idle_before
        && written_since(conn, d, idle_before).await?
    {
        return Ok(0);
    }
    let Some(selection) = &d.selection else {
        let done = sqlx::query("DELETE FROM records WHERE namespace = $1 AND turn_id = ANY($2::text[])")
            .bind(&d.namespace)
            .bind(&d.turn_ids)
            .execute(&mut *conn)
            .await?;
        return Ok(done.rows_affected());
    };
    delete_selected(conn, d, selection).await
}

/// The deletion `d`, confined to the turns it will touch, so that they can
/// be locked first; `None` when a deletion across turns finds none. Across
/// more turns than a transaction should lock, it stays unconfined and runs
/// unlocked (a deadlock then fails it alone, UNAVAILABLE, and its retry
/// deletes what is left).
async fn within_turns<'d>(
    conn: &mut PgConnection,
    d: &'d RecordDelete,
) -> Result<Option<Cow<'d, RecordDelete>>, sqlx::Error> {
    let mut d = Cow::Borrowed(d);
    if d.turn_ids.is_empty() {
        let turns = matching_turns(conn, &d).await?;
        if turns.is_empty() {
            return Ok(None);
        }
        if turns.len() <= LOCKED_TURNS_MAX {
            d.to_mut().turn_ids = turns;
        }
    }
    Ok(Some(d))
}

/// Whether any record of retention's turns was written at or after
/// `idle_before`, since retention chose them: they are kept then.
async fn written_since(conn: &mut PgConnection, d: &RecordDelete, idle_before: UnixNanos) -> Result<bool, sqlx::Error> {
    let written = sqlx::query(
        "SELECT 1 FROM records WHERE namespace = $1 AND turn_id = ANY($2::text[]) AND recorded_at_ns >= $3 LIMIT 1",
    )
    .bind(&d.namespace)
    .bind(&d.turn_ids)
    .bind(idle_before)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(written.is_some())
}

/// Deletes the records `selection` chooses in `d`'s turns. One statement
/// deletes the chosen records and their children and answers the scopes it
/// touched; a second deletes those scopes' references that no record of
/// the kind uses any more (it must see the first's deletions, which a later
/// part of the same statement would not).
async fn delete_selected(conn: &mut PgConnection, d: &RecordDelete, selection: &Selection) -> Result<u64, sqlx::Error> {
    let chosen = chosen_sql(d, selection);
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH chosen AS MATERIALIZED ({chosen}), \
         children AS (DELETE FROM records c USING chosen \
                      WHERE c.namespace = $1 AND c.kind = $5 AND c.turn_id = chosen.turn_id \
                        AND c.scope = chosen.scope AND c.parent_id = chosen.id RETURNING 1), \
         gone AS (DELETE FROM records r USING chosen \
                  WHERE r.namespace = $1 AND r.kind = $2 AND r.turn_id = chosen.turn_id AND r.scope = chosen.scope \
                    AND r.id = chosen.id RETURNING r.turn_id, r.scope) \
         SELECT (SELECT count(*) FROM children) + (SELECT count(*) FROM gone) AS deleted, \
                CAST((SELECT coalesce(jsonb_agg(DISTINCT jsonb_build_array(turn_id, scope)), '[]') FROM gone) \
                     AS text) AS scopes"
    )))
    .bind(&d.namespace)
    .bind(&selection.kind)
    .bind(&d.turn_ids)
    .bind(&selection.metadata_any)
    .bind(selection.children_kind.as_deref().unwrap_or(""))
    .fetch_one(&mut *conn)
    .await?;
    let mut deleted: i64 = row.try_get("deleted")?;
    let scopes: String = row.try_get("scopes")?;
    if let Some(refs) = &selection.refs_kind
        && scopes != "[]"
    {
        let gone = delete_unused_refs(conn, &d.namespace, refs, &selection.kind, &scopes).await?;
        deleted += i64::try_from(gone).unwrap_or(i64::MAX);
    }
    Ok(u64::try_from(deleted).unwrap_or(0))
}

/// The query that picks the records a selection deletes: of its kind, in
/// `d`'s turns if it names any, matching its metadata if it asks, and all
/// but each scope's newest with `keep_latest`.
fn chosen_sql(d: &RecordDelete, selection: &Selection) -> String {
    let mut chosen = "SELECT turn_id, scope, id FROM records p WHERE namespace = $1 AND kind = $2".to_owned();
    if !d.turn_ids.is_empty() {
        chosen.push_str(" AND turn_id = ANY($3::text[])");
    }
    if !selection.metadata_any.is_empty() {
        chosen.push_str(" AND metadata @> ANY(CAST($4 AS jsonb[]))");
    }
    if selection.keep_latest {
        chosen.push_str(
            " AND id < (SELECT max(id) FROM records l \
                        WHERE l.namespace = p.namespace AND l.turn_id = p.turn_id AND l.kind = p.kind \
                          AND l.scope = p.scope)",
        );
    }
    chosen
}

/// Up to `q.limit` turns none of whose records was written at or after `q.idle_before`.
pub async fn idle_turns(conn: &mut PgConnection, q: &IdleQuery) -> Result<Vec<(String, String)>, sqlx::Error> {
    let (namespaces, rule) = match &q.namespace {
        Some(namespace) => (vec![namespace.clone()], "namespace = ANY($1::text[])"),
        None => (q.except.clone(), "namespace <> ALL($1::text[])"),
    };
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT namespace, turn_id FROM records WHERE {rule} \
         GROUP BY namespace, turn_id HAVING max(recorded_at_ns) < $2 LIMIT $3"
    )))
    .bind(namespaces)
    .bind(q.idle_before)
    .bind(i64::from(q.limit))
    .fetch_all(&mut *conn)
    .await
}

/// Deletes the records of `refs` kind in `scopes` (a JSON array of [turn,
/// scope] pairs) that no record of `kind` refers to any more.
async fn delete_unused_refs(
    conn: &mut PgConnection,
    namespace: &str,
    refs: &str,
    kind: &str,
    scopes: &str,
) -> Result<u64, sqlx::Error> {
    let done = sqlx::query(
        "DELETE FROM records r \
         USING (SELECT e->>0 AS turn_id, e->>1 AS scope FROM jsonb_array_elements(CAST($3 AS jsonb)) e) a \
         WHERE r.namespace = $1 AND r.kind = $2 AND r.turn_id = a.turn_id AND r.scope = a.scope \
           AND NOT EXISTS (SELECT 1 FROM records p \
                           WHERE p.namespace = r.namespace AND p.turn_id = r.turn_id AND p.kind = $4 \
                             AND p.scope = r.scope AND p.refs ? r.id)",
    )
    .bind(namespace)
    .bind(refs)
    .bind(scopes)
    .bind(kind)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// Most turns one deletion locks (as many as a DeleteRecords may name).
const LOCKED_TURNS_MAX: usize = crate::domain::limits::DELETE_SELECTORS_MAX;

/// Takes the advisory lock of each (namespace, turn) of `turns`, in one
/// sorted order, until the transaction ends (one round trip).
async fn lock_turns<'a>(
    conn: &mut PgConnection,
    turns: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<(), sqlx::Error> {
    let (namespaces, turns): (Vec<&str>, Vec<&str>) = turns.unzip();
    sqlx::query(
        "SELECT count(*) FROM (SELECT pg_advisory_xact_lock(h) FROM ( \
           SELECT DISTINCT hashtextextended(n || '/' || t, 1) AS h \
           FROM UNNEST($1::text[], $2::text[]) AS u(n, t) ORDER BY h) sorted) locked",
    )
    .bind(namespaces)
    .bind(turns)
    .fetch_one(&mut *conn)
    .await?;
    Ok(())
}

/// The turns that hold records a cross-turn deletion selects.
async fn matching_turns(conn: &mut PgConnection, d: &RecordDelete) -> Result<Vec<String>, sqlx::Error> {
    let Some(selection) = &d.selection else { return Ok(Vec::new()) };
    sqlx::query_scalar(
        "SELECT DISTINCT turn_id FROM records \
         WHERE namespace = $1 AND kind = $2 AND metadata @> ANY(CAST($3 AS jsonb[])) ORDER BY turn_id",
    )
    .bind(&d.namespace)
    .bind(&selection.kind)
    .bind(&selection.metadata_any)
    .fetch_all(&mut *conn)
    .await
}

/// Copies every record of `source` to `target`, replacing what is at an address there.
pub async fn copy(
    conn: &mut PgConnection,
    namespace: &str,
    source: &str,
    target: &str,
    recorded_at: UnixNanos,
) -> Result<u64, sqlx::Error> {
    lock_turns(conn, [(namespace, source), (namespace, target)].into_iter()).await?;
    let done = sqlx::query(
        "INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, refs, \
                              recorded_at_ns) \
         SELECT namespace, $3, kind, scope, id, parent_id, content_type, payload, metadata, refs, $4 \
         FROM records WHERE namespace = $1 AND turn_id = $2 \
         ON CONFLICT (namespace, turn_id, kind, scope, id) DO UPDATE SET \
           parent_id = excluded.parent_id, content_type = excluded.content_type, payload = excluded.payload, \
           metadata = excluded.metadata, refs = excluded.refs, recorded_at_ns = excluded.recorded_at_ns",
    )
    .bind(namespace)
    .bind(source)
    .bind(target)
    .bind(recorded_at)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected())
}

/// How a page of split entries is read: its sizes and its records from one snapshot.
pub const SPLIT_PAGE_ISOLATION: &str = "ISOLATION LEVEL REPEATABLE READ, READ ONLY";

/// One page of a list: the page's records (part 0), their children (part 1)
/// and their refs (part 2) in one statement, each related row naming the
/// record it belongs to. A page of more than one entry is first sized
/// (`fitting`: each entry's bytes, read from the records' lengths without
/// their payloads), so that only the entries within the byte budget are
/// ever read whole. `in_transaction`: `conn` is in a transaction begun
/// `SPLIT_PAGE_ISOLATION` (a unit of work behind a pooler).
pub async fn list(
    conn: &mut PgConnection,
    q: &RecordQuery,
    in_transaction: bool,
) -> Result<(Vec<RecordEntry>, bool), sqlx::Error> {
    if q.split_entries && in_transaction {
        return split_page(conn, q).await;
    }
    if q.split_entries {
        // Sizes and records from one snapshot, so the page is cut where it was sized.
        let mut tx = conn.begin_with(sqlx::AssertSqlSafe(format!("BEGIN {SPLIT_PAGE_ISOLATION}"))).await?;
        let page = split_page(&mut tx, q).await?;
        tx.commit().await?;
        return Ok(page);
    }
    let (take, mut more) = if q.limit > 1 { fitting(conn, q).await? } else { (1, false) };
    let arguments = list_arguments(q, i64::try_from(take).unwrap_or(i64::MAX))?;
    let rows = sqlx::query_with(sqlx::AssertSqlSafe(list_sql(q)), arguments).fetch_all(&mut *conn).await?;
    let mut entries = assemble(&rows)?;
    more |= entries.len() > take;
    entries.truncate(take);
    let mut used = 0usize;
    if let Some(fit) = entries.iter().position(|entry| {
        used = used.saturating_add(entry.bytes());
        used > q.bytes_max
    }) {
        // The first entry always comes, however large; if it was the last,
        // the listing ends here.
        let keep = fit.max(1);
        if keep < entries.len() {
            entries.truncate(keep);
            more = true;
        }
    }
    Ok((entries, more))
}

/// How many entries of the page fit its byte budget (at least one, at most
/// its size), and whether more follow: the page's records and the sizes of
/// their related records, without their payloads.
async fn fitting(conn: &mut PgConnection, q: &RecordQuery) -> Result<(usize, bool), sqlx::Error> {
    let sizes = entry_sizes(conn, q, q.limit as usize).await?;
    // One row per entry of the page, in list order.
    let limit = q.limit as usize;
    let (mut take, mut used) = (0usize, 0usize);
    for size in sizes.iter().take(limit) {
        if take > 0 && used.saturating_add(size.bytes) > q.bytes_max {
            return Ok((take, true));
        }
        used = used.saturating_add(size.bytes);
        take += 1;
    }
    Ok((take.max(1), sizes.len() > limit))
}

/// An entry of a list as sized before it is read.
struct EntrySize {
    key: RecordCursor,
    /// The record's own cost.
    record: usize,
    /// The record's and its related records' cost.
    bytes: usize,
}

/// The sizes of the next `entries` entries of the list, and of one more if
/// there is one, in list order.
async fn entry_sizes(conn: &mut PgConnection, q: &RecordQuery, entries: usize) -> Result<Vec<EntrySize>, sqlx::Error> {
    let arguments = list_arguments(q, i64::try_from(entries).unwrap_or(i64::MAX))?;
    let rows = sqlx::query_with(sqlx::AssertSqlSafe(sizes_sql(q)), arguments).fetch_all(&mut *conn).await?;
    let size = |row: &PgRow, column: &str| -> Result<usize, sqlx::Error> {
        Ok(usize::try_from(row.try_get::<i64, _>(column)?).unwrap_or(usize::MAX))
    };
    rows.iter()
        .map(|row| {
            Ok(EntrySize {
                key: RecordCursor {
                    id: row.try_get("id")?,
                    turn_id: row.try_get("turn_id")?,
                    scope: row.try_get("scope")?,
                },
                record: size(row, "record_bytes")?,
                bytes: size(row, "bytes")?,
            })
        })
        .collect()
}

/// A page with `split_entries`, in one snapshot: the rest of the entry the
/// last page cut, then whole entries while they fit (read in one statement),
/// and an entry that does not fit a page of its own, first in its page, cut
/// at the budget. Every record is sized before it is read.
async fn split_page(conn: &mut PgConnection, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), sqlx::Error> {
    let (mut page, mut used) = (Vec::new(), 0usize);
    if let (Some(after), Some(within)) = (&q.after, &q.within) {
        let entry = continued(conn, q, after, within).await?;
        let cut = entry.cut.is_some();
        used = entry.bytes();
        page.push(entry);
        if cut {
            return Ok((page, true));
        }
    }
    let room = (q.limit as usize).saturating_sub(page.len());
    let sizes = entry_sizes(conn, q, room).await?;
    let mut take = 0;
    for size in sizes.iter().take(room) {
        let alone = page.is_empty() && take == 0 && size.bytes == size.record;
        if used.saturating_add(size.bytes) > q.bytes_max && !alone {
            break;
        }
        used = used.saturating_add(size.bytes);
        take += 1;
    }
    if take > 0 {
        let arguments = list_arguments(q, i64::try_from(take - 1).unwrap_or(i64::MAX))?;
        let rows = sqlx::query_with(sqlx::AssertSqlSafe(list_sql(q)), arguments).fetch_all(&mut *conn).await?;
        page.extend(assemble(&rows)?);
    }
    match sizes.get(take) {
        Some(first) if page.is_empty() && take < room => {
            page.push(cut_entry(conn, q, first).await?);
            Ok((page, true))
        }
        next => Ok((page, next.is_some())),
    }
}

/// The first piece of an entry that does not fit a page of its own: its
/// record and the related records that fit the budget beside it.
async fn cut_entry(conn: &mut PgConnection, q: &RecordQuery, size: &EntrySize) -> Result<RecordEntry, sqlx::Error> {
    let record = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {COLUMNS} FROM records r \
         WHERE r.namespace = $1 AND r.turn_id = $2 AND r.kind = $3 AND r.scope = $4 AND r.id = $5"
    )))
    .bind(&q.namespace)
    .bind(&size.key.turn_id)
    .bind(&q.kind)
    .bind(&size.key.scope)
    .bind(&size.key.id)
    .fetch_one(&mut *conn)
    .await?;
    let start = RelatedCursor::start();
    let related = related_sizes(conn, q, &size.key, &start).await?;
    let (take, cut) = records::fitting_related(&related, q.bytes_max.saturating_sub(size.record), false, &start);
    let mut entry = RecordEntry::new(stored(&record)?, Vec::new(), Vec::new());
    read_related(conn, q, &size.key, &related[..take], &mut entry).await?;
    entry.cut = cut;
    Ok(entry)
}

/// The rest of the entry at `after`, cut at `within`: its related records
/// that follow, as many as fit the budget (at least one).
async fn continued(
    conn: &mut PgConnection,
    q: &RecordQuery,
    after: &RecordCursor,
    within: &RelatedCursor,
) -> Result<RecordEntry, sqlx::Error> {
    let related = related_sizes(conn, q, after, within).await?;
    let (take, cut) = records::fitting_related(&related, q.bytes_max, true, within);
    let mut entry = RecordEntry::new(records::address(&q.kind, after), Vec::new(), Vec::new());
    entry.continued = true;
    read_related(conn, q, after, &related[..take], &mut entry).await?;
    entry.cut = cut;
    Ok(entry)
}

/// The sizes of the related records of the entry at `key` that follow
/// `from`: its children by id, then its refs (as the entry names them now;
/// none if it is gone) by id. A part the query does not ask for, or that
/// `from` is past, has a NULL kind and matches nothing.
async fn related_sizes(
    conn: &mut PgConnection,
    q: &RecordQuery,
    key: &RecordCursor,
    from: &RelatedCursor,
) -> Result<Vec<RelatedSize>, sqlx::Error> {
    let after = |part: Part| if from.part == part { from.after.as_str() } else { "" };
    let children = q.children_kind.as_deref().filter(|_| from.part <= Part::Children);
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "WITH owner AS (SELECT refs FROM records \
                        WHERE namespace = $1 AND turn_id = $2 AND kind = $9 AND scope = $3 AND id = $4) \
         SELECT 0 AS part, r.id, CAST({RECORD_BYTES} AS bigint) AS bytes FROM records r \
         WHERE r.namespace = $1 AND r.turn_id = $2 AND r.kind = $5 AND r.scope = $3 AND r.parent_id = $4 \
           AND r.id > $6 \
         UNION ALL \
         SELECT 1, r.id, CAST({RECORD_BYTES} AS bigint) \
         FROM owner o CROSS JOIN LATERAL jsonb_array_elements_text(o.refs) AS u(ref) JOIN records r \
           ON r.namespace = $1 AND r.turn_id = $2 AND r.kind = $7 AND r.scope = $3 AND r.id = u.ref \
         WHERE r.id > $8 \
         ORDER BY part, id"
    )))
    .bind(&q.namespace)
    .bind(&key.turn_id)
    .bind(&key.scope)
    .bind(&key.id)
    .bind(children)
    .bind(after(Part::Children))
    .bind(q.refs_kind.as_deref())
    .bind(after(Part::Refs))
    .bind(&q.kind)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter()
        .map(|row| {
            let part = if row.try_get::<i32, _>("part")? == 0 { Part::Children } else { Part::Refs };
            let bytes = usize::try_from(row.try_get::<i64, _>("bytes")?).unwrap_or(usize::MAX);
            Ok(RelatedSize { part, id: row.try_get("id")?, bytes })
        })
        .collect()
}

/// Reads the related records `chosen` (sized by `related_sizes`) of the
/// entry at `key` into `entry`, each part by id, in one statement.
async fn read_related(
    conn: &mut PgConnection,
    q: &RecordQuery,
    key: &RecordCursor,
    chosen: &[RelatedSize],
    entry: &mut RecordEntry,
) -> Result<(), sqlx::Error> {
    if chosen.is_empty() {
        return Ok(());
    }
    let ids = |part: Part| chosen.iter().filter(|r| r.part == part).map(|r| r.id.as_str()).collect::<Vec<&str>>();
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 0 AS part, {COLUMNS} FROM records r \
         WHERE r.namespace = $1 AND r.turn_id = $2 AND r.kind = $4 AND r.scope = $3 AND r.id = ANY($5::text[]) \
         UNION ALL \
         SELECT 1, {COLUMNS} FROM records r \
         WHERE r.namespace = $1 AND r.turn_id = $2 AND r.kind = $6 AND r.scope = $3 AND r.id = ANY($7::text[]) \
         ORDER BY part, id"
    )))
    .bind(&q.namespace)
    .bind(&key.turn_id)
    .bind(&key.scope)
    .bind(q.children_kind.as_deref())
    .bind(ids(Part::Children))
    .bind(q.refs_kind.as_deref())
    .bind(ids(Part::Refs))
    .fetch_all(&mut *conn)
    .await?;
    for row in &rows {
        let part = if row.try_get::<i32, _>("part")? == 0 { Part::Children } else { Part::Refs };
        entry.attach(part, stored(row)?);
    }
    Ok(())
}

/// The arguments of `list_sql(q)` and `sizes_sql(q)`, in the order they number them: the
/// filters asked for, the cursor, one more entry than `page` (to tell
/// whether more follow), then the related kinds.
fn list_arguments(q: &RecordQuery, page: i64) -> Result<PgArguments, sqlx::Error> {
    fn add<'t>(
        arguments: &mut PgArguments,
        value: impl Encode<'t, Postgres> + Type<Postgres>,
    ) -> Result<(), sqlx::Error> {
        arguments.add(value).map_err(sqlx::Error::Encode)
    }
    let mut arguments = PgArguments::default();
    add(&mut arguments, &q.namespace)?;
    add(&mut arguments, &q.kind)?;
    for value in [&q.turn_id, &q.scope, &q.id, &q.before_id, &q.metadata_contains].into_iter().flatten() {
        add(&mut arguments, value)?;
    }
    if let Some(after) = &q.after {
        add(&mut arguments, &after.id)?;
        add(&mut arguments, &after.turn_id)?;
        add(&mut arguments, &after.scope)?;
    }
    add(&mut arguments, page.saturating_add(1))?;
    for kind in [&q.children_kind, &q.refs_kind].into_iter().flatten() {
        add(&mut arguments, kind)?;
    }
    Ok(arguments)
}

/// What each record of a list costs in a page, as `RecordEntry::bytes` counts it.
const RECORD_BYTES: &str = "(octet_length(r.turn_id) + octet_length(r.scope) + octet_length(r.kind) \
     + octet_length(r.id) + octet_length(r.parent_id) + octet_length(r.content_type) + octet_length(r.payload) \
     + coalesce(octet_length(CAST(r.metadata AS text)), 0) + octet_length(CAST(r.refs AS text)) + 64)";

/// The filters of a list (`list_sql`, `sizes_sql`) for `q`: only those asked
/// for, numbered in the order `list_arguments` adds them (turn, scope, id,
/// before, metadata, cursor), and the number of the limit that follows them.
fn list_filters(q: &RecordQuery) -> (String, usize) {
    let mut filters = String::new();
    let mut n = 2;
    let wanted = [
        (q.turn_id.is_some(), " AND turn_id = #"),
        (q.scope.is_some(), " AND scope = #"),
        (q.id.is_some(), " AND id = #"),
        (q.before_id.is_some(), " AND id < #"),
        (q.metadata_contains.is_some(), " AND metadata @> CAST(# AS jsonb)"),
    ];
    for (_, filter) in wanted.into_iter().filter(|(on, _)| *on) {
        n += 1;
        filters.push_str(&filter.replace('#', &format!("${n}")));
    }
    if q.after.is_some() {
        n += 3;
        filters.push_str(&format!(" AND (id, turn_id, scope) < (${}, ${}, ${})", n - 2, n - 1, n));
    }
    (filters, n + 1)
}

/// The list statement for `q`: a page of whole records with their children
/// and refs, numbered as `list_arguments` adds them (the filters, the
/// limit, then the related kinds).
fn list_sql(q: &RecordQuery) -> String {
    let (filters, limit) = list_filters(q);
    let mut sql = format!(
        "WITH page AS MATERIALIZED (\
           SELECT * FROM records WHERE namespace = $1 AND kind = $2{filters} \
           ORDER BY id DESC, turn_id DESC, scope DESC LIMIT ${limit}) \
         SELECT 0 AS part, r.turn_id AS owner_turn, r.scope AS owner_scope, r.id AS owner_id, {COLUMNS} FROM page r"
    );
    let mut n = limit;
    if q.children_kind.is_some() {
        n += 1;
        sql.push_str(&format!(
            " UNION ALL SELECT 1, p.turn_id, p.scope, p.id, {COLUMNS} FROM page p JOIN records r \
               ON r.namespace = $1 AND r.turn_id = p.turn_id AND r.kind = ${n} AND r.scope = p.scope \
              AND r.parent_id = p.id"
        ));
    }
    if q.refs_kind.is_some() {
        n += 1;
        sql.push_str(&format!(
            " UNION ALL SELECT 2, p.turn_id, p.scope, p.id, {COLUMNS} \
              FROM page p CROSS JOIN LATERAL jsonb_array_elements_text(p.refs) AS u(ref) JOIN records r \
               ON r.namespace = $1 AND r.turn_id = p.turn_id AND r.kind = ${n} AND r.scope = p.scope AND r.id = u.ref"
        ));
    }
    sql
}

/// The sizing statement of the list `list_sql` reads: per page entry, in
/// list order, its bytes and its related records' (children by parent,
/// refs named once each), numbered as `list_sql` is.
fn sizes_sql(q: &RecordQuery) -> String {
    let (filters, limit) = list_filters(q);
    let mut n = limit;
    let mut related = String::new();
    if q.children_kind.is_some() {
        n += 1;
        related.push_str(&format!(
            " + coalesce((SELECT sum({RECORD_BYTES}) FROM records r \
                 WHERE r.namespace = $1 AND r.turn_id = p.turn_id AND r.kind = ${n} AND r.scope = p.scope \
                   AND r.parent_id = p.id), 0)"
        ));
    }
    if q.refs_kind.is_some() {
        n += 1;
        related.push_str(&format!(
            " + coalesce((SELECT sum({RECORD_BYTES}) FROM records r \
                 WHERE r.namespace = $1 AND r.turn_id = p.turn_id AND r.kind = ${n} AND r.scope = p.scope \
                   AND r.id IN (SELECT jsonb_array_elements_text(p.refs))), 0)"
        ));
    }
    format!(
        "SELECT p.turn_id, p.scope, p.id, CAST(p.bytes AS bigint) AS record_bytes, \
                CAST(p.bytes{related} AS bigint) AS bytes FROM (\
           SELECT r.turn_id, r.scope, r.id, r.refs, {RECORD_BYTES} AS bytes FROM records r \
           WHERE r.namespace = $1 AND r.kind = $2{filters} \
           ORDER BY r.id DESC, r.turn_id DESC, r.scope DESC LIMIT ${limit}) p \
         ORDER BY p.id DESC, p.turn_id DESC, p.scope DESC"
    )
}

/// The page's entries, newest id first, each with its children and refs by id.
fn assemble(rows: &[PgRow]) -> Result<Vec<RecordEntry>, sqlx::Error> {
    let mut entries: Vec<RecordEntry> = Vec::new();
    let mut related: Vec<(i32, (String, String, String), StoredRecord)> = Vec::new();
    for row in rows {
        let part: i32 = row.try_get("part")?;
        let record = stored(row)?;
        if part == 0 {
            entries.push(RecordEntry::new(record, Vec::new(), Vec::new()));
        } else {
            let owner = (row.try_get("owner_turn")?, row.try_get("owner_scope")?, row.try_get("owner_id")?);
            related.push((part, owner, record));
        }
    }
    let key = |e: &RecordEntry| {
        let r = &e.record.record;
        (r.id.clone(), r.turn_id.clone(), r.scope.clone())
    };
    entries.sort_by_key(|e| std::cmp::Reverse(key(e)));
    related.sort_by(|a, b| a.2.record.id.cmp(&b.2.record.id));
    let index: HashMap<(String, String, String), usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let r = &e.record.record;
            ((r.turn_id.clone(), r.scope.clone(), r.id.clone()), i)
        })
        .collect();
    for (part, owner, record) in related {
        if let Some(&i) = index.get(&owner) {
            if part == 1 { entries[i].children.push(record) } else { entries[i].refs.push(record) }
        }
    }
    Ok(entries)
}
