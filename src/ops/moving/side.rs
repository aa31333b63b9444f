//! One store as the move sees it: its own connections to the database (not
//! a sidecar's store), the rows of checkpoints, turns, idempotency and
//! records (RecordService) read in key order, in chunks bounded by rows and
//! by bytes (each row's size counted by `RowBytes`), the idempotent inserts,
//! the fencing sequence, and the canonical tally used to verify a move.

use futures::{Stream, TryStreamExt};
use sqlx::QueryBuilder;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use std::str::FromStr;

use super::rows::{CheckpointRow, KeyRow, RecordKey, RowBytes, StoredRecordRow, TurnRow};
use super::tally::{Tallier, Tallies, checkpoint_digest, record_digest, stored_record_digest, turn_digest};
use super::{Error, Plan, WAIT};
use crate::domain::clock::Clock;
use crate::store::Database;
use crate::store::{self, Options};

/// Takes rows from `rows` until the chunk holds `plan.chunk_bytes` or the
/// stream ends, always at least one row; the rest of the stream is dropped
/// unread (the query's LIMIT bounds it by `plan.chunk_rows`).
async fn take_chunk<R: RowBytes>(
    mut rows: impl Stream<Item = Result<R, sqlx::Error>> + Unpin,
    plan: Plan,
) -> Result<Vec<R>, Error> {
    let (mut chunk, mut bytes) = (Vec::new(), 0);
    while bytes < plan.chunk_bytes.max(1)
        && let Some(row) = rows.try_next().await?
    {
        bytes += row.bytes();
        chunk.push(row);
    }
    Ok(chunk)
}

const CHECKPOINT_COLUMNS: &str =
    "seq, namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns";
const TURN_COLUMNS: &str = "namespace, turn_id, session_id, first_ts_ns, last_ts_ns, last_phase, checkpoint_count, \
                            terminal, workflow_version, session_ts_ns, version_ts_ns";
const RECORD_COLUMNS: &str = "namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, result, \
                              error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns";
const STORED_RECORD_KEY: &str = "namespace, turn_id, kind, scope, id";
const SQLITE_STORED_RECORD_COLUMNS: &str =
    "namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, refs, recorded_at_ns";
/// Postgres's jsonb read as text, so both backends give the same row type.
const PG_STORED_RECORD_COLUMNS: &str = "namespace, turn_id, kind, scope, id, parent_id, content_type, payload, \
                                        CAST(metadata AS text) AS metadata, CAST(refs AS text) AS refs, \
                                        recorded_at_ns";

/// Rebuilds the summaries of the given turns from the checkpoints Postgres
/// holds: the latest checkpoint by (timestamp, seq) decides phase and
/// terminal, and the latest that named a session or version names them,
/// exactly as an append keeps them.
const PG_REBUILD_TURNS: &str = "INSERT INTO turns (namespace, turn_id, checkpoint_count, first_ts_ns, last_ts_ns, \
       last_seq, last_phase, terminal, session_id, session_ts_ns, workflow_version, version_ts_ns) \
     SELECT c.namespace, c.turn_id, count(*), min(c.ts_ns), max(c.ts_ns), \
       (array_agg(c.seq ORDER BY c.ts_ns DESC, c.seq DESC))[1], \
       (array_agg(c.phase ORDER BY c.ts_ns DESC, c.seq DESC))[1], \
       (array_agg(c.terminal ORDER BY c.ts_ns DESC, c.seq DESC))[1], \
       coalesce((array_agg(c.session_id ORDER BY c.ts_ns DESC, c.seq DESC) \
                 FILTER (WHERE c.session_id <> ''))[1], ''), \
       coalesce(max(c.ts_ns) FILTER (WHERE c.session_id <> ''), -9223372036854775808), \
       coalesce((array_agg(c.workflow_version ORDER BY c.ts_ns DESC, c.seq DESC) \
                 FILTER (WHERE c.workflow_version <> ''))[1], ''), \
       coalesce(max(c.ts_ns) FILTER (WHERE c.workflow_version <> ''), -9223372036854775808) \
     FROM checkpoints c \
     JOIN UNNEST($1::text[], $2::text[]) AS u(n, t) ON c.namespace = u.n COLLATE \"C\" AND c.turn_id = u.t COLLATE \"C\" \
     GROUP BY c.namespace, c.turn_id ORDER BY c.namespace, c.turn_id \
     ON CONFLICT (namespace, turn_id) DO UPDATE SET \
       checkpoint_count = excluded.checkpoint_count, first_ts_ns = excluded.first_ts_ns, \
       last_ts_ns = excluded.last_ts_ns, last_seq = excluded.last_seq, last_phase = excluded.last_phase, \
       terminal = excluded.terminal, session_id = excluded.session_id, session_ts_ns = excluded.session_ts_ns, \
       workflow_version = excluded.workflow_version, version_ts_ns = excluded.version_ts_ns";

