//! What the SQLite and Postgres backends do alike: the reads of the turns,
//! and a deletion chunk's statements, written once in SQL both dialects
//! accept; and, for a backend on sqlx (Postgres),
//! a batch's transaction, those statements run through sqlx, and `Store`
//! for every `Backend`, so that such a backend supplies only what is its
//! own. SQLite runs the same SQL through its own connections (`sqlite`).
//!
//! The statements are written with `$N` parameters (SQLite binds `$N` by
//! its name, Postgres by its number) and `CAST` rather than Postgres's `::`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use sqlx::Sqlite;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgQueryResult;
use sqlx::{Connection, Database, Encode, Executor, FromRow, IntoArguments, Pool, SqlStr, Type};

use super::batch::{self, Statements};
use super::rows::{self, PageRow, TurnRow};
use super::{Error, ExpiredQuery, IdleQuery, NotCommitted, Store, Write, Written};
use crate::domain::clock::{Clock, system_now};
use crate::domain::keys::KeyRecord;
use crate::domain::model::{
    Cursor, ListTurnsQuery, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};
use crate::domain::records::{RecordEntry, RecordQuery};
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

pub(super) const TURN: &str = "SELECT * FROM turns WHERE namespace = $1 AND turn_id = $2";

/// A page of turns after `$2` in turn_id order, one statement for each set
/// of filters, with only the filters asked for: a filter is never written as
/// `$N IS NULL OR ...`, which would keep the planner from its index
/// (`turns_status` for a status, `turns_updated` for `updated_before`). The
/// filters' parameters follow `$2` in the order status, session, updated
/// before; the limit is last. SQLite is told that `updated_before` is
/// selective (`likelihood`): without a histogram of `last_ts_ns` its planner
/// would rather walk the whole namespace in turn_id order than sort a page.
/// Postgres indexes the minute of the last write (`updated_minute`), so the
/// statement asks for the minute first and the nanosecond after.
static LIST_TURNS: LazyLock<[[String; 8]; 2]> = LazyLock::new(|| {
    [false, true].map(|sqlite| {
        std::array::from_fn(|filters| {
            let mut sql = "SELECT * FROM turns WHERE namespace = $1 AND turn_id > $2".to_owned();
            let mut n = 2;
            for bit in [STATUS, SESSION, UPDATED] {
                if filters & bit != 0 {
                    n += 1;
                    sql.push_str(&match bit {
                        STATUS => format!(" AND terminal = ${n}"),
                        SESSION => format!(" AND session_id = ${n}"),
                        _ if sqlite => format!(" AND likelihood(last_ts_ns < ${n}, 0.01)"),
                        _ => format!(" AND updated_minute <= ${n} / {NANOS_PER_MINUTE} AND last_ts_ns < ${n}"),
                    });
                }
            }
            sql + &format!(" ORDER BY turn_id LIMIT ${}", n + 1)
        })
    })
});
/// The width of Postgres's `updated_minute`, as its migration computes it.
const NANOS_PER_MINUTE: i64 = 60_000_000_000;
const STATUS: usize = 1;
const SESSION: usize = 2;
const UPDATED: usize = 4;

/// The statement ListTurns runs for `q`'s filters, on SQLite or on Postgres
/// (public so that the tests can show its query plan).
pub fn list_turns_sql(on_sqlite: bool, q: &ListTurnsQuery) -> &'static str {
    let filters = if q.status == TurnStatus::Any { 0 } else { STATUS }
        | if q.session_id.is_some() { SESSION } else { 0 }
        | if q.updated_before.is_some() { UPDATED } else { 0 };
    &LIST_TURNS[usize::from(on_sqlite)][filters]
}

/// Up to `$5` of a turn's checkpoints after the cursor `($3, $4)`, oldest
/// first (restore order), so that the summary's latest checkpoint is the
/// last to go. Starting after the previous chunk, an index seek passes over
/// what earlier chunks deleted instead of reading it again.
pub(super) const DELETE_CHUNK: &str = "\
    DELETE FROM checkpoints WHERE seq IN (\
      SELECT seq FROM checkpoints WHERE namespace = $1 AND turn_id = $2 AND (ts_ns, seq) > ($3, $4) \
      ORDER BY ts_ns, seq LIMIT $5) \
    RETURNING ts_ns, seq";
