//! The Postgres backend: one database shared by many sidecars. Every write
//! commits with `synchronous_commit=on` (set on each connection), and at
//! start-up the store refuses a server that would not keep acknowledged
//! writes. Migrations run under sqlx's advisory lock, so sidecars starting
//! together migrate once.
//!
//! Lease arithmetic runs on the database server's clock (plus the test
//! offset), so sidecars with skewed clocks agree on who holds a lease. A
//! batch first takes transaction-scoped advisory locks on all its idempotency
//! keys, in one sorted order, which serializes requests for one key across
//! all writers and sidecars, including requests for a key with no row yet.
//! Multi-row statements take their rows from `UNNEST` arrays, so a batch is a
//! constant number of round trips.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};

use std::collections::HashMap;

use super::batch::{self, CheckpointKey, checkpoint_key};
use super::{Error, Store, Write, Written};
use crate::clock::{Clock, system_now};
use crate::idempotency::{Held, Record};
use crate::model::{
    Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// How long a request waits for a free connection before UNAVAILABLE. While
/// the server refuses connections the pool retries until then, so this is
/// also how long a write can take to hear that Postgres went away before
/// the health monitor trips the breaker.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The database server's time in nanoseconds (microsecond resolution).
const DB_NOW_NS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000";

/// Settings under which the server keeps every acknowledged commit.
const DURABLE_SYNCHRONOUS_COMMIT: [&str; 4] = ["on", "local", "remote_write", "remote_apply"];

/// A store in a Postgres database.
pub struct PostgresStore {
    pool: PgPool,
    /// For the health check's own connection when no pooled one is idle.
    options: PgConnectOptions,
    /// When a health check last failed, as time since `opened`: connections
    /// opened before it may be dead, so the pool discards them.
    failed_at: Arc<AtomicU64>,
    opened: Instant,
    /// The offset added to the database server's clock.
    clock: Clock,
}

impl PostgresStore {
    /// Connects, checks the server keeps acknowledged writes (unless
    /// `allow_nondurable`), and migrates.
    pub async fn open(url: &str, pool_max: u32, clock: Clock, allow_nondurable: bool) -> Result<PostgresStore, Error> {
        let options = PgConnectOptions::from_str(url)?.application_name("stepwell");
        check_durability(&options, allow_nondurable).await?;
        // No ping before each use: a broken connection fails its batch
        // (UNAVAILABLE, nothing acknowledged), is dropped, and the health
        // monitor notices.
        let (opened, failed_at) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        let options = options.options([("synchronous_commit", "on")]);
        let pool = PgPoolOptions::new()
            .max_connections(pool_max)
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
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone())
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(PostgresStore { pool, options, failed_at, opened, clock })
    }
}

/// Refuses a server that could lose acknowledged commits: `fsync=off`, or
/// `synchronous_commit=off` for this role or database (read on a connection
/// without stepwell's own session setting, so role and database defaults show).
async fn check_durability(options: &PgConnectOptions, allow_nondurable: bool) -> Result<(), Error> {
    use sqlx::Connection;
    let mut conn = PgConnection::connect_with(options).await?;
    let fsync: String = sqlx::query_scalar("SHOW fsync").fetch_one(&mut conn).await?;
    let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit").fetch_one(&mut conn).await?;
    conn.close().await?;
    let mut problems = Vec::new();
    if fsync != "on" {
        problems.push(format!("fsync is {fsync}: a crash of the database host can lose committed transactions"));
    }
    if !DURABLE_SYNCHRONOUS_COMMIT.contains(&synchronous_commit.as_str()) {
        problems.push(format!(
            "synchronous_commit is {synchronous_commit} for this role or database: commits are acknowledged before \
             they are durable"
        ));
    }
    if problems.is_empty() {
        return Ok(());
    }
    let problems = problems.join("; ");
    if allow_nondurable {
        tracing::warn!(%problems, "UNSAFE: serving on a Postgres that may lose acknowledged writes");
        return Ok(());
    }
    Err(Error::NotDurable(problems))
}

