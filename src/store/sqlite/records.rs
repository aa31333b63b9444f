//! SQLite's statements for records (RecordService): a batch's puts, deleting
//! and copying records inside the writer's transaction, and a page of a
//! list on a read connection. Lists of values (turn ids, filters, the
//! addresses a deletion chose) are bound as one JSON array each and read
//! with `json_each`, so a statement's text does not depend on their length.
//! Metadata filters run `json_contains`, which `register_functions` puts on
//! every connection: `records::json_contains`, the containment Postgres's
//! `@>` defines.

use std::collections::HashSet;

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ToSql;
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;

use crate::domain::model::UnixNanos;
use crate::domain::records::{
    self, Address, NewRecord, Part, PutMode, RecordCursor, RecordDelete, RecordEntry, RecordQuery, RelatedCursor,
    RelatedSize, Selection, StoredRecord,
};
use crate::store::IdleQuery;

/// A record's columns, in the order `stored` reads them.
const COLUMNS: &str = "turn_id, scope, kind, id, parent_id, content_type, payload, metadata, refs, recorded_at_ns";

/// What a record costs in a page, as `RecordEntry::bytes` counts it, read
/// from the lengths of its values (`octet_length` of a blob does not read it).
const RECORD_BYTES: &str = "(octet_length(turn_id) + octet_length(scope) + octet_length(kind) + octet_length(id) \
     + octet_length(parent_id) + octet_length(content_type) + octet_length(payload) \
     + coalesce(octet_length(metadata), 0) + octet_length(refs) + 64)";

/// Most rows one multi-row insert carries (11 parameters each, well under
/// SQLite's limit on parameters).
const ROWS_PER_INSERT: usize = 500;

/// Registers `json_contains(target, filter)`: whether the JSON text
/// `target` contains the JSON text `filter`; false for a NULL target. The
/// filter, the same for every row of a statement, is parsed once per statement.
pub fn register_functions(conn: &Connection) -> rusqlite::Result<()> {
    let flags = FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC;
    conn.create_scalar_function("json_contains", 2, flags, |ctx| {
        let filter = ctx.get_or_create_aux(1, |raw| -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
            Ok(serde_json::from_slice(raw.as_bytes()?)?)
        })?;
        let Some(target) = ctx.get::<Option<String>>(0)? else { return Ok(false) };
        let target: Value =
            serde_json::from_str(&target).map_err(|error| rusqlite::Error::UserFunctionError(error.into()))?;
        Ok(records::json_contains(&target, &filter))
    })
}

fn stored(row: &Row<'_>) -> rusqlite::Result<StoredRecord> {
    Ok(StoredRecord {
        record: NewRecord {
            turn_id: row.get(0)?,
            scope: row.get(1)?,
            kind: row.get(2)?,
            id: row.get(3)?,
            parent_id: row.get(4)?,
            content_type: row.get(5)?,
            payload: row.get(6)?,
            metadata: row.get(7)?,
            refs: row.get(8)?,
            mode: PutMode::Upsert,
        },
        recorded_at: row.get(9)?,
    })
}

/// Which of `wanted` hold a record. The writer's transaction already
/// excludes every other writer of the file, so nothing needs locking.
pub fn stored_addresses(conn: &Connection, wanted: &[Address]) -> rusqlite::Result<HashSet<Address>> {
    let mut statement = conn.prepare_cached(
        "SELECT 1 FROM records WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 AND id = ?5",
    )?;
    let mut stored = HashSet::new();
    for a in wanted {
        if statement.exists([&a.namespace, &a.turn_id, &a.kind, &a.scope, &a.id])? {
            stored.insert(a.clone());
        }
    }
    Ok(stored)
}