/// The timestamp of the turn's oldest checkpoint after the cursor `($3, $4)`.
pub(super) const OLDEST_AFTER: &str = "\
    SELECT ts_ns FROM checkpoints WHERE namespace = $1 AND turn_id = $2 AND (ts_ns, seq) > ($3, $4) \
    ORDER BY ts_ns, seq LIMIT 1";
/// The summary less `$3` checkpoints whose oldest was at `$4`: if the turn
/// held an older one (appended after the delete began), its first timestamp
/// stays; otherwise it is `$5`, the oldest after the chunk.
pub(super) const SHRINK_TURN: &str = "\
    UPDATE turns SET checkpoint_count = checkpoint_count - $3, \
      first_ts_ns = CASE WHEN first_ts_ns < $4 THEN first_ts_ns ELSE $5 END \
    WHERE namespace = $1 AND turn_id = $2";
pub(super) const DELETE_TURN: &str = "DELETE FROM turns WHERE namespace = $1 AND turn_id = $2";

/// The statement that finds turns past a retention rule: `$1` terminal,
/// `$2` the cutoff, then the namespace (`= $3`) or the namespaces with rules
/// of their own (`NOT IN ($3, …)`), and the limit last. On Postgres it also
/// bounds the minute of the last write (implied by the cutoff), so a rule
/// reads an index by minute: `turns_updated` within a namespace,
/// `turns_expiry` across namespaces. (SQLite's `turns_updated` holds
/// `last_ts_ns` itself, and its planner skips through it namespace by
/// namespace for a rule across them.)
pub fn expired_turns_sql(on_sqlite: bool, q: &ExpiredQuery) -> String {
    let mut sql = String::from("SELECT namespace, turn_id FROM turns WHERE terminal = $1 AND last_ts_ns < $2");
    if !on_sqlite {
        sql.push_str(&format!(" AND updated_minute <= $2 / {NANOS_PER_MINUTE}"));
    }
    let mut next = 3;
    if q.namespace.is_some() {
        sql.push_str(" AND namespace = $3");
        next = 4;
    } else if !q.except.is_empty() {
        let list: Vec<String> = (0..q.except.len()).map(|i| format!("${}", 3 + i)).collect();
        sql.push_str(&format!(" AND namespace NOT IN ({})", list.join(", ")));
        next = 3 + q.except.len();
    }
    sql.push_str(&format!(" LIMIT ${next}"));
    sql
}

/// How a backend reads a turn's checkpoint count, newest timestamp and
/// terminal flag, and locks its summary row until the transaction ends, so
/// that no append to the turn commits while a deletion chunk runs: `$1` is
/// the namespace, `$2` the turn.
pub trait LockTurn {
    const LOCK_TURN: &'static str;
}

/// A backend's connections and clock.
pub struct Pools<DB: Database> {
    /// Where batches and purges are written: SQLite's one connection, or Postgres's pool.
    pub writer: Pool<DB>,
    /// Where reads go: SQLite's readers beside the writer, or Postgres's pool again.
    pub reader: Pool<DB>,
    /// The clock leases are computed on.
    pub clock: Clock,
    /// Requests waiting for a connection, none being idle: a metric.
    waiting: Arc<AtomicU32>,
}

impl<DB: Database> Pools<DB> {
    pub fn new(writer: Pool<DB>, reader: Pool<DB>, clock: Clock) -> Pools<DB> {
        Pools { writer, reader, clock, waiting: Arc::default() }
    }

    /// A connection of `pool` (the writer or the reader); while none is
    /// idle, the wait for one is counted in `waiting`.
    pub async fn acquire(&self, pool: &Pool<DB>) -> Result<PoolConnection<DB>, sqlx::Error> {
        if let Some(conn) = pool.try_acquire() {
            return Ok(conn);
        }
        let _waiting = Waiting::enter(&self.waiting);
        pool.acquire().await
    }

