//! The connections to the file: how each is opened (the writer's capped, the
//! readers' query-only), and running work on a read connection or on the
//! writer's, each on a blocking thread.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::Semaphore;

use super::*;
use crate::store::{DbError, Error};

/// Rows of each index `ANALYZE` reads, so that gathering the planner's
/// statistics stays short on a large store.
pub(super) const ANALYSIS_LIMIT: u32 = 1000;

/// Prepared statements each connection keeps: a batch's multi-row
/// statements differ by their row count, and the reads by their filters.
pub(super) const STATEMENT_CACHE: usize = 128;

/// How each connection to the file is opened.
#[derive(Clone)]
pub(super) struct Settings {
    pub(super) path: PathBuf,
    pub(super) busy_timeout: Duration,
    /// The writer's cap on the file, in pages (`max_page_count`).
    pub(super) max_pages: Option<u64>,
    /// `synchronous` on every connection: FULL, or NORMAL when unsafe.
    pub(super) synchronous: &'static str,
}

impl Settings {
    /// The writer's connection to the existing, migrated file, capped at
    /// `max_pages` if a cap was given.
    pub(super) fn connect_writer(&self) -> rusqlite::Result<Connection> {
        let conn = self.connect()?;
        if let Some(pages) = self.max_pages {
            conn.pragma_update(None, "max_page_count", i64::try_from(pages).unwrap_or(i64::MAX))?;
        }
        Ok(conn)
    }

    /// A reader's connection to the existing, migrated file, which may only read.
    pub(super) fn connect_reader(&self) -> rusqlite::Result<Connection> {
        let conn = self.connect()?;
        conn.pragma_update(None, "query_only", true)?;
        Ok(conn)
    }

    /// A connection with what the writer and the readers both set.
    pub(super) fn connect(&self) -> rusqlite::Result<Connection> {
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
pub(super) struct Readers {
    pub(super) idle: std::sync::Mutex<Vec<Connection>>,
    pub(super) permits: Arc<Semaphore>,
    pub(super) settings: Settings,
    pub(super) acquire_timeout: Duration,
}

impl SqliteStore {
    /// Runs `read` on a read connection, on a blocking thread; waits for a
    /// connection at most `--pool-acquire-timeout-ms`.
    pub(super) async fn read<T, F>(&self, read: F) -> Result<T, Error>
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
    pub(super) async fn on_writer<T, F>(&self, work: F) -> Result<T, Error>
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
