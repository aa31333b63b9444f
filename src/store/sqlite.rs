//! The embedded SQLite backend: one file in WAL mode with `synchronous=FULL`,
//! so a commit has reached the disk before any write is acknowledged.
//!
//! Writes go through a pool of exactly one connection, because SQLite admits
//! one writer at a time and the group-commit queue in front of it is cheaper
//! than lock contention; reads use a separate pool that WAL lets run beside
//! the writer. A batch is one `BEGIN IMMEDIATE` transaction of multi-row
//! statements. What SQLite does as Postgres does is in `shared` and `rows`.

use std::collections::HashMap;
use std::fs::TryLockError;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{QueryBuilder, SqlSafeStr, Sqlite};

use super::batch::{self, CheckpointKey};
use super::rows::{self, CheckpointRow, InsertedRow, RecordRow, decode_error};
use super::shared::{Backend, Conn, Dialect, LockTurn, Pools};
use super::{Error, Options};
use crate::idempotency::Record;
use crate::metrics::StoreState;
use crate::model::{NewCheckpoint, StoredCheckpoint, UnixNanos};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// Rows of each index `ANALYZE` reads, so that gathering the planner's
/// statistics stays short on a large store.
const ANALYSIS_LIMIT: &str = "1000";

/// SQLite's default page size, which stepwell keeps.
const PAGE_BYTES: u64 = 4096;

