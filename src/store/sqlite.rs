//! The embedded SQLite backend: one file in WAL mode with `synchronous=FULL`,
//! so a commit has reached the disk before any write is acknowledged.
//!
//! Writes go through a pool of exactly one connection, because SQLite admits
//! one writer at a time and the group-commit queue in front of it is cheaper
//! than lock contention; reads use a separate pool that WAL lets run beside
//! the writer. A batch is one `BEGIN IMMEDIATE` transaction of multi-row
//! statements.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use std::collections::HashMap;

use sqlx::{QueryBuilder, Sqlite};

use super::batch::{self, CheckpointKey, checkpoint_key};
use super::{Error, Store, Write, Written};
use crate::clock::{Clock, system_now};
use crate::idempotency::{Held, Record};
use crate::model::{
    Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// How long a statement waits for a lock held by another process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request waits for a free connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Write transactions take the write lock at BEGIN, so a transaction that
/// reads before it writes can never fail to upgrade its lock.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// SQLite's default page size, which stepwell keeps.
const PAGE_BYTES: u64 = 4096;

/// A store in one SQLite file.
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    /// The store clock for leases: the sidecar's, as the file is local.
    clock: Clock,
}

impl SqliteStore {
    /// Opens (creating if missing) the file at `path` and migrates it. With
    /// `bytes_max`, the file may not grow past it: a write that would fails
    /// with SQLITE_FULL, as on a full disk.
    pub async fn open(path: &Path, pool_max: u32, bytes_max: Option<u64>, clock: Clock) -> Result<SqliteStore, Error> {
        let mut options = SqliteConnectOptions::new()
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        if let Some(bytes) = bytes_max {
            // The default page size; the cap counts pages.
            options = options.pragma("max_page_count", (bytes / PAGE_BYTES).max(1).to_string());
        }
        // Sidecars on one host may share the file and start together; an
        // exclusive lock beside it lets one create it, switch it to WAL and
        // migrate it while the others wait (the switch to WAL does not wait
        // on SQLite's busy timeout: it fails at once with "database is locked").
        let lock = migration_lock(path).await.map_err(Error::MigrationLock)?;
        // Connections to a local file do not go stale: no ping before each use.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone().create_if_missing(true))
            .await?;
        MIGRATOR.run(&writer).await?;
        drop(lock);
        // A restore page of up to 10000 rows crosses from the connection's
        // thread without waiting on the reader at every 50th row.
        let reader = SqlitePoolOptions::new()
            .max_connections(pool_max)
            .test_before_acquire(false)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.row_buffer_size(1024))
            .await?;
        Ok(SqliteStore { writer, reader, clock })
    }
}

/// Takes the exclusive lock on `DB-migrate.lock`, released when the file drops.
async fn migration_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push("-migrate.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(lock_path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

fn checkpoint_from_row(row: &SqliteRow) -> Result<StoredCheckpoint, sqlx::Error> {
    Ok(StoredCheckpoint {
        checkpoint: NewCheckpoint {
            namespace: row.try_get("namespace")?,
            turn_id: row.try_get("turn_id")?,
            session_id: row.try_get("session_id")?,
            phase: row.try_get("phase")?,
            state: row.try_get("state")?,
            timestamp: row.try_get("ts_ns")?,
            terminal: row.try_get("terminal")?,
            workflow_version: row.try_get("workflow_version")?,
        },
        recorded_at: row.try_get("recorded_at_ns")?,
        seq: row.try_get("seq")?,
    })
}

fn turn_from_row(row: &SqliteRow) -> Result<TurnSummary, sqlx::Error> {
    Ok(TurnSummary {
        turn_id: row.try_get("turn_id")?,
        session_id: row.try_get("session_id")?,
        first_timestamp: row.try_get("first_ts_ns")?,
        last_timestamp: row.try_get("last_ts_ns")?,
        last_phase: row.try_get("last_phase")?,
        checkpoint_count: row.try_get::<i64, _>("checkpoint_count")?.try_into().unwrap_or_default(),
        terminal: row.try_get("terminal")?,
        workflow_version: row.try_get("workflow_version")?,
    })
}

fn decode_error(what: String) -> sqlx::Error {
    sqlx::Error::Decode(what.into())
}

fn record_from_row(row: &SqliteRow) -> Result<Record, sqlx::Error> {
    let held: i64 = row.try_get("held")?;
    let attempt: i64 = row.try_get("attempt")?;
    let lease_token: i64 = row.try_get("lease_token")?;
    Ok(Record {
        namespace: row.try_get("namespace")?,
        key: row.try_get("key")?,
        held: Held::from_code(held).ok_or_else(|| decode_error(format!("unknown held state {held}")))?,
        fingerprint: row.try_get("fingerprint")?,
        attempt: u32::try_from(attempt).map_err(|_| decode_error(format!("attempt {attempt} out of range")))?,
        lease_token: u64::try_from(lease_token).map_err(|_| decode_error(format!("token {lease_token} < 0")))?,
        lease_expires_at: row.try_get("lease_expires_at_ns")?,
        result: row.try_get("result")?,
        error: row.try_get("error")?,
        retention: row.try_get("retention_ns")?,
        created_at: row.try_get("created_at_ns")?,
        updated_at: row.try_get("updated_at_ns")?,
        purge_after: row.try_get("purge_after_ns")?,
    })
}

/// The key's record, unless absent or past its retention (then its key is free).
async fn load_record(
    conn: &mut SqliteConnection,
    namespace: &str,
    key: &str,
    now: UnixNanos,
) -> Result<Option<Record>, sqlx::Error> {
    let row = sqlx::query("SELECT * FROM idempotency WHERE namespace = ?1 AND key = ?2")
        .bind(namespace)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.as_ref().map(record_from_row).transpose()?.filter(|r| !r.is_purgeable(now)))
}

