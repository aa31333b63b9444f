//! Baseline (a), "direct": what an application gets by writing each
//! checkpoint itself with sqlx, one `INSERT ... ON CONFLICT DO NOTHING` per
//! transaction, into a table created by stepwell's own first migration (so
//! its shape and indexes are stepwell's; the turns summary stepwell also
//! keeps is left empty). Same durability as the sidecar: SQLite in WAL mode
//! with `synchronous=FULL` through one writer connection that all callers
//! share (a pool of one), and Postgres through a pool with
//! `synchronous_commit=on`, one connection per caller.
//!
//! The keys and payloads are those of W1's `Append`, so the two are compared
//! on identical rows.
//!
//! With `--direct-sqlite rusqlite`, the SQLite writer is instead what an
//! application using a synchronous binding writes: a thread that owns one
//! rusqlite connection (same settings) and commits each insert as its own
//! transaction, one hop there and one back per insert instead of sqlx's
//! message per statement to its worker thread. (Running the insert on the
//! caller's own thread would block the runtime's workers, and with them the
//! harness's timers.) Ratios against it are the ones an independent load
//! generator with such a writer sees.
//!
//! For W2, `DirectRead` is the application reading a whole turn itself: one
//! `SELECT … ORDER BY ts_ns, seq LIMIT 101` of the turn's checkpoints per
//! call, every column decoded, through a pool of one connection per caller
//! (SQLite opened read-only beside the file stepwell wrote), on the very
//! store W2's sidecar filled and restored from.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::{PgPool, Row, SqlitePool};

use crate::load::{CallResult, Failure, Workload};
use crate::payload::Payloads;
use crate::stores::sqlite_options;
use crate::workloads::{NAMESPACE, TURN_LENGTH, checkpoint_key, restored_turn};

/// stepwell's checkpoint schema for each backend (the turns table comes along, unused).
const SQLITE_SCHEMA: &str = include_str!("../../migrations/sqlite/0001_checkpoints.sql");
pub const POSTGRES_SCHEMA: &str = include_str!("../../migrations/postgres/0001_checkpoints.sql");
/// stepwell's idempotency table and lease-token sequence, for the W3 pgbench pair.
pub const POSTGRES_IDEMPOTENCY_SCHEMA: &str = include_str!("../../migrations/postgres/0002_idempotency.sql");

const SQLITE_INSERT: &str = "INSERT INTO checkpoints \
    (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
    VALUES (?1, ?2, ?3, ?4, '', ?5, 0, '', ?6) ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING";
const POSTGRES_INSERT: &str = "INSERT INTO checkpoints \
    (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
    VALUES ($1, $2, $3, $4, '', $5, false, '', $6) ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING";

/// A whole turn's checkpoints in order, one more than a turn to see that no more follow.
const SQLITE_READ_TURN: &str = "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
    FROM checkpoints WHERE namespace = ?1 AND turn_id = ?2 ORDER BY ts_ns, seq LIMIT ?3";
const POSTGRES_READ_TURN: &str = "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
    FROM checkpoints WHERE namespace = $1 AND turn_id = $2 ORDER BY ts_ns, seq LIMIT $3";

#[derive(Clone)]
enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
    /// The thread that owns a synchronous connection, by its queue.
    Rusqlite(std::sync::mpsc::Sender<Insert>),
}

/// Inserts W1's checkpoints directly; each must be new (one row affected).
pub struct DirectInsert {
    pool: Pool,
    run: String,
    payloads: Arc<Payloads>,
}

impl DirectInsert {
    /// A new SQLite file at `path` with stepwell's checkpoint table, written
    /// through one connection.
    pub async fn sqlite(path: &Path, run: String, payloads: Arc<Payloads>) -> Result<DirectInsert, String> {
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(sqlite_options(path).create_if_missing(true))
            .await
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        sqlx::raw_sql(SQLITE_SCHEMA).execute(&pool).await.map_err(|e| format!("create the schema: {e}"))?;
        Ok(DirectInsert { pool: Pool::Sqlite(pool), run, payloads })
    }