const PG_INSERT_CHECKPOINTS: &str = "WITH ins AS ( \
       INSERT INTO checkpoints \
         (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
       SELECT n, t, p, ts, s, st, te, v, r \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::bool[], \
                   $8::text[], $9::bigint[]) WITH ORDINALITY AS u(n, t, p, ts, s, st, te, v, r, i) \
       ORDER BY i \
       ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

const PG_INSERT_RECORDS: &str = "WITH ins AS ( \
       INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
       SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bigint[], \
                            $7::bigint[], $8::bytea[], $9::bytea[], $10::bigint[], $11::bigint[], $12::bigint[], \
                            $13::bigint[]) \
       ON CONFLICT (namespace, key) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

/// The JSON columns are written from their text, as jsonb.
const PG_INSERT_STORED_RECORDS: &str = "WITH ins AS ( \
       INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, refs, \
                            recorded_at_ns) \
       SELECT n, t, k, s, i, p, c, b, CAST(m AS jsonb), CAST(f AS jsonb), r \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                   $8::bytea[], $9::text[], $10::text[], $11::bigint[]) AS u(n, t, k, s, i, p, c, b, m, f, r) \
       ON CONFLICT (namespace, turn_id, kind, scope, id) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

/// The last token Postgres issued (0 before the first).
const PG_FENCE: &str = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease_tokens";

/// An open store, through connections of the move's own.
pub enum Side {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs the same query on either backend; `$q` is built from `sqlx::query*`
/// and ends in a fetch method taking the pool.
macro_rules! on_both {
    ($side:expr, |$pool:ident| $body:expr) => {
        match $side {
            Side::Sqlite($pool) => $body,
            Side::Postgres($pool) => $body,
        }
    };
}

impl Side {
    /// Opens an existing store to read. A SQLite file that does not exist is
    /// an error rather than created empty.
    pub async fn open_source(database: &Database) -> Result<Side, Error> {
        match database {
            Database::Sqlite { path } => {
                if !path.exists() {
                    return Err(Error::Format(format!("no SQLite store at {}", path.display())));
                }
                let options = SqliteConnectOptions::new().filename(path).create_if_missing(false).busy_timeout(WAIT);
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
                Ok(Side::Sqlite(pool))
            }
            Database::Postgres { url } => {
                let options = PgConnectOptions::from_str(url)?.application_name("stepwell-migrate");
                let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
                Ok(Side::Postgres(pool))
            }
        }
    }

    /// Opens the store to write, creating and migrating it as a sidecar
    /// would (so a Postgres that may lose commits is refused here too).
    pub async fn open_target(database: &Database) -> Result<Side, Error> {
        let options = Options {
            database: database.clone(),
            pool_max: 1,
            acquire_timeout: WAIT,
            sqlite_busy_timeout: WAIT,
            migration_lock_timeout: WAIT,
            postgres_statement_timeout: Duration::ZERO,
            postgres_lock_timeout: WAIT,
            sqlite_bytes_max: None,
            unsafe_accept_nondurable_postgres: false,
            clock: Clock::system(),
        };
        drop(store::open(&options).await?);
        match database {
            Database::Sqlite { path } => {
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(false)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(WAIT);
                let pool = SqlitePoolOptions::new().max_connections(1).connect_with(options).await?;
                Ok(Side::Sqlite(pool))
            }
            Database::Postgres { url } => {
                let options = PgConnectOptions::from_str(url)?
                    .application_name("stepwell-migrate")
                    .options([("synchronous_commit", "on")]);
                let pool = PgPoolOptions::new().max_connections(1).connect_with(options).await?;
                Ok(Side::Postgres(pool))
            }
        }
    }

    pub async fn close(&self) {
        on_both!(self, |pool| pool.close().await)
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Side::Sqlite(_) => "sqlite",
            Side::Postgres(_) => "postgres",
        }
    }

    /// Rows in `table` (one of the four tables a move copies or rebuilds).
    pub async fn count(&self, table: &'static str) -> Result<u64, Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}"));
        let count: i64 = on_both!(self, |pool| sqlx::query_scalar(sql).fetch_one(pool).await?);
        Ok(count.max(0) as u64)
    }