fn decode_error(what: String) -> sqlx::Error {
    sqlx::Error::Decode(what.into())
}

fn checkpoint_from_row(row: &PgRow) -> Result<StoredCheckpoint, sqlx::Error> {
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

fn turn_from_row(row: &PgRow) -> Result<TurnSummary, sqlx::Error> {
    let count: i64 = row.try_get("checkpoint_count")?;
    Ok(TurnSummary {
        turn_id: row.try_get("turn_id")?,
        session_id: row.try_get("session_id")?,
        first_timestamp: row.try_get("first_ts_ns")?,
        last_timestamp: row.try_get("last_ts_ns")?,
        last_phase: row.try_get("last_phase")?,
        checkpoint_count: u64::try_from(count).map_err(|_| decode_error(format!("count {count} < 0")))?,
        terminal: row.try_get("terminal")?,
        workflow_version: row.try_get("workflow_version")?,
    })
}

fn record_from_row(row: &PgRow) -> Result<Record, sqlx::Error> {
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
        error: String::from_utf8(row.try_get("error")?).map_err(|_| decode_error("error is not UTF-8".into()))?,
        retention: row.try_get("retention_ns")?,
        created_at: row.try_get("created_at_ns")?,
        updated_at: row.try_get("updated_at_ns")?,
        purge_after: row.try_get("purge_after_ns")?,
    })
}

/// Takes the advisory locks of the batch's keys, in one sorted order so that
/// concurrent batches never deadlock, then reads the database's clock: one
/// round trip. The locks last until the transaction ends.
async fn lock_keys(conn: &mut PgConnection, keys: &[(&str, &str)]) -> Result<UnixNanos, sqlx::Error> {
    let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "WITH locks AS MATERIALIZED ( \
           SELECT pg_advisory_xact_lock(h) FROM ( \
             SELECT DISTINCT hashtextextended(n || '/' || k, 0) AS h FROM UNNEST($1::text[], $2::text[]) AS u(n, k) \
             ORDER BY h) sorted) \
         SELECT {DB_NOW_NS} FROM (SELECT count(*) FROM locks) locked"
    )))
    .bind(namespaces)
    .bind(names)
    .fetch_one(&mut *conn)
    .await
}