/// Writes `rows` (one per address, sorted): the upserts replace what is
/// stored, the inserts keep it.
pub fn put(conn: &Connection, rows: &[(&str, &NewRecord)], recorded_at: UnixNanos) -> rusqlite::Result<()> {
    for mode in [PutMode::Upsert, PutMode::InsertIfAbsent] {
        let chosen: Vec<&(&str, &NewRecord)> = rows.iter().filter(|(_, r)| r.mode.on_conflict() == mode).collect();
        for chunk in chosen.chunks(ROWS_PER_INSERT) {
            let tail = match mode {
                PutMode::Upsert => {
                    " ON CONFLICT (namespace, turn_id, kind, scope, id) DO UPDATE SET \
                       parent_id = excluded.parent_id, content_type = excluded.content_type, \
                       payload = excluded.payload, metadata = excluded.metadata, refs = excluded.refs, \
                       recorded_at_ns = excluded.recorded_at_ns"
                }
                PutMode::InsertIfAbsent | PutMode::Create | PutMode::Update => {
                    " ON CONFLICT (namespace, turn_id, kind, scope, id) DO NOTHING"
                }
            };
            let sql = super::values_sql(
                "INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, \
                                      metadata, refs, recorded_at_ns) VALUES ",
                11,
                chunk.len(),
                tail,
            );
            let mut params: Vec<&dyn ToSql> = Vec::with_capacity(chunk.len() * 11);
            for (namespace, r) in chunk {
                params.extend([
                    namespace as &dyn ToSql,
                    &r.turn_id,
                    &r.kind,
                    &r.scope,
                    &r.id,
                    &r.parent_id,
                    &r.content_type,
                    &r.payload,
                    &r.metadata,
                    &r.refs,
                    &recorded_at,
                ]);
            }
            conn.prepare_cached(&sql)?.execute(&params[..])?;
        }
    }
    Ok(())
}

/// Deletes what `d` selects; answers how many records went.
pub fn delete(conn: &Connection, d: &RecordDelete) -> rusqlite::Result<u64> {
    let turns = serde_json::to_string(&d.turn_ids).expect("strings serialize");
    if let Some(idle_before) = d.idle_before {
        // Retention's turn, kept if any of its records was written since it was chosen.
        let written: Option<i64> = conn
            .prepare_cached(
                "SELECT 1 FROM records WHERE namespace = ?1 AND turn_id IN (SELECT value FROM json_each(?2)) \
                   AND recorded_at_ns >= ?3 LIMIT 1",
            )?
            .query_row(rusqlite::params![d.namespace, turns, idle_before], |row| row.get(0))
            .optional()?;
        if written.is_some() {
            return Ok(0);
        }
    }
    let Some(selection) = &d.selection else {
        let deleted = conn
            .prepare_cached(
                "DELETE FROM records WHERE namespace = ?1 AND turn_id IN (SELECT value FROM json_each(?2))",
            )?
            .execute(rusqlite::params![d.namespace, turns])?;
        return Ok(deleted as u64);
    };
    let chosen = chosen(conn, d, selection, &turns)?;
    if chosen.is_empty() {
        return Ok(0);
    }
    let addresses = serde_json::to_string(&chosen).expect("strings serialize");
    let mut deleted = 0;
    if let Some(children) = &selection.children_kind {
        deleted += conn
            .prepare_cached(
                "DELETE FROM records WHERE namespace = ?1 AND kind = ?2 AND (turn_id, scope, parent_id) IN \
                   (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
                    FROM json_each(?3))",
            )?
            .execute(rusqlite::params![d.namespace, children, addresses])?;
    }
    deleted += conn
        .prepare_cached(
            "DELETE FROM records WHERE namespace = ?1 AND kind = ?2 AND (turn_id, scope, id) IN \
               (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), json_extract(value, '$[2]') \
                FROM json_each(?3))",
        )?
        .execute(rusqlite::params![d.namespace, selection.kind, addresses])?;
    if let Some(refs) = &selection.refs_kind {
        // The references of the scopes touched that no record of the kind uses any more.
        deleted += conn
            .prepare_cached(
                "DELETE FROM records AS r WHERE namespace = ?1 AND kind = ?2 AND (turn_id, scope) IN \
                   (SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(?3)) \
                 AND NOT EXISTS (SELECT 1 FROM records p, json_each(p.refs) j \
                                 WHERE p.namespace = r.namespace AND p.turn_id = r.turn_id AND p.kind = ?4 \
                                   AND p.scope = r.scope AND j.value = r.id)",
            )?
            .execute(rusqlite::params![d.namespace, refs, addresses, selection.kind])?;
    }
    Ok(deleted as u64)
}

/// The records a selection chooses, as (turn, scope, id): of its kind, in
/// the turns (`turns`, a JSON array; or any turn), matching a filter (or
/// all), and not the newest of their turn and scope when that one is kept.
fn chosen(
    conn: &Connection,
    d: &RecordDelete,
    selection: &Selection,
    turns: &str,
) -> rusqlite::Result<Vec<(String, String, String)>> {
    let mut sql = "SELECT turn_id, scope, id FROM records p WHERE namespace = $1 AND kind = $2".to_owned();
    if !d.turn_ids.is_empty() {
        sql.push_str(" AND turn_id IN (SELECT value FROM json_each($3))");
    }
    if !selection.metadata_any.is_empty() {
        sql.push_str(" AND EXISTS (SELECT 1 FROM json_each($4) f WHERE json_contains(p.metadata, f.value))");
    }
    if selection.keep_latest {
        sql.push_str(
            " AND id < (SELECT max(id) FROM records l \
                        WHERE l.namespace = p.namespace AND l.turn_id = p.turn_id AND l.kind = p.kind \
                          AND l.scope = p.scope)",
        );
    }
    let filters = format!("[{}]", selection.metadata_any.join(","));
    let mut statement = conn.prepare_cached(&sql)?;
    let values: [&dyn ToSql; 4] = [&d.namespace, &selection.kind, &turns, &filters];
    super::bind_numbered(&mut statement, &values)?;
    let mut rows = statement.raw_query();
    let mut found = Vec::new();
    while let Some(row) = rows.next()? {
        found.push((row.get(0)?, row.get(1)?, row.get(2)?));
    }
    Ok(found)
}

