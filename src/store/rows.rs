//! The rows both backends read, and how each becomes a model value. The row
//! types are `sqlx::FromRow` (through `sql_row!`, `store/sql_row.rs`) for Postgres's rows and are read from
//! SQLite's (rusqlite's) by column name (`from_sqlite`), so both backends
//! decode a table the same way; whatever a row holds that the model cannot
//! (a negative count, an unknown state, an error that is not UTF-8) is a
//! decode error, because only a corrupt row can hold it.

use std::collections::HashMap;

use super::DbError;
use super::batch::{CheckpointKey, checkpoint_key};
use super::sql_row::sql_row;
use crate::domain::keys::{Held, KeyRecord};
use crate::domain::model::{NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnSummary};

/// A row the model cannot represent: the database holds what stepwell never writes.
pub fn decode_error(what: String) -> DbError {
    DbError::decode(what)
}

sql_row! {
    /// A whole row of `checkpoints`.
    pub struct CheckpointRow {
        namespace: String,
        turn_id: String,
        session_id: String,
        phase: String,
        state: Vec<u8>,
        ts_ns: i64,
        terminal: bool,
        workflow_version: String,
        recorded_at_ns: i64,
        seq: i64,
    }
}

impl From<CheckpointRow> for StoredCheckpoint {
    fn from(row: CheckpointRow) -> StoredCheckpoint {
        StoredCheckpoint {
            checkpoint: NewCheckpoint {
                namespace: row.namespace,
                turn_id: row.turn_id,
                session_id: row.session_id,
                phase: row.phase,
                state: row.state,
                timestamp: row.ts_ns,
                terminal: row.terminal,
                workflow_version: row.workflow_version,
            },
            recorded_at: row.recorded_at_ns,
            seq: row.seq,
        }
    }
}

sql_row! {
    /// A restored checkpoint: the restore query's columns, without the namespace
    /// and turn, which are the query's.
    pub struct PageRow {
        seq: i64,
        session_id: String,
        phase: String,
        ts_ns: i64,
        state: Vec<u8>,
        terminal: bool,
        workflow_version: String,
        recorded_at_ns: i64,
        /// How many rows the page's query read: more than it returned when
        /// the page ended before the turn did.
        pub rows_read: i64,
    }
}

impl PageRow {
    pub fn into_checkpoint(self, q: &RestoreQuery) -> StoredCheckpoint {
        StoredCheckpoint {
            seq: self.seq,
            checkpoint: NewCheckpoint {
                namespace: q.namespace.clone(),
                turn_id: q.turn_id.clone(),
                session_id: self.session_id,
                phase: self.phase,
                timestamp: self.ts_ns,
                state: self.state,
                terminal: self.terminal,
                workflow_version: self.workflow_version,
            },
            recorded_at: self.recorded_at_ns,
        }
    }
}

sql_row! {
    /// A row of `turns`.
    pub struct TurnDbRow {
        turn_id: String,
        session_id: String,
        first_ts_ns: i64,
        last_ts_ns: i64,
        last_phase: String,
        checkpoint_count: i64,
        terminal: bool,
        workflow_version: String,
    }
}

impl TryFrom<TurnDbRow> for TurnSummary {
    type Error = DbError;

    fn try_from(row: TurnDbRow) -> Result<TurnSummary, DbError> {
        // Stepwell only ever adds to a count, so a negative one is corruption,
        // reported as such rather than served as a plausible 0.
        let count = row.checkpoint_count;
        Ok(TurnSummary {
            turn_id: row.turn_id,
            session_id: row.session_id,
            first_timestamp: row.first_ts_ns,
            last_timestamp: row.last_ts_ns,
            last_phase: row.last_phase,
            checkpoint_count: u64::try_from(count).map_err(|_| decode_error(format!("count {count} < 0")))?,
            terminal: row.terminal,
            workflow_version: row.workflow_version,
        })
    }
}

