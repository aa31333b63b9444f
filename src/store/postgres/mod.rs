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
//! all writers and sidecars, including requests for a key with no row yet;
//! the same statement reads the clock and draws the batch's fencing tokens.
//! Multi-row statements take their rows from `UNNEST` arrays, so a batch is a
//! constant number of round trips: with idempotency requests, BEGIN, the
//! locks, the records, their upsert, COMMIT.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use sqlx::migrate::MigrateError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::{ConnectOptions, FromRow, Postgres, Row, SqlSafeStr};

mod records;

use super::batch::{self, CheckpointKey};
use super::rows::{self, CheckpointRow, InsertedRow, KeyRow, decode_error};
use super::shared::{Backend, Conn, Dialect, LockTurn, Pools};
use super::{Error, IdleQuery, Options};
use crate::domain::keys::KeyRecord;
use crate::domain::model::{NewCheckpoint, StoredCheckpoint, UnixNanos};
use crate::domain::records::{NewRecord, RecordDelete, RecordEntry, RecordQuery};
use crate::observe::metrics::StoreState;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

/// The database server's time in nanoseconds (microsecond resolution).
const DB_NOW_NS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000";

/// Settings under which the server keeps every acknowledged commit.
const DURABLE_SYNCHRONOUS_COMMIT: [&str; 4] = ["on", "local", "remote_write", "remote_apply"];

/// A store in a Postgres database.
pub struct PostgresStore {
    /// One pool for writes and reads alike; the clock's offset is added to
    /// the database server's clock.
    pools: Pools<Postgres>,
    /// For the health check's own connection when no pooled one is idle.
    options: PgConnectOptions,
    /// When a health check last failed, as time since `opened`: connections
    /// opened before it may be dead, so the pool discards them.
    failed_at: Arc<AtomicU64>,
    opened: Instant,
}

impl PostgresStore {
    /// Connects, checks the server keeps acknowledged writes (unless
    /// `unsafe_accept_nondurable_postgres`), and migrates.
    pub async fn open(url: &str, store: &Options) -> Result<PostgresStore, Error> {
        let options = connect_options(url).await?.application_name("stepwell");
        check_durability(&options, store.unsafe_accept_nondurable_postgres).await?;
        // No ping before each use: a broken connection fails its batch
        // (UNAVAILABLE, nothing acknowledged), is dropped, and the health
        // monitor notices.
        let (opened, failed_at) = (Instant::now(), Arc::new(AtomicU64::new(0)));
        // Migrations run on a connection of their own: their wait for
        // another sidecar's migration is bounded by --migration-lock-timeout-ms,
        // and their statements (an index built over a large table) by nothing.
        migrate(&options, store.migration_lock_timeout).await?;
        let statement_timeout = store.postgres_statement_timeout.as_millis().to_string();
        let lock_timeout = store.postgres_lock_timeout.as_millis().to_string();
        let options = options.options([
            ("synchronous_commit", "on"),
            ("statement_timeout", statement_timeout.as_str()),
            ("lock_timeout", lock_timeout.as_str()),
        ]);
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
            .await?;
        let pools = Pools::new(pool.clone(), pool, store.clock.clone());
        Ok(PostgresStore { pools, options, failed_at, opened })
    }
}

/// Brings the schema up to date on a connection of its own, waiting at
/// most `lock_wait` for the migration lock another sidecar may hold.
async fn migrate(options: &PgConnectOptions, lock_wait: Duration) -> Result<(), Error> {
    let lock_timeout = lock_wait.as_millis().to_string();
    let options = options.clone().options([("lock_timeout", lock_timeout.as_str()), ("statement_timeout", "0")]);
    let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
    let migrated = MIGRATOR.run(&pool).await;
    pool.close().await;
    match migrated {
        Err(MigrateError::Execute(sqlx::Error::Database(error)))
            if error.code().as_deref() == Some(LOCK_NOT_AVAILABLE) =>
        {
            Err(Error::MigrationLockTimeout {
                lock: "the Postgres migration lock (an advisory lock)".to_owned(),
                waited: lock_wait,
            })
        }
        migrated => Ok(migrated?),
    }
}

