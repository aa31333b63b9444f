//! A store's tables opened for a move (`stepwell migrate`, `export`,
//! `import`), with the sidecars stopped: connections of the move's own (not
//! a sidecar's store), the rows of checkpoints, turns, idempotency keys,
//! records (RecordService) and waits (WaitService) read in key order, in chunks bounded by rows and
//! by bytes (each row's size counted by `RowBytes`), the idempotent inserts,
//! the fencing sequence, and every table read whole in the canonical order
//! a move's tally hashes. `ops::moving` drives a move through this API and
//! never sees SQL or a driver.
//!
//! The reads are the same SQL on both backends and run here; what differs
//! (the inserts, the fence) is in `sqlite` and `postgres`.

mod postgres;
mod rows;
mod sqlite;

use std::str::FromStr;
use std::time::Duration;

use futures::{Stream, TryStreamExt};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

pub use rows::{
    BulkKeyRow, BulkTurnRow, BulkWaitKey, BulkWaitRow, CheckpointRow, RecordKey, RowBytes, StoredRecordRow,
};

use super::{Database, DbError, Options};
use crate::domain::clock::Clock;

/// Why a move's work on a store failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A statement or a connection failed.
    #[error("database: {0}")]
    Database(#[from] DbError),
    /// The target could not be created, migrated or accepted as a store.
    #[error("opening the target store: {0}")]
    Open(#[source] super::Error),
    /// The store, or a row for it, cannot be used as it is.
    #[error("{0}")]
    Unusable(String),
}

/// How long opening a store waits on pools and locks.
const WAIT: Duration = Duration::from_secs(30);

/// How much one chunk may hold: at most `rows` rows, and no more once they
/// reach `bytes` (as `RowBytes` counts them; a chunk always holds one row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkSize {
    pub rows: usize,
    pub bytes: usize,
}

/// The tables a move counts to show its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Checkpoints,
    Keys,
    Records,
    Waits,
    /// Memory items (MemoryService), which a move does not copy yet.
    MemoryItems,
}

impl Table {
    fn name(self) -> &'static str {
        match self {
            Table::Checkpoints => "checkpoints",
            Table::Keys => "idempotency",
            Table::Records => "records",
            Table::Waits => "waits",
            Table::MemoryItems => "memory_items",
        }
    }
}

const CHECKPOINT_COLUMNS: &str =
    "seq, namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns";
const TURN_COLUMNS: &str = "namespace, turn_id, session_id, first_ts_ns, last_ts_ns, last_phase, checkpoint_count, \
                            terminal, workflow_version, session_ts_ns, version_ts_ns";
const KEY_COLUMNS: &str = "namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, result, \
                           error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns";
const RECORD_KEY: &str = "namespace, turn_id, kind, scope, id";
const SQLITE_RECORD_COLUMNS: &str =
    "namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, refs, recorded_at_ns";
/// Postgres's jsonb read as text, so both backends give the same row type.
const PG_RECORD_COLUMNS: &str = "namespace, turn_id, kind, scope, id, parent_id, content_type, payload, \
                                 CAST(metadata AS text) AS metadata, CAST(refs AS text) AS refs, recorded_at_ns";

const WAIT_KEY: &str = "namespace, turn_id, name";
/// Every column of `waits`, the same text on both backends.
const WAIT_COLUMNS: &str = "namespace, turn_id, name, status, metadata, created_at_ns, expire_at_ns, resolve_at_ns, \
                            due_at_ns, settled_at_ns, payload, content_type, settled_by, settled_span";