/// A store in one SQLite file.
pub struct SqliteStore {
    /// The store clock for leases is the sidecar's, as the file is local.
    pools: Pools<Sqlite>,
    /// The database file, whose size and its write-ahead log's a scrape reports.
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if missing) the file at `path` and migrates it. With
    /// `sqlite_bytes_max`, the file may not grow past it: a write that would
    /// fails with SQLITE_FULL, as on a full disk.
    pub async fn open(path: &Path, store: &Options) -> Result<SqliteStore, Error> {
        let mut options = SqliteConnectOptions::new()
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(store.sqlite_busy_timeout)
            .foreign_keys(false)
            .pragma("analysis_limit", ANALYSIS_LIMIT);
        if let Some(bytes) = store.sqlite_bytes_max {
            // The default page size; the cap counts pages.
            options = options.pragma("max_page_count", (bytes / PAGE_BYTES).max(1).to_string());
        }
        // Sidecars on one host may share the file and start together; an
        // exclusive lock beside it lets one create it, switch it to WAL and
        // migrate it while the others wait (the switch to WAL does not wait
        // on SQLite's busy timeout: it fails at once with "database is locked").
        let lock = migration_lock(path, store.migration_lock_timeout).await?;
        // SQLite gives the -wal and -shm files the main file's permissions,
        // so creating it private first keeps all three private.
        create_private(path).await.map_err(Error::CreateFile)?;
        // Connections to a local file do not go stale: no ping before each use.
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .test_before_acquire(false)
            .acquire_timeout(store.acquire_timeout)
            .connect_with(options.clone().create_if_missing(true))
            .await?;
        MIGRATOR.run(&writer).await?;
        drop(lock);
        // The planner's statistics, gathered at open from at most
        // `ANALYSIS_LIMIT` rows of each index, so that ListTurns' filters
        // read their indexes; the sweeper refreshes them while serving. A
        // store that cannot take them now (full, say) still opens.
        if let Err(error) = sqlx::query("ANALYZE").execute(&writer).await {
            tracing::warn!(%error, "could not gather the query planner's statistics; the sweeper will try again");
        }
        // A restore page of up to 10000 rows crosses from the connection's
        // thread without waiting on the reader at every 50th row.
        let reader = SqlitePoolOptions::new()
            .max_connections(store.pool_max)
            .test_before_acquire(false)
            .acquire_timeout(store.acquire_timeout)
            .connect_with(options.row_buffer_size(1024))
            .await?;
        Ok(SqliteStore { pools: Pools::new(writer, reader, store.clock.clone()), path: path.to_owned() })
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

/// A deletion chunk's transaction holds SQLite's write lock from its start
/// (`BEGIN IMMEDIATE`), which keeps every other writer out already.
impl LockTurn for Sqlite {
    const LOCK_TURN: &'static str =
        "SELECT checkpoint_count, last_ts_ns, terminal FROM turns WHERE namespace = $1 AND turn_id = $2";
}

/// SQLite's batch statements: multi-row `VALUES` lists built per batch.
#[async_trait]
impl batch::Statements for Conn<'_, Sqlite> {
    async fn lock_keys(&mut self, _keys: &[(&str, &str)]) -> Result<UnixNanos, sqlx::Error> {
        // SQLite has one writer, and this one holds the write lock already.
        Ok(self.clock.now())
    }

    /// One statement; the trigger keeps the turns.
    async fn insert_checkpoints<'b>(
        &mut self,
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
        let rows = query.build_query_as::<InsertedRow>().fetch_all(&mut *self.conn).await?;
        rows::inserted_seqs(unique, rows)
    }

    async fn fetch_stored<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, sqlx::Error> {
        let mut query =
            QueryBuilder::<Sqlite>::new("SELECT * FROM checkpoints WHERE (namespace, turn_id, phase, ts_ns) IN (");
        query.push_values(keys, |mut row, key| {
            row.push_bind(key.0).push_bind(key.1).push_bind(key.2).push_bind(key.3);
        });
        query.push(")");
        let rows = query.build_query_as::<CheckpointRow>().fetch_all(&mut *self.conn).await?;
        rows::found_checkpoints(keys, rows)
    }

    async fn load_records(&mut self, keys: &[(&str, &str)]) -> Result<HashMap<(String, String), Record>, sqlx::Error> {
        let mut query = QueryBuilder::<Sqlite>::new("SELECT * FROM idempotency WHERE (namespace, key) IN (");
        query.push_values(keys, |mut row, (namespace, key)| {
            row.push_bind(*namespace).push_bind(*key);
        });
        query.push(")");
        rows::records_by_key(query.build_query_as::<RecordRow>().fetch_all(&mut *self.conn).await?)
    }

    async fn lease_tokens(&mut self, count: usize) -> Result<Vec<u64>, sqlx::Error> {
        if count == 0 {
            return Ok(Vec::new());
        }
        let count = u64::try_from(count).map_err(|_| decode_error("too many tokens".into()))?;
        let last: i64 = sqlx::query_scalar("UPDATE lease_tokens SET last = last + ?1 WHERE id = 1 RETURNING last")
            .bind(count as i64)
            .fetch_one(&mut *self.conn)
            .await?;
        let last = u64::try_from(last).map_err(|_| decode_error(format!("token {last} < 0")))?;
        Ok((last + 1 - count..=last).collect())
    }

    async fn save_records(&mut self, records: &[Record]) -> Result<(), sqlx::Error> {
        if records.is_empty() {
            return Ok(());
        }
        let mut query = QueryBuilder::<Sqlite>::new(
            "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                      result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) ",
        );
        query.push_values(records.iter().zip(rows::stored_tokens(records)?), |mut row, (r, token)| {
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
        query.build().execute(&mut *self.conn).await?;
        Ok(())
    }
}

#[async_trait]
impl Backend for SqliteStore {
    type Database = Sqlite;
    /// Write transactions take the write lock at BEGIN, so a transaction that
    /// reads before it writes can never fail to upgrade its lock.
    const BEGIN: Option<&'static str> = Some("BEGIN IMMEDIATE");

    fn pools(&self) -> &Pools<Sqlite> {
        &self.pools
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(Record, UnixNanos)>, Error> {
        let mut conn = self.pools.acquire(&self.pools.reader).await?;
        let now = self.pools.clock.now();
        let row: Option<RecordRow> = sqlx::query_as("SELECT * FROM idempotency WHERE namespace = ?1 AND key = ?2")
            .bind(namespace)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await?;
        let record = row.map(Record::try_from).transpose()?;
        Ok(record.filter(|r| !r.is_purgeable(now)).map(|record| (record, now)))
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        let purge = "DELETE FROM idempotency WHERE rowid IN \
                       (SELECT rowid FROM idempotency WHERE purge_after_ns <= $1 LIMIT $2)";
        Ok(Sqlite::purge(&self.pools.writer, purge.into_sql_str(), self.pools.clock.now(), limit).await?)
    }

    /// Gathers the planner's statistics again for the tables that grew or
    /// shrank much since they were last gathered (SQLite decides), reading
    /// a bounded sample of each index: usually nothing to do.
    async fn optimize(&self) -> Result<(), Error> {
        sqlx::query("PRAGMA optimize").execute(&self.pools.writer).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1").execute(&self.pools.reader).await?;
        Ok(())
    }

    /// The sizes of the database file and of its write-ahead log (0 when
    /// absent, as between checkpoints that truncate it).
    async fn figures(&self) -> StoreState {
        let size = |path: PathBuf| async move { tokio::fs::metadata(path).await.map_or(0, |m| m.len()) };
        let mut wal = self.path.as_os_str().to_owned();
        wal.push("-wal");
        StoreState::Sqlite { database_bytes: size(self.path.clone()).await, wal_bytes: size(wal.into()).await }
    }

    async fn close(&self) {
        self.pools.writer.close().await;
        self.pools.reader.close().await;
    }
}