/// Copies every record of `source` to `target`, replacing what is at an address there.
pub fn copy(
    conn: &Connection,
    namespace: &str,
    source: &str,
    target: &str,
    recorded_at: UnixNanos,
) -> rusqlite::Result<u64> {
    let copied = conn
        .prepare_cached(
            "INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, \
                                  refs, recorded_at_ns) \
             SELECT namespace, ?3, kind, scope, id, parent_id, content_type, payload, metadata, refs, ?4 \
             FROM records WHERE namespace = ?1 AND turn_id = ?2 \
             ON CONFLICT (namespace, turn_id, kind, scope, id) DO UPDATE SET \
               parent_id = excluded.parent_id, content_type = excluded.content_type, payload = excluded.payload, \
               metadata = excluded.metadata, refs = excluded.refs, recorded_at_ns = excluded.recorded_at_ns",
        )?
        .execute(rusqlite::params![namespace, source, target, recorded_at])?;
    Ok(copied as u64)
}

/// Up to `q.limit` turns none of whose records was written at or after `q.idle_before`.
pub fn idle_turns(conn: &Connection, q: &IdleQuery) -> rusqlite::Result<Vec<(String, String)>> {
    let (namespaces, rule) = match &q.namespace {
        Some(namespace) => (serde_json::to_string(&[namespace]).expect("strings serialize"), "IN"),
        None => (serde_json::to_string(&q.except).expect("strings serialize"), "NOT IN"),
    };
    let sql = format!(
        "SELECT namespace, turn_id FROM records WHERE namespace {rule} (SELECT value FROM json_each(?1)) \
         GROUP BY namespace, turn_id HAVING max(recorded_at_ns) < ?2 LIMIT ?3"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let found = statement.query_map(rusqlite::params![namespaces, q.idle_before, i64::from(q.limit)], |row| {
        Ok((row.get(0)?, row.get(1)?))
    })?;
    found.collect()
}

/// The main statement of a list: only the filters asked for, so that the
/// planner reads the primary key within a turn and `records_by_id` across turns.
/// With `columns` a record's `COLUMNS`, or other columns of it.
fn list_sql(q: &RecordQuery, columns: &str) -> String {
    let mut sql = format!("SELECT {columns} FROM records WHERE namespace = $1 AND kind = $2");
    if q.turn_id.is_some() {
        sql.push_str(" AND turn_id = $3");
    }
    if q.scope.is_some() {
        sql.push_str(" AND scope = $4");
    }
    if q.id.is_some() {
        sql.push_str(" AND id = $5");
    }
    if q.before_id.is_some() {
        sql.push_str(" AND id < $6");
    }
    if q.metadata_contains.is_some() {
        sql.push_str(" AND json_contains(metadata, $7)");
    }
    if q.after.is_some() {
        sql.push_str(" AND (id, turn_id, scope) < ($8, $9, $10)");
    }
    sql.push_str(" ORDER BY id DESC, turn_id DESC, scope DESC");
    sql
}

/// One page of a list, on one snapshot of the file: steps through the
/// records and reads each one's children and refs as it goes, stopping
/// where the page is full by count or by bytes (at least one entry).
pub fn list(conn: &Connection, q: &RecordQuery) -> rusqlite::Result<(Vec<RecordEntry>, bool)> {
    let snapshot = conn.unchecked_transaction()?;
    let page = if q.split_entries { list_split(conn, q)? } else { list_whole(conn, q)? };
    snapshot.finish()?;
    Ok(page)
}

/// Binds the list statement's `$1..$10`: the query's filters and cursor.
fn bind_list(statement: &mut rusqlite::Statement<'_>, q: &RecordQuery) -> rusqlite::Result<()> {
    let (after_id, after_turn, after_scope) = match &q.after {
        Some(c) => (Some(&c.id), Some(&c.turn_id), Some(&c.scope)),
        None => (None, None, None),
    };
    let values: [&dyn ToSql; 10] = [
        &q.namespace,
        &q.kind,
        &q.turn_id,
        &q.scope,
        &q.id,
        &q.before_id,
        &q.metadata_contains,
        &after_id,
        &after_turn,
        &after_scope,
    ];
    super::bind_numbered(statement, &values)
}

/// A page of whole entries: the first one however large.
fn list_whole(conn: &Connection, q: &RecordQuery) -> rusqlite::Result<(Vec<RecordEntry>, bool)> {
    let mut statement = conn.prepare_cached(&list_sql(q, COLUMNS))?;
    bind_list(&mut statement, q)?;
    let mut rows = statement.raw_query();
    let (mut page, mut used, mut more) = (Vec::new(), 0usize, false);
    while let Some(row) = rows.next()? {
        if page.len() == q.limit as usize {
            more = true;
            break;
        }
        let record = stored(row)?;
        let children = match &q.children_kind {
            Some(kind) => children(conn, &q.namespace, &record.record, kind)?,
            None => Vec::new(),
        };
        let refs = match &q.refs_kind {
            Some(kind) => referenced(conn, &q.namespace, &record.record, kind)?,
            None => Vec::new(),
        };
        let entry = RecordEntry::new(record, children, refs);
        let cost = entry.bytes();
        if !page.is_empty() && used.saturating_add(cost) > q.bytes_max {
            more = true;
            break;
        }
        used = used.saturating_add(cost);
        page.push(entry);
    }
    Ok((page, more))
}

/// A page with `split_entries`: the rest of the entry the last page cut,
/// then whole entries while they fit, and an entry that does not fit a page
/// of its own, first in its page, cut at the budget. Every record is sized
/// before it is read, so nothing beyond the page is read.
fn list_split(conn: &Connection, q: &RecordQuery) -> rusqlite::Result<(Vec<RecordEntry>, bool)> {
    let (mut page, mut used) = (Vec::new(), 0usize);
    if let (Some(after), Some(within)) = (&q.after, &q.within) {
        let entry = continued(conn, q, after, within)?;
        let cut = entry.cut.is_some();
        used = entry.bytes();
        page.push(entry);
        if cut {
            return Ok((page, true));
        }
    }
    let mut statement = conn.prepare_cached(&list_sql(q, &format!("turn_id, scope, id, refs, {RECORD_BYTES}")))?;
    bind_list(&mut statement, q)?;
    let mut rows = statement.raw_query();
    while let Some(row) = rows.next()? {
        if page.len() == q.limit as usize {
            return Ok((page, true));
        }
        let key = RecordCursor { turn_id: row.get(0)?, scope: row.get(1)?, id: row.get(2)? };
        let refs: String = row.get(3)?;
        let bytes = usize::try_from(row.get::<_, i64>(4)?).unwrap_or(usize::MAX);
        let related = related_sizes(conn, q, &key, &refs, &RelatedCursor::start())?;
        let total = related.iter().fold(bytes, |sum, r| sum.saturating_add(r.bytes));
        let fits = used.saturating_add(total) <= q.bytes_max || (page.is_empty() && related.is_empty());
        if !fits && !page.is_empty() {
            return Ok((page, true));
        }
        let Some(record) = record_at(conn, q, &key)? else { continue };
        // Whole if it fits; else first in its page, cut after what fits beside its record.
        let room = if fits { usize::MAX } else { q.bytes_max.saturating_sub(bytes) };
        let (take, cut) = records::fitting_related(&related, room, false, &RelatedCursor::start());
        let mut entry = RecordEntry::new(record, Vec::new(), Vec::new());
        read_related(conn, q, &key, &related[..take], &mut entry)?;
        entry.cut = cut;
        used = used.saturating_add(entry.bytes());
        let cut = entry.cut.is_some();
        page.push(entry);
        if cut {
            return Ok((page, true));
        }
    }
    Ok((page, false))
}

/// The rest of the entry at `after`, cut at `within`: its related records
/// that follow, as many as fit the budget (at least one).
fn continued(
    conn: &Connection,
    q: &RecordQuery,
    after: &RecordCursor,
    within: &RelatedCursor,
) -> rusqlite::Result<RecordEntry> {
    // Its refs as they are now; none if it was deleted since.
    let refs: Option<String> = conn
        .prepare_cached(
            "SELECT refs FROM records WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 AND id = ?5",
        )?
        .query_row(rusqlite::params![q.namespace, after.turn_id, q.kind, after.scope, after.id], |row| row.get(0))
        .optional()?;
    let related = related_sizes(conn, q, after, refs.as_deref().unwrap_or("[]"), within)?;
    let (take, cut) = records::fitting_related(&related, q.bytes_max, true, within);
    let mut entry = RecordEntry::new(records::address(&q.kind, after), Vec::new(), Vec::new());
    entry.continued = true;
    read_related(conn, q, after, &related[..take], &mut entry)?;
    entry.cut = cut;
    Ok(entry)
}

/// The record of the listed kind at `key`, whole.
fn record_at(conn: &Connection, q: &RecordQuery, key: &RecordCursor) -> rusqlite::Result<Option<StoredRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM records WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 AND id = ?5"
    );
    conn.prepare_cached(&sql)?
        .query_row(rusqlite::params![q.namespace, key.turn_id, q.kind, key.scope, key.id], stored)
        .optional()
}