/// Inserts the batch's new checkpoints and updates their turns in one
/// statement; answers the `seq` of each key it inserted (a key already stored
/// is skipped).
async fn insert_checkpoints<'b>(
    conn: &mut PgConnection,
    unique: &[&'b NewCheckpoint],
    recorded_at: UnixNanos,
) -> Result<HashMap<CheckpointKey<'b>, i64>, sqlx::Error> {
    let column = |f: fn(&'b NewCheckpoint) -> &'b str| unique.iter().map(|cp| f(cp)).collect::<Vec<&str>>();
    // One statement inserts the checkpoints and merges each turn's summary:
    // the latest inserted checkpoint by (timestamp, seq) per turn, and the
    // latest that named a session or version, as a single append would.
    let rows = sqlx::query(
        "WITH ins AS ( \
           INSERT INTO checkpoints \
             (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
           SELECT n, t, p, ts, s, st, te, v, $9 \
           FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::bool[], \
                       $8::text[]) AS u(n, t, p, ts, s, st, te, v) \
           ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING \
           RETURNING namespace, turn_id, phase, ts_ns, seq, session_id, terminal, workflow_version), \
         deltas AS ( \
           SELECT namespace, turn_id, count(*) AS checkpoint_count, min(ts_ns) AS first_ts_ns, \
             max(ts_ns) AS last_ts_ns, \
             (array_agg(seq ORDER BY ts_ns DESC, seq DESC))[1] AS last_seq, \
             (array_agg(phase ORDER BY ts_ns DESC, seq DESC))[1] AS last_phase, \
             (array_agg(terminal ORDER BY ts_ns DESC, seq DESC))[1] AS terminal, \
             coalesce((array_agg(session_id ORDER BY ts_ns DESC, seq DESC) \
                       FILTER (WHERE session_id <> ''))[1], '') AS session_id, \
             coalesce(max(ts_ns) FILTER (WHERE session_id <> ''), -9223372036854775808) AS session_ts_ns, \
             coalesce((array_agg(workflow_version ORDER BY ts_ns DESC, seq DESC) \
                       FILTER (WHERE workflow_version <> ''))[1], '') AS workflow_version, \
             coalesce(max(ts_ns) FILTER (WHERE workflow_version <> ''), -9223372036854775808) AS version_ts_ns \
           FROM ins GROUP BY namespace, turn_id), \
         summary AS ( \
           INSERT INTO turns (namespace, turn_id, checkpoint_count, first_ts_ns, last_ts_ns, last_seq, last_phase, \
                              terminal, session_id, session_ts_ns, workflow_version, version_ts_ns) \
           SELECT * FROM deltas ORDER BY namespace, turn_id \
           ON CONFLICT (namespace, turn_id) DO UPDATE SET \
             checkpoint_count = turns.checkpoint_count + excluded.checkpoint_count, \
             first_ts_ns = LEAST(turns.first_ts_ns, excluded.first_ts_ns), \
             last_phase = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                          THEN excluded.last_phase ELSE turns.last_phase END, \
             terminal = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                        THEN excluded.terminal ELSE turns.terminal END, \
             last_seq = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                        THEN excluded.last_seq ELSE turns.last_seq END, \
             last_ts_ns = GREATEST(turns.last_ts_ns, excluded.last_ts_ns), \
             session_id = CASE WHEN excluded.session_id <> '' AND excluded.session_ts_ns >= turns.session_ts_ns \
                          THEN excluded.session_id ELSE turns.session_id END, \
             session_ts_ns = CASE WHEN excluded.session_id <> '' AND excluded.session_ts_ns >= turns.session_ts_ns \
                             THEN excluded.session_ts_ns ELSE turns.session_ts_ns END, \
             workflow_version = CASE WHEN excluded.workflow_version <> '' \
                                 AND excluded.version_ts_ns >= turns.version_ts_ns \
                                THEN excluded.workflow_version ELSE turns.workflow_version END, \
             version_ts_ns = CASE WHEN excluded.workflow_version <> '' \
                              AND excluded.version_ts_ns >= turns.version_ts_ns \
                             THEN excluded.version_ts_ns ELSE turns.version_ts_ns END) \
         SELECT namespace, turn_id, phase, ts_ns, seq FROM ins",
    )
    .bind(column(|cp| &cp.namespace))
    .bind(column(|cp| &cp.turn_id))
    .bind(column(|cp| &cp.phase))
    .bind(unique.iter().map(|cp| cp.timestamp).collect::<Vec<i64>>())
    .bind(column(|cp| &cp.session_id))
    .bind(unique.iter().map(|cp| &cp.state[..]).collect::<Vec<&[u8]>>())
    .bind(unique.iter().map(|cp| cp.terminal).collect::<Vec<bool>>())
    .bind(column(|cp| &cp.workflow_version))
    .bind(recorded_at)
    .fetch_all(&mut *conn)
    .await?;
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
    conn: &mut PgConnection,
    keys: &[CheckpointKey<'b>],
) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, sqlx::Error> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = sqlx::query(
        "SELECT c.* FROM checkpoints c \
         JOIN UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[]) AS k(namespace, turn_id, phase, ts_ns) \
           USING (namespace, turn_id, phase, ts_ns)",
    )
    .bind(keys.iter().map(|k| k.0).collect::<Vec<&str>>())
    .bind(keys.iter().map(|k| k.1).collect::<Vec<&str>>())
    .bind(keys.iter().map(|k| k.2).collect::<Vec<&str>>())
    .bind(keys.iter().map(|k| k.3).collect::<Vec<i64>>())
    .fetch_all(&mut *conn)
    .await?;
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
    conn: &mut PgConnection,
    keys: &[(&str, &str)],
) -> Result<HashMap<(String, String), Record>, sqlx::Error> {
    let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
    let rows = sqlx::query(
        "SELECT i.* FROM idempotency i \
         JOIN UNNEST($1::text[], $2::text[]) AS k(namespace, key) USING (namespace, key)",
    )
    .bind(namespaces)
    .bind(names)
    .fetch_all(&mut *conn)
    .await?;
    rows.iter().map(|row| record_from_row(row).map(|r| ((r.namespace.clone(), r.key.clone()), r))).collect()
}