    /// A new SQLite file at `path` with stepwell's checkpoint table, written
    /// by a thread of its own through one rusqlite connection in WAL mode
    /// with `synchronous=FULL`, as through sqlx. The thread ends when the
    /// last handle to its queue is dropped.
    pub fn rusqlite(path: &Path, run: String, payloads: Arc<Payloads>) -> Result<DirectInsert, String> {
        let open = || -> rusqlite::Result<rusqlite::Connection> {
            let connection = rusqlite::Connection::open(path)?;
            connection.busy_timeout(Duration::from_secs(5))?;
            connection.pragma_update(None, "journal_mode", "WAL")?;
            connection.pragma_update(None, "synchronous", "FULL")?;
            connection.execute_batch(SQLITE_SCHEMA)?;
            Ok(connection)
        };
        let connection = open().map_err(|e| format!("open {}: {e}", path.display()))?;
        let (queue, inserts) = std::sync::mpsc::channel::<Insert>();
        std::thread::Builder::new()
            .name("direct-rusqlite".into())
            .spawn(move || {
                for insert in inserts {
                    let inserted = rusqlite_insert(&connection, &insert);
                    let _ = insert.answer.send(inserted);
                }
            })
            .map_err(|e| format!("start the writer thread: {e}"))?;
        Ok(DirectInsert { pool: Pool::Rusqlite(queue), run, payloads })
    }

    /// The empty database at `url`, given stepwell's checkpoint table and
    /// written through a pool of `connections` with `synchronous_commit=on`.
    pub async fn postgres(
        url: &str,
        connections: u32,
        run: String,
        payloads: Arc<Payloads>,
    ) -> Result<DirectInsert, String> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| e.to_string())?
            .application_name("stepwell-bench-direct")
            .options([("synchronous_commit", "on")]);
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            .map_err(|e| format!("connect to {url}: {e}"))?;
        sqlx::raw_sql(POSTGRES_SCHEMA).execute(&pool).await.map_err(|e| format!("create the schema: {e}"))?;
        Ok(DirectInsert { pool: Pool::Postgres(pool), run, payloads })
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
            Pool::Rusqlite(_) => {}
        }
    }
}

/// One W1 row for the rusqlite writer thread, and where its answer goes.
struct Insert {
    key: (String, String, i64),
    state: Vec<u8>,
    recorded_at: i64,
    answer: tokio::sync::oneshot::Sender<Result<u64, String>>,
}

/// Commits one W1 row as its own transaction (autocommit).
fn rusqlite_insert(connection: &rusqlite::Connection, insert: &Insert) -> Result<u64, String> {
    let mut statement = connection.prepare_cached(SQLITE_INSERT).map_err(|e| e.to_string())?;
    let (turn_id, phase, ts) = &insert.key;
    let inserted = statement
        .execute(rusqlite::params![NAMESPACE, turn_id, phase, ts, insert.state, insert.recorded_at])
        .map_err(|e| e.to_string())?;
    Ok(inserted as u64)
}

/// Hands one row to the rusqlite writer thread and waits for its answer.
async fn rusqlite_call(
    queue: &std::sync::mpsc::Sender<Insert>,
    key: (String, String, i64),
    state: Vec<u8>,
    recorded_at: i64,
) -> Result<u64, String> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    queue.send(Insert { key, state, recorded_at, answer }).map_err(|_| "the writer thread has ended".to_string())?;
    answered.await.map_err(|_| "the writer thread dropped the insert".to_string())?
}

impl Workload for DirectInsert {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let (turn_id, phase, ts) = checkpoint_key(&self.run, caller, k);
        let state = self.payloads.get(caller, k).to_vec();
        let pool = self.pool.clone();
        async move {
            let recorded_at =
                std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as i64);
            let inserted = match pool {
                Pool::Sqlite(pool) => sqlx::query(SQLITE_INSERT)
                    .bind(NAMESPACE)
                    .bind(&turn_id)
                    .bind(&phase)
                    .bind(ts)
                    .bind(state)
                    .bind(recorded_at)
                    .execute(&pool)
                    .await
                    .map(|done| done.rows_affected())
                    .map_err(|e| e.to_string()),
                Pool::Postgres(pool) => sqlx::query(POSTGRES_INSERT)
                    .bind(NAMESPACE)
                    .bind(&turn_id)
                    .bind(&phase)
                    .bind(ts)
                    .bind(state)
                    .bind(recorded_at)
                    .execute(&pool)
                    .await
                    .map(|done| done.rows_affected())
                    .map_err(|e| e.to_string()),
                Pool::Rusqlite(queue) => {
                    rusqlite_call(&queue, (turn_id.clone(), phase.clone(), ts), state, recorded_at).await
                }
            }
            .map_err(Failure::Error)?;
            if inserted != 1 {
                return Err(Failure::Check(format!(
                    "inserting new checkpoint {turn_id}/{phase} affected {inserted} rows"
                )));
            }
            Ok(())
        }
        .boxed()
    }
}