/// SQLSTATE of a lock wait past `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// The URL parameters sqlx reads; it ignores any other, but logs its value.
const KNOWN_PARAMETERS: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// The parameters that name a certificate or key: a file, or PEM text.
const CERTIFICATE_PARAMETERS: [&str; 7] =
    ["sslrootcert", "ssl-root-cert", "ssl-ca", "sslcert", "ssl-cert", "sslkey", "ssl-key"];

/// The connect options `url` names. sqlx would log the value of a parameter
/// it does not know, which may be a secret (libpq's `sslpassword`, say), so
/// such a parameter is dropped here and named without its value. A
/// certificate file that cannot be read is reported here as a wrong setting;
/// sqlx would report it at each connection as an I/O error, which looks like
/// an outage.
async fn connect_options(url: &str) -> Result<PgConnectOptions, Error> {
    let mut parsed = url::Url::parse(url).map_err(|error| sqlx::Error::Configuration(Box::new(error)))?;
    let mut kept = Vec::new();
    for (key, value) in parsed.query_pairs() {
        if !KNOWN_PARAMETERS.contains(&&*key) && !key.starts_with("options[") {
            tracing::warn!(parameter = %key, "ignoring a parameter of the database URL that stepwell does not know");
            continue;
        }
        let is_file = CERTIFICATE_PARAMETERS.contains(&&*key) && !value.trim_start().starts_with("-----BEGIN");
        if is_file && let Err(error) = tokio::fs::File::open(&*value).await {
            let message = format!("{key} names {value}, which cannot be read: {error}");
            return Err(sqlx::Error::Configuration(message.into()).into());
        }
        kept.push((key.into_owned(), value.into_owned()));
    }
    if parsed.query().is_some() {
        parsed.query_pairs_mut().clear().extend_pairs(&kept);
    }
    Ok(PgConnectOptions::from_url(&parsed)?)
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

/// Inserts the batch's new checkpoints and merges each turn's summary in one
/// statement: the latest inserted checkpoint by (timestamp, seq) per turn,
/// and the latest that named a session or version, as a single append would.
/// A key already stored is skipped; the rest are returned with their `seq`.
const INSERT_CHECKPOINTS: &str = "WITH ins AS ( \
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
     SELECT namespace, turn_id, phase, ts_ns, seq FROM ins";

/// The records of the keys `$1, $2`, each found through the primary key. A
/// plain join of the arrays with the table is planned once per connection
/// (a prepared statement's generic plan) from the statistics of the moment:
/// on a new, empty table that is a hash join over a sequential scan, which
/// then reads the whole table at every batch as it grows. A lateral subquery
/// that cannot be flattened (`OFFSET 0`) leaves the planner only one probe
/// of the index per key, whatever the statistics say.
const LOAD_RECORDS: &str = "SELECT i.* FROM UNNEST($1::text[], $2::text[]) AS k(namespace, key) \
     CROSS JOIN LATERAL (SELECT * FROM idempotency r WHERE r.namespace = k.namespace AND r.key = k.key OFFSET 0) i";

/// A deletion chunk locks the turn's summary row. A batch that appends to the
/// turn waits at its summary upsert until the chunk commits, and the rows it
/// inserted before that are invisible to the chunk; so no append commits in
/// the middle of a chunk, and none is counted by a summary the chunk deletes.
impl LockTurn for Postgres {
    const LOCK_TURN: &'static str =
        "SELECT checkpoint_count, last_ts_ns, terminal FROM turns WHERE namespace = $1 AND turn_id = $2 FOR UPDATE";
}

/// Postgres's batch statements: one round trip each, whatever the batch's
/// size, with the rows as `UNNEST`ed arrays.
#[async_trait]
impl batch::Statements for Conn<'_, Postgres> {
    /// Takes the advisory locks of the batch's keys, in one sorted order so
    /// that concurrent batches never deadlock, then reads the database's
    /// clock and draws the batch's fencing tokens from the sequence: one
    /// round trip. The locks last until the transaction ends. The records are
    /// read by the next statement, not by this one: a statement's snapshot is
    /// taken when it starts, before it waits for a lock, so it would miss what
    /// the batch it waited for committed.
    async fn lock_keys(&mut self, keys: &[(&str, &str)], tokens: usize) -> Result<(UnixNanos, Vec<u64>), sqlx::Error> {
        let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let count = i64::try_from(tokens).map_err(|_| decode_error("too many tokens".into()))?;
        let (now, mut tokens): (i64, Vec<i64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH locks AS MATERIALIZED ( \
               SELECT pg_advisory_xact_lock(h) FROM ( \
                 SELECT DISTINCT hashtextextended(n || '/' || k, 0) AS h FROM UNNEST($1::text[], $2::text[]) AS u(n, k) \
                 ORDER BY h) sorted) \
             SELECT {DB_NOW_NS}, ARRAY(SELECT nextval('lease_tokens') FROM generate_series(1, $3 + 0 * locked.n)) \
             FROM (SELECT count(*) AS n FROM locks) locked"
        )))
        .bind(namespaces)
        .bind(names)
        .bind(count)
        .fetch_one(&mut *self.conn)
        .await?;
        tokens.sort_unstable();
        let tokens = tokens
            .into_iter()
            .map(|t| u64::try_from(t).map_err(|_| decode_error(format!("token {t} < 0"))))
            .collect::<Result<_, _>>()?;
        Ok((now.saturating_add(self.clock.offset()), tokens))
    }

    async fn insert_checkpoints<'b>(
        &mut self,
        unique: &[&'b NewCheckpoint],
        recorded_at: UnixNanos,
    ) -> Result<HashMap<CheckpointKey<'b>, i64>, sqlx::Error> {
        let column = |f: fn(&'b NewCheckpoint) -> &'b str| unique.iter().map(|cp| f(cp)).collect::<Vec<&str>>();
        let rows: Vec<InsertedRow> = sqlx::query_as(INSERT_CHECKPOINTS)
            .bind(column(|cp| &cp.namespace))
            .bind(column(|cp| &cp.turn_id))
            .bind(column(|cp| &cp.phase))
            .bind(unique.iter().map(|cp| cp.timestamp).collect::<Vec<i64>>())
            .bind(column(|cp| &cp.session_id))
            .bind(unique.iter().map(|cp| &cp.state[..]).collect::<Vec<&[u8]>>())
            .bind(unique.iter().map(|cp| cp.terminal).collect::<Vec<bool>>())
            .bind(column(|cp| &cp.workflow_version))
            .bind(recorded_at)
            .fetch_all(&mut *self.conn)
            .await?;
        rows::inserted_seqs(unique, rows)
    }

    async fn fetch_stored<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, sqlx::Error> {
        let rows: Vec<CheckpointRow> = sqlx::query_as(
            "SELECT c.* FROM checkpoints c \
             JOIN UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[]) AS k(namespace, turn_id, phase, ts_ns) \
               USING (namespace, turn_id, phase, ts_ns)",
        )
        .bind(keys.iter().map(|k| k.0).collect::<Vec<&str>>())
        .bind(keys.iter().map(|k| k.1).collect::<Vec<&str>>())
        .bind(keys.iter().map(|k| k.2).collect::<Vec<&str>>())
        .bind(keys.iter().map(|k| k.3).collect::<Vec<i64>>())
        .fetch_all(&mut *self.conn)
        .await?;
        rows::found_checkpoints(keys, rows)
    }

    async fn load_records(
        &mut self,
        keys: &[(&str, &str)],
    ) -> Result<HashMap<(String, String), KeyRecord>, sqlx::Error> {
        let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let rows: Vec<KeyRow> =
            sqlx::query_as(LOAD_RECORDS).bind(namespaces).bind(names).fetch_all(&mut *self.conn).await?;
        rows::records_by_key(rows)
    }

    async fn save_records(&mut self, records: &[KeyRecord]) -> Result<(), sqlx::Error> {
        if records.is_empty() {
            return Ok(());
        }
        let tokens = rows::stored_tokens(records)?;
        let int = |f: fn(&KeyRecord) -> i64| records.iter().map(f).collect::<Vec<i64>>();
        let bytes = |f: fn(&KeyRecord) -> &[u8]| records.iter().map(f).collect::<Vec<&[u8]>>();
        sqlx::query(
            "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                      result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
             SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bigint[], \
                                  $7::bigint[], $8::bytea[], $9::bytea[], $10::bigint[], $11::bigint[], \
                                  $12::bigint[], $13::bigint[]) \
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
        .execute(&mut *self.conn)
        .await?;
        Ok(())
    }

    async fn put_records(&mut self, rows: &[(&str, &NewRecord)], recorded_at: UnixNanos) -> Result<(), sqlx::Error> {
        records::put(self.conn, rows, recorded_at).await
    }

    async fn delete_records(&mut self, delete: &RecordDelete) -> Result<u64, sqlx::Error> {
        records::delete(self.conn, delete).await
    }

    async fn copy_turn(
        &mut self,
        namespace: &str,
        source: &str,
        target: &str,
        recorded_at: UnixNanos,
    ) -> Result<u64, sqlx::Error> {
        records::copy(self.conn, namespace, source, target, recorded_at).await
    }
}

