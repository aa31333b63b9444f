//! The embedded SQLite backend: one file in WAL mode with `synchronous=FULL`,
//! so a commit has reached the disk before any write is acknowledged
//! (`--unsafe-sqlite-synchronous-normal` gives that up, for the fault suite).
//!
//! Writes go through one connection, because SQLite admits one writer at a
//! time and the group-commit queue in front of it is cheaper than lock
//! contention. `write` runs its statements on the thread that calls it
//! (`writes_block`), so the writer gives it a committer thread of its own:
//! a request's write crosses one thread to be committed and one back to be
//! answered, and no statement crosses any. Reads run on a small pool of
//! connections beside the writer (WAL lets them), each read on a blocking
//! thread, its rows decoded where they are read. A batch is one
//! `BEGIN IMMEDIATE` transaction of multi-row statements. The connections
//! are rusqlite's, and their errors become `DbError`s here (`sqlite`); the
//! migrations are sqlx's, run once at open. What SQLite does as Postgres
//! does (the SQL of reads and of deletion chunks, and the rows) is in `sql`
//! and `rows`.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fs::TryLockError;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::types::ToSql;
use rusqlite::{Connection, OpenFlags, Statement};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{Mutex, Semaphore};

use super::batch::{self, CheckpointKey, Statements, TurnChunks};
use super::cause::{migration_failed, sqlite_cause};
use super::console::Value;
use super::rows::{self, CheckpointRow, InsertedRow, KeyDbRow, PageRow, TurnDbRow, decode_error};
use super::sql::{self, DELETE_CHUNK, DELETE_TURN, Dialect, OLDEST_AFTER, SHRINK_TURN, TURN};
use super::{Cause, DbError, Error, ExpiredQuery, IdleQuery, NotCommitted, Options, Store, Write, Written};
use crate::domain::clock::{Clock, system_now};
use crate::domain::keys::KeyRecord;
use crate::domain::model::{
    Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};
use crate::domain::records::{Address, NewRecord, RecordDelete, RecordEntry, RecordQuery};
use crate::domain::waits::{Wait, WaitKey, WaitQuery};
use crate::observe::metrics::StoreState;

mod console;
mod records;
mod waits;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Rows of each index `ANALYZE` reads, so that gathering the planner's
/// statistics stays short on a large store.
const ANALYSIS_LIMIT: u32 = 1000;

/// SQLite's default page size, which stepwell keeps.
const PAGE_BYTES: u64 = 4096;

/// Prepared statements each connection keeps: a batch's multi-row
/// statements differ by their row count, and the reads by their filters.
const STATEMENT_CACHE: usize = 128;

/// A page of a turn's checkpoints in restore order, each row led by its
/// size (what Restore's byte budget counts); `?3` is the phase, if only one,
/// and `(?4, ?5)` the cursor. `restore` reads the rows one by one and stops
/// where the page is full, so no limit is needed here.
macro_rules! restore_page {
    ($order:literal, $after:literal) => {
        concat!(
            "SELECT octet_length(state) + octet_length(phase) + octet_length(session_id) \
                      + octet_length(workflow_version), \
                    seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
             FROM checkpoints \
             WHERE namespace = $1 AND turn_id = $2 AND ($3 IS NULL OR phase = $3) AND (ts_ns, seq) ",
            $after,
            " ($4, $5) ORDER BY ts_ns",
            $order,
            ", seq",
            $order
        )
    };
}

const RESTORE_OLDEST_FIRST: &str = restore_page!("", ">");
const RESTORE_NEWEST_FIRST: &str = restore_page!(" DESC", "<");

/// A store in one SQLite file.
pub struct SqliteStore {
    /// The one connection writes go through; `None` once closed.
    writer: Arc<Mutex<Option<Connection>>>,
    readers: Arc<Readers>,
    /// The store clock for leases is the sidecar's, as the file is local.
    clock: Clock,
    /// The database file, whose size and its write-ahead log's a scrape reports.
    path: PathBuf,
}

/// How each connection to the file is opened.
#[derive(Clone)]
struct Settings {
    path: PathBuf,
    busy_timeout: Duration,
    /// The writer's cap on the file, in pages (`max_page_count`).
    max_pages: Option<u64>,
    /// `synchronous` on every connection: FULL, or NORMAL when unsafe.
    synchronous: &'static str,
}

