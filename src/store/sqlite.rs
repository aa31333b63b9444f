//! The embedded SQLite backend: one file in WAL mode with `synchronous=FULL`,
//! so a commit has reached the disk before any write is acknowledged.
//!
//! Writes go through a pool of exactly one connection, because SQLite admits
//! one writer at a time and a queue in front of it is cheaper than lock
//! contention; reads use a separate pool that WAL lets run beside the writer.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};

use super::{Error, Fenced, Store};
use crate::clock::{Clock, system_now};
use crate::idempotency::{self, BeginArgs, BeginOutcome, BeginPlan, Fence, Held, Plan, Record, RecordState};
use crate::model::{
    Appended, Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnStatus, TurnSummary, UnixNanos,
};

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");

/// How long a statement waits for a lock held by another process.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a request waits for a free connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// Write transactions take the write lock at BEGIN, so a transaction that
/// reads before it writes can never fail to upgrade its lock.
const BEGIN_WRITE: &str = "BEGIN IMMEDIATE";

/// A store in one SQLite file.
pub struct SqliteStore {
    writer: SqlitePool,
    reader: SqlitePool,
    /// The store clock for leases: the sidecar's, as the file is local.
    clock: Clock,
}

impl SqliteStore {
    /// Opens (creating if missing) the file at `path` and migrates it.
    pub async fn open(path: &Path, pool_max: u32, clock: Clock) -> Result<SqliteStore, Error> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(BUSY_TIMEOUT)
            .foreign_keys(false);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options.clone().create_if_missing(true))
            .await?;
        // Sidecars on one host may share the file and start together; an
        // exclusive lock beside it lets one migrate while the others wait.
        let lock = migration_lock(path).await.map_err(Error::MigrationLock)?;
        MIGRATOR.run(&writer).await?;
        drop(lock);
        let reader = SqlitePoolOptions::new()
            .max_connections(pool_max)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_with(options)
            .await?;
        Ok(SqliteStore { writer, reader, clock })
    }

    /// Runs a Complete, Release or Extend plan on the fenced record in one
    /// write transaction, committing only if the plan writes.
    async fn fenced<T>(
        &self,
        fence: &Fence,
        plan: impl FnOnce(Option<&Record>, UnixNanos) -> Plan<T>,
    ) -> Result<Fenced<T>, Error> {
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let now = self.clock.now();
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

/// Takes the exclusive lock on `DB-migrate.lock`, released when the file drops.
async fn migration_lock(path: &Path) -> std::io::Result<std::fs::File> {
    let mut lock_path = path.as_os_str().to_owned();
    lock_path.push("-migrate.lock");
    tokio::task::spawn_blocking(move || {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(lock_path)?;
        file.lock()?;
        Ok(file)
    })
    .await
    .map_err(std::io::Error::other)?
}

fn decode_error(what: String) -> sqlx::Error {
    sqlx::Error::Decode(what.into())
}

fn record_from_row(row: &SqliteRow) -> Result<Record, sqlx::Error> {
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
        error: row.try_get("error")?,
        retention: row.try_get("retention_ns")?,
        created_at: row.try_get("created_at_ns")?,
        updated_at: row.try_get("updated_at_ns")?,
        purge_after: row.try_get("purge_after_ns")?,
    })
}

/// The key's record, unless absent or past its retention (then its key is free).
async fn load_record(
    conn: &mut SqliteConnection,
    namespace: &str,
    key: &str,
    now: UnixNanos,
) -> Result<Option<Record>, sqlx::Error> {
    let row = sqlx::query("SELECT * FROM idempotency WHERE namespace = ?1 AND key = ?2")
        .bind(namespace)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.as_ref().map(record_from_row).transpose()?.filter(|r| !r.is_purgeable(now)))
}