/// Inserts the batch's new checkpoints in one statement; answers the `seq` of
/// each key it inserted (a key already stored is skipped).
async fn insert_checkpoints<'b>(
    conn: &mut SqliteConnection,
    unique: &[&'b NewCheckpoint],
    recorded_at: UnixNanos,
) -> Result<HashMap<CheckpointKey<'b>, i64>, sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new(
        "INSERT INTO checkpoints \
           (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) ",
    );
    query.push_values(unique, |mut row, cp| {
        row.push_bind(&cp.namespace)
            .push_bind(&cp.turn_id)
            .push_bind(&cp.phase)
            .push_bind(cp.timestamp)
            .push_bind(&cp.session_id)
            .push_bind(&cp.state[..])
            .push_bind(cp.terminal)
            .push_bind(&cp.workflow_version)
            .push_bind(recorded_at);
    });
    query.push(
        " ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING RETURNING namespace, turn_id, phase, ts_ns, seq",
    );
    let rows = query.build().fetch_all(&mut *conn).await?;
    let index: HashMap<CheckpointKey<'_>, usize> =
        unique.iter().enumerate().map(|(i, cp)| (checkpoint_key(cp), i)).collect();
    let mut inserted = HashMap::with_capacity(rows.len());
    for row in rows {
        let (namespace, turn_id, phase): (String, String, String) =
            (row.try_get("namespace")?, row.try_get("turn_id")?, row.try_get("phase")?);
        let ts: i64 = row.try_get("ts_ns")?;
        let &i = index
            .get(&(namespace.as_str(), turn_id.as_str(), phase.as_str(), ts))
            .ok_or_else(|| decode_error("RETURNING named a checkpoint the batch did not insert".into()))?;
        inserted.insert(checkpoint_key(unique[i]), row.try_get("seq")?);
    }
    Ok(inserted)
}

/// The stored rows of checkpoints the batch found already there.
async fn fetch_checkpoints<'b>(
    conn: &mut SqliteConnection,
    keys: &[CheckpointKey<'b>],
) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, sqlx::Error> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let mut query =
        QueryBuilder::<Sqlite>::new("SELECT * FROM checkpoints WHERE (namespace, turn_id, phase, ts_ns) IN (");
    query.push_values(keys, |mut row, key| {
        row.push_bind(key.0).push_bind(key.1).push_bind(key.2).push_bind(key.3);
    });
    query.push(")");
    let rows = query.build().fetch_all(&mut *conn).await?;
    let mut found = HashMap::with_capacity(rows.len());
    for row in rows {
        let stored = checkpoint_from_row(&row)?;
        let c = &stored.checkpoint;
        let key = keys
            .iter()
            .find(|k| **k == (c.namespace.as_str(), c.turn_id.as_str(), c.phase.as_str(), c.timestamp))
            .copied()
            .ok_or_else(|| decode_error("fetched a checkpoint the batch did not ask for".into()))?;
        found.insert(key, stored);
    }
    Ok(found)
}

/// The records of the batch's keys, past retention or not.
async fn load_records(
    conn: &mut SqliteConnection,
    keys: &[(&str, &str)],
) -> Result<HashMap<(String, String), Record>, sqlx::Error> {
    let mut query = QueryBuilder::<Sqlite>::new("SELECT * FROM idempotency WHERE (namespace, key) IN (");
    query.push_values(keys, |mut row, (namespace, key)| {
        row.push_bind(*namespace).push_bind(*key);
    });
    query.push(")");
    let rows = query.build().fetch_all(&mut *conn).await?;
    rows.iter().map(|row| record_from_row(row).map(|r| ((r.namespace.clone(), r.key.clone()), r))).collect()
}

