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

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::Connection;
use rusqlite::types::ToSql;
use tokio::sync::Mutex;

use super::console::Value;
use super::rows::{self, KeyDbRow, PageRow, TurnDbRow};
use super::sql::{self, Dialect, TURN};
use super::{Error, ExpiredQuery, IdleQuery, NotCommitted, Store, Write, Written};
use crate::domain::clock::{Clock, system_now};
use crate::domain::keys::KeyRecord;
use crate::domain::memory::search::Searched;
use crate::domain::memory::{ItemsQuery, Path, StoredItem};
use crate::domain::model::{ListTurnsQuery, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos};
use crate::domain::records::{RecordEntry, RecordQuery};
use crate::domain::waits::{Wait, WaitKey, WaitQuery};
use crate::observe::metrics::StoreState;

mod batch;
mod connections;
mod console;
mod exec;
mod memory;
mod open;
mod records;
mod waits;

use batch::Batch;
use connections::{Readers, Settings};
use exec::*;

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

    async fn get_items(&self, namespace: &str, addresses: &[(Path, String)]) -> Result<Vec<StoredItem>, Error> {
        let (namespace, addresses, now) = (namespace.to_owned(), addresses.to_vec(), self.clock.now());
        self.read(move |conn| memory::get(conn, &namespace, &addresses, now).map_err(sqlite)).await
    }

    async fn search_items(&self, q: &ItemsQuery) -> Result<Searched, Error> {
        let (q, now) = (q.clone(), self.clock.now());
        self.read(move |conn| memory::search(conn, &q, now).map_err(sqlite)).await
    }

    async fn item_paths(&self, namespace: &str, prefix: &Path) -> Result<Vec<Path>, Error> {
        let (namespace, prefix, now) = (namespace.to_owned(), prefix.clone(), self.clock.now());
        self.read(move |conn| memory::paths(conn, &namespace, &prefix, now).map_err(sqlite)).await
    }

    /// Each a short transaction of its own on the writer's connection.
    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        let now = self.clock.now();
        let keys = self
            .on_writer(move |conn| {
                conn.prepare_cached(
                    "DELETE FROM idempotency WHERE rowid IN \
                       (SELECT rowid FROM idempotency WHERE purge_after_ns <= ?1 LIMIT ?2)",
                )?
                .execute(rusqlite::params![now, i64::from(limit)])
            })
            .await?;
        let items = self
            .on_writer(move |conn| {
                let tx = rusqlite::Transaction::new_unchecked(conn, rusqlite::TransactionBehavior::Immediate)?;
                let gone = memory::purge_expired(&tx, now, limit)?;
                tx.commit()?;
                Ok(gone)
            })
            .await?;
        Ok(keys as u64 + items)
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
    use std::time::Duration;

    use super::batch::run;
    use super::open::synchronous;
    use super::*;
    use crate::store::Cause;
    use crate::store::Options;

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