impl Settings {
    /// The writer's connection to the existing, migrated file, capped at
    /// `max_pages` if a cap was given.
    fn connect_writer(&self) -> rusqlite::Result<Connection> {
        let conn = self.connect()?;
        if let Some(pages) = self.max_pages {
            conn.pragma_update(None, "max_page_count", i64::try_from(pages).unwrap_or(i64::MAX))?;
        }
        Ok(conn)
    }

    /// A reader's connection to the existing, migrated file, which may only read.
    fn connect_reader(&self) -> rusqlite::Result<Connection> {
        let conn = self.connect()?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(conn)
    }

    /// A connection with what the writer and the readers both set.
    fn connect(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(&self.path, flags)?;
        conn.busy_timeout(self.busy_timeout)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.pragma_update(None, "synchronous", self.synchronous)?;
        conn.pragma_update(None, "foreign_keys", false)?;
        conn.pragma_update(None, "analysis_limit", ANALYSIS_LIMIT)?;
        records::register_functions(&conn)?;
        Ok(conn)
    }
}

/// The read connections: opened as needed, at most `--pool-max` at once,
/// each used by one read at a time on a blocking thread.
struct Readers {
    idle: std::sync::Mutex<Vec<Connection>>,
    permits: Arc<Semaphore>,
    settings: Settings,
    acquire_timeout: Duration,
}

/// `synchronous` for every connection: FULL, or NORMAL (with a warning at
/// start) under `--unsafe-sqlite-synchronous-normal`, where a commit is
/// acknowledged before the WAL is synced.
fn synchronous(store: &Options) -> (SqliteSynchronous, &'static str) {
    if store.unsafe_sqlite_synchronous_normal {
        tracing::warn!(
            "UNSAFE: SQLite runs with synchronous=NORMAL: a power loss or an OS crash may lose acknowledged writes"
        );
        (SqliteSynchronous::Normal, "NORMAL")
    } else {
        (SqliteSynchronous::Full, "FULL")
    }
}

impl SqliteStore {
    /// Opens (creating if missing) the file at `path` and migrates it. With
    /// `sqlite_bytes_max`, the file may not grow past it: a write that would
    /// fails with SQLITE_FULL, as on a full disk.
    pub async fn open(path: &Path, store: &Options) -> Result<SqliteStore, Error> {
        let max_pages = store.sqlite_bytes_max.map(|bytes| (bytes / PAGE_BYTES).max(1));
        let (synchronous, pragma) = synchronous(store);
        let mut options = SqliteConnectOptions::new()
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(synchronous)
            .busy_timeout(store.sqlite_busy_timeout)
            .foreign_keys(false);
        if let Some(pages) = max_pages {
            options = options.pragma("max_page_count", pages.to_string());
        }
        // Sidecars on one host may share the file and start together; an
        // exclusive lock beside it lets one create it, switch it to WAL and
        // migrate it while the others wait (the switch to WAL does not wait
        // on SQLite's busy timeout: it fails at once with "database is locked").
        let lock = migration_lock(path, store.migration_lock_timeout).await?;
        // SQLite gives the -wal and -shm files the main file's permissions,
        // so creating it private first keeps all three private.
        create_private(path).await.map_err(Error::CreateFile)?;
        let migrating = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(store.acquire_timeout)
            .connect_with(options.create_if_missing(true))
            .await
            .map_err(DbError::sqlx)?;
        let migrated = MIGRATOR.run(&migrating).await;
        migrating.close().await;
        migrated.map_err(migration_failed)?;
        drop(lock);
        let settings =
            Settings { path: path.to_owned(), busy_timeout: store.sqlite_busy_timeout, max_pages, synchronous: pragma };
        let opening = settings.clone();
        let writer = tokio::task::spawn_blocking(move || {
            let conn = opening.connect_writer()?;
            // The planner's statistics, gathered at open from at most
            // `ANALYSIS_LIMIT` rows of each index, so that ListTurns' filters
            // read their indexes; the sweeper refreshes them while serving. A
            // store that cannot take them now (full, say) still opens.
            if let Err(error) = conn.execute_batch("ANALYZE") {
                tracing::warn!(%error, "could not gather the query planner's statistics; the sweeper will try again");
            }
            Ok::<_, rusqlite::Error>(conn)
        })
        .await
        .map_err(|_| crashed())?
        .map_err(sqlite)?;
        let readers = Readers {
            idle: std::sync::Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(store.pool_max as usize)),
            settings,
            acquire_timeout: store.acquire_timeout,
        };
        Ok(SqliteStore {
            writer: Arc::new(Mutex::new(Some(writer))),
            readers: Arc::new(readers),
            clock: store.clock.clone(),
            path: path.to_owned(),
        })
    }

    /// Runs `read` on a read connection, on a blocking thread; waits for a
    /// connection at most `--pool-acquire-timeout-ms`.
    async fn read<T, F>(&self, read: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        let readers = &self.readers;
        let permit = match readers.permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => tokio::time::timeout(readers.acquire_timeout, readers.permits.clone().acquire_owned())
                .await
                .map_err(|_| readers_timed_out())?
                .map_err(|_| closed())?,
        };
        let readers = readers.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let idle = readers.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).pop();
            let conn = match idle {
                Some(conn) => conn,
                None => readers.settings.connect_reader().map_err(sqlite)?,
            };
            let answer = read(&conn);
            readers.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(conn);
            answer
        })
        .await
        .map_err(|_| crashed())?;
        Ok(answer?)
    }

    /// Runs `work` on the writer's connection, on a blocking thread: the
    /// sweeper's writes, which bypass the queue.
    async fn on_writer<T, F>(&self, work: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let writer = self.writer.clone();
        let answer = tokio::task::spawn_blocking(move || {
            let guard = writer.blocking_lock();
            let conn = guard.as_ref().ok_or_else(closed)?;
            work(conn).map_err(sqlite)
        })
        .await
        .map_err(|_| crashed())?;
        Ok(answer?)
    }
}

