//! Opening a SQLite store: the file created private, the lock that lets one
//! of the sidecars sharing it switch it to WAL and migrate it (through
//! sqlx, once), then the writer's connection and the read connections.

use std::fs::TryLockError;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use tokio::sync::{Mutex, Semaphore};

use super::*;
use crate::store::cause::migration_failed;
use crate::store::migrations::SQLITE_MIGRATOR;
use crate::store::{DbError, Error, Options};

/// SQLite's default page size, which stepwell keeps.
pub(super) const PAGE_BYTES: u64 = 4096;

/// `synchronous` for every connection: FULL, or NORMAL (with a warning at
/// start) under `--unsafe-sqlite-synchronous-normal`, where a commit is
/// acknowledged before the WAL is synced.
pub(super) fn synchronous(store: &Options) -> (SqliteSynchronous, &'static str) {
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
        let migrated = SQLITE_MIGRATOR.run(&migrating).await;
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
}

/// Takes the exclusive lock on `DB-migrate.lock`, released when the file
/// drops. Another sidecar holding it is waited for, trying again with
/// backoff, for at most `timeout`; then start-up fails, naming the lock.
pub(super) async fn migration_lock(path: &Path, timeout: Duration) -> Result<std::fs::File, Error> {
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
pub(super) const PRIVATE: u32 = 0o600;

/// Creates the database file, empty and private, unless it exists (an
/// existing file keeps the permissions its owner gave it). SQLite takes an
/// empty file as a new database.
pub(super) async fn create_private(path: &Path) -> std::io::Result<()> {
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