/// Writes whole records, replacing the rows of their keys.
async fn save_records(conn: &mut SqliteConnection, records: &[Record]) -> Result<(), sqlx::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut query = QueryBuilder::<Sqlite>::new(
        "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                  result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) ",
    );
    let mut tokens = Vec::with_capacity(records.len());
    for r in records {
        tokens.push(
            i64::try_from(r.lease_token).map_err(|_| decode_error(format!("token {} too large", r.lease_token)))?,
        );
    }
    query.push_values(records.iter().zip(tokens), |mut row, (r, token)| {
        row.push_bind(&r.namespace)
            .push_bind(&r.key)
            .push_bind(r.held.code())
            .push_bind(&r.fingerprint[..])
            .push_bind(i64::from(r.attempt))
            .push_bind(token)
            .push_bind(r.lease_expires_at)
            .push_bind(&r.result[..])
            .push_bind(&r.error)
            .push_bind(r.retention)
            .push_bind(r.created_at)
            .push_bind(r.updated_at)
            .push_bind(r.purge_after);
    });
    query.push(
        " ON CONFLICT (namespace, key) DO UPDATE SET \
           held = excluded.held, fingerprint = excluded.fingerprint, attempt = excluded.attempt, \
           lease_token = excluded.lease_token, lease_expires_at_ns = excluded.lease_expires_at_ns, \
           result = excluded.result, error = excluded.error, retention_ns = excluded.retention_ns, \
           created_at_ns = excluded.created_at_ns, updated_at_ns = excluded.updated_at_ns, \
           purge_after_ns = excluded.purge_after_ns",
    );
    query.build().execute(&mut *conn).await?;
    Ok(())
}

/// `count` fresh fencing tokens from the store-wide sequence, in increasing order.
async fn lease_tokens(conn: &mut SqliteConnection, count: usize) -> Result<Vec<u64>, sqlx::Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let count = u64::try_from(count).map_err(|_| decode_error("too many tokens".into()))?;
    let last: i64 = sqlx::query_scalar("UPDATE lease_tokens SET last = last + ?1 WHERE id = 1 RETURNING last")
        .bind(count as i64)
        .fetch_one(&mut *conn)
        .await?;
    let last = u64::try_from(last).map_err(|_| decode_error(format!("token {last} < 0")))?;
    Ok((last + 1 - count..=last).collect())
}

/// Deletes a turn's checkpoints and summary; answers how many checkpoints went.
async fn delete_turn(conn: &mut SqliteConnection, namespace: &str, turn_id: &str) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM checkpoints WHERE namespace = ?1 AND turn_id = ?2")
        .bind(namespace)
        .bind(turn_id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM turns WHERE namespace = ?1 AND turn_id = ?2")
        .bind(namespace)
        .bind(turn_id)
        .execute(&mut *conn)
        .await?;
    Ok(deleted)
}

/// A restored checkpoint, from the restore query's columns by position; the
/// namespace and turn are the query's.
fn page_row(row: &SqliteRow, q: &RestoreQuery) -> Result<StoredCheckpoint, sqlx::Error> {
    Ok(StoredCheckpoint {
        seq: row.try_get(0)?,
        checkpoint: NewCheckpoint {
            namespace: q.namespace.clone(),
            turn_id: q.turn_id.clone(),
            session_id: row.try_get(1)?,
            phase: row.try_get(2)?,
            timestamp: row.try_get(3)?,
            state: row.try_get(4)?,
            terminal: row.try_get(5)?,
            workflow_version: row.try_get(6)?,
        },
        recorded_at: row.try_get(7)?,
    })
}

/// Splits `limit + 1` fetched rows into a page and whether more follow.
fn page<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

/// This backend's statements for `batch::run`, on one connection.
struct Statements<'c> {
    conn: &'c mut SqliteConnection,
    clock: &'c Clock,
}