/// Writes the whole record, replacing any row for its key.
async fn save_record(conn: &mut SqliteConnection, r: &Record) -> Result<(), sqlx::Error> {
    let token = i64::try_from(r.lease_token).map_err(|_| decode_error(format!("token {} too large", r.lease_token)))?;
    sqlx::query(
        "INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                  result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
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
    .bind(&r.error)
    .bind(r.retention)
    .bind(r.created_at)
    .bind(r.updated_at)
    .bind(r.purge_after)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The next fencing token of the store-wide sequence.
async fn next_lease_token(conn: &mut SqliteConnection) -> Result<u64, sqlx::Error> {
    let last: i64 = sqlx::query_scalar("UPDATE lease_tokens SET last = last + 1 WHERE id = 1 RETURNING last")
        .fetch_one(&mut *conn)
        .await?;
    u64::try_from(last).map_err(|_| decode_error(format!("token {last} < 0")))
}

fn checkpoint_from_row(row: &SqliteRow) -> Result<StoredCheckpoint, sqlx::Error> {
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

fn turn_from_row(row: &SqliteRow) -> Result<TurnSummary, sqlx::Error> {
    Ok(TurnSummary {
        turn_id: row.try_get("turn_id")?,
        session_id: row.try_get("session_id")?,
        first_timestamp: row.try_get("first_ts_ns")?,
        last_timestamp: row.try_get("last_ts_ns")?,
        last_phase: row.try_get("last_phase")?,
        checkpoint_count: row.try_get::<i64, _>("checkpoint_count")?.try_into().unwrap_or_default(),
        terminal: row.try_get("terminal")?,
        workflow_version: row.try_get("workflow_version")?,
    })
}

/// Splits `limit + 1` fetched rows into a page and whether more follow.
fn page<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

#[async_trait]
impl Store for SqliteStore {
    async fn append(&self, cp: NewCheckpoint) -> Result<Appended, Error> {
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let recorded_at = system_now();
        let seq: Option<i64> = sqlx::query_scalar(
            "INSERT INTO checkpoints \
               (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
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
            let row = sqlx::query(
                "SELECT seq, namespace, turn_id, session_id, phase, ts_ns, state, terminal, workflow_version, \
                        recorded_at_ns \
                 FROM checkpoints WHERE namespace = ?1 AND turn_id = ?2 AND phase = ?3 AND ts_ns = ?4",
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

        // The new checkpoint has the greatest seq, so it is the turn's latest
        // whenever its timestamp is not older than the latest one's. The
        // session and version are those of the latest checkpoint that named
        // one; a checkpoint may arrive late with an older timestamp, so each
        // remembers the timestamp it came from. SET sees the old row.
        sqlx::query(
            "INSERT INTO turns (namespace, turn_id, session_id, first_ts_ns, last_ts_ns, last_seq, last_phase, \
                                checkpoint_count, terminal, workflow_version, session_ts_ns, version_ts_ns) \
             VALUES (?1, ?2, ?3, ?4, ?4, ?5, ?6, 1, ?7, ?8, \
                     CASE WHEN ?3 = '' THEN ?9 ELSE ?4 END, CASE WHEN ?8 = '' THEN ?9 ELSE ?4 END) \
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
               first_ts_ns = min(turns.first_ts_ns, excluded.first_ts_ns), \
               checkpoint_count = turns.checkpoint_count + 1, \
               last_phase = CASE WHEN excluded.last_ts_ns >= turns.last_ts_ns \
                            THEN excluded.last_phase ELSE turns.last_phase END, \
               terminal = CASE WHEN excluded.last_ts_ns >= turns.last_ts_ns \
                          THEN excluded.terminal ELSE turns.terminal END, \
               last_seq = CASE WHEN excluded.last_ts_ns >= turns.last_ts_ns \
                          THEN excluded.last_seq ELSE turns.last_seq END, \
               last_ts_ns = max(turns.last_ts_ns, excluded.last_ts_ns)",
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
            "SELECT seq, namespace, turn_id, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
             FROM checkpoints \
             WHERE namespace = ?1 AND turn_id = ?2 AND (?3 IS NULL OR phase = ?3) AND (ts_ns, seq) < (?4, ?5) \
             ORDER BY ts_ns DESC, seq DESC LIMIT ?6"
        } else {
            "SELECT seq, namespace, turn_id, session_id, phase, ts_ns, state, terminal, workflow_version, recorded_at_ns \
             FROM checkpoints \
             WHERE namespace = ?1 AND turn_id = ?2 AND (?3 IS NULL OR phase = ?3) AND (ts_ns, seq) > (?4, ?5) \
             ORDER BY ts_ns, seq LIMIT ?6"
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
            .fetch_all(&self.reader)
            .await?;
        let checkpoints = rows.iter().map(checkpoint_from_row).collect::<Result<Vec<_>, _>>()?;
        Ok(page(checkpoints, q.limit))
    }

    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error> {
        let row = sqlx::query("SELECT * FROM turns WHERE namespace = ?1 AND turn_id = ?2")
            .bind(namespace)
            .bind(turn_id)
            .fetch_optional(&self.reader)
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
             WHERE namespace = ?1 AND turn_id > ?2 AND (?3 IS NULL OR terminal = ?3) \
               AND (?4 IS NULL OR session_id = ?4) AND (?5 IS NULL OR last_ts_ns < ?5) \
             ORDER BY turn_id LIMIT ?6",
        )
        .bind(&q.namespace)
        .bind(q.after_turn_id.as_deref().unwrap_or(""))
        .bind(terminal)
        .bind(q.session_id.as_deref())
        .bind(q.updated_before)
        .bind(i64::from(q.limit) + 1)
        .fetch_all(&self.reader)
        .await?;
        let turns = rows.iter().map(turn_from_row).collect::<Result<Vec<_>, _>>()?;
        Ok(page(turns, q.limit))
    }

    async fn delete_turn(&self, namespace: &str, turn_id: &str) -> Result<u64, Error> {
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let deleted = sqlx::query("DELETE FROM checkpoints WHERE namespace = ?1 AND turn_id = ?2")
            .bind(namespace)
            .bind(turn_id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        sqlx::query("DELETE FROM turns WHERE namespace = ?1 AND turn_id = ?2")
            .bind(namespace)
            .bind(turn_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(deleted)
    }

    async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error> {
        let mut tx = self.writer.begin_with(BEGIN_WRITE).await?;
        let now = self.clock.now();
        let record = load_record(&mut tx, &args.namespace, &args.key, now).await?;
        match idempotency::plan_begin(record.as_ref(), &args, now) {
            BeginPlan::Answer(answer) => {
                tx.rollback().await?;
                Ok(answer)
            }
            BeginPlan::Acquire { attempt, previous_lease_expired } => {
                let lease_token = next_lease_token(&mut tx).await?;
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
        let mut conn = self.reader.acquire().await?;
        let now = self.clock.now();
        Ok(load_record(&mut conn, namespace, key, now).await?.map(|record| (record, now)))
    }

    async fn purge_expired(&self, limit: u32) -> Result<u64, Error> {
        let purged = sqlx::query(
            "DELETE FROM idempotency WHERE rowid IN \
               (SELECT rowid FROM idempotency WHERE purge_after_ns <= ?1 LIMIT ?2)",
        )
        .bind(self.clock.now())
        .bind(i64::from(limit))
        .execute(&self.writer)
        .await?
        .rows_affected();
        Ok(purged)
    }

    async fn ping(&self) -> Result<(), Error> {
        sqlx::query("SELECT 1").execute(&self.reader).await?;
        Ok(())
    }

    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}
