//! The Postgres backend: one database shared by many sidecars. Every write
//! commits with `synchronous_commit=on` (set on each connection, or behind
//! a pooler in each transaction: `session`), and at start-up the store
//! refuses a server that would not keep acknowledged writes. Migrations run
//! under a lock (`migrate`), so sidecars starting together migrate once.
//!
//! Lease arithmetic runs on the database server's clock (plus the test
//! offset), so sidecars with skewed clocks agree on who holds a lease. A
//! batch first takes transaction-scoped advisory locks on all its idempotency
//! keys, in one sorted order, which serializes requests for one key across
//! all writers and sidecars, including requests for a key with no row yet;
//! the same statement reads the clock and draws the batch's fencing tokens.
//! Multi-row statements take their rows from `UNNEST` arrays, so a batch is a
//! constant number of round trips: with idempotency requests, BEGIN, the
//! locks, the records, their upsert, COMMIT (`batch`); a batch of only
//! Begins and Completes on distinct keys is one statement (`keys`).
//!
//! The backend is concrete, on sqlx's Postgres driver: its pool, its
//! statements and its errors stay in here, and its errors leave as
//! `DbError`s. Opening the store is `open`'s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Instant;

use async_trait::async_trait;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, FromRow, Postgres, Row};

mod batch;
mod console;
mod keys;
mod memory;
mod migrate;
mod open;
mod records;
mod session;
mod vectors;
pub mod waits;

use self::batch::Conn;
use self::open::Nondurable;
use self::session::{Session, Unit};
use super::rows::{self, KeyDbRow, PageRow, TurnDbRow};
use super::sql::{self, DB_NOW_NS, Dialect, TURN};
use super::{DbError, Error, ExpiredQuery, IdleQuery, NotCommitted, Options, Store, Write, Written};
use crate::domain::clock::{Clock, system_now};
use crate::domain::keys::KeyRecord;
use crate::domain::memory::search::Searched;
use crate::domain::memory::{ItemsQuery, Path, StoredItem};
use crate::domain::model::{ListTurnsQuery, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos};
use crate::domain::records::{RecordEntry, RecordQuery};
use crate::domain::waits::{Wait, WaitKey, WaitQuery};
use crate::observe::metrics::StoreState;

/// A page of a turn's checkpoints on Postgres, from the oldest or from the
/// newest, chosen whole by one statement (SQLite's connection steps through
/// the rows instead and stops where the page is full: `sqlite`).
/// `$3` is the phase, if only one; `$4, $5` the cursor; `$6` the page size
/// plus one; `$7` the page's byte budget and `$8` each checkpoint's cost
/// beyond its variable-length fields. The innermost query reads at most `$6`
/// rows' sizes, never their states (`octet_length` reads a value's length,
/// not its bytes); the window keeps the rows whose running cost fits `$7`
/// (the first always), and only those are joined back for their states.
/// `rows_read` tells the caller whether more follow.
macro_rules! restore_page {
    ($order:literal, $after:literal) => {
        concat!(
            "SELECT c.seq, c.session_id, c.phase, c.ts_ns, c.state, c.terminal, c.workflow_version, c.recorded_at_ns, \
                    p.rows_read \
             FROM (SELECT seq, ts_ns, row_number() OVER w AS rn, sum(bytes) OVER w AS running, \
                          count(*) OVER () AS rows_read \
                   FROM (SELECT seq, ts_ns, \
                                octet_length(state) + octet_length(phase) + octet_length(session_id) \
                                  + octet_length(workflow_version) AS bytes \
                         FROM checkpoints \
                         WHERE namespace = $1 AND turn_id = $2 AND (CAST($3 AS TEXT) IS NULL OR phase = $3) \
                           AND (ts_ns, seq) ",
            $after,
            " ($4, $5) \
                         ORDER BY ts_ns",
            $order,
            ", seq",
            $order,
            " LIMIT $6) page \
                   WINDOW w AS (ORDER BY ts_ns",
            $order,
            ", seq",
            $order,
            " ROWS UNBOUNDED PRECEDING)) p \
             JOIN checkpoints c ON c.seq = p.seq \
             WHERE p.rn < $6 AND (p.running + p.rn * $8 <= $7 OR p.rn = 1) \
             ORDER BY p.ts_ns",
            $order,
            ", p.seq",
            $order
        )
    };
}

