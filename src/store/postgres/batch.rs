//! Postgres's statements for a batch, on the connection the batch runs on:
//! one round trip each, whatever the batch's size, with the rows as
//! `UNNEST`ed arrays; and a deletion chunk's, which lock the turn's summary
//! row. What a batch means is `batch`'s; this is only its SQL.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use sqlx::postgres::PgConnection;

use super::{DB_NOW_NS, memory, records};
use crate::domain::clock::Clock;
use crate::domain::keys::KeyRecord;
use crate::domain::memory::{Final, ItemsTouch, Path};
use crate::domain::model::{Cursor, NewCheckpoint, StoredCheckpoint, UnixNanos};
use crate::domain::records::{Address, NewRecord, RecordDelete};
use crate::store::DbError;
use crate::store::batch::{CheckpointKey, Statements, TurnChunks};
use crate::store::rows::{self, CheckpointRow, InsertedRow, KeyDbRow, decode_error};
use crate::store::sql::{DELETE_CHUNK, DELETE_TURN, OLDEST_AFTER, SHRINK_TURN};

/// The connection a batch runs on, with the store's clock, whose offset
/// (the tests') is added to the database server's clock.
pub(super) struct Conn<'c> {
    pub conn: &'c mut PgConnection,
    pub clock: &'c Clock,
    /// The portable profile: fencing tokens come from the counter row.
    pub portable: bool,
    /// pgvector's column is there: puts fill it beside the vectors' bytes.
    pub embedding: bool,
}

/// Where a batch's fencing tokens come from: the sequence, whose values
/// (uncached) increase store-wide; or, in the portable profile, the
/// counter row of `stepwell_counters`, since a distributed engine caches a
/// sequence's values per connection, and tokens drawn by two sidecars would
/// then not increase together. The row is locked until the batch commits,
/// so batches that draw tokens take their turns on it; one that draws none
/// leaves it alone.
fn draw_tokens(portable: bool) -> &'static str {
    if portable {
        "(SELECT ARRAY(SELECT generate_series(value - $3 + 1, value)) FROM drawn)"
    } else {
        "ARRAY(SELECT nextval('lease_tokens') FROM generate_series(1, $3 + 0 * locked.n))"
    }
}

/// The counter row's update, for the portable profile: after the locks,
/// and only for a batch that draws tokens.
const DRAW_FROM_COUNTER: &str = ", drawn AS ( \
       UPDATE stepwell_counters SET value = value + $3 \
       WHERE name = 'lease_tokens' AND $3 > 0 AND (SELECT count(*) FROM locks) >= 0 RETURNING value)";

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
const LOAD_KEYS: &str = "SELECT i.* FROM UNNEST($1::text[], $2::text[]) AS k(namespace, key) \
     CROSS JOIN LATERAL (SELECT * FROM idempotency r WHERE r.namespace = k.namespace AND r.key = k.key OFFSET 0) i";

/// A deletion chunk locks the turn's summary row. A batch that appends to the
/// turn waits at its summary upsert until the chunk commits, and the rows it
/// inserted before that are invisible to the chunk; so no append commits in
/// the middle of a chunk, and none is counted by a summary the chunk deletes.
const LOCK_TURN: &str =
    "SELECT checkpoint_count, last_ts_ns, terminal FROM turns WHERE namespace = $1 AND turn_id = $2 FOR UPDATE";

