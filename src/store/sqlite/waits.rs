//! SQLite's statements for waits (WaitService): the shared SQL of
//! `store::waits`, run on the writer's connection inside a batch's
//! transaction, and the reads on a read connection.

use async_trait::async_trait;
use rusqlite::Connection;
use rusqlite::types::ToSql;

use super::{Batch, query_numbered, sqlite};
use crate::domain::model::UnixNanos;
use crate::domain::waits::{NewWait, Settle, Wait, WaitKey, WaitQuery, due_at};
use crate::store::DbError;
use crate::store::waits::{
    COUNT_TURN_WAITS, DELETE_TURN_WAITS, FIRE_DUE_SQLITE, GET_WAIT, INSERT_SETTLED_WAIT, INSERT_WAIT, LIST_WAITS,
    NEXT_DUE, SETTLE_WAIT, WaitDbRow, WaitStatements, into_waits,
};

/// The settled waits among the keys of the JSON array `$1`, each found
/// through the primary key.
const SETTLED_WAITS: &str = "SELECT w.namespace, w.turn_id, w.name, w.status, w.metadata, w.created_at_ns, \
       w.expire_at_ns, w.resolve_at_ns, w.settled_at_ns, w.payload, w.content_type, w.settled_by, w.settled_span \
     FROM json_each($1) AS k JOIN waits AS w \
       ON w.namespace = json_extract(k.value, '$[0]') AND w.turn_id = json_extract(k.value, '$[1]') \
      AND w.name = json_extract(k.value, '$[2]') \
     WHERE w.status <> 1";

/// Runs a statement that returns waits.
fn waits(conn: &Connection, sql: &str, values: &[&dyn ToSql]) -> Result<Vec<Wait>, DbError> {
    into_waits(query_numbered(conn, sql, values, WaitDbRow::from_sqlite).map_err(sqlite)?)
}

/// Runs a statement that returns at most one wait.
fn one(conn: &Connection, sql: &str, values: &[&dyn ToSql]) -> Result<Option<Wait>, DbError> {
    Ok(waits(conn, sql, values)?.into_iter().next())
}

/// A wait, on any connection.
pub(super) fn get(conn: &Connection, key: &WaitKey) -> Result<Option<Wait>, DbError> {
    one(conn, GET_WAIT, &[&key.namespace, &key.turn_id, &key.name])
}

/// Those of `keys` that are settled, in one statement: the keys are bound
/// as one JSON array of [namespace, turn_id, name] arrays.
pub(super) fn settled(conn: &Connection, keys: &[WaitKey]) -> Result<Vec<Wait>, DbError> {
    let triples: Vec<[&str; 3]> =
        keys.iter().map(|key| [key.namespace.as_str(), key.turn_id.as_str(), key.name.as_str()]).collect();
    let keys = serde_json::to_string(&triples).expect("strings serialize");
    waits(conn, SETTLED_WAITS, &[&keys])
}

/// A page of waits, and whether more follow.
pub(super) fn list(conn: &Connection, q: &WaitQuery) -> Result<(Vec<Wait>, bool), DbError> {
    let (after_turn, after_name) = q.after.clone().unwrap_or_default();
    let status = q.status.map(|status| status.code());
    let limit = i64::from(q.limit) + 1;
    let values: [&dyn ToSql; 7] =
        [&q.namespace, &after_turn, &after_name, &q.turn_id, &status, &q.resolve_before, &limit];
    let mut page = waits(conn, LIST_WAITS, &values)?;
    let more = page.len() > q.limit as usize;
    page.truncate(q.limit as usize);
    Ok((page, more))
}

/// When the next pending wait falls due.
pub(super) fn next_due(conn: &Connection) -> Result<Option<UnixNanos>, DbError> {
    let found: Vec<Option<i64>> = query_numbered(conn, NEXT_DUE, &[], |row| row.get(0)).map_err(sqlite)?;
    Ok(found.into_iter().next().flatten())
}

#[async_trait]
impl WaitStatements for Batch<'_> {
    async fn get_wait(&mut self, key: &WaitKey) -> Result<Option<Wait>, DbError> {
        get(self.conn, key)
    }

    async fn count_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<i64, DbError> {
        let found =
            query_numbered(self.conn, COUNT_TURN_WAITS, &[&namespace, &turn_id], |row| row.get(0)).map_err(sqlite)?;
        Ok(found.into_iter().next().unwrap_or(0))
    }

    async fn insert_wait(&mut self, new: &NewWait, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        let (key, due, empty) = (&new.key, due_at(new.resolve_at, new.expire_at), Vec::<u8>::new());
        let values: [&dyn ToSql; 9] = [
            &key.namespace,
            &key.turn_id,
            &key.name,
            &new.metadata,
            &at,
            &new.expire_at,
            &new.resolve_at,
            &due,
            &empty,
        ];
        one(self.conn, INSERT_WAIT, &values)
    }

    async fn settle_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        one(self.conn, SETTLE_WAIT, &settlement(settle, &at, &settle.status.code()))
    }

    async fn insert_settled_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError> {
        one(self.conn, INSERT_SETTLED_WAIT, &settlement(settle, &at, &settle.status.code()))
    }

    async fn fire_due(&mut self, now: UnixNanos, limit: u32) -> Result<Vec<Wait>, DbError> {
        waits(self.conn, FIRE_DUE_SQLITE, &[&now, &now, &limit])
    }

    async fn delete_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<u64, DbError> {
        let deleted = super::execute_numbered(self.conn, DELETE_TURN_WAITS, &[&namespace, &turn_id]).map_err(sqlite)?;
        Ok(deleted as u64)
    }
}

/// A settlement's parameters, as `SETTLE_WAIT` and `INSERT_SETTLED_WAIT` take them.
fn settlement<'a>(settle: &'a Settle, at: &'a UnixNanos, status: &'a i64) -> [&'a dyn ToSql; 9] {
    let key = &settle.key;
    let (payload, content_type, by) = (&settle.payload, &settle.content_type, &settle.settled_by);
    [&key.namespace, &key.turn_id, &key.name, status, at, payload, content_type, by, &settle.span]
}