/// Takes the exclusive lock on `DB-migrate.lock`, released when the file
/// drops. Another sidecar holding it is waited for, trying again with
/// backoff, for at most `timeout`; then start-up fails, naming the lock.
async fn migration_lock(path: &Path, timeout: Duration) -> Result<std::fs::File, Error> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push("-migrate.lock");
    let lock_path = PathBuf::from(lock_path);
    let opened = lock_path.clone();
    let file = tokio::task::spawn_blocking(move || {
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(PRIVATE).open(opened)
    })
    .await
    .map_err(std::io::Error::other)
    .and_then(|opened| opened)
    .map_err(Error::MigrationLock)?;
    let started = Instant::now();
    let mut backoff = Duration::from_millis(5);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(TryLockError::WouldBlock) if started.elapsed() < timeout => {
                tokio::time::sleep(backoff.min(timeout.saturating_sub(started.elapsed()))).await;
                backoff = (backoff * 2).min(Duration::from_millis(250));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(Error::MigrationLockTimeout { lock: lock_path.display().to_string(), waited: timeout });
            }
            Err(TryLockError::Error(error)) => return Err(Error::MigrationLock(error)),
        }
    }
}

/// Owner read and write only: the store's files hold every namespace's data.
const PRIVATE: u32 = 0o600;

/// Creates the database file, empty and private, unless it exists (an
/// existing file keeps the permissions its owner gave it). SQLite takes an
/// empty file as a new database.
async fn create_private(path: &Path) -> std::io::Result<()> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        match std::fs::OpenOptions::new().create_new(true).write(true).mode(PRIVATE).open(&path) {
            Ok(_) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
            Err(error) => Err(error),
        }
    })
    .await
    .map_err(std::io::Error::other)?
}

/// What SQLite's failure says in the logs: rusqlite's message, worded as
/// a database's answer.
#[derive(Debug, thiserror::Error)]
#[error("error returned from database: {0}")]
struct Failure(String);

/// rusqlite's error as the `DbError` the batch code and `store::Error`
/// speak: a value that does not decode is a decode error; anything else is
/// the database's, its extended result code naming the cause (13,
/// SQLITE_FULL, is what `Error::is_full` looks for).
fn sqlite(error: rusqlite::Error) -> DbError {
    match error {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => decode_error(error.to_string()),
        rusqlite::Error::SqliteFailure(failure, _) => {
            let code = failure.extended_code;
            DbError::new(sqlite_cause(code), Some(code.to_string()), Failure(error.to_string()))
        }
        other => DbError::new(Cause::DatabaseError, None, Failure(other.to_string())),
    }
}

/// No read connection came free within `--pool-acquire-timeout-ms`.
fn readers_timed_out() -> DbError {
    DbError::new(Cause::PoolAcquireTimeout, None, "pool timed out while waiting for an open connection")
}