    /// Requests waiting for a connection now.
    pub fn waiting(&self) -> u32 {
        self.waiting.load(Ordering::Relaxed)
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

/// The connection a batch runs on, with the store's clock; each backend
/// implements `batch::Statements` on it for its own database, and
/// `batch::TurnChunks` is implemented here for both.
pub struct Conn<'c, DB: Database> {
    pub conn: &'c mut DB::Connection,
    pub clock: &'c Clock,
}

/// What is a backend's own; `Store` comes with it.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    type Database: Dialect;
    /// What begins a batch's transaction, where the database's plain `BEGIN` would not do.
    const BEGIN: Option<&'static str>;

    /// Its connections and clock, which the shared statements run on.
    fn pools(&self) -> &Pools<Self::Database>;

    /// The key's record, unless absent or past its retention, with the store's time.
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error>;

    /// One page of records of a kind with their related records.
    async fn list_records(&self, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error>;

    /// Turns of records idle since before a time.
    async fn idle_record_turns(&self, q: &IdleQuery) -> Result<Vec<(String, String)>, Error>;

    /// Deletes up to `limit` records past their retention; returns how many went.
    async fn purge_expired(&self, limit: u32) -> Result<u64, Error>;

    /// Refreshes the planner's statistics, where the database needs it.
    async fn optimize(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), Error>;

    /// Its own figures for a metrics scrape: file sizes, or the pool's state.
    async fn figures(&self) -> StoreState;

    /// Finishes in-flight work and closes connections.
    async fn close(&self);
}

/// How many rows a statement changed, which `sqlx` answers per database.
pub trait RowsAffected {
    fn rows_affected(&self) -> u64;
}

impl RowsAffected for PgQueryResult {
    fn rows_affected(&self) -> u64 {
        PgQueryResult::rows_affected(self)
    }
}

/// A database the shared statements run on: any whose driver binds and
/// decodes what they need (both of stepwell's do).
#[async_trait]
pub trait Dialect: Database {
    /// Commits a batch on `pools.writer`: in a transaction begun with
    /// `begin` (or plain `BEGIN`), unless the batch is one statement. A
    /// batch not committed comes back with the error.
    async fn write(
        pools: &Pools<Self>,
        begin: Option<&'static str>,
        batch: Vec<Write>,
    ) -> Result<Written, NotCommitted>;

    /// One page of a turn's checkpoints in restore order, and whether more follow.
    async fn restore(pools: &Pools<Self>, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), sqlx::Error>;

