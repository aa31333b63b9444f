//! SQLite's statements for a batch, on the writer's connection, as multi-row
//! `VALUES` lists built per batch; a deletion chunk's; and running a batch
//! in one `BEGIN IMMEDIATE` transaction when it needs one. What a batch
//! means is `batch`'s; this is only its SQL.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use rusqlite::Connection;
use rusqlite::types::ToSql;

use super::*;
use crate::domain::clock::Clock;
use crate::domain::keys::KeyRecord;
use crate::domain::memory::{Final, ItemsTouch, Path};
use crate::domain::model::{Cursor, NewCheckpoint, StoredCheckpoint, UnixNanos};
use crate::domain::records::{Address, NewRecord, RecordDelete};
use crate::store::batch::{self, CheckpointKey, Statements, TurnChunks};
use crate::store::rows::{self, CheckpointRow, InsertedRow, KeyDbRow, decode_error};
use crate::store::sql::{DELETE_CHUNK, DELETE_TURN, OLDEST_AFTER, SHRINK_TURN};
use crate::store::{DbError, Error, Write};

/// A batch's connection, with the store's clock: the writer's, inside
/// `write`, on the committer thread.
pub(super) struct Batch<'c> {
    pub(super) conn: &'c mut Connection,
    pub(super) clock: &'c Clock,
}