/// Postgres's batch statements: one round trip each, whatever the batch's
/// size, with the rows as `UNNEST`ed arrays.
#[async_trait]
impl Statements for Conn<'_> {
    /// Takes the advisory locks of the batch's keys, in one sorted order so
    /// that concurrent batches never deadlock, then reads the database's
    /// clock and draws the batch's fencing tokens from the sequence: one
    /// round trip. The locks last until the transaction ends. The records are
    /// read by the next statement, not by this one: a statement's snapshot is
    /// taken when it starts, before it waits for a lock, so it would miss what
    /// the batch it waited for committed.
    async fn lock_keys(&mut self, keys: &[(&str, &str)], tokens: usize) -> Result<(UnixNanos, Vec<u64>), DbError> {
        let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let count = i64::try_from(tokens).map_err(|_| decode_error("too many tokens".into()))?;
        let (counter, draw) =
            if self.portable { (DRAW_FROM_COUNTER, draw_tokens(true)) } else { ("", draw_tokens(false)) };
        let (now, mut tokens): (i64, Vec<i64>) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "WITH locks AS MATERIALIZED ( \
               SELECT pg_advisory_xact_lock(h) FROM ( \
                 SELECT DISTINCT hashtextextended(n || '/' || k, 0) AS h FROM UNNEST($1::text[], $2::text[]) AS u(n, k) \
                 ORDER BY h) sorted){counter} \
             SELECT {DB_NOW_NS}, COALESCE({draw}, '{{}}') \
             FROM (SELECT count(*) AS n FROM locks) locked"
        )))
        .bind(namespaces)
        .bind(names)
        .bind(count)
        .fetch_one(&mut *self.conn)
        .await
        .map_err(DbError::sqlx)?;
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
    ) -> Result<HashMap<CheckpointKey<'b>, i64>, DbError> {
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
            .await
            .map_err(DbError::sqlx)?;
        rows::inserted_seqs(unique, rows)
    }

    async fn fetch_stored<'b>(
        &mut self,
        keys: &[CheckpointKey<'b>],
    ) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, DbError> {
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
        .await
        .map_err(DbError::sqlx)?;
        rows::found_checkpoints(keys, rows)
    }

    async fn load_keys(&mut self, keys: &[(&str, &str)]) -> Result<HashMap<(String, String), KeyRecord>, DbError> {
        let (namespaces, names): (Vec<&str>, Vec<&str>) = keys.iter().copied().unzip();
        let rows: Vec<KeyDbRow> = sqlx::query_as(LOAD_KEYS)
            .bind(namespaces)
            .bind(names)
            .fetch_all(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        rows::records_by_key(rows)
    }

    async fn save_keys(&mut self, records: &[KeyRecord]) -> Result<(), DbError> {
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
        .await
        .map_err(DbError::sqlx)?;
        Ok(())
    }

    async fn put_records(&mut self, rows: &[(&str, &NewRecord)], recorded_at: UnixNanos) -> Result<(), DbError> {
        records::put(self.conn, rows, recorded_at).await.map_err(DbError::sqlx)
    }

    async fn stored_addresses(
        &mut self,
        turns: &[(&str, &str)],
        wanted: &[Address],
    ) -> Result<HashSet<Address>, DbError> {
        records::stored_addresses(self.conn, turns, wanted).await.map_err(DbError::sqlx)
    }

    async fn delete_records(&mut self, delete: &RecordDelete) -> Result<u64, DbError> {
        records::delete(self.conn, delete).await.map_err(DbError::sqlx)
    }

    async fn copy_turn(
        &mut self,
        namespace: &str,
        source: &str,
        target: &str,
        recorded_at: UnixNanos,
    ) -> Result<u64, DbError> {
        records::copy(self.conn, namespace, source, target, recorded_at).await.map_err(DbError::sqlx)
    }

    async fn write_items(&mut self, finals: &[Final<'_>], recorded_at: UnixNanos) -> Result<(), DbError> {
        memory::write(self.conn, finals, recorded_at, self.clock.offset(), self.embedding).await.map_err(DbError::sqlx)
    }

    async fn touch_items(&mut self, touch: &ItemsTouch) -> Result<(), DbError> {
        memory::touch(self.conn, touch, self.clock.offset()).await.map_err(DbError::sqlx)
    }

    async fn delete_items(&mut self, namespace: &str, prefix: &Path) -> Result<u64, DbError> {
        memory::delete_under(self.conn, namespace, prefix).await.map_err(DbError::sqlx)
    }
}

/// A DeleteTurn chunk's statements (`batch::delete_chunk` is what a chunk
/// does with them), in the SQL both dialects accept (`sql`), but for the
/// lock on the turn's summary row.
#[async_trait]
impl TurnChunks for Conn<'_> {
    async fn lock_turn(&mut self, namespace: &str, turn_id: &str) -> Result<Option<(i64, i64, bool)>, DbError> {
        sqlx::query_as(LOCK_TURN)
            .bind(namespace)
            .bind(turn_id)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)
    }

    async fn delete_oldest(
        &mut self,
        namespace: &str,
        turn_id: &str,
        from: Cursor,
        rows: u32,
    ) -> Result<Vec<(i64, i64)>, DbError> {
        sqlx::query_as(DELETE_CHUNK)
            .bind(namespace)
            .bind(turn_id)
            .bind(from.timestamp)
            .bind(from.seq)
            .bind(i64::from(rows))
            .fetch_all(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)
    }

    async fn oldest_after(&mut self, namespace: &str, turn_id: &str, after: Cursor) -> Result<Option<i64>, DbError> {
        let row: Option<(i64,)> = sqlx::query_as(OLDEST_AFTER)
            .bind(namespace)
            .bind(turn_id)
            .bind(after.timestamp)
            .bind(after.seq)
            .fetch_optional(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        Ok(row.map(|(ts,)| ts))
    }

    async fn shrink_turn(
        &mut self,
        namespace: &str,
        turn_id: &str,
        deleted: i64,
        oldest_gone: i64,
        oldest_left: i64,
    ) -> Result<(), DbError> {
        sqlx::query(SHRINK_TURN)
            .bind(namespace)
            .bind(turn_id)
            .bind(deleted)
            .bind(oldest_gone)
            .bind(oldest_left)
            .execute(&mut *self.conn)
            .await
            .map_err(DbError::sqlx)?;
        Ok(())
    }

    async fn delete_summary(&mut self, namespace: &str, turn_id: &str) -> Result<(), DbError> {
        sqlx::query(DELETE_TURN).bind(namespace).bind(turn_id).execute(&mut *self.conn).await.map_err(DbError::sqlx)?;
        Ok(())
    }
}