#[async_trait]
impl Backend for PostgresStore {
    type Database = Postgres;
    const BEGIN: Option<&'static str> = None;

    fn pools(&self) -> &Pools<Postgres> {
        &self.pools
    }

    async fn idle_record_turns(&self, q: &IdleQuery) -> Result<Vec<(String, String)>, Error> {
        let mut conn = self.pools.acquire(&self.pools.reader).await?;
        Ok(records::idle_turns(&mut conn, q).await?)
    }

    async fn list_records(&self, q: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error> {
        let mut conn = self.pools.acquire(&self.pools.reader).await?;
        Ok(records::list(&mut conn, q).await?)
    }

    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {DB_NOW_NS} + $3 AS now_ns, * FROM idempotency WHERE namespace = $1 AND key = $2"
        )))
        .bind(namespace)
        .bind(key)
        .bind(self.pools.clock.offset())
        .fetch_optional(&mut *self.pools.acquire(&self.pools.reader).await?)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let now: i64 = row.try_get("now_ns")?;
        let record = KeyRecord::try_from(KeyRow::from_row(&row)?)?;
        Ok((!record.is_purgeable(now)).then_some((record, now)))
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        // The outer condition is checked again on a row updated meanwhile, so
        // a key begun again after its retention ran out is not deleted.
        let purge = sqlx::AssertSqlSafe(format!(
            "WITH now AS (SELECT {DB_NOW_NS} + $1 AS ns) \
             DELETE FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) AND ctid IN \
               (SELECT ctid FROM idempotency WHERE purge_after_ns <= (SELECT ns FROM now) LIMIT $2)"
        ));
        Ok(Postgres::purge(&self.pools.writer, purge.into_sql_str(), self.pools.clock.offset(), limit).await?)
    }

    /// An idle pooled connection answers, or else a connection of its own
    /// does: a server that refuses connections fails the check at once,
    /// where the pool would retry until its acquire timeout.
    /// The pool's connections in use and idle, the requests waiting for
    /// one, and its most.
    async fn figures(&self) -> StoreState {
        let pool = &self.pools.writer;
        let idle = u32::try_from(pool.num_idle()).unwrap_or(u32::MAX);
        let max = pool.options().get_max_connections();
        StoreState::Postgres { in_use: pool.size().saturating_sub(idle), idle, waiting: self.pools.waiting(), max }
    }

    async fn ping(&self) -> Result<(), Error> {
        use sqlx::Connection;
        let mark_failed = || self.failed_at.store(self.opened.elapsed().as_nanos() as u64, Ordering::Relaxed);
        if let Some(mut conn) = self.pools.writer.try_acquire() {
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
        self.pools.writer.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Misconfigured;

    #[tokio::test]
    async fn an_unreadable_root_certificate_is_a_wrong_setting() {
        let url = "postgres://app@db/stepwell?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem";
        let error = connect_options(url).await.expect_err("the file is missing");
        assert_eq!(error.misconfigured(), Some(Misconfigured::Url), "{error}");
        assert!(error.to_string().contains("/nonexistent/ca.pem"), "the error names the file: {error}");
    }

    #[tokio::test]
    async fn parameters_sqlx_does_not_know_are_dropped_and_the_rest_kept() {
        let url = "postgres://app@db/stepwell?sslpassword=k3y&sslmode=require&application_name=x";
        let options = connect_options(url).await.expect("the URL is usable");
        assert!(matches!(options.get_ssl_mode(), sqlx::postgres::PgSslMode::Require));
        assert_eq!(options.get_application_name(), Some("x"));
        assert!(!format!("{options:?}").contains("k3y"), "the unknown parameter is gone");
    }
}
