//! SQLite's side of a move: the idempotent inserts of a chunk as one
//! multi-row `INSERT ... ON CONFLICT DO NOTHING` each (the turns trigger
//! keeps the summaries of inserted checkpoints), and the fencing sequence,
//! which is the one row of `lease_tokens`. The move reads and writes SQLite
//! through sqlx's driver, on connections of its own.

use sqlx::{QueryBuilder, SqlitePool};

use super::rows::{BulkKeyRow, BulkWaitRow, CheckpointRow, StoredRecordRow};
use super::{KEY_COLUMNS, RECORD_KEY, SQLITE_RECORD_COLUMNS, WAIT_COLUMNS, WAIT_KEY};

/// The last token issued (0 before the first).
pub(super) async fn fence(pool: &SqlitePool) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT last FROM lease_tokens WHERE id = 1").fetch_one(pool).await
}

/// Moves the fencing sequence to at least `last`, never back.
pub(super) async fn advance_fence(pool: &SqlitePool, last: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE lease_tokens SET last = $1 WHERE id = 1 AND last < $1").bind(last).execute(pool).await?;
    Ok(())
}

/// Inserts checkpoints in the order given, skipping keys already stored, in
/// one transaction; the turns trigger keeps each inserted checkpoint's
/// summary. Returns how many were inserted.
pub(super) async fn insert_checkpoints(pool: &SqlitePool, rows: &[CheckpointRow]) -> Result<u64, sqlx::Error> {
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

/// Inserts idempotency keys not stored yet, in one transaction, each error
/// as the UTF-8 text SQLite keeps (`errors`, one per row). Returns how many
/// were inserted.
pub(super) async fn insert_keys(
    pool: &SqlitePool,
    rows: &[BulkKeyRow],
    errors: Vec<String>,
) -> Result<u64, sqlx::Error> {
    let mut builder = QueryBuilder::new(format!("INSERT INTO idempotency ({KEY_COLUMNS}) "));
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

/// Inserts records (RecordService) not stored yet, in one transaction.
/// Returns how many were inserted.
pub(super) async fn insert_records(pool: &SqlitePool, rows: &[StoredRecordRow]) -> Result<u64, sqlx::Error> {
    let mut builder = QueryBuilder::new(format!("INSERT INTO records ({SQLITE_RECORD_COLUMNS}) "));
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
    builder.push(format!(" ON CONFLICT ({RECORD_KEY}) DO NOTHING"));
    let mut tx = pool.begin().await?;
    let inserted = builder.build().execute(&mut *tx).await?.rows_affected();
    tx.commit().await?;
    Ok(inserted)
}

/// Inserts waits (WaitService) not stored yet, in one transaction. Returns
/// how many were inserted.
pub(super) async fn insert_waits(pool: &SqlitePool, rows: &[BulkWaitRow]) -> Result<u64, sqlx::Error> {
    let mut builder = QueryBuilder::new(format!("INSERT INTO waits ({WAIT_COLUMNS}) "));
    builder.push_values(rows, |mut b, r| {
        b.push_bind(&r.namespace)
            .push_bind(&r.turn_id)
            .push_bind(&r.name)
            .push_bind(r.status)
            .push_bind(&r.metadata)
            .push_bind(r.created_at_ns)
            .push_bind(r.expire_at_ns)
            .push_bind(r.resolve_at_ns)
            .push_bind(r.due_at_ns)
            .push_bind(r.settled_at_ns)
            .push_bind(&r.payload)
            .push_bind(&r.content_type)
            .push_bind(&r.settled_by)
            .push_bind(&r.settled_span);
    });
    builder.push(format!(" ON CONFLICT ({WAIT_KEY}) DO NOTHING"));
    let mut tx = pool.begin().await?;
    let inserted = builder.build().execute(&mut *tx).await?.rows_affected();
    tx.commit().await?;
    Ok(inserted)
}