/// SQLite's batch statements: multi-row `VALUES` lists built per batch.
#[async_trait]
impl Statements for Batch<'_> {
    async fn lock_keys(&mut self, _keys: &[(&str, &str)], tokens: usize) -> Result<(UnixNanos, Vec<u64>), DbError> {
        // SQLite has one writer, and this one holds the write lock already.
        let now = self.clock.now();
        if tokens == 0 {
            return Ok((now, Vec::new()));
        }
        let count = i64::try_from(tokens).map_err(|_| decode_error("too many tokens".into()))?;
        let last: i64 = self
            .conn
            .prepare_cached("UPDATE lease_tokens SET last = last + ?1 WHERE id = 1 RETURNING last")
            .and_then(|mut statement| statement.query_row([count], |row| row.get(0)))
            .map_err(sqlite)?;
        let last = u64::try_from(last).map_err(|_| decode_error(format!("token {last} < 0")))?;
        Ok((now, (last + 1 - tokens as u64..=last).collect()))
    }

    /// One statement; the trigger keeps the turns.
    async fn insert_checkpoints<'b>(
        &mut self,
        unique: &[&'b NewCheckpoint],
        recorded_at: UnixNanos,
    ) -> Result<HashMap<CheckpointKey<'b>, i64>, DbError> {
        let sql = values_sql(
            "INSERT INTO checkpoints \
               (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) VALUES ",
            9,
            unique.len(),
            " ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING RETURNING namespace, turn_id, phase, ts_ns, seq",
        );
        let mut params: Vec<&dyn ToSql> = Vec::with_capacity(unique.len() * 9);
        for cp in unique {
            params.extend([
                &cp.namespace as &dyn ToSql,
                &cp.turn_id,
                &cp.phase,
                &cp.timestamp,
                &cp.session_id,
                &cp.state,
                &cp.terminal,
                &cp.workflow_version,
                &recorded_at,
            ]);
        }
        let rows = query_all(self.conn, &sql, &params, InsertedRow::from_sqlite)?;
        rows::inserted_seqs(unique, rows)
    }

    async fn fetch_stored<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, DbError> {
        let sql = values_sql(
            "SELECT * FROM checkpoints WHERE (namespace, turn_id, phase, ts_ns) IN (VALUES ",
            4,
            keys.len(),
            ")",
        );
        let mut params: Vec<&dyn ToSql> = Vec::with_capacity(keys.len() * 4);
        for (namespace, turn_id, phase, ts) in keys {
            params.extend([namespace as &dyn ToSql, turn_id, phase, ts]);
        }
        let rows = query_all(self.conn, &sql, &params, CheckpointRow::from_sqlite)?;
        rows::found_checkpoints(keys, rows)
    }

    async fn load_keys(&mut self, keys: &[(&str, &str)]) -> Result<HashMap<(String, String), KeyRecord>, DbError> {
        let sql = values_sql("SELECT * FROM idempotency WHERE (namespace, key) IN (VALUES ", 2, keys.len(), ")");
        let mut params: Vec<&dyn ToSql> = Vec::with_capacity(keys.len() * 2);
        for (namespace, key) in keys {
            params.extend([namespace as &dyn ToSql, key]);
        }
        rows::records_by_key(query_all(self.conn, &sql, &params, KeyDbRow::from_sqlite)?)
    }

    async fn save_keys(&mut self, records: &[KeyRecord]) -> Result<(), DbError> {
        if records.is_empty() {
            return Ok(());
        }
        let sql = values_sql(
            "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                      result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) VALUES ",
            13,
            records.len(),
            " ON CONFLICT (namespace, key) DO UPDATE SET \
               held = excluded.held, fingerprint = excluded.fingerprint, attempt = excluded.attempt, \
               lease_token = excluded.lease_token, lease_expires_at_ns = excluded.lease_expires_at_ns, \
               result = excluded.result, error = excluded.error, retention_ns = excluded.retention_ns, \
               created_at_ns = excluded.created_at_ns, updated_at_ns = excluded.updated_at_ns, \
               purge_after_ns = excluded.purge_after_ns",
        );
        let tokens = rows::stored_tokens(records)?;
        let fixed: Vec<(i64, i64)> = records.iter().map(|r| (r.held.code(), i64::from(r.attempt))).collect();
        let mut params: Vec<&dyn ToSql> = Vec::with_capacity(records.len() * 13);
        for ((r, token), (held, attempt)) in records.iter().zip(&tokens).zip(&fixed) {
            params.extend([
                &r.namespace as &dyn ToSql,
                &r.key,
                held,
                &r.fingerprint,
                attempt,
                token,
                &r.lease_expires_at,
                &r.result,
                &r.error,
                &r.retention,
                &r.created_at,
                &r.updated_at,
                &r.purge_after,
            ]);
        }
        let mut statement = self.conn.prepare_cached(&sql).map_err(sqlite)?;
        statement.execute(&params[..]).map_err(sqlite)?;
        Ok(())
    }

    async fn put_records(&mut self, rows: &[(&str, &NewRecord)], recorded_at: UnixNanos) -> Result<(), DbError> {
        records::put(self.conn, rows, recorded_at).map_err(sqlite)
    }

    async fn stored_addresses(
        &mut self,
        _turns: &[(&str, &str)],
        wanted: &[Address],
    ) -> Result<HashSet<Address>, DbError> {
        records::stored_addresses(self.conn, wanted).map_err(sqlite)
    }

    async fn delete_records(&mut self, delete: &RecordDelete) -> Result<u64, DbError> {
        records::delete(self.conn, delete).map_err(sqlite)
    }

    async fn copy_turn(
        &mut self,
        namespace: &str,
        source: &str,
        target: &str,
        recorded_at: UnixNanos,
    ) -> Result<u64, DbError> {
        records::copy(self.conn, namespace, source, target, recorded_at).map_err(sqlite)
    }

    async fn write_items(&mut self, finals: &[Final<'_>], recorded_at: UnixNanos) -> Result<(), DbError> {
        memory::write(self.conn, finals, recorded_at, self.clock.now()).map_err(sqlite)
    }

    async fn touch_items(&mut self, touch: &ItemsTouch) -> Result<(), DbError> {
        memory::touch(self.conn, touch, self.clock.now()).map_err(sqlite)
    }

    async fn delete_items(&mut self, namespace: &str, prefix: &Path) -> Result<u64, DbError> {
        memory::delete_under(self.conn, namespace, prefix).map_err(sqlite)
    }
}