/// The store was closed: its connections are gone.
fn closed() -> DbError {
    DbError::new(Cause::ShuttingDown, None, "attempted to acquire a connection on a closed pool")
}

/// The blocking thread a statement ran on panicked or was cancelled.
fn crashed() -> DbError {
    DbError::new(Cause::ShuttingDown, None, "attempted to communicate with a crashed background worker")
}

/// The names SQLite gives `$1`, `$2`, … parameters.
const NUMBERED: [&str; 12] = ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12"];

/// Binds `values` to a statement written with `$N` parameters (the shared
/// statements), each by its name, since a statement may name `$8` before `$7`.
fn bind_numbered(statement: &mut Statement<'_>, values: &[&dyn ToSql]) -> rusqlite::Result<()> {
    for (i, value) in values.iter().enumerate() {
        let name: Cow<'_, str> =
            NUMBERED.get(i).map_or_else(|| Cow::Owned(format!("${}", i + 1)), |n| Cow::Borrowed(*n));
        if let Some(index) = statement.parameter_index(&name)? {
            statement.raw_bind_parameter(index, value)?;
        }
    }
    Ok(())
}

/// Runs a `$N` statement and decodes every row it returns.
fn query_numbered<T>(
    conn: &Connection,
    sql: &str,
    values: &[&dyn ToSql],
    decode: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    let mut rows = statement.raw_query();
    let mut found = Vec::new();
    while let Some(row) = rows.next()? {
        found.push(decode(row)?);
    }
    Ok(found)
}

/// Runs a `$N` statement that returns no rows; answers the rows it changed.
fn execute_numbered(conn: &Connection, sql: &str, values: &[&dyn ToSql]) -> rusqlite::Result<usize> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    statement.raw_execute()
}

/// `head`, then `rows` groups of `columns` `?` parameters, then `tail`.
fn values_sql(head: &str, columns: usize, rows: usize, tail: &str) -> String {
    let group = format!("({})", vec!["?"; columns].join(", "));
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * (group.len() + 2));
    sql.push_str(head);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&group);
    }
    sql.push_str(tail);
    sql
}

/// Runs a `?` statement with `params` and decodes every row it returns.
fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
    decode: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, DbError> {
    let mut statement = conn.prepare_cached(sql).map_err(sqlite)?;
    let rows = statement.query_map(params, |row| decode(row)).map_err(sqlite)?;
    rows.collect::<rusqlite::Result<Vec<T>>>().map_err(sqlite)
}

/// A batch's connection, with the store's clock: the writer's, inside
/// `write`, on the committer thread.
struct Batch<'c> {
    conn: &'c mut Connection,
    clock: &'c Clock,
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
fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([])?;
    Ok(())
}

