//! The Postgres backend: one database shared by many sidecars. Every write
//! commits with `synchronous_commit=on` (set on each connection), and at
//! start-up the store refuses a server that would not keep acknowledged
//! writes. Migrations run under sqlx's advisory lock, so sidecars starting
//! together migrate once.
//!
//! Lease arithmetic runs on the database server's clock (plus the test
//! offset), so sidecars with skewed clocks agree on who holds a lease. Every
//! idempotency write first takes a transaction-scoped advisory lock on its
//! key, which serializes requests for one key across all sidecars, including
//! requests for a key that has no row yet.

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};

use super::{Error, Fenced, Store};
use crate::clock::{Clock, system_now};
use crate::idempotency::{self, BeginArgs, BeginOutcome, BeginPlan, Fence, Held, Plan, Record, RecordState};
use crate::model::{
    Appended, Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// How long a request waits for a free connection before UNAVAILABLE.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The database server's time in nanoseconds (microsecond resolution).
const DB_NOW_NS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000";

/// Settings under which the server keeps every acknowledged commit.
const DURABLE_SYNCHRONOUS_COMMIT: [&str; 4] = ["on", "local", "remote_write", "remote_apply"];

/// A store in a Postgres database.
pub struct PostgresStore {
    pool: PgPool,
    /// The offset added to the database server's clock.
    clock: Clock,
}

impl PostgresStore {
    /// Connects, checks the server keeps acknowledged writes (unless
    /// `allow_nondurable`), and migrates.
    pub async fn open(url: &str, pool_max: u32, clock: Clock, allow_nondurable: bool) -> Result<PostgresStore, Error> {
        let options = PgConnectOptions::from_str(url)?.application_name("stepwell");
        check_durability(&options, allow_nondurable).await?;
        let pool = PgPoolOptions::new()
            .max_connections(pool_max)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.options([("synchronous_commit", "on")]))
            .await?;
        MIGRATOR.run(&pool).await?;
        Ok(PostgresStore { pool, clock })
    }

    /// Begins a write transaction on `namespace/key`: takes the key's advisory
    /// lock, then reads the store's time.
    async fn lock_key(
        &self,
        namespace: &str,
        key: &str,
    ) -> Result<(sqlx::Transaction<'static, sqlx::Postgres>, UnixNanos), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // The lock is taken in the FROM clause, so the time is read after it is held.
        let now: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {DB_NOW_NS} FROM (SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || $2, 0))) AS locked"
        )))
        .bind(namespace)
        .bind(key)
        .fetch_one(&mut *tx)
        .await?;
        Ok((tx, now.saturating_add(self.clock.offset())))
    }

    /// Runs a Complete, Release or Extend plan on the fenced record.
    async fn fenced<T>(
        &self,
        fence: &Fence,
        plan: impl FnOnce(Option<&Record>, UnixNanos) -> Plan<T>,
    ) -> Result<Fenced<T>, Error> {
        let (mut tx, now) = self.lock_key(&fence.namespace, &fence.key).await?;
        let record = load_record(&mut tx, &fence.namespace, &fence.key, now).await?;
        match plan(record.as_ref(), now) {
            Plan::Answer(answer) => {
                tx.rollback().await?;
                Ok(answer)
            }
            Plan::Write(record, answer) => {
                save_record(&mut tx, &record).await?;
                tx.commit().await?;
                Ok(Ok(answer))
            }
        }
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

/// The key's record, unless absent or past its retention.
async fn load_record(
    conn: &mut PgConnection,
    namespace: &str,
    key: &str,
    now: UnixNanos,
) -> Result<Option<Record>, sqlx::Error> {
    let row = sqlx::query("SELECT * FROM idempotency WHERE namespace = $1 AND key = $2")
        .bind(namespace)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.as_ref().map(record_from_row).transpose()?.filter(|r| !r.is_purgeable(now)))
}