/// A deletion chunk's statements. Its transaction holds SQLite's write lock
/// from its start (`BEGIN IMMEDIATE`), which keeps every other writer out
/// already, so locking the turn is reading it.
#[async_trait]
impl TurnChunks for Batch<'_> {
    async fn lock_turn(&mut self, namespace: &str, turn_id: &str) -> Result<Option<(i64, i64, bool)>, DbError> {
        let found = query_numbered(
            self.conn,
            "SELECT checkpoint_count, last_ts_ns, terminal FROM turns WHERE namespace = $1 AND turn_id = $2",
            &[&namespace, &turn_id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .map_err(sqlite)?;
        Ok(found.into_iter().next())
    }

    async fn delete_oldest(
        &mut self,
        namespace: &str,
        turn_id: &str,
        from: Cursor,
        rows: u32,
    ) -> Result<Vec<(i64, i64)>, DbError> {
        let values: [&dyn ToSql; 5] = [&namespace, &turn_id, &from.timestamp, &from.seq, &rows];
        query_numbered(self.conn, DELETE_CHUNK, &values, |row| Ok((row.get(0)?, row.get(1)?))).map_err(sqlite)
    }

    async fn oldest_after(&mut self, namespace: &str, turn_id: &str, after: Cursor) -> Result<Option<i64>, DbError> {
        let values: [&dyn ToSql; 4] = [&namespace, &turn_id, &after.timestamp, &after.seq];
        let found = query_numbered(self.conn, OLDEST_AFTER, &values, |row| row.get(0)).map_err(sqlite)?;
        Ok(found.into_iter().next())
    }

    async fn shrink_turn(
        &mut self,
        namespace: &str,
        turn_id: &str,
        deleted: i64,
        oldest_gone: i64,
        oldest_left: i64,
    ) -> Result<(), DbError> {
        let values: [&dyn ToSql; 5] = [&namespace, &turn_id, &deleted, &oldest_gone, &oldest_left];
        execute_numbered(self.conn, SHRINK_TURN, &values).map_err(sqlite)?;
        Ok(())
    }

    async fn delete_summary(&mut self, namespace: &str, turn_id: &str) -> Result<(), DbError> {
        execute_numbered(self.conn, DELETE_TURN, &[&namespace, &turn_id]).map_err(sqlite)?;
        Ok(())
    }
}

/// Runs a statement of its own, cached (`BEGIN IMMEDIATE`, `COMMIT`, `ROLLBACK`).
pub(super) fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

impl SqliteStore {
    /// On the calling thread (the committer's): a batch of appends alone is
    /// one statement, atomic and durable by itself (the trigger keeps the
    /// turns); any other batch is a transaction that takes the write lock at
    /// BEGIN, so it can never fail to upgrade its lock.
    pub(super) async fn run_batch(&self, batch: &[Write], recorded_at: UnixNanos) -> Result<batch::Ran, Error> {
        let mut guard = self.writer.lock().await;
        let conn = guard.as_mut().ok_or(Error::WriterStopped)?;
        if !batch::needs_transaction(batch) {
            return batch::run(&mut Batch { conn, clock: &self.clock }, batch, recorded_at).await;
        }
        run(conn, "BEGIN IMMEDIATE").map_err(sqlite)?;
        let ran = batch::run(&mut Batch { conn: &mut *conn, clock: &self.clock }, batch, recorded_at).await;
        let committed = ran.and_then(|ran| {
            run(conn, "COMMIT").map_err(sqlite)?;
            Ok(ran)
        });
        if committed.is_err() && !conn.is_autocommit() {
            // Nothing of a failed batch stays: its transaction is undone.
            if let Err(error) = run(conn, "ROLLBACK") {
                tracing::warn!(%error, "could not roll back a failed batch");
            }
        }
        committed
    }
}
