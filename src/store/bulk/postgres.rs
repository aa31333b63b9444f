//! Postgres's side of a move: the idempotent inserts of a chunk as
//! `UNNEST`ed arrays (one statement each, whatever the chunk's size), the
//! rebuild of the summaries of the turns a chunk touched, and the fencing
//! sequence, which is a Postgres sequence.

use sqlx::PgPool;

use super::rows::{BulkKeyRow, BulkWaitRow, CheckpointRow, StoredRecordRow};

/// Rebuilds the summaries of the given turns from the checkpoints Postgres
/// holds: the latest checkpoint by (timestamp, seq) decides phase and
/// terminal, and the latest that named a session or version names them,
/// exactly as an append keeps them.
const REBUILD_TURNS: &str = "INSERT INTO turns (namespace, turn_id, checkpoint_count, first_ts_ns, last_ts_ns, \
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

const INSERT_CHECKPOINTS: &str = "WITH ins AS ( \
       INSERT INTO checkpoints \
         (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns) \
       SELECT n, t, p, ts, s, st, te, v, r \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bytea[], $7::bool[], \
                   $8::text[], $9::bigint[]) WITH ORDINALITY AS u(n, t, p, ts, s, st, te, v, r, i) \
       ORDER BY i \
       ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

const INSERT_KEYS: &str = "WITH ins AS ( \
       INSERT INTO idempotency (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, \
                                result, error, retention_ns, created_at_ns, updated_at_ns, purge_after_ns) \
       SELECT * FROM UNNEST($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::bigint[], $6::bigint[], \
                            $7::bigint[], $8::bytea[], $9::bytea[], $10::bigint[], $11::bigint[], $12::bigint[], \
                            $13::bigint[]) \
       ON CONFLICT (namespace, key) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

/// The JSON columns are written from their text, as jsonb.
const INSERT_RECORDS: &str = "WITH ins AS ( \
       INSERT INTO records (namespace, turn_id, kind, scope, id, parent_id, content_type, payload, metadata, refs, \
                            recorded_at_ns) \
       SELECT n, t, k, s, i, p, c, b, CAST(m AS jsonb), CAST(f AS jsonb), r \
       FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], \
                   $8::bytea[], $9::text[], $10::text[], $11::bigint[]) AS u(n, t, k, s, i, p, c, b, m, f, r) \
       ON CONFLICT (namespace, turn_id, kind, scope, id) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

/// Each row's columns in `WAIT_COLUMNS` order; the times a wait may lack
/// are NULL in their arrays.
const INSERT_WAITS: &str = "WITH ins AS ( \
       INSERT INTO waits (namespace, turn_id, name, status, metadata, created_at_ns, expire_at_ns, resolve_at_ns, \
                          due_at_ns, settled_at_ns, payload, content_type, settled_by, settled_span) \
       SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::bigint[], \
                            $7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::bytea[], $12::text[], \
                            $13::text[], $14::text[]) \
       ON CONFLICT (namespace, turn_id, name) DO NOTHING RETURNING 1) \
     SELECT count(*) FROM ins";

/// The last token Postgres issued (0 before the first).
const FENCE: &str = "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM lease_tokens";

/// The last token issued (0 before the first).
pub(super) async fn fence(pool: &PgPool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(FENCE).fetch_one(pool).await
}

/// Moves the fencing sequence to at least `last`, never back.
pub(super) async fn advance_fence(pool: &PgPool, last: i64) -> Result<(), sqlx::Error> {
    let sql = format!("SELECT setval('lease_tokens', $1) WHERE $1 > ({FENCE})");
    sqlx::query(sqlx::AssertSqlSafe(sql)).bind(last).fetch_optional(pool).await?;
    Ok(())
}

/// Inserts checkpoints in the order given, skipping keys already stored,
/// and rebuilds the summaries of their turns, in one transaction. Returns
/// how many were inserted.
pub(super) async fn insert_checkpoints(pool: &PgPool, rows: &[CheckpointRow]) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // Borrowed, so the chunk's bytes are not copied once more.
    let column = |f: fn(&CheckpointRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let inserted: i64 = sqlx::query_scalar(INSERT_CHECKPOINTS)
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
        let mut turns: Vec<(&str, &str)> = rows.iter().map(|r| (r.namespace.as_str(), r.turn_id.as_str())).collect();
        turns.sort_unstable();
        turns.dedup();
        sqlx::query(REBUILD_TURNS)
            .bind(turns.iter().map(|t| t.0).collect::<Vec<_>>())
            .bind(turns.iter().map(|t| t.1).collect::<Vec<_>>())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    Ok(inserted.max(0) as u64)
}

/// Inserts idempotency keys not stored yet, in one transaction. Returns how
/// many were inserted.
pub(super) async fn insert_keys(pool: &PgPool, rows: &[BulkKeyRow]) -> Result<u64, sqlx::Error> {
    // Borrowed, so the chunk's bytes are not copied once more.
    let strings = |f: fn(&BulkKeyRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let bytes = |f: fn(&BulkKeyRow) -> &[u8]| rows.iter().map(f).collect::<Vec<&[u8]>>();
    let ints = |f: fn(&BulkKeyRow) -> i64| rows.iter().map(f).collect::<Vec<_>>();
    let mut tx = pool.begin().await?;
    let inserted: i64 = sqlx::query_scalar(INSERT_KEYS)
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

/// Inserts records (RecordService) not stored yet, in one transaction.
/// Returns how many were inserted.
pub(super) async fn insert_records(pool: &PgPool, rows: &[StoredRecordRow]) -> Result<u64, sqlx::Error> {
    let text = |f: fn(&StoredRecordRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let mut tx = pool.begin().await?;
    let inserted: i64 = sqlx::query_scalar(INSERT_RECORDS)
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

/// Inserts waits (WaitService) not stored yet, in one transaction. Returns
/// how many were inserted.
pub(super) async fn insert_waits(pool: &PgPool, rows: &[BulkWaitRow]) -> Result<u64, sqlx::Error> {
    // Borrowed, so the chunk's bytes are not copied once more.
    let text = |f: fn(&BulkWaitRow) -> &str| rows.iter().map(f).collect::<Vec<&str>>();
    let maybe_text = |f: fn(&BulkWaitRow) -> Option<&str>| rows.iter().map(f).collect::<Vec<Option<&str>>>();
    let time = |f: fn(&BulkWaitRow) -> Option<i64>| rows.iter().map(f).collect::<Vec<Option<i64>>>();
    let mut tx = pool.begin().await?;
    let inserted: i64 = sqlx::query_scalar(INSERT_WAITS)
        .bind(text(|r| &r.namespace))
        .bind(text(|r| &r.turn_id))
        .bind(text(|r| &r.name))
        .bind(rows.iter().map(|r| r.status).collect::<Vec<i64>>())
        .bind(maybe_text(|r| r.metadata.as_deref()))
        .bind(rows.iter().map(|r| r.created_at_ns).collect::<Vec<i64>>())
        .bind(time(|r| r.expire_at_ns))
        .bind(time(|r| r.resolve_at_ns))
        .bind(time(|r| r.due_at_ns))
        .bind(time(|r| r.settled_at_ns))
        .bind(rows.iter().map(|r| &r.payload[..]).collect::<Vec<&[u8]>>())
        .bind(text(|r| &r.content_type))
        .bind(text(|r| &r.settled_by))
        .bind(maybe_text(|r| r.settled_span.as_deref()))
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(inserted.max(0) as u64)
}