/// A store's tables, through connections of the move's own.
pub enum Tables {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same query on either backend; `$body` is built from
/// `sqlx::query*` and ends in a fetch method taking the pool.
macro_rules! on_both {
    ($tables:expr, |$pool:ident| $body:expr) => {
        match $tables {
            Tables::Sqlite($pool) => $body,
            Tables::Postgres($pool) => $body,
        }
    };
}

/// Takes rows from `rows` until the chunk holds `size.bytes` or the stream
/// ends, always at least one row; the rest of the stream is dropped unread
/// (the query's LIMIT bounds it by `size.rows`).
async fn take_chunk<R: RowBytes>(
    mut rows: impl Stream<Item = Result<R, sqlx::Error>> + Unpin,
    size: ChunkSize,
) -> Result<Vec<R>, Error> {
    let (mut chunk, mut bytes) = (Vec::new(), 0);
    while bytes < size.bytes.max(1)
        && let Some(row) = rows.try_next().await.map_err(DbError::sqlx)?
    {
        bytes += row.bytes();
        chunk.push(row);
    }
    Ok(chunk)
}

/// Calls `each` with every row `rows` yields, in order.
async fn each_row<R>(
    mut rows: impl Stream<Item = Result<R, sqlx::Error>> + Unpin,
    mut each: impl FnMut(R),
) -> Result<(), Error> {
    while let Some(row) = rows.try_next().await.map_err(DbError::sqlx)? {
        each(row);
    }
    Ok(())
}

impl Tables {
    /// Opens an existing store to read. A SQLite file that does not exist is
    /// an error rather than created empty.
    pub async fn open_source(database: &Database) -> Result<Tables, Error> {
        match database {
            Database::Sqlite { path } => {
                if !path.exists() {
                    return Err(Error::Unusable(format!("no SQLite store at {}", path.display())));
                }
                let options = SqliteConnectOptions::new().filename(path).create_if_missing(false).busy_timeout(WAIT);
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await;
                Ok(Tables::Sqlite(pool.map_err(DbError::sqlx)?))
            }
            Database::Postgres { url } => {
                let options = PgConnectOptions::from_str(url).map_err(DbError::sqlx)?;
                let options = options.application_name("stepwell-migrate");
                let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await;
                Ok(Tables::Postgres(pool.map_err(DbError::sqlx)?))
            }
        }
    }

    /// Opens the store to write, creating and migrating it as a sidecar
    /// would (so a Postgres that may lose commits is refused here too).
    pub async fn open_target(database: &Database) -> Result<Tables, Error> {
        let options = Options {
            database: database.clone(),
            pool_max: 1,
            acquire_timeout: WAIT,
            sqlite_busy_timeout: WAIT,
            migration_lock_timeout: WAIT,
            postgres_statement_timeout: Duration::ZERO,
            postgres_lock_timeout: WAIT,
            sqlite_bytes_max: None,
            unsafe_accept_nondurable_postgres: false,
            unsafe_sqlite_synchronous_normal: false,
            clock: Clock::system(),
            postgres: super::PostgresMode::default(),
        };
        drop(super::open(&options).await.map_err(Error::Open)?);
        match database {
            Database::Sqlite { path } => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(false)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(WAIT);
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await;
                Ok(Tables::Sqlite(pool.map_err(DbError::sqlx)?))
            }
            Database::Postgres { url } => {
                let options = PgConnectOptions::from_str(url).map_err(DbError::sqlx)?;
                let options = options.application_name("stepwell-migrate").options([("synchronous_commit", "on")]);
                let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await;
                Ok(Tables::Postgres(pool.map_err(DbError::sqlx)?))
            }
        }
    }

    pub async fn close(&self) {
        on_both!(self, |pool| pool.close().await)
    }