/// W2's direct baseline: reads whole turns of W2's populated store; each
/// read must give exactly one turn of `TURN_LENGTH` checkpoints.
pub struct DirectRead {
    pool: Pool,
    run: String,
    /// The callers and turns per caller that populated the store.
    populated: (usize, u64),
}

impl DirectRead {
    /// The SQLite file at `path`, read through `connections` read-only connections.
    pub async fn sqlite(
        path: &Path,
        connections: u32,
        run: String,
        populated: (usize, u64),
    ) -> Result<DirectRead, String> {
        let pool = SqlitePoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(sqlite_options(path).read_only(true))
            .await
            .map_err(|e| format!("open {}: {e}", path.display()))?;
        Ok(DirectRead { pool: Pool::Sqlite(pool), run, populated })
    }

    /// The database at `url`, read through a pool of `connections`.
    pub async fn postgres(
        url: &str,
        connections: u32,
        run: String,
        populated: (usize, u64),
    ) -> Result<DirectRead, String> {
        let options =
            PgConnectOptions::from_str(url).map_err(|e| e.to_string())?.application_name("stepwell-bench-direct-read");
        let pool = PgPoolOptions::new()
            .max_connections(connections)
            .min_connections(connections)
            .acquire_timeout(Duration::from_secs(60))
            .connect_with(options)
            .await
            .map_err(|e| format!("connect to {url}: {e}"))?;
        Ok(DirectRead { pool: Pool::Postgres(pool), run, populated })
    }

    pub async fn close(&self) {
        match &self.pool {
            Pool::Sqlite(pool) => pool.close().await,
            Pool::Postgres(pool) => pool.close().await,
            Pool::Rusqlite(_) => {}
        }
    }
}

/// The bytes a read decoded: every column of every row.
fn decoded<R: Row>(rows: &[R]) -> Result<usize, sqlx::Error>
where
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> Vec<u8>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    usize: sqlx::ColumnIndex<R>,
{
    let mut bytes = 0;
    for row in rows {
        let _seq: i64 = row.try_get(0)?;
        let session: String = row.try_get(1)?;
        let phase: String = row.try_get(2)?;
        let _ts: i64 = row.try_get(3)?;
        let state: Vec<u8> = row.try_get(4)?;
        let _terminal: bool = row.try_get(5)?;
        let version: String = row.try_get(6)?;
        let _recorded: i64 = row.try_get(7)?;
        bytes += session.len() + phase.len() + state.len() + version.len();
    }
    Ok(bytes)
}

impl Workload for DirectRead {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let (callers, turns) = self.populated;
        let turn_id = restored_turn(&self.run, callers, turns, caller, k);
        let pool = self.pool.clone();
        let limit = TURN_LENGTH as i64 + 1;
        async move {
            let read = match pool {
                Pool::Sqlite(pool) => {
                    let rows =
                        sqlx::query(SQLITE_READ_TURN).bind(NAMESPACE).bind(&turn_id).bind(limit).fetch_all(&pool).await;
                    rows.and_then(|rows| decoded(&rows).map(|_| rows.len()))
                }
                Pool::Postgres(pool) => {
                    let rows = sqlx::query(POSTGRES_READ_TURN)
                        .bind(NAMESPACE)
                        .bind(&turn_id)
                        .bind(limit)
                        .fetch_all(&pool)
                        .await;
                    rows.and_then(|rows| decoded(&rows).map(|_| rows.len()))
                }
                Pool::Rusqlite(_) => Err(sqlx::Error::Protocol("the direct read reads through sqlx".into())),
            }
            .map_err(|e| Failure::Error(e.to_string()))?;
            if read as u64 != TURN_LENGTH {
                return Err(Failure::Check(format!("reading {turn_id} gave {read} checkpoints, not {TURN_LENGTH}")));
            }
            Ok(())
        }
        .boxed()
    }
}