    /// The summary of one turn, if it has checkpoints.
    async fn turn(pools: &Pools<Self>, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, sqlx::Error>;

    /// One page of turn summaries ordered by turn id, and whether more follow.
    async fn list_turns(pools: &Pools<Self>, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), sqlx::Error>;

    /// Turns past a retention rule.
    async fn expired_turns(pools: &Pools<Self>, q: &ExpiredQuery) -> Result<Vec<(String, String)>, sqlx::Error>;

    /// Runs a backend's purge statement, whose `$1` is `now` and `$2` the most
    /// records to delete; answers how many went.
    async fn purge(pool: &Pool<Self>, purge: SqlStr, now: i64, limit: u32) -> Result<u64, sqlx::Error>;
}

#[async_trait]
impl<DB> Dialect for DB
where
    DB: Database,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'c> Conn<'c, DB>: Statements,
    DB::Arguments: IntoArguments<DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> Option<&'q str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'q> Option<i64>: Encode<'q, DB> + Type<DB>,
    for<'q> bool: Encode<'q, DB> + Type<DB>,
    for<'r> PageRow: FromRow<'r, DB::Row>,
    for<'r> TurnRow: FromRow<'r, DB::Row>,
    for<'r> (String, String): FromRow<'r, DB::Row>,
    for<'q> String: Encode<'q, DB> + Type<DB>,
{
    async fn write(pools: &Pools<DB>, begin: Option<&'static str>, batch: Vec<Write>) -> Result<Written, NotCommitted> {
        let recorded_at = system_now();
        match run_batch(pools, begin, &batch, recorded_at).await {
            Ok(ran) => Ok(ran.answers(batch, recorded_at)),
            Err(error) => Err(NotCommitted { error, batch }),
        }
    }

    async fn restore(pools: &Pools<DB>, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), sqlx::Error> {
        let start = q.start();
        let sql = if q.newest_first { RESTORE_NEWEST_FIRST } else { RESTORE_OLDEST_FIRST };
        let overhead = q.row_overhead();
        let rows: Vec<PageRow> = sqlx::query_as(sql)
            .bind(q.namespace.as_str())
            .bind(q.turn_id.as_str())
            .bind(q.phase.as_deref())
            .bind(start.timestamp)
            .bind(start.seq)
            .bind(i64::from(q.limit) + 1)
            .bind(i64::try_from(q.bytes_max).unwrap_or(i64::MAX))
            .bind(i64::try_from(overhead).unwrap_or(i64::MAX))
            .fetch_all(&mut *pools.acquire(&pools.reader).await?)
            .await?;
        let more = rows.first().is_some_and(|first| usize::try_from(first.rows_read).unwrap_or(0) > rows.len());
        Ok((rows.into_iter().map(|row| row.into_checkpoint(q)).collect(), more))
    }

    async fn turn(pools: &Pools<DB>, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, sqlx::Error> {
        let mut conn = pools.acquire(&pools.reader).await?;
        let row: Option<TurnRow> =
            sqlx::query_as(TURN).bind(namespace).bind(turn_id).fetch_optional(&mut *conn).await?;
        row.map(TurnSummary::try_from).transpose()
    }

    async fn list_turns(pools: &Pools<DB>, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), sqlx::Error> {
        let mut query = sqlx::query_as(list_turns_sql(DB::NAME == Sqlite::NAME, q))
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
        let mut conn = pools.acquire(&pools.reader).await?;
        let rows: Vec<TurnRow> = query.bind(i64::from(q.limit) + 1).fetch_all(&mut *conn).await?;
        let turns = rows.into_iter().map(TurnSummary::try_from).collect::<Result<Vec<_>, _>>()?;
        Ok(rows::page(turns, q.limit))
    }

    async fn expired_turns(pools: &Pools<DB>, q: &ExpiredQuery) -> Result<Vec<(String, String)>, sqlx::Error> {
        let sql = expired_turns_sql(DB::NAME == Sqlite::NAME, q);
        let mut query = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(q.expired.terminal).bind(q.expired.last_before);
        if let Some(namespace) = q.namespace.as_deref() {
            query = query.bind(namespace);
        } else {
            for namespace in &q.except {
                query = query.bind(namespace.as_str());
            }
        }
        let mut conn = pools.acquire(&pools.reader).await?;
        query.bind(i64::from(q.limit)).fetch_all(&mut *conn).await
    }

    async fn purge(pool: &Pool<DB>, purge: SqlStr, now: i64, limit: u32) -> Result<u64, sqlx::Error> {
        Ok(sqlx::query(purge).bind(now).bind(i64::from(limit)).execute(pool).await?.rows_affected())
    }
}

/// Runs `batch` on `pools.writer` and commits it: in a transaction begun
/// with `begin` (or plain `BEGIN`), unless the batch is one statement.
async fn run_batch<DB>(
    pools: &Pools<DB>,
    begin: Option<&'static str>,
    batch: &[Write],
    recorded_at: UnixNanos,
) -> Result<batch::Ran, Error>
where
    DB: Database,
    for<'c> Conn<'c, DB>: Statements,
{
    let mut conn = pools.acquire(&pools.writer).await?;
    if !batch::needs_transaction(batch) {
        // One statement, atomic and durable by itself (on SQLite a
        // trigger keeps the turns), in one round trip.
        return batch::run(&mut Conn { conn: &mut *conn, clock: &pools.clock }, batch, recorded_at).await;
    }
    let mut tx = match begin {
        Some(statement) => conn.begin_with(statement).await?,
        None => conn.begin().await?,
    };
    let ran = batch::run(&mut Conn { conn: &mut *tx, clock: &pools.clock }, batch, recorded_at).await?;
    tx.commit().await?;
    Ok(ran)
}

/// A DeleteTurn chunk's statements (`batch::delete_chunk` is what a chunk
/// does with them), in the SQL both dialects accept.
#[async_trait]
impl<DB> batch::TurnChunks for Conn<'_, DB>
where
    DB: Database + LockTurn,
    DB::Arguments: IntoArguments<DB>,
    DB::QueryResult: RowsAffected,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    for<'q> &'q str: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    for<'r> (i64,): FromRow<'r, DB::Row>,
    for<'r> (i64, i64): FromRow<'r, DB::Row>,
    for<'r> (i64, i64, bool): FromRow<'r, DB::Row>,
{
    async fn lock_turn(&mut self, namespace: &str, turn_id: &str) -> Result<Option<(i64, i64, bool)>, sqlx::Error> {
        sqlx::query_as(DB::LOCK_TURN).bind(namespace).bind(turn_id).fetch_optional(&mut *self.conn).await
    }

    async fn delete_oldest(
        &mut self,
        namespace: &str,
        turn_id: &str,
        from: Cursor,
        rows: u32,
    ) -> Result<Vec<(i64, i64)>, sqlx::Error> {
        sqlx::query_as(DELETE_CHUNK)
            .bind(namespace)
            .bind(turn_id)
            .bind(from.timestamp)
            .bind(from.seq)
            .bind(i64::from(rows))
            .fetch_all(&mut *self.conn)
            .await
    }

    async fn oldest_after(
        &mut self,
        namespace: &str,
        turn_id: &str,
        after: Cursor,
    ) -> Result<Option<i64>, sqlx::Error> {
        let row: Option<(i64,)> = sqlx::query_as(OLDEST_AFTER)
            .bind(namespace)
            .bind(turn_id)
            .bind(after.timestamp)
            .bind(after.seq)
            .fetch_optional(&mut *self.conn)
            .await?;
        Ok(row.map(|(ts,)| ts))
    }

    async fn shrink_turn(
        &mut self,
        namespace: &str,
        turn_id: &str,
        deleted: i64,
        oldest_gone: i64,
        oldest_left: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(SHRINK_TURN)
            .bind(namespace)
            .bind(turn_id)
            .bind(deleted)
            .bind(oldest_gone)
            .bind(oldest_left)
            .execute(&mut *self.conn)
            .await?;
        Ok(())
    }

    async fn delete_summary(&mut self, namespace: &str, turn_id: &str) -> Result<(), sqlx::Error> {
        sqlx::query(DELETE_TURN).bind(namespace).bind(turn_id).execute(&mut *self.conn).await?;
        Ok(())
    }
}

#[async_trait]
impl<B: Backend> Store for B {
    async fn attempt(&self, batch: Vec<Write>) -> Result<Written, NotCommitted> {
        <B::Database as Dialect>::write(self.pools(), B::BEGIN, batch).await
    }

    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        Ok(<B::Database as Dialect>::restore(self.pools(), q).await?)
    }

    async fn list_records(&self, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error> {
        Backend::list_records(self, q).await
    }

    async fn idle_record_turns(&self, q: &IdleQuery) -> Result<Vec<(String, String)>, Error> {
        Backend::idle_record_turns(self, q).await
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        Ok(<B::Database as Dialect>::turn(self.pools(), namespace, turn_id).await?)
    }

    async fn list_turns(&self, q: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error> {
        Ok(<B::Database as Dialect>::list_turns(self.pools(), q).await?)
    }

    async fn expired_turns(&self, q: &ExpiredQuery) -> Result<Vec<(String, String)>, Error> {
        Ok(<B::Database as Dialect>::expired_turns(self.pools(), q).await?)
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error> {
        Backend::get(self, namespace, key).await
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        Backend::purge_expired(self, limit).await
    }

    async fn optimize(&self) -> Result<(), Error> {
        Backend::optimize(self).await
    }

    async fn ping(&self) -> Result<(), Error> {
        Backend::ping(self).await
    }

    async fn figures(&self) -> StoreState {
        Backend::figures(self).await
    }

    async fn close(&self) {
        Backend::close(self).await
    }
}