/// The sizes of the related records of the entry at `key` (whose refs are
/// `refs`) that follow `from`: its children by id, then its refs by id.
fn related_sizes(
    conn: &Connection,
    q: &RecordQuery,
    key: &RecordCursor,
    refs: &str,
    from: &RelatedCursor,
) -> rusqlite::Result<Vec<RelatedSize>> {
    let mut sizes = Vec::new();
    for (part, kind) in [(Part::Children, &q.children_kind), (Part::Refs, &q.refs_kind)] {
        let Some(kind) = kind else { continue };
        if part < from.part {
            continue;
        }
        let after = if part == from.part { from.after.as_str() } else { "" };
        let chosen = match part {
            Part::Children => "parent_id = ?5",
            Part::Refs => "id IN (SELECT value FROM json_each(?5))",
        };
        let sql = format!(
            "SELECT id, {RECORD_BYTES} FROM records \
             WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 AND {chosen} AND id > ?6 ORDER BY id"
        );
        let owner: &str = if part == Part::Children { &key.id } else { refs };
        let mut statement = conn.prepare_cached(&sql)?;
        let found =
            statement.query_map(rusqlite::params![q.namespace, key.turn_id, kind, key.scope, owner, after], |row| {
                let bytes: i64 = row.get(1)?;
                Ok(RelatedSize { part, id: row.get(0)?, bytes: usize::try_from(bytes).unwrap_or(usize::MAX) })
            })?;
        for size in found {
            sizes.push(size?);
        }
    }
    Ok(sizes)
}