/// Writes whole records, replacing the rows of their keys.
async fn save_records(conn: &mut PgConnection, records: &[Record]) -> Result<(), sqlx::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut tokens = Vec::with_capacity(records.len());
    for r in records {
        tokens.push(
            i64::try_from(r.lease_token).map_err(|_| decode_error(format!("token {} too large", r.lease_token)))?,
        );
    }
    let int = |f: fn(&Record) -> i64| records.iter().map(f).collect::<Vec<i64>>();
    let bytes = |f: fn(&Record) -> &[u8]| records.iter().map(f).collect::<Vec<&[u8]>>();
    sqlx::query(
        "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                  result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bigint[], \
                              $7::bigint[], $8::bytea[], $9::bytea[], $10::bigint[], $11::bigint[], $12::bigint[], \
                              $13::bigint[]) \
         ON CONFLICT (namespace, key) DO UPDATE SET \
           held = excluded.held, fingerprint = excluded.fingerprint, attempt = excluded.attempt, \
           lease_token = excluded.lease_token, lease_expires_at_ns = excluded.lease_expires_at_ns, \
           result = excluded.result, error = excluded.error, retention_ns = excluded.retention_ns, \
           created_at_ns = excluded.created_at_ns, updated_at_ns = excluded.updated_at_ns, \
           purge_after_ns = excluded.purge_after_ns",
    )
    .bind(records.iter().map(|r| r.namespace.as_str()).collect::<Vec<&str>>())
    .bind(records.iter().map(|r| r.key.as_str()).collect::<Vec<&str>>())
    .bind(int(|r| r.held.code()))
    .bind(bytes(|r| &r.fingerprint))
    .bind(int(|r| i64::from(r.attempt)))
    .bind(tokens)
    .bind(int(|r| r.lease_expires_at))
    .bind(bytes(|r| &r.result))
    .bind(bytes(|r| r.error.as_bytes()))
    .bind(int(|r| r.retention))
    .bind(int(|r| r.created_at))
    .bind(int(|r| r.updated_at))
    .bind(int(|r| r.purge_after))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// `count` fresh fencing tokens from the store-wide sequence, in increasing order.
async fn lease_tokens(conn: &mut PgConnection, count: usize) -> Result<Vec<u64>, sqlx::Error> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let count = i64::try_from(count).map_err(|_| decode_error("too many tokens".into()))?;
    let mut tokens: Vec<i64> = sqlx::query_scalar("SELECT nextval('lease_tokens') FROM generate_series(1, $1)")
        .bind(count)
        .fetch_all(&mut *conn)
        .await?;
    tokens.sort_unstable();
    tokens.into_iter().map(|t| u64::try_from(t).map_err(|_| decode_error(format!("token {t} < 0")))).collect()
}

/// Deletes a turn's checkpoints and summary; answers how many checkpoints went.
async fn delete_turn(conn: &mut PgConnection, namespace: &str, turn_id: &str) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query("DELETE FROM checkpoints WHERE namespace = $1 AND turn_id = $2")
        .bind(namespace)
        .bind(turn_id)
        .execute(&mut *conn)
        .await?
        .rows_affected();
    sqlx::query("DELETE FROM turns WHERE namespace = $1 AND turn_id = $2")
        .bind(namespace)
        .bind(turn_id)
        .execute(&mut *conn)
        .await?;
    Ok(deleted)
}

/// A restored checkpoint, from the restore query's columns by position; the
/// namespace and turn are the query's.
fn page_row(row: &PgRow, q: &RestoreQuery) -> Result<StoredCheckpoint, sqlx::Error> {
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
    conn: &'c mut PgConnection,
    clock: &'c Clock,
}