    /// The last fencing token the store issued.
    pub async fn fence(&self) -> Result<i64, Error> {
        Ok(match self {
            Side::Sqlite(pool) => {
                sqlx::query_scalar("SELECT last FROM lease_tokens WHERE id = 1").fetch_one(pool).await?
            }
            Side::Postgres(pool) => sqlx::query_scalar(PG_FENCE).fetch_one(pool).await?,
        })
    }

    /// The greatest token any stored record holds.
    pub async fn max_token(&self) -> Result<i64, Error> {
        let sql = "SELECT coalesce(max(lease_token), 0) FROM idempotency";
        Ok(on_both!(self, |pool| sqlx::query_scalar(sql).fetch_one(pool).await?))
    }

    /// Moves the fencing sequence to at least `last`, never back.
    pub async fn advance_fence(&self, last: i64) -> Result<(), Error> {
        match self {
            Side::Sqlite(pool) => {
                sqlx::query("UPDATE lease_tokens SET last = $1 WHERE id = 1 AND last < $1")
                    .bind(last)
                    .execute(pool)
                    .await?;
            }
            Side::Postgres(pool) => {
                let sql = format!("SELECT setval('lease_tokens', $1) WHERE $1 > ({PG_FENCE})");
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(last).fetch_optional(pool).await?;
            }
        }
        Ok(())
    }