sql_row! {
    /// A row of `idempotency`. Its `error` is read as bytes because Postgres
    /// keeps it as bytes (it may hold NUL); SQLite's text reads as bytes too.
    pub struct KeyDbRow {
        namespace: String,
        key: String,
        held: i64,
        fingerprint: Vec<u8>,
        attempt: i64,
        lease_token: i64,
        lease_expires_at_ns: i64,
        result: Vec<u8>,
        error: Vec<u8>,
        retention_ns: i64,
        created_at_ns: i64,
        updated_at_ns: i64,
        purge_after_ns: i64,
    }
}

impl TryFrom<KeyDbRow> for KeyRecord {
    type Error = DbError;

    fn try_from(row: KeyDbRow) -> Result<KeyRecord, DbError> {
        let KeyDbRow { held, attempt, lease_token, .. } = row;
        Ok(KeyRecord {
            namespace: row.namespace,
            key: row.key,
            held: Held::from_code(held).ok_or_else(|| decode_error(format!("unknown held state {held}")))?,
            fingerprint: row.fingerprint,
            attempt: u32::try_from(attempt).map_err(|_| decode_error(format!("attempt {attempt} out of range")))?,
            lease_token: u64::try_from(lease_token).map_err(|_| decode_error(format!("token {lease_token} < 0")))?,
            lease_expires_at: row.lease_expires_at_ns,
            result: row.result,
            error: String::from_utf8(row.error).map_err(|_| decode_error("error is not UTF-8".into()))?,
            retention: row.retention_ns,
            created_at: row.created_at_ns,
            updated_at: row.updated_at_ns,
            purge_after: row.purge_after_ns,
        })
    }
}

/// Reading the rows from SQLite (rusqlite), by column name.
impl CheckpointRow {
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<CheckpointRow> {
        Ok(CheckpointRow {
            namespace: row.get("namespace")?,
            turn_id: row.get("turn_id")?,
            session_id: row.get("session_id")?,
            phase: row.get("phase")?,
            state: row.get("state")?,
            ts_ns: row.get("ts_ns")?,
            terminal: row.get("terminal")?,
            workflow_version: row.get("workflow_version")?,
            recorded_at_ns: row.get("recorded_at_ns")?,
            seq: row.get("seq")?,
        })
    }
}

impl PageRow {
    /// A row of SQLite's restore page: its size first (which the page's
    /// budget reads), then the columns in the order Postgres's names them.
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<PageRow> {
        Ok(PageRow {
            seq: row.get(1)?,
            session_id: row.get(2)?,
            phase: row.get(3)?,
            ts_ns: row.get(4)?,
            state: row.get(5)?,
            terminal: row.get(6)?,
            workflow_version: row.get(7)?,
            recorded_at_ns: row.get(8)?,
            rows_read: 0,
        })
    }
}

impl TurnDbRow {
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<TurnDbRow> {
        Ok(TurnDbRow {
            turn_id: row.get("turn_id")?,
            session_id: row.get("session_id")?,
            first_ts_ns: row.get("first_ts_ns")?,
            last_ts_ns: row.get("last_ts_ns")?,
            last_phase: row.get("last_phase")?,
            checkpoint_count: row.get("checkpoint_count")?,
            terminal: row.get("terminal")?,
            workflow_version: row.get("workflow_version")?,
        })
    }
}

impl KeyDbRow {
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<KeyDbRow> {
        Ok(KeyDbRow {
            namespace: row.get("namespace")?,
            key: row.get("key")?,
            held: row.get("held")?,
            fingerprint: row.get("fingerprint")?,
            attempt: row.get("attempt")?,
            lease_token: row.get("lease_token")?,
            lease_expires_at_ns: row.get("lease_expires_at_ns")?,
            result: row.get("result")?,
            // SQLite keeps the error as text; its bytes are what Postgres keeps.
            error: row.get::<_, String>("error")?.into_bytes(),
            retention_ns: row.get("retention_ns")?,
            created_at_ns: row.get("created_at_ns")?,
            updated_at_ns: row.get("updated_at_ns")?,
            purge_after_ns: row.get("purge_after_ns")?,
        })
    }
}