#[async_trait]
impl batch::Statements for Statements<'_> {
    async fn lock_keys(&mut self, keys: &[(&str, &str)]) -> Result<UnixNanos, sqlx::Error> {
        Ok(lock_keys(self.conn, keys).await?.saturating_add(self.clock.offset()))
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
impl Store for PostgresStore {
    async fn write(&self, batch: Vec<Write>) -> Result<Written, Error> {
        let recorded_at = system_now();
        if batch::needs_transaction(&batch) {
            let mut tx = self.pool.begin().await?;
            let statements = &mut Statements { conn: &mut tx, clock: &self.clock };
            let answers = batch::run(statements, batch, recorded_at).await?;
            tx.commit().await?;
            Ok(answers)
        } else {
            // One statement, one round trip.
            let mut conn = self.pool.acquire().await?;
            batch::run(&mut Statements { conn: &mut conn, clock: &self.clock }, batch, recorded_at).await
        }
    }

    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        let sql = if q.newest_first {
            "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns FROM checkpoints \
             WHERE namespace = $1 AND turn_id = $2 AND ($3::text IS NULL OR phase = $3) AND (ts_ns, seq) < ($4, $5) \
             ORDER BY ts_ns DESC, seq DESC LIMIT $6"
        } else {
            "SELECT seq, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns FROM checkpoints \
             WHERE namespace = $1 AND turn_id = $2 AND ($3::text IS NULL OR phase = $3) AND (ts_ns, seq) > ($4, $5) \
             ORDER BY ts_ns, seq LIMIT $6"
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
            .fetch_all(&self.pool)
            .await?;
        let checkpoints = rows.iter().map(|row| page_row(row, q)).collect::<Result<Vec<_>, _>>()?;
        Ok(page(checkpoints, q.limit))
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        let row = sqlx::query("SELECT * FROM turns WHERE namespace = $1 AND turn_id = $2")
            .bind(namespace)
            .bind(turn_id)
            .fetch_optional(&self.pool)
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
             WHERE namespace = $1 AND turn_id > $2 AND ($3::boolean IS NULL OR terminal = $3) \
               AND ($4::text IS NULL OR session_id = $4) AND ($5::bigint IS NULL OR last_ts_ns < $5) \
             ORDER BY turn_id LIMIT $6",
        )
        .bind(&q.namespace)
        .bind(q.after_turn_id.as_deref().unwrap_or(""))
        .bind(terminal)
        .bind(q.session_id.as_deref())
        .bind(q.updated_before)
        .bind(i64::from(q.limit) + 1)
        .fetch_all(&self.pool)
        .await?;
        let turns = rows.iter().map(turn_from_row).collect::<Result<Vec<_>, _>>()?;
        Ok(page(turns, q.limit))
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(Record, UnixNanos)>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {DB_NOW_NS} + $3 AS now_ns, * FROM idempotency WHERE namespace = $1 AND key = $2"
        )))
        .bind(namespace)
        .bind(key)
        .bind(self.clock.offset())
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let now: i64 = row.try_get("now_ns")?;
        let record = record_from_row(&row)?;
        Ok((!record.is_purgeable(now)).then_some((record, now)))
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        // The outer condition is checked again on a row updated meanwhile, so
        // a key begun again after its retention ran out is not deleted.
        let purged = sqlx::query(sqlx::AssertSqlSafe(format!(
            "WITH now AS (SELECT {DB_NOW_NS} + $1 AS ns) \
             DELETE FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) AND ctid IN \
               (SELECT ctid FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) LIMIT $2)"
        )))
        .bind(self.clock.offset())
        .bind(i64::from(limit))
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(purged)
    }

    /// An idle pooled connection answers, or else a connection of its own
    /// does: a server that refuses connections fails the check at once,
    /// where the pool would retry until its acquire timeout.
    async fn ping(&self) -> Result<(), Error> {
        use sqlx::Connection;
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
        Ok(answered?)
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
