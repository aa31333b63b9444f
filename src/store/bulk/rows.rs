//! The rows a move carries between stores, one type per table, as each
//! store reads and writes them and as the export file holds them (their
//! serde form is the export's lines, bytes as base64), with what each row
//! counts against a chunk's byte budget.

use crate::store::sql_row::sql_row;
use serde::{Deserialize, Serialize};

sql_row! {
    /// A row of `checkpoints`; `seq` is the source's insertion order.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct CheckpointRow {
        pub seq: i64,
        pub namespace: String,
        pub turn_id: String,
        pub phase: String,
        pub ts_ns: i64,
        pub session_id: String,
        #[serde(with = "base64_bytes")]
        pub state: Vec<u8>,
        pub terminal: bool,
        pub workflow_version: String,
        pub recorded_at_ns: i64,
    }
}

sql_row! {
    /// A row of `turns`, without `last_seq` (a position in one store's log).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BulkTurnRow {
        pub namespace: String,
        pub turn_id: String,
        pub session_id: String,
        pub first_ts_ns: i64,
        pub last_ts_ns: i64,
        pub last_phase: String,
        pub checkpoint_count: i64,
        pub terminal: bool,
        pub workflow_version: String,
        pub session_ts_ns: i64,
        pub version_ts_ns: i64,
    }
}

sql_row! {
    /// A row of `idempotency`, every column. `error` is UTF-8 text (bytes on
    /// Postgres, which keeps NUL).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BulkKeyRow {
        pub namespace: String,
        pub key: String,
        pub held: i64,
        #[serde(with = "base64_bytes")]
        pub fingerprint: Vec<u8>,
        pub attempt: i64,
        pub lease_token: i64,
        pub lease_expires_at_ns: i64,
        #[serde(with = "base64_bytes")]
        pub result: Vec<u8>,
        #[serde(with = "utf8_bytes")]
        pub error: Vec<u8>,
        pub retention_ns: i64,
        pub created_at_ns: i64,
        pub updated_at_ns: i64,
        pub purge_after_ns: i64,
    }
}

sql_row! {
    /// A row of `records` (RecordService), every column. `metadata` (a JSON
    /// object, `None` for none) and `refs` (a JSON array) are JSON text: as
    /// stored on SQLite, as Postgres prints its jsonb. In an export, `kind` is
    /// `record_kind`, since `kind` names the line's kind.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct StoredRecordRow {
        pub namespace: String,
        pub turn_id: String,
        #[serde(rename = "record_kind")]
        pub kind: String,
        pub scope: String,
        pub id: String,
        pub parent_id: String,
        pub content_type: String,
        #[serde(with = "base64_bytes")]
        pub payload: Vec<u8>,
        pub metadata: Option<String>,
        pub refs: String,
        pub recorded_at_ns: i64,
    }
}

impl StoredRecordRow {
    /// The row's key, in the order rows are read and tallied.
    pub fn key(&self) -> RecordKey {
        (self.namespace.clone(), self.turn_id.clone(), self.kind.clone(), self.scope.clone(), self.id.clone())
    }
}

/// (namespace, turn_id, kind, scope, id): a record's key; compared bytewise.
pub type RecordKey = (String, String, String, String, String);

sql_row! {
    /// A row of `waits` (WaitService), every column: `status` is the
    /// contract's WaitStatus number, `due_at_ns` the earlier of the timer and
    /// the expiry (kept as stored, so the target's timer finds what is due), and
    /// `metadata` the JSON text as given (a text column on both backends).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BulkWaitRow {
        pub namespace: String,
        pub turn_id: String,
        pub name: String,
        pub status: i64,
        pub metadata: Option<String>,
        pub created_at_ns: i64,
        pub expire_at_ns: Option<i64>,
        pub resolve_at_ns: Option<i64>,
        pub due_at_ns: Option<i64>,
        pub settled_at_ns: Option<i64>,
        #[serde(with = "base64_bytes")]
        pub payload: Vec<u8>,
        pub content_type: String,
        pub settled_by: String,
        pub settled_span: Option<String>,
    }
}

impl BulkWaitRow {
    /// The row's key, in the order rows are read and tallied.
    pub fn key(&self) -> BulkWaitKey {
        (self.namespace.clone(), self.turn_id.clone(), self.name.clone())
    }
}

/// (namespace, turn_id, name): a wait's key; compared bytewise.
pub type BulkWaitKey = (String, String, String);

/// What a row counts against a chunk's byte budget: the lengths of its
/// variable-length columns, plus the row's own size in memory as a fixed
/// overhead (its fixed-width columns and the headers of the others).
pub trait RowBytes {
    fn bytes(&self) -> usize;
}

impl RowBytes for CheckpointRow {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.namespace.len()
            + self.turn_id.len()
            + self.phase.len()
            + self.session_id.len()
            + self.state.len()
            + self.workflow_version.len()
    }
}

impl RowBytes for BulkKeyRow {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.namespace.len()
            + self.key.len()
            + self.fingerprint.len()
            + self.result.len()
            + self.error.len()
    }
}

impl RowBytes for StoredRecordRow {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.namespace.len()
            + self.turn_id.len()
            + self.kind.len()
            + self.scope.len()
            + self.id.len()
            + self.parent_id.len()
            + self.content_type.len()
            + self.payload.len()
            + self.metadata.as_ref().map_or(0, String::len)
            + self.refs.len()
    }
}

impl RowBytes for BulkWaitRow {
    fn bytes(&self) -> usize {
        size_of::<Self>()
            + self.namespace.len()
            + self.turn_id.len()
            + self.name.len()
            + self.metadata.as_ref().map_or(0, String::len)
            + self.payload.len()
            + self.content_type.len()
            + self.settled_by.len()
            + self.settled_span.as_ref().map_or(0, String::len)
    }
}

/// Bytes as a base64 string.
mod base64_bytes {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// UTF-8 bytes as a JSON string.
mod utf8_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        let text = std::str::from_utf8(bytes).map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(text)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        Ok(String::deserialize(deserializer)?.into_bytes())
    }
}