const RESTORE_OLDEST_FIRST: &str = restore_page!("", ">");
const RESTORE_NEWEST_FIRST: &str = restore_page!(" DESC", "<");

/// A store in a Postgres database.
pub struct PostgresStore {
    /// One pool for writes and reads alike.
    pool: PgPool,
    /// The clock whose offset (the tests') is added to the database server's clock.
    clock: Clock,
    /// Requests waiting for a connection, none being idle: a metric.
    waiting: Arc<AtomicU32>,
    /// For the health check's own connection when no pooled one is idle.
    options: PgConnectOptions,
    /// When a health check last failed, as time since `opened`: connections
    /// opened before it may be dead, so the pool discards them.
    failed_at: Arc<AtomicU64>,
    opened: Instant,
    /// How units of work run: directly, or behind a pooler; which profile.
    session: Session,
    /// Where LISTEN connects: the store's URL, another given for it, or
    /// nowhere (behind a pooler without one: the poll finds settlements).
    listen: Option<PgConnectOptions>,
    /// pgvector: whether puts fill `embedding`, which lengths searches index.
    vectors: vectors::Vectors,
}

impl PostgresStore {
    /// Connects, checks the server keeps acknowledged writes (unless
    /// `unsafe_accept_nondurable_postgres`), and migrates.
    pub async fn open(url: &str, store: &Options) -> Result<PostgresStore, Error> {
        let session = Session::new(&store.postgres, store.postgres_statement_timeout, store.postgres_lock_timeout);
        let options = open::connect_options(url).await?.application_name("stepwell");
        open::check_durability(&options, &session, Nondurable::of(store)).await?;
        // No ping before each use: a broken connection fails its batch
        // (UNAVAILABLE, nothing acknowledged), is dropped, and the health
        // monitor notices.
        let (opened, failed_at) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        // Migrations run on a connection of their own: their wait for
        // another sidecar's migration is bounded by --migration-lock-timeout-ms,
        // and their statements (an index built over a large table) by nothing.
        migrate::migrate(&options, &session, store.migration_lock_timeout).await?;
        let vectors = vectors::prepare(&options, &session, &store.postgres.vector_index_dims).await?;
        let listen = listen_options(&options, store, &session).await?;
        let options = session.connect_options(options);
        open::check_settings_hold(&options, &session).await?;
        let pool = PgPoolOptions::new()
            .max_connections(store.pool_max)
            .test_before_acquire(false)
            .before_acquire({
                // After a failed health check (Postgres restarted, say), every
                // connection opened before it is dropped unused rather than
                // failing a batch; no round trip is spent on the others.
                let failed_at = failed_at.clone();
                move |_, meta| {
                    let opened_at = opened.elapsed().saturating_sub(meta.age);
                    let fresh = opened_at.as_nanos() as u64 > failed_at.load(Ordering::Relaxed);
                    Box::pin(async move { Ok(fresh) })
                }
            })
            // While the server refuses connections the pool retries until
            // this timeout, so it is also how long a write can take to hear
            // that Postgres went away before the health monitor trips the breaker.
            .acquire_timeout(store.acquire_timeout)
            .connect_with(options.clone())
            .await
            .map_err(DbError::sqlx)?;
        let (clock, waiting) = (store.clock.clone(), Arc::default());
        Ok(PostgresStore { pool, clock, waiting, options, failed_at, opened, session, listen, vectors })
    }

    /// A unit of work: a pooled connection, or behind a pooler a
    /// transaction on one, which `Unit::done` commits.
    async fn unit(&self) -> Result<Unit, DbError> {
        let conn = self.acquire().await?;
        self.session.unit(conn).await
    }

    /// A pooled connection; while none is idle, the wait for one is counted
    /// in `waiting`.
    async fn acquire(&self) -> Result<PoolConnection<Postgres>, DbError> {
        if let Some(conn) = self.pool.try_acquire() {
            return Ok(conn);
        }
        let _waiting = Waiting::enter(&self.waiting);
        self.pool.acquire().await.map_err(DbError::sqlx)
    }