#[async_trait]
impl batch::Statements for Statements<'_> {
    async fn lock_keys(&mut self, _keys: &[(&str, &str)]) -> Result<UnixNanos, sqlx::Error> {
        // SQLite has one writer, and this one holds the write lock already.
        Ok(self.clock.now())
    }

    async fn insert_checkpoints<'b>(
        &mut self,
        unique: &[&'b NewCheckpoint],
        recorded_at: UnixNanos,
    ) -> Result<HashMap<CheckpointKey<'b>, i64>, sqlx::Error> {
        insert_checkpoints(self.conn, unique, recorded_at).await
    }

    async fn fetch_checkpoints<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, sqlx::Error> {
        fetch_checkpoints(self.conn, keys).await
    }

    async fn load_records(&mut self, keys: &[(&str, &str)]) -> Result<HashMap<(String, String), Record>, sqlx::Error> {
        load_records(self.conn, keys).await
    }

    async fn lease_tokens(&mut self, count: usize) -> Result<Vec<u64>, sqlx::Error> {
        lease_tokens(self.conn, count).await
    }

    async fn save_records(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        save_records(self.conn, records).await
    }

    async fn delete_turn(&mut self, namespace: &str, turn_id: &str) -> Result<u64, sqlx::Error> {
        delete_turn(self.conn, namespace, turn_id).await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn write(&self, batch: Vec<Write>) -> Result<Written, Error> {
        let recorded_at = system_now();
        if batch::needs_transaction(&batch) {
            let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
            let statements = &mut Statements { conn: &mut tx, clock: &self.clock };
            let answers = batch::run(statements, batch, recorded_at).await?;
            tx.commit().await?;
            Ok(answers)
        } else {
            // One statement: the trigger keeps the turns.
            let mut conn = self.writer.acquire().await?;
            batch::run(&mut Statements { conn: &mut conn, clock: &self.clock }, batch, recorded_at).await
        }
    }

    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        let sql = if q.newest_first {
            "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
             FROM checkpoints \
             WHERE namespace = ?1 AND turn_id = ?2 AND (?3 IS NULL OR phase = ?3) AND (ts_ns, seq) < (?4, ?5) \
             ORDER BY ts_ns DESC, seq DESC LIMIT ?6"
        } else {
            "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
             FROM checkpoints \
             WHERE namespace = ?1 AND turn_id = ?2 AND (?3 IS NULL OR phase = ?3) AND (ts_ns, seq) > (?4, ?5) \
             ORDER BY ts_ns, seq LIMIT ?6"
        };
        let start = match (q.after, q.newest_first) {
            (Some(cursor), _) => cursor,
            (None, false) => Cursor { timestamp: i64::MIN, seq: i64::MIN },
            (None, true) => Cursor { timestamp: i64::MAX, seq: i64::MAX },
        };
        let rows = sqlx::query(sql)
            .bind(&q.namespace)
            .bind(&q.turn_id)
            .bind(q.phase.as_deref())
            .bind(start.timestamp)
            .bind(start.seq)
            .bind(i64::from(q.limit) + 1)
            .fetch_all(&self.reader)
            .await?;
        let checkpoints = rows.iter().map(|row| page_row(row, q)).collect::<Result<Vec<_>, _>>()?;
        Ok(page(checkpoints, q.limit))
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        let row = sqlx::query("SELECT * FROM turns WHERE namespace = ?1 AND turn_id = ?2")
            .bind(namespace)
            .bind(turn_id)
            .fetch_optional(&self.reader)
            .await?;
        Ok(row.as_ref().map(turn_from_row).transpose()?)
    }

    async fn list_turns(&self, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error> {
        let terminal = match q.status {
            TurnStatus::Open => Some(false),
            TurnStatus::Terminal => Some(true),
            TurnStatus::Any => None,
        };
        let rows = sqlx::query(
            "SELECT * FROM turns \
             WHERE namespace = ?1 AND turn_id > ?2 AND (?3 IS NULL OR terminal = ?3) \
               AND (?4 IS NULL OR session_id = ?4) AND (?5 IS NULL OR last_ts_ns < ?5) \
             ORDER BY turn_id LIMIT ?6",
        )
        .bind(&q.namespace)
        .bind(q.after_turn_id.as_deref().unwrap_or(""))
        .bind(terminal)
        .bind(q.session_id.as_deref())
        .bind(q.updated_before)
        .bind(i64::from(q.limit) + 1)
        .fetch_all(&self.reader)
        .await?;
        let turns = rows.iter().map(turn_from_row).collect::<Result<Vec<_>, _>>()?;
        Ok(page(turns, q.limit))
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(Record, UnixNanos)>, Error> {
        let mut conn = self.reader.acquire().await?;
        let now = self.clock.now();
        Ok(load_record(&mut conn, namespace, key, now).await?.map(|record| (record, now)))
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        let purged = sqlx::query(
            "DELETE FROM idempotency WHERE rowid IN \
               (SELECT rowid FROM idempotency WHERE purge_after_ns <= ?1 LIMIT ?2)",
        )
        .bind(self.clock.now())
        .bind(i64::from(limit))
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(purged)
    }

    async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}