impl SqliteStore {
    /// On the calling thread (the committer's): a batch of appends alone is
    /// one statement, atomic and durable by itself (the trigger keeps the
    /// turns); any other batch is a transaction that takes the write lock at
    /// BEGIN, so it can never fail to upgrade its lock.
    async fn run_batch(&self, batch: &[Write], recorded_at: UnixNanos) -> Result<batch::Ran, Error> {
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

#[async_trait]
impl Store for SqliteStore {
    /// Runs the batch on the calling thread (`run_batch`), and hands it back if it did not commit.
    async fn attempt(&self, batch: Vec<Write>) -> Result<Written, NotCommitted> {
        let recorded_at = system_now();
        match self.run_batch(&batch, recorded_at).await {
            Ok(ran) => Ok(ran.answers(batch, recorded_at)),
            Err(error) => Err(NotCommitted { error, batch }),
        }
    }

    fn writes_block(&self) -> bool {
        true
    }

    /// Steps through the turn's rows in restore order and stops where the
    /// page is full, by count or by bytes (at least one row always): each
    /// row's size is read from its record before its state is, so the row
    /// that ends the page is never copied, and no query runs twice.
    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        let q = q.clone();
        self.read(move |conn| {
            let start = q.start();
            let sql = if q.newest_first { RESTORE_NEWEST_FIRST } else { RESTORE_OLDEST_FIRST };
            let overhead = q.row_overhead();
            let limit = q.limit as usize;
            let values: [&dyn ToSql; 5] = [&q.namespace, &q.turn_id, &q.phase, &start.timestamp, &start.seq];
            let step = || -> rusqlite::Result<(Vec<StoredCheckpoint>, bool)> {
                let mut statement = conn.prepare_cached(sql)?;
                bind_numbered(&mut statement, &values)?;
                let mut rows = statement.raw_query();
                let (mut page, mut used) = (Vec::new(), 0usize);
                while let Some(row) = rows.next()? {
                    let cost = usize::try_from(row.get::<_, i64>(0)?).unwrap_or(usize::MAX).saturating_add(overhead);
                    if page.len() == limit || (!page.is_empty() && used.saturating_add(cost) > q.bytes_max) {
                        return Ok((page, true));
                    }
                    used = used.saturating_add(cost);
                    page.push(PageRow::from_sqlite(row)?.into_checkpoint(&q));
                }
                Ok((page, false))
            };
            step().map_err(sqlite)
        })
        .await
    }

    async fn list_records(&self, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error> {
        let q = q.clone();
        self.read(move |conn| records::list(conn, &q).map_err(sqlite)).await
    }

    async fn idle_record_turns(&self, q: &IdleQuery) -> Result<Vec<(String, String)>, Error> {
        let q = q.clone();
        self.read(move |conn| records::idle_turns(conn, &q).map_err(sqlite)).await
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        let (namespace, turn_id) = (namespace.to_owned(), turn_id.to_owned());
        self.read(move |conn| {
            let rows = query_numbered(conn, TURN, &[&namespace, &turn_id], TurnDbRow::from_sqlite).map_err(sqlite)?;
            rows.into_iter().next().map(TurnSummary::try_from).transpose()
        })
        .await
    }

    async fn list_turns(&self, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error> {
        let q = q.clone();
        self.read(move |conn| {
            let after = q.after_turn_id.as_deref().unwrap_or("");
            let limit = i64::from(q.limit) + 1;
            let mut values: Vec<&dyn ToSql> = vec![&q.namespace, &after];
            match q.status {
                TurnStatus::Open => values.push(&false),
                TurnStatus::Terminal => values.push(&true),
                TurnStatus::Any => {}
            }
            if let Some(session_id) = &q.session_id {
                values.push(session_id);
            }
            if let Some(updated_before) = &q.updated_before {
                values.push(updated_before);
            }
            values.push(&limit);
            let rows = query_numbered(conn, sql::list_turns(Dialect::Sqlite, &q), &values, TurnDbRow::from_sqlite)
                .map_err(sqlite)?;
            let turns = rows.into_iter().map(TurnSummary::try_from).collect::<Result<Vec<_>, _>>()?;
            Ok(rows::page(turns, q.limit))
        })
        .await
    }

    async fn expired_turns(&self, q: &ExpiredQuery) -> Result<Vec<(String, String)>, Error> {
        let q = q.clone();
        self.read(move |conn| {
            let limit = i64::from(q.limit);
            let mut values: Vec<&dyn ToSql> = vec![&q.expired.terminal, &q.expired.last_before];
            if let Some(namespace) = &q.namespace {
                values.push(namespace);
            } else {
                values.extend(q.except.iter().map(|namespace| namespace as &dyn ToSql));
            }
            values.push(&limit);
            query_numbered(conn, &sql::expired_turns(Dialect::Sqlite, &q), &values, |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .map_err(sqlite)
        })
        .await
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        let clock = self.clock.clone();
        self.read(move |conn| {
            let now = clock.now();
            let rows = query_all(
                conn,
                "SELECT * FROM idempotency WHERE namespace = ?1 AND key = ?2",
                &[&namespace, &key],
                KeyDbRow::from_sqlite,
            )?;
            let record = rows.into_iter().next().map(KeyRecord::try_from).transpose()?;
            Ok(record.filter(|r| !r.is_purgeable(now)).map(|record| (record, now)))
        })
        .await
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        let now = self.clock.now();
        let purged = self
            .on_writer(move |conn| {
                conn.prepare_cached(
                    "DELETE FROM idempotency WHERE rowid IN \
                       (SELECT rowid FROM idempotency WHERE purge_after_ns <= ?1 LIMIT ?2)",
                )?
                .execute(rusqlite::params![now, i64::from(limit)])
            })
            .await?;
        Ok(purged as u64)
    }

    /// Gathers the planner's statistics again for the tables that grew or
    /// shrank much since they were last gathered (SQLite decides), reading
    /// a bounded sample of each index: usually nothing to do.
    async fn optimize(&self) -> Result<(), Error> {
        self.on_writer(|conn| conn.execute_batch("PRAGMA optimize")).await
    }

    async fn get_wait(&self, key: &WaitKey) -> Result<Option<Wait>, Error> {
        let key = key.clone();
        self.read(move |conn| waits::get(conn, &key)).await
    }

    /// One statement on one read connection: sidecars on one host may share
    /// the file, and a settlement through another is seen here.
    async fn settled_waits(&self, keys: &[WaitKey]) -> Result<Vec<Wait>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let keys = keys.to_vec();
        self.read(move |conn| waits::settled(conn, &keys)).await
    }

    async fn list_waits(&self, q: &WaitQuery) -> Result<(Vec<Wait>, bool), Error> {
        let q = q.clone();
        self.read(move |conn| waits::list(conn, &q)).await
    }

    async fn next_due(&self) -> Result<Option<UnixNanos>, Error> {
        self.read(waits::next_due).await
    }

    async fn ping(&self) -> Result<(), Error> {
        self.read(|conn| conn.query_row("SELECT 1", [], |_| Ok(())).map_err(sqlite)).await
    }

    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    async fn read_rows(&self, statement: &crate::store::console::Statement) -> Result<Vec<Vec<Value>>, Error> {
        let (statement, now) = (statement.clone(), self.clock.now());
        self.read(move |conn| console::read_rows(conn, &statement, now)).await
    }

    /// The sizes of the database file and of its write-ahead log (0 when
    /// absent, as between checkpoints that truncate it).
    async fn figures(&self) -> StoreState {
        let size = |path: PathBuf| async move { tokio::fs::metadata(path).await.map_or(0, |m| m.len()) };
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        StoreState::Sqlite { database_bytes: size(self.path.clone()).await, wal_bytes: size(wal.into()).await }
    }

    /// Closes the readers, then the writer, the last connection, which
    /// checkpoints the write-ahead log into the file.
    async fn close(&self) {
        self.readers.permits.close();
        let idle = std::mem::take(&mut *self.readers.idle.lock().unwrap_or_else(|poisoned| poisoned.into_inner()));
        let writer = self.writer.lock().await.take();
        let _ = tokio::task::spawn_blocking(move || {
            drop(idle);
            drop(writer);
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Cause;

    #[test]
    fn a_write_lock_held_past_the_busy_timeout_is_contention() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("busy.db");
        let holder = Connection::open(&path).expect("open the file");
        holder.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x); BEGIN IMMEDIATE").expect("take the lock");
        let waiter = Connection::open(&path).expect("open it again");
        waiter.busy_timeout(Duration::from_millis(1)).expect("a short busy timeout");
        let busy = run(&waiter, "BEGIN IMMEDIATE").expect_err("the lock is held");
        let error = Error::Database(sqlite(busy));
        assert_eq!(error.cause(), Cause::SqliteBusy, "{error}");
        assert!(error.cause().is_contention());
        assert_eq!(error.code().as_deref(), Some("5"), "SQLITE_BUSY's result code is logged");
    }

    #[test]
    fn the_unsafe_flag_sets_synchronous_normal_and_its_absence_full() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("sync.db");
        Connection::open(&path).expect("create the file").execute_batch("PRAGMA journal_mode = WAL").expect("WAL");
        // PRAGMA synchronous reads 1 for NORMAL and 2 for FULL.
        for (unsafe_normal, expected) in [(false, 2), (true, 1)] {
            let options = Options {
                database: crate::store::Database::Sqlite { path: path.clone() },
                pool_max: 1,
                acquire_timeout: Duration::from_secs(1),
                sqlite_busy_timeout: Duration::from_secs(1),
                migration_lock_timeout: Duration::from_secs(1),
                postgres_statement_timeout: Duration::ZERO,
                postgres_lock_timeout: Duration::from_secs(1),
                sqlite_bytes_max: None,
                unsafe_accept_nondurable_postgres: false,
                unsafe_sqlite_synchronous_normal: unsafe_normal,
                clock: crate::domain::clock::Clock::system(),
                postgres: crate::store::PostgresMode::default(),
            };
            let (_, pragma) = synchronous(&options);
            let settings = Settings {
                path: path.clone(),
                busy_timeout: Duration::from_secs(1),
                max_pages: None,
                synchronous: pragma,
            };
            for conn in [settings.connect_writer(), settings.connect_reader()] {
                let conn = conn.expect("connect");
                let level: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0)).expect("read synchronous");
                assert_eq!(level, expected, "unsafe_sqlite_synchronous_normal = {unsafe_normal}");
            }
        }
    }
}