    /// Runs `batch` and commits it: in a transaction, unless the batch is
    /// one statement. Behind a pooler every batch is a transaction, which
    /// sets the connection's settings; the portable profile draws fencing
    /// tokens from a counter row, which the one-statement keys path does not.
    async fn run_batch(&self, batch: &[Write], recorded_at: UnixNanos) -> Result<crate::store::batch::Ran, Error> {
        let mut conn = self.acquire().await?;
        let (clock, portable, embedding) = (&self.clock, self.session.portable(), self.vectors.embedding);
        if !self.session.pooled() {
            if !portable && keys::applies(batch) {
                return keys::run(&mut conn, clock, batch).await;
            }
            if !crate::store::batch::needs_transaction(batch) {
                // One statement, atomic and durable by itself, in one round trip.
                return crate::store::batch::run(
                    &mut Conn { conn: &mut conn, clock, portable, embedding },
                    batch,
                    recorded_at,
                )
                .await;
            }
        }
        let mut tx = self.session.begin(&mut conn).await.map_err(DbError::sqlx)?;
        let ran = crate::store::batch::run(&mut Conn { conn: &mut tx, clock, portable, embedding }, batch, recorded_at)
            .await?;
        tx.commit().await.map_err(DbError::sqlx)?;
        Ok(ran)
    }

    /// One page of a turn's checkpoints in restore order, chosen whole by
    /// one statement, and how many rows the statement read.
    async fn restore_page(&self, q: &RestoreQuery) -> Result<Vec<PageRow>, DbError> {
        let start = q.start();
        let sql = if q.newest_first { RESTORE_NEWEST_FIRST } else { RESTORE_OLDEST_FIRST };
        let overhead = q.row_overhead();
        let query = sqlx::query_as(sql)
            .bind(q.namespace.as_str())
            .bind(q.turn_id.as_str())
            .bind(q.phase.as_deref())
            .bind(start.timestamp)
            .bind(start.seq)
            .bind(i64::from(q.limit) + 1)
            .bind(i64::try_from(q.bytes_max).unwrap_or(i64::MAX))
            .bind(i64::try_from(overhead).unwrap_or(i64::MAX));
        let mut unit = self.unit().await?;
        let rows = query.fetch_all(&mut *unit).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(rows)
    }

    /// `limit + 1` turn summaries after the query's cursor, filtered as it asks.
    async fn turn_rows(&self, q: &ListTurnsQuery) -> Result<Vec<TurnDbRow>, DbError> {
        let mut query = sqlx::query_as(sql::list_turns(Dialect::Postgres, q))
            .bind(q.namespace.as_str())
            .bind(q.after_turn_id.as_deref().unwrap_or(""));
        match q.status {
            TurnStatus::Open => query = query.bind(false),
            TurnStatus::Terminal => query = query.bind(true),
            TurnStatus::Any => {}
        }
        if let Some(session_id) = q.session_id.as_deref() {
            query = query.bind(session_id);
        }
        if let Some(updated_before) = q.updated_before {
            query = query.bind(updated_before);
        }
        let mut unit = self.unit().await?;
        let rows = query.bind(i64::from(q.limit) + 1).fetch_all(&mut *unit).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(rows)
    }