    /// The next chunk of checkpoints after `seq`, in insertion order: at most
    /// `plan.chunk_rows`, and no more once they reach `plan.chunk_bytes`.
    pub async fn checkpoints_after(&self, seq: i64, plan: Plan) -> Result<Vec<CheckpointRow>, Error> {
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE seq > $1 ORDER BY seq LIMIT $2"
        ));
        on_both!(self, |pool| {
            take_chunk(sqlx::query_as(sql).bind(seq).bind(plan.chunk_rows as i64).fetch(pool), plan).await
        })
    }

    /// The next chunk of records after the key `after`, in key order, as
    /// bounded as `checkpoints_after`.
    pub async fn records_after(&self, after: Option<&(String, String)>, plan: Plan) -> Result<Vec<KeyRow>, Error> {
        let (namespace, key) = after.cloned().unwrap_or_default();
        let filter = if after.is_some() { "(namespace, key) > ($1, $2)" } else { "$1 = $2" };
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {RECORD_COLUMNS} FROM idempotency WHERE {filter} ORDER BY namespace, key LIMIT $3"
        ));
        on_both!(self, |pool| {
            let rows = sqlx::query_as(sql).bind(namespace).bind(key).bind(plan.chunk_rows as i64).fetch(pool);
            take_chunk(rows, plan).await
        })
    }

    /// The columns of `records` as `StoredRecordRow` reads them.
    fn stored_record_columns(&self) -> &'static str {
        match self {
            Side::Sqlite(_) => SQLITE_STORED_RECORD_COLUMNS,
            Side::Postgres(_) => PG_STORED_RECORD_COLUMNS,
        }
    }

    /// The next chunk of records (RecordService) after the key `after`, as
    /// bounded as `checkpoints_after`, in key order: bytewise on both
    /// backends (SQLite's BINARY collation, the "C" collation of Postgres's
    /// columns).
    pub async fn stored_records_after(
        &self,
        after: Option<&RecordKey>,
        plan: Plan,
    ) -> Result<Vec<StoredRecordRow>, Error> {
        let (namespace, turn_id, kind, scope, id) = after.cloned().unwrap_or_default();
        let filter = if after.is_some() {
            format!("({STORED_RECORD_KEY}) > ($1, $2, $3, $4, $5)")
        } else {
            "$1 = $2 AND $3 = $4 AND $4 = $5".to_owned()
        };
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM records WHERE {filter} ORDER BY {STORED_RECORD_KEY} LIMIT $6",
            self.stored_record_columns()
        ));
        on_both!(self, |pool| {
            let rows = sqlx::query_as(sql)
                .bind(namespace)
                .bind(turn_id)
                .bind(kind)
                .bind(scope)
                .bind(id)
                .bind(plan.chunk_rows as i64)
                .fetch(pool);
            take_chunk(rows, plan).await
        })
    }

    /// Inserts checkpoints in the order given, skipping keys already stored,
    /// and rebuilds the summaries of their turns, in one transaction.
    /// Returns how many were inserted.
    pub async fn insert_checkpoints(&self, rows: &[CheckpointRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        match self {
            Side::Sqlite(pool) => {
                // The turns trigger keeps each inserted checkpoint's summary.
                let mut tx = pool.begin().await?;
                let mut builder = QueryBuilder::new(
                    "INSERT INTO checkpoints (namespace, turn_id, phase, ts_ns, session_id, state, terminal, \
                     workflow_version, recorded_at_ns) ",
                );
                builder.push_values(rows, |mut b, r| {
                    b.push_bind(&r.namespace)
                        .push_bind(&r.turn_id)
                        .push_bind(&r.phase)
                        .push_bind(r.ts_ns)
                        .push_bind(&r.session_id)
                        .push_bind(&r.state)
                        .push_bind(r.terminal)
                        .push_bind(&r.workflow_version)
                        .push_bind(r.recorded_at_ns);
                });
                builder.push(" ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING");
                let inserted = builder.build().execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(inserted)
            }
            Side::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                // Borrowed, so the chunk's bytes are not copied once more.
                let column = |f: fn(&CheckpointRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
                let inserted: i64 = sqlx::query_scalar(PG_INSERT_CHECKPOINTS)
                    .bind(column(|r| &r.namespace))
                    .bind(column(|r| &r.turn_id))
                    .bind(column(|r| &r.phase))
                    .bind(rows.iter().map(|r| r.ts_ns).collect::<Vec<_>>())
                    .bind(column(|r| &r.session_id))
                    .bind(rows.iter().map(|r| &r.state[..]).collect::<Vec<&[u8]>>())
                    .bind(rows.iter().map(|r| r.terminal).collect::<Vec<_>>())
                    .bind(column(|r| &r.workflow_version))
                    .bind(rows.iter().map(|r| r.recorded_at_ns).collect::<Vec<_>>())
                    .fetch_one(&mut *tx)
                    .await?;
                if inserted > 0 {
                    let mut turns: Vec<(&str, &str)> =
                        rows.iter().map(|r| (r.namespace.as_str(), r.turn_id.as_str())).collect();
                    turns.sort_unstable();
                    turns.dedup();
                    sqlx::query(PG_REBUILD_TURNS)
                        .bind(turns.iter().map(|t| t.0).collect::<Vec<_>>())
                        .bind(turns.iter().map(|t| t.1).collect::<Vec<_>>())
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok(inserted.max(0) as u64)
            }
        }
    }

    /// Inserts records whose key is not stored yet, in one transaction.
    /// Returns how many were inserted.
    pub async fn insert_records(&self, rows: &[KeyRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        match self {
            Side::Sqlite(pool) => {
                let errors = rows
                    .iter()
                    .map(|r| {
                        String::from_utf8(r.error.clone())
                            .map_err(|_| Error::Format(format!("the error of key {:?} is not UTF-8", r.key)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let mut builder = QueryBuilder::new(format!("INSERT INTO idempotency ({RECORD_COLUMNS}) "));
                builder.push_values(rows.iter().zip(errors), |mut b, (r, error)| {
                    b.push_bind(&r.namespace)
                        .push_bind(&r.key)
                        .push_bind(r.held)
                        .push_bind(&r.fingerprint)
                        .push_bind(r.attempt)
                        .push_bind(r.lease_token)
                        .push_bind(r.lease_expires_at_ns)
                        .push_bind(&r.result)
                        .push_bind(error)
                        .push_bind(r.retention_ns)
                        .push_bind(r.created_at_ns)
                        .push_bind(r.updated_at_ns)
                        .push_bind(r.purge_after_ns);
                });
                builder.push(" ON CONFLICT (namespace, key) DO NOTHING");
                let mut tx = pool.begin().await?;
                let inserted = builder.build().execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(inserted)
            }
            Side::Postgres(pool) => {
                // Borrowed, so the chunk's bytes are not copied once more.
                let strings = |f: fn(&KeyRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
                let bytes = |f: fn(&KeyRow) -> &[u8]| rows.iter().map(f).collect::<Vec<&[u8]>>();
                let ints = |f: fn(&KeyRow) -> i64| rows.iter().map(f).collect::<Vec<_>>();
                let mut tx = pool.begin().await?;
                let inserted: i64 = sqlx::query_scalar(PG_INSERT_RECORDS)
                    .bind(strings(|r| &r.namespace))
                    .bind(strings(|r| &r.key))
                    .bind(ints(|r| r.held))
                    .bind(bytes(|r| &r.fingerprint))
                    .bind(ints(|r| r.attempt))
                    .bind(ints(|r| r.lease_token))
                    .bind(ints(|r| r.lease_expires_at_ns))
                    .bind(bytes(|r| &r.result))
                    .bind(bytes(|r| &r.error))
                    .bind(ints(|r| r.retention_ns))
                    .bind(ints(|r| r.created_at_ns))
                    .bind(ints(|r| r.updated_at_ns))
                    .bind(ints(|r| r.purge_after_ns))
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(inserted.max(0) as u64)
            }
        }
    }

    /// Inserts records (RecordService) whose key is not stored yet, in one
    /// transaction. Returns how many were inserted.
    pub async fn insert_stored_records(&self, rows: &[StoredRecordRow]) -> Result<u64, Error> {
        if rows.is_empty() {
            return Ok(0);
        }
        match self {
            Side::Sqlite(pool) => {
                let mut builder = QueryBuilder::new(format!("INSERT INTO records ({SQLITE_STORED_RECORD_COLUMNS}) "));
                builder.push_values(rows, |mut b, r| {
                    b.push_bind(&r.namespace)
                        .push_bind(&r.turn_id)
                        .push_bind(&r.kind)
                        .push_bind(&r.scope)
                        .push_bind(&r.id)
                        .push_bind(&r.parent_id)
                        .push_bind(&r.content_type)
                        .push_bind(&r.payload)
                        .push_bind(&r.metadata)
                        .push_bind(&r.refs)
                        .push_bind(r.recorded_at_ns);
                });
                builder.push(format!(" ON CONFLICT ({STORED_RECORD_KEY}) DO NOTHING"));
                let mut tx = pool.begin().await?;
                let inserted = builder.build().execute(&mut *tx).await?.rows_affected();
                tx.commit().await?;
                Ok(inserted)
            }
            Side::Postgres(pool) => {
                let text = |f: fn(&StoredRecordRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
                let mut tx = pool.begin().await?;
                let inserted: i64 = sqlx::query_scalar(PG_INSERT_STORED_RECORDS)
                    .bind(text(|r| &r.namespace))
                    .bind(text(|r| &r.turn_id))
                    .bind(text(|r| &r.kind))
                    .bind(text(|r| &r.scope))
                    .bind(text(|r| &r.id))
                    .bind(text(|r| &r.parent_id))
                    .bind(text(|r| &r.content_type))
                    .bind(rows.iter().map(|r| &r.payload[..]).collect::<Vec<&[u8]>>())
                    .bind(rows.iter().map(|r| r.metadata.as_deref()).collect::<Vec<Option<&str>>>())
                    .bind(text(|r| &r.refs))
                    .bind(rows.iter().map(|r| r.recorded_at_ns).collect::<Vec<i64>>())
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(inserted.max(0) as u64)
            }
        }
    }

    /// Streams every turn summary in (namespace, turn_id) order.
    pub async fn for_each_turn(&self, mut each: impl FnMut(TurnRow)) -> Result<(), Error> {
        let sql = sqlx::AssertSqlSafe(format!("SELECT {TURN_COLUMNS} FROM turns ORDER BY namespace, turn_id"));
        on_both!(self, |pool| {
            let mut rows = sqlx::query_as::<_, TurnRow>(sql).fetch(pool);
            while let Some(row) = rows.try_next().await? {
                each(row);
            }
        });
        Ok(())
    }

    /// Counts and checksums every namespace, reading each table in its
    /// canonical order: checkpoints as Restore orders them (namespace, turn,
    /// timestamp, insertion), turns, idempotency keys and records
    /// (RecordService) by key.
    pub async fn tally(&self) -> Result<Tallies, Error> {
        let mut tallier = Tallier::default();
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints ORDER BY namespace, turn_id, ts_ns, seq"
        ));
        on_both!(self, |pool| {
            let mut rows = sqlx::query_as::<_, CheckpointRow>(sql).fetch(pool);
            while let Some(row) = rows.try_next().await? {
                tallier.checkpoint(&row.namespace, checkpoint_digest(&row));
            }
        });
        self.for_each_turn(|row| tallier.turn(&row.namespace, turn_digest(&row))).await?;
        let sql = sqlx::AssertSqlSafe(format!("SELECT {RECORD_COLUMNS} FROM idempotency ORDER BY namespace, key"));
        on_both!(self, |pool| {
            let mut rows = sqlx::query_as::<_, KeyRow>(sql).fetch(pool);
            while let Some(row) = rows.try_next().await? {
                tallier.record(&row.namespace, record_digest(&row));
            }
        });
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM records ORDER BY {STORED_RECORD_KEY}",
            self.stored_record_columns()
        ));
        on_both!(self, |pool| {
            let mut rows = sqlx::query_as::<_, StoredRecordRow>(sql).fetch(pool);
            while let Some(row) = rows.try_next().await? {
                tallier.stored_record(&row.namespace, stored_record_digest(&row));
            }
        });
        Ok(tallier.finish())
    }
}

use std::time::Duration;