/// Writes the whole record, replacing any row for its key.
async fn save_record(conn: &mut PgConnection, r: &Record) -> Result<(), sqlx::Error> {
    let token = i64::try_from(r.lease_token).map_err(|_| decode_error(format!("token {} too large", r.lease_token)))?;
    sqlx::query(
        "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                  result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (namespace, key) DO UPDATE SET \
           held = excluded.held, fingerprint = excluded.fingerprint, attempt = excluded.attempt, \
           lease_token = excluded.lease_token, lease_expires_at_ns = excluded.lease_expires_at_ns, \
           result = excluded.result, error = excluded.error, retention_ns = excluded.retention_ns, \
           created_at_ns = excluded.created_at_ns, updated_at_ns = excluded.updated_at_ns, \
           purge_after_ns = excluded.purge_after_ns",
    )
    .bind(&r.namespace)
    .bind(&r.key)
    .bind(r.held.code())
    .bind(&r.fingerprint[..])
    .bind(i64::from(r.attempt))
    .bind(token)
    .bind(r.lease_expires_at)
    .bind(&r.result[..])
    .bind(r.error.as_bytes())
    .bind(r.retention)
    .bind(r.created_at)
    .bind(r.updated_at)
    .bind(r.purge_after)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Splits `limit + 1` fetched rows into a page and whether more follow.
fn page<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

#[async_trait]
impl Store for PostgresStore {
    async fn append(&self, cp: NewCheckpoint) -> Result<Appended, Error> {
        let mut tx = self.pool.begin().await?;
        let recorded_at = system_now();
        let seq: Option<i64> = sqlx::query_scalar(
            "INSERT INTO checkpoints \
               (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING \
             RETURNING seq",
        )
        .bind(&cp.namespace)
        .bind(&cp.turn_id)
        .bind(&cp.phase)
        .bind(cp.timestamp)
        .bind(&cp.session_id)
        .bind(&cp.state[..])
        .bind(cp.terminal)
        .bind(&cp.workflow_version)
        .bind(recorded_at)
        .fetch_optional(&mut *tx)
        .await?;

        let Some(seq) = seq else {
            // The conflicting row is committed: ON CONFLICT waited for it.
            let row = sqlx::query(
                "SELECT * FROM checkpoints WHERE namespace = $1 AND turn_id = $2 AND phase = $3 AND ts_ns = $4",
            )
            .bind(&cp.namespace)
            .bind(&cp.turn_id)
            .bind(&cp.phase)
            .bind(cp.timestamp)
            .fetch_one(&mut *tx)
            .await?;
            let stored = checkpoint_from_row(&row)?;
            tx.rollback().await?;
            return Ok(if cp.same_content(&stored.checkpoint) {
                Appended::Duplicate(stored)
            } else {
                Appended::Conflict
            });
        };

        // As on SQLite, but concurrent appends may commit out of seq order,
        // so "latest" compares (timestamp, seq) rather than the timestamp alone.
        sqlx::query(
            "INSERT INTO turns (namespace, turn_id, session_id, first_ts_ns, last_ts_ns, last_seq, last_phase, \
                                checkpoint_count, terminal, workflow_version, session_ts_ns, version_ts_ns) \
             VALUES ($1, $2, $3, $4, $4, $5, $6, 1, $7, $8, \
                     CASE WHEN $3 = '' THEN $9 ELSE $4 END, CASE WHEN $8 = '' THEN $9 ELSE $4 END) \
             ON CONFLICT (namespace, turn_id) DO UPDATE SET \
               session_id = CASE WHEN excluded.session_id <> '' AND excluded.last_ts_ns >= turns.session_ts_ns \
                            THEN excluded.session_id ELSE turns.session_id END, \
               session_ts_ns = CASE WHEN excluded.session_id <> '' AND excluded.last_ts_ns >= turns.session_ts_ns \
                               THEN excluded.last_ts_ns ELSE turns.session_ts_ns END, \
               workflow_version = CASE WHEN excluded.workflow_version <> '' \
                                   AND excluded.last_ts_ns >= turns.version_ts_ns \
                                  THEN excluded.workflow_version ELSE turns.workflow_version END, \
               version_ts_ns = CASE WHEN excluded.workflow_version <> '' \
                                AND excluded.last_ts_ns >= turns.version_ts_ns \
                               THEN excluded.last_ts_ns ELSE turns.version_ts_ns END, \
               first_ts_ns = LEAST(turns.first_ts_ns, excluded.first_ts_ns), \
               checkpoint_count = turns.checkpoint_count + 1, \
               last_phase = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                            THEN excluded.last_phase ELSE turns.last_phase END, \
               terminal = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                          THEN excluded.terminal ELSE turns.terminal END, \
               last_seq = CASE WHEN (excluded.last_ts_ns, excluded.last_seq) > (turns.last_ts_ns, turns.last_seq) \
                          THEN excluded.last_seq ELSE turns.last_seq END, \
               last_ts_ns = GREATEST(turns.last_ts_ns, excluded.last_ts_ns)",
        )
        .bind(&cp.namespace)
        .bind(&cp.turn_id)
        .bind(&cp.session_id)
        .bind(cp.timestamp)
        .bind(seq)
        .bind(&cp.phase)
        .bind(cp.terminal)
        .bind(&cp.workflow_version)
        .bind(i64::MIN)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Appended::Inserted(StoredCheckpoint { checkpoint: cp, recorded_at, seq }))
    }

    async fn restore(&self, q: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error> {
        let sql = if q.newest_first {
            "SELECT * FROM checkpoints \
             WHERE namespace = $1 AND turn_id = $2 AND ($3::text IS NULL OR phase = $3) AND (ts_ns, seq) < ($4, $5) \
             ORDER BY ts_ns DESC, seq DESC LIMIT $6"
        } else {
            "SELECT * FROM checkpoints \
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
        let checkpoints = rows.iter().map(checkpoint_from_row).collect::<Result<Vec<_>, _>>()?;
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

    async fn delete_turn(&self, namespace: &str, turn_id: &str) -> Result<u64, Error> {
        let mut tx = self.pool.begin().await?;
        let deleted = sqlx::query("DELETE FROM checkpoints WHERE namespace = $1 AND turn_id = $2")
            .bind(namespace)
            .bind(turn_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM turns WHERE namespace = $1 AND turn_id = $2")
            .bind(namespace)
            .bind(turn_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error> {
        let (mut tx, now) = self.lock_key(&args.namespace, &args.key).await?;
        let record = load_record(&mut tx, &args.namespace, &args.key, now).await?;
        match idempotency::plan_begin(record.as_ref(), &args, now) {
            BeginPlan::Answer(answer) => {
                tx.rollback().await?;
                Ok(answer)
            }
            BeginPlan::Acquire { attempt, previous_lease_expired } => {
                let token: i64 = sqlx::query_scalar("SELECT nextval('lease_tokens')").fetch_one(&mut *tx).await?;
                let lease_token = u64::try_from(token).map_err(|_| decode_error(format!("token {token} < 0")))?;
                let acquired = idempotency::acquired(record.as_ref(), &args, now, lease_token, attempt);
                save_record(&mut tx, &acquired).await?;
                tx.commit().await?;
                Ok(Ok(BeginOutcome::Acquired {
                    lease_token,
                    attempt,
                    lease_expires_at: acquired.lease_expires_at,
                    previous_lease_expired,
                }))
            }
        }
    }

    async fn complete(&self, fence: Fence, result: Vec<u8>) -> Result<Fenced<UnixNanos>, Error> {
        self.fenced(&fence, |record, now| idempotency::plan_complete(record, &fence, &result, now)).await
    }

    async fn release(&self, fence: Fence, error: String, permanent: bool) -> Result<Fenced<RecordState>, Error> {
        self.fenced(&fence, |record, now| idempotency::plan_release(record, &fence, &error, permanent, now)).await
    }

    async fn extend(&self, fence: Fence, lease: i64) -> Result<Fenced<UnixNanos>, Error> {
        self.fenced(&fence, |record, now| idempotency::plan_extend(record, &fence, lease, now)).await
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

    async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }
}