    /// Whether the server answers: an idle pooled connection, or else a
    /// connection of its own. A failure marks every connection opened
    /// before it as old.
    async fn answers(&self) -> Result<(), sqlx::Error> {
        let mark_failed = || self.failed_at.store(self.opened.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Some(mut conn) = self.pool.try_acquire() {
            if conn.ping().await.is_ok() {
                return Ok(());
            }
            // Dead: the server restarted or went away. Drop it and every
            // connection as old, and ask the server itself.
            conn.close_on_drop();
            mark_failed();
        }
        let answered = match PgConnection::connect_with(&self.options).await {
            Ok(mut conn) => conn.ping().await.and(conn.close().await),
            Err(error) => Err(error),
        };
        if answered.is_err() {
            mark_failed();
        }
        answered
    }
}

/// Where LISTEN connects: `--postgres-listen-url`, or else the store's own
/// URL, unless that reaches a pooler in transaction mode, which cannot
/// keep a LISTEN (a server session lasts one transaction): then nowhere.
async fn listen_options(
    options: &PgConnectOptions,
    store: &Options,
    session: &Session,
) -> Result<Option<PgConnectOptions>, Error> {
    match &store.postgres.listen_url {
        Some(url) => Ok(Some(open::connect_options(url).await?)),
        None if session.pooled() => Ok(None),
        None => Ok(Some(options.clone())),
    }
}

/// One request counted as waiting for a connection until dropped, however
/// its wait ends (a connection, an error, or the request given up).
struct Waiting<'a>(&'a AtomicU32);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicU32) -> Waiting<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[async_trait]
impl Store for PostgresStore {
    async fn attempt(&self, batch: Vec<Write>) -> Result<Written, NotCommitted> {
        let recorded_at = system_now();
        match self.run_batch(&batch, recorded_at).await {
            Ok(ran) => Ok(ran.answers(batch, recorded_at)),
            Err(error) => Err(NotCommitted { error, batch }),
        }
    }

    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        let rows = self.restore_page(q).await?;
        let more = rows.first().is_some_and(|first| usize::try_from(first.rows_read).unwrap_or(0) > rows.len());
        Ok((rows.into_iter().map(|row| row.into_checkpoint(q)).collect(), more))
    }

    async fn list_records(&self, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error> {
        let conn = self.acquire().await?;
        let mode = q.split_entries.then_some(records::SPLIT_PAGE_ISOLATION);
        let mut unit = self.session.unit_as(conn, mode).await?;
        let listed = records::list(&mut unit, q, self.session.pooled()).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(listed)
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        let mut unit = self.unit().await?;
        let row: Option<TurnDbRow> = sqlx::query_as(TURN)
            .bind(namespace)
            .bind(turn_id)
            .fetch_optional(&mut *unit)
            .await
            .map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(row.map(TurnSummary::try_from).transpose()?)
    }

    async fn list_turns(&self, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error> {
        let rows = self.turn_rows(q).await?;
        let turns = rows.into_iter().map(TurnSummary::try_from).collect::<Result<Vec<_>, _>>()?;
        Ok(rows::page(turns, q.limit))
    }

    async fn expired_turns(&self, q: &ExpiredQuery) -> Result<Vec<(String, String)>, Error> {
        let sql = sql::expired_turns(Dialect::Postgres, q);
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(q.expired.terminal).bind(q.expired.last_before);
        if let Some(namespace) = q.namespace.as_deref() {
            query = query.bind(namespace);
        } else {
            for namespace in &q.except {
                query = query.bind(namespace.as_str());
            }
        }
        let mut unit = self.unit().await?;
        let turns = query.bind(i64::from(q.limit)).fetch_all(&mut *unit).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(turns)
    }

    async fn idle_record_turns(&self, q: &IdleQuery) -> Result<Vec<(String, String)>, Error> {
        let mut unit = self.unit().await?;
        let turns = records::idle_turns(&mut unit, q).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(turns)
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {DB_NOW_NS} + $3 AS now_ns, * FROM idempotency WHERE namespace = $1 AND key = $2"
        )))
        .bind(namespace)
        .bind(key)
        .bind(self.clock.offset());
        let mut unit = self.unit().await?;
        let row = row.fetch_optional(&mut *unit).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        let Some(row) = row else { return Ok(None) };
        let now: i64 = row.try_get("now_ns").map_err(DbError::sqlx)?;
        let record = KeyRecord::try_from(KeyDbRow::from_row(&row).map_err(DbError::sqlx)?)?;
        Ok((!record.is_purgeable(now)).then_some((record, now)))
    }

    async fn get_items(&self, namespace: &str, addresses: &[(Path, String)]) -> Result<Vec<StoredItem>, Error> {
        let mut unit = self.unit().await?;
        let items = memory::get(&mut unit, namespace, addresses, self.clock.offset()).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(items)
    }

    async fn search_items(&self, q: &ItemsQuery) -> Result<Searched, Error> {
        let mut unit = self.unit().await?;
        let hits = memory::search(&mut unit, q, self.clock.offset(), self.vectors.index.as_ref())
            .await
            .map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(hits)
    }

    async fn item_paths(&self, namespace: &str, prefix: &Path) -> Result<Vec<Path>, Error> {
        let mut unit = self.unit().await?;
        let paths = memory::paths(&mut unit, namespace, prefix, self.clock.offset()).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(paths)
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        // The outer condition is checked again on a row updated meanwhile, so
        // a key begun again after its retention ran out is not deleted. Rows
        // are named by their primary key, not `ctid`, which distributed
        // engines do not have.
        let purge = sqlx::AssertSqlSafe(format!(
            "WITH now AS (SELECT {DB_NOW_NS} + $1 AS ns) \
             DELETE FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) AND (namespace, key) IN \
               (SELECT namespace, key FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) LIMIT $2)"
        ));
        let query = sqlx::query(purge).bind(self.clock.offset()).bind(i64::from(limit));
        let mut unit = self.unit().await?;
        let purged = query.execute(&mut *unit).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        let mut unit = self.unit().await?;
        let items = memory::purge_expired(&mut unit, limit, self.clock.offset()).await.map_err(DbError::sqlx)?;
        unit.done().await?;
        Ok(purged.rows_affected() + items)
    }

    /// Postgres's autovacuum keeps the planner's statistics: nothing to do.
    async fn optimize(&self) -> Result<(), Error> {
        Ok(())
    }

    /// An idle pooled connection answers, or else a connection of its own
    /// does: a server that refuses connections fails the check at once,
    /// where the pool would retry until its acquire timeout.
    async fn get_wait(&self, key: &WaitKey) -> Result<Option<Wait>, Error> {
        {
            let mut unit = self.unit().await?;
            let read = waits::get(&mut unit, key).await?;
            unit.done().await?;
            Ok(read)
        }
    }

    async fn settled_waits(&self, keys: &[WaitKey]) -> Result<Vec<Wait>, Error> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        {
            let mut unit = self.unit().await?;
            let read = waits::settled(&mut unit, keys).await?;
            unit.done().await?;
            Ok(read)
        }
    }

    async fn list_waits(&self, q: &WaitQuery) -> Result<(Vec<Wait>, bool), Error> {
        {
            let mut unit = self.unit().await?;
            let read = waits::list(&mut unit, q).await?;
            unit.done().await?;
            Ok(read)
        }
    }

    async fn next_due(&self) -> Result<Option<UnixNanos>, Error> {
        {
            let mut unit = self.unit().await?;
            let read = waits::next_due(&mut unit).await?;
            unit.done().await?;
            Ok(read)
        }
    }

    /// Behind a pooler without `--postgres-listen-url` nothing listens, and
    /// the waits' poll finds other sidecars' settlements.
    async fn listen(&self, hub: Arc<crate::store::hub::Hub>) {
        match &self.listen {
            Some(options) => waits::listen(options.clone(), hub).await,
            None => std::future::pending().await,
        }
    }

    async fn ping(&self) -> Result<(), Error> {
        Ok(self.answers().await.map_err(DbError::sqlx)?)
    }

    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    async fn read_rows(&self, statement: &super::console::Statement) -> Result<Vec<Vec<super::console::Value>>, Error> {
        let mut unit = self.unit().await?;
        let rows = console::read_rows(&mut unit, statement, self.clock.offset()).await?;
        unit.done().await?;
        Ok(rows)
    }

    /// The pool's connections in use and idle, the requests waiting for
    /// one, and its most.
    async fn figures(&self) -> StoreState {
        let idle = u32::try_from(self.pool.num_idle()).unwrap_or(u32::MAX);
        let max = self.pool.options().get_max_connections();
        let waiting = self.waiting.load(Ordering::Relaxed);
        StoreState::Postgres { in_use: self.pool.size().saturating_sub(idle), idle, waiting, max }
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