impl InsertedRow {
    /// `RETURNING namespace, turn_id, phase, ts_ns, seq`, in that order.
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<InsertedRow> {
        Ok(InsertedRow {
            namespace: row.get(0)?,
            turn_id: row.get(1)?,
            phase: row.get(2)?,
            ts_ns: row.get(3)?,
            seq: row.get(4)?,
        })
    }
}

/// Records by their (namespace, key).
pub fn records_by_key(rows: Vec<KeyDbRow>) -> Result<HashMap<(String, String), KeyRecord>, DbError> {
    rows.into_iter().map(|row| KeyRecord::try_from(row).map(|r| ((r.namespace.clone(), r.key.clone()), r))).collect()
}

/// Each record's fencing token as the signed integer the column holds.
pub fn stored_tokens(records: &[KeyRecord]) -> Result<Vec<i64>, DbError> {
    records
        .iter()
        .map(|r| i64::try_from(r.lease_token).map_err(|_| decode_error(format!("token {} too large", r.lease_token))))
        .collect()
}

sql_row! {
    /// What an insert's `RETURNING namespace, turn_id, phase, ts_ns, seq` names.
    pub struct InsertedRow {
        namespace: String,
        turn_id: String,
        phase: String,
        ts_ns: i64,
        seq: i64,
    }
}

/// The `seq` of each key the batch inserted, keyed by the batch's own
/// strings, from the rows the insert returned.
pub fn inserted_seqs<'b>(
    unique: &[&'b NewCheckpoint],
    rows: Vec<InsertedRow>,
) -> Result<HashMap<CheckpointKey<'b>, i64>, DbError> {
    let index: HashMap<CheckpointKey<'_>, usize> =
        unique.iter().enumerate().map(|(i, cp)| (checkpoint_key(cp), i)).collect();
    let mut inserted = HashMap::with_capacity(rows.len());
    for row in rows {
        let &i = index
            .get(&(row.namespace.as_str(), row.turn_id.as_str(), row.phase.as_str(), row.ts_ns))
            .ok_or_else(|| decode_error("RETURNING named a checkpoint the batch did not insert".into()))?;
        inserted.insert(checkpoint_key(unique[i]), row.seq);
    }
    Ok(inserted)
}

/// The fetched rows of checkpoints already stored, by the key the batch asked with.
pub fn found_checkpoints<'b>(
    keys: &[CheckpointKey<'b>],
    rows: Vec<CheckpointRow>,
) -> Result<HashMap<CheckpointKey<'b>, StoredCheckpoint>, DbError> {
    let mut found = HashMap::with_capacity(rows.len());
    for row in rows {
        let stored = StoredCheckpoint::from(row);
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

/// Splits `limit + 1` fetched rows into a page and whether more follow.
pub fn page<T>(mut rows: Vec<T>, limit: u32) -> (Vec<T>, bool) {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    (rows, more)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn_row(checkpoint_count: i64) -> TurnDbRow {
        TurnDbRow {
            turn_id: "t".into(),
            session_id: String::new(),
            first_ts_ns: 1,
            last_ts_ns: 2,
            last_phase: "p".into(),
            checkpoint_count,
            terminal: false,
            workflow_version: String::new(),
        }
    }

    #[test]
    fn a_negative_count_is_a_decode_error_not_zero() {
        assert_eq!(TurnSummary::try_from(turn_row(3)).unwrap().checkpoint_count, 3);
        let error = TurnSummary::try_from(turn_row(-1)).expect_err("a negative count");
        assert!(error.to_string().starts_with("error occurred while decoding"), "{error}");
    }
}