    /// The backend's name, as an export's header gives it.
    pub fn backend(&self) -> &'static str {
        match self {
            Tables::Sqlite(_) => "sqlite",
            Tables::Postgres(_) => "postgres",
        }
    }

    /// Rows in `table`.
    pub async fn count(&self, table: Table) -> Result<u64, Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {}", table.name()));
        let count: i64 = on_both!(self, |pool| sqlx::query_scalar(sql).fetch_one(pool).await).map_err(DbError::sqlx)?;
        Ok(count.max(0) as u64)
    }

    /// The last fencing token the store issued (0 before the first).
    pub async fn fence(&self) -> Result<i64, Error> {
        let fence = match self {
            Tables::Sqlite(pool) => sqlite::fence(pool).await,
            Tables::Postgres(pool) => postgres::fence(pool).await,
        };
        Ok(fence.map_err(DbError::sqlx)?)
    }

    /// The greatest token any stored key holds.
    pub async fn max_token(&self) -> Result<i64, Error> {
        let sql = "SELECT coalesce(max(lease_token), 0) FROM idempotency";
        Ok(on_both!(self, |pool| sqlx::query_scalar(sql).fetch_one(pool).await).map_err(DbError::sqlx)?)
    }

    /// Moves the fencing sequence to at least `last`, never back.
    pub async fn advance_fence(&self, last: i64) -> Result<(), Error> {
        let advanced = match self {
            Tables::Sqlite(pool) => sqlite::advance_fence(pool, last).await,
            Tables::Postgres(pool) => postgres::advance_fence(pool, last).await,
        };
        Ok(advanced.map_err(DbError::sqlx)?)
    }

    /// The next chunk of checkpoints after `seq`, in insertion order, at
    /// most `size` big.
    pub async fn checkpoints_after(&self, seq: i64, size: ChunkSize) -> Result<Vec<CheckpointRow>, Error> {
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE seq > $1 ORDER BY seq LIMIT $2"
        ));
        on_both!(self, |pool| {
            take_chunk(sqlx::query_as(sql).bind(seq).bind(size.rows as i64).fetch(pool), size).await
        })
    }

    /// The next chunk of idempotency keys after the key `after`, in key
    /// order, as bounded as `checkpoints_after`.
    pub async fn keys_after(
        &self,
        after: Option<&(String, String)>,
        size: ChunkSize,
    ) -> Result<Vec<BulkKeyRow>, Error> {
        let (namespace, key) = after.cloned().unwrap_or_default();
        let filter = if after.is_some() { "(namespace, key) > ($1, $2)" } else { "$1 = $2" };
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {KEY_COLUMNS} FROM idempotency WHERE {filter} ORDER BY namespace, key LIMIT $3"
        ));
        on_both!(self, |pool| {
            let rows = sqlx::query_as(sql).bind(namespace).bind(key).bind(size.rows as i64).fetch(pool);
            take_chunk(rows, size).await
        })
    }

    /// The columns of `records` as `StoredRecordRow` reads them.
    fn record_columns(&self) -> &'static str {
        match self {
            Tables::Sqlite(_) => SQLITE_RECORD_COLUMNS,
            Tables::Postgres(_) => PG_RECORD_COLUMNS,
        }
    }

    /// The next chunk of records (RecordService) after the key `after`, as
    /// bounded as `checkpoints_after`, in key order: bytewise on both
    /// backends (SQLite's BINARY collation, the "C" collation of Postgres's
    /// columns).
    pub async fn records_after(
        &self,
        after: Option<&RecordKey>,
        size: ChunkSize,
    ) -> Result<Vec<StoredRecordRow>, Error> {
        let (namespace, turn_id, kind, scope, id) = after.cloned().unwrap_or_default();
        let filter = if after.is_some() {
            format!("({RECORD_KEY}) > ($1, $2, $3, $4, $5)")
        } else {
            "$1 = $2 AND $3 = $4 AND $4 = $5".to_owned()
        };
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM records WHERE {filter} ORDER BY {RECORD_KEY} LIMIT $6",
            self.record_columns()
        ));
        on_both!(self, |pool| {
            let rows = sqlx::query_as(sql)
                .bind(namespace)
                .bind(turn_id)
                .bind(kind)
                .bind(scope)
                .bind(id)
                .bind(size.rows as i64)
                .fetch(pool);
            take_chunk(rows, size).await
        })
    }

    /// The next chunk of waits (WaitService) after the key `after`, as
    /// bounded as `checkpoints_after`, in key order: bytewise on both
    /// backends, as `records_after`.
    pub async fn waits_after(&self, after: Option<&BulkWaitKey>, size: ChunkSize) -> Result<Vec<BulkWaitRow>, Error> {
        let (namespace, turn_id, name) = after.cloned().unwrap_or_default();
        let filter =
            if after.is_some() { format!("({WAIT_KEY}) > ($1, $2, $3)") } else { "$1 = $2 AND $2 = $3".to_owned() };
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {WAIT_COLUMNS} FROM waits WHERE {filter} ORDER BY {WAIT_KEY} LIMIT $4"
        ));
        on_both!(self, |pool| {
            let rows = sqlx::query_as(sql).bind(namespace).bind(turn_id).bind(name).bind(size.rows as i64).fetch(pool);
            take_chunk(rows, size).await
        })
    }

    /// Inserts checkpoints in the order given, skipping keys already stored,
    /// and keeps the summaries of their turns, in one transaction. Returns
    /// how many were inserted.
    pub async fn insert_checkpoints(&self, rows: &[CheckpointRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = match self {
            Tables::Sqlite(pool) => sqlite::insert_checkpoints(pool, rows).await,
            Tables::Postgres(pool) => postgres::insert_checkpoints(pool, rows).await,
        };
        Ok(inserted.map_err(DbError::sqlx)?)
    }

    /// Inserts idempotency keys not stored yet, in one transaction. Returns
    /// how many were inserted.
    pub async fn insert_keys(&self, rows: &[BulkKeyRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = match self {
            Tables::Sqlite(pool) => sqlite::insert_keys(pool, rows, utf8_errors(rows)?).await,
            Tables::Postgres(pool) => postgres::insert_keys(pool, rows).await,
        };
        Ok(inserted.map_err(DbError::sqlx)?)
    }

    /// Inserts records (RecordService) not stored yet, in one transaction.
    /// Returns how many were inserted.
    pub async fn insert_records(&self, rows: &[StoredRecordRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = match self {
            Tables::Sqlite(pool) => sqlite::insert_records(pool, rows).await,
            Tables::Postgres(pool) => postgres::insert_records(pool, rows).await,
        };
        Ok(inserted.map_err(DbError::sqlx)?)
    }

    /// Inserts waits (WaitService) not stored yet, in one transaction; a
    /// wait the target holds is left as it is, whatever its status. Returns
    /// how many were inserted.
    pub async fn insert_waits(&self, rows: &[BulkWaitRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        let inserted = match self {
            Tables::Sqlite(pool) => sqlite::insert_waits(pool, rows).await,
            Tables::Postgres(pool) => postgres::insert_waits(pool, rows).await,
        };
        Ok(inserted.map_err(DbError::sqlx)?)
    }

    /// Calls `each` with every checkpoint in Restore's order: namespace,
    /// turn, timestamp, insertion.
    pub async fn each_checkpoint(&self, each: impl FnMut(CheckpointRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY namespace, turn_id, ts_ns, seq"
        ));
        on_both!(self, |pool| each_row(sqlx::query_as::<_, CheckpointRow>(sql).fetch(pool), each).await)
    }

    /// Calls `each` with every turn summary in (namespace, turn_id) order.
    pub async fn each_turn(&self, each: impl FnMut(BulkTurnRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {TURN_COLUMNS} FROM turns ORDER BY namespace, turn_id"));
        on_both!(self, |pool| each_row(sqlx::query_as::<_, BulkTurnRow>(sql).fetch(pool), each).await)
    }

    /// Calls `each` with every idempotency key in (namespace, key) order.
    pub async fn each_key(&self, each: impl FnMut(BulkKeyRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {KEY_COLUMNS} FROM idempotency ORDER BY namespace, key"));
        on_both!(self, |pool| each_row(sqlx::query_as::<_, BulkKeyRow>(sql).fetch(pool), each).await)
    }

    /// Calls `each` with every record (RecordService) in key order.
    pub async fn each_record(&self, each: impl FnMut(StoredRecordRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {} FROM records ORDER BY {RECORD_KEY}", self.record_columns()));
        on_both!(self, |pool| each_row(sqlx::query_as::<_, StoredRecordRow>(sql).fetch(pool), each).await)
    }

    /// Calls `each` with every wait (WaitService) in key order.
    pub async fn each_wait(&self, each: impl FnMut(BulkWaitRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {WAIT_COLUMNS} FROM waits ORDER BY {WAIT_KEY}"));
        on_both!(self, |pool| each_row(sqlx::query_as::<_, BulkWaitRow>(sql).fetch(pool), each).await)
    }
}

/// Each key's error as the UTF-8 text SQLite keeps it as.
fn utf8_errors(rows: &[BulkKeyRow]) -> Result<Vec<String>, Error> {
    rows.iter()
        .map(|r| {
            String::from_utf8(r.error.clone())
                .map_err(|_| Error::Unusable(format!("the error of key {:?} is not UTF-8", r.key)))
        })
        .collect()
}