/// Reads the related records `chosen` (sized by `related_sizes`) of the
/// entry at `key` into `entry`, each part by id.
fn read_related(
    conn: &Connection,
    q: &RecordQuery,
    key: &RecordCursor,
    chosen: &[RelatedSize],
    entry: &mut RecordEntry,
) -> rusqlite::Result<()> {
    for (part, kind) in [(Part::Children, &q.children_kind), (Part::Refs, &q.refs_kind)] {
        let ids: Vec<&str> = chosen.iter().filter(|r| r.part == part).map(|r| r.id.as_str()).collect();
        let Some(kind) = kind.as_ref().filter(|_| !ids.is_empty()) else { continue };
        let sql = format!(
            "SELECT {COLUMNS} FROM records WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 \
               AND id IN (SELECT value FROM json_each(?5)) ORDER BY id"
        );
        let ids = serde_json::to_string(&ids).expect("strings serialize");
        let mut statement = conn.prepare_cached(&sql)?;
        let found = statement.query_map(rusqlite::params![q.namespace, key.turn_id, kind, key.scope, ids], stored)?;
        for record in found {
            entry.attach(part, record?);
        }
    }
    Ok(())
}

/// The records of `kind` whose parent is `of`, by id.
fn children(conn: &Connection, namespace: &str, of: &NewRecord, kind: &str) -> rusqlite::Result<Vec<StoredRecord>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM records \
         WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 AND parent_id = ?5 ORDER BY id"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let found = statement.query_map(rusqlite::params![namespace, of.turn_id, kind, of.scope, of.id], stored)?;
    found.collect()
}

/// The records of `kind` that `of` lists in its refs, by id.
fn referenced(conn: &Connection, namespace: &str, of: &NewRecord, kind: &str) -> rusqlite::Result<Vec<StoredRecord>> {
    if of.refs == "[]" {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT {COLUMNS} FROM records \
         WHERE namespace = ?1 AND turn_id = ?2 AND kind = ?3 AND scope = ?4 \
           AND id IN (SELECT value FROM json_each(?5)) ORDER BY id"
    );
    let mut statement = conn.prepare_cached(&sql)?;
    let found = statement.query_map(rusqlite::params![namespace, of.turn_id, kind, of.scope, of.refs], stored)?;
    found.collect()
}
