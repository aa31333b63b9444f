//! What a batch's wait writes mean, over each backend's statements, and the
//! SQL text both backends run for them. Every settlement is one conditional
//! statement (an UPDATE, or an upsert whose update is conditional, on
//! `status = PENDING`), so the first settlement wins atomically however many
//! sidecars share the store: a later one changes no row, reads the winner,
//! and answers a repeat or a refusal. `batch` runs a batch's wait writes
//! through `create` and `settle_one`, one after another in the batch's
//! transaction, after its other writes, and checks a Signal's fence first.

use crate::store::sql_row::sql_row;
use async_trait::async_trait;

use super::DbError;
use crate::domain::model::UnixNanos;
use crate::domain::waits::{NewWait, Settle, Wait, WaitDone, WaitKey, WaitRefusal, WaitStatus};

/// A wait's columns, in the order `WaitDbRow` reads them.
macro_rules! wait_columns {
    () => {
        "namespace, turn_id, name, status, metadata, created_at_ns, expire_at_ns, resolve_at_ns, settled_at_ns, \
         payload, content_type, settled_by, settled_span"
    };
}

pub(super) const GET_WAIT: &str =
    concat!("SELECT ", wait_columns!(), " FROM waits WHERE namespace = $1 AND turn_id = $2 AND name = $3");

pub(super) const COUNT_TURN_WAITS: &str = "SELECT count(*) FROM waits WHERE namespace = $1 AND turn_id = $2";

/// A new PENDING wait, unless the key has one; `$9` is an empty payload.
pub(super) const INSERT_WAIT: &str = concat!(
    "INSERT INTO waits (namespace, turn_id, name, status, metadata, created_at_ns, expire_at_ns, resolve_at_ns, \
                        due_at_ns, payload, content_type, settled_by) \
     VALUES ($1, $2, $3, 1, $4, $5, $6, $7, $8, $9, '', '') \
     ON CONFLICT (namespace, turn_id, name) DO NOTHING RETURNING ",
    wait_columns!()
);

/// Settles a PENDING wait; no row when it is settled already or absent.
pub(super) const SETTLE_WAIT: &str = concat!(
    "UPDATE waits SET status = $4, settled_at_ns = $5, payload = $6, content_type = $7, settled_by = $8, \
       settled_span = $9 \
     WHERE namespace = $1 AND turn_id = $2 AND name = $3 AND status = 1 RETURNING ",
    wait_columns!()
);

/// Creates the wait settled, or settles it if another write created it
/// PENDING meanwhile; no row when it was settled first by another.
pub(super) const INSERT_SETTLED_WAIT: &str = concat!(
    "INSERT INTO waits (namespace, turn_id, name, status, metadata, created_at_ns, settled_at_ns, payload, \
                        content_type, settled_by, settled_span) \
     VALUES ($1, $2, $3, $4, NULL, $5, $5, $6, $7, $8, $9) \
     ON CONFLICT (namespace, turn_id, name) DO UPDATE SET status = excluded.status, \
       settled_at_ns = excluded.settled_at_ns, payload = excluded.payload, content_type = excluded.content_type, \
       settled_by = excluded.settled_by, settled_span = excluded.settled_span \
     WHERE waits.status = 1 RETURNING ",
    wait_columns!()
);

/// Settles up to `$3` PENDING waits due by `$2`, at `$1`: RESOLVED by their
/// timer when it is what fell due (first, or with the expiry), else
/// EXPIRED. The row's own `status = 1` check is what makes each fire once,
/// across sidecars; `{lock}` lets Postgres skip the rows another sidecar is
/// settling now rather than wait for them.
macro_rules! fire_due {
    ($lock:literal) => {
        concat!(
            "UPDATE waits SET \
               status = CASE WHEN resolve_at_ns = due_at_ns THEN 2 ELSE 4 END, \
               settled_by = CASE WHEN resolve_at_ns = due_at_ns THEN '",
            "stepwell:timer",
            "' ELSE '",
            "stepwell:expiry",
            "' END, settled_at_ns = $1 \
             WHERE status = 1 AND due_at_ns <= $2 AND (namespace, turn_id, name) IN ( \
               SELECT namespace, turn_id, name FROM waits WHERE status = 1 AND due_at_ns <= $2 \
               ORDER BY due_at_ns LIMIT $3",
            $lock,
            ") RETURNING ",
            wait_columns!()
        )
    };
}

pub(super) const FIRE_DUE_SQLITE: &str = fire_due!("");
pub(super) const FIRE_DUE_POSTGRES: &str = fire_due!(" FOR UPDATE SKIP LOCKED");

/// When the next pending wait falls due, through the partial index.
pub(super) const NEXT_DUE: &str = "SELECT min(due_at_ns) FROM waits WHERE status = 1 AND due_at_ns IS NOT NULL";

/// A page of a namespace's waits after ($2, $3) in (turn_id, name) order;
/// `$4` the turn, `$5` the status and `$6` resolve_before, each when asked
/// for; `$7` the limit.
pub(super) const LIST_WAITS: &str = concat!(
    "SELECT ",
    wait_columns!(),
    " FROM waits WHERE namespace = $1 AND (turn_id, name) > ($2, $3) \
       AND (CAST($4 AS TEXT) IS NULL OR turn_id = $4) \
       AND (CAST($5 AS BIGINT) IS NULL OR status = $5) \
       AND (CAST($6 AS BIGINT) IS NULL OR resolve_at_ns < $6) \
     ORDER BY turn_id, name LIMIT $7"
);

/// Deletes a turn's waits, with the turn.
pub(super) const DELETE_TURN_WAITS: &str = "DELETE FROM waits WHERE namespace = $1 AND turn_id = $2";

sql_row! {
    /// A wait's row as both backends read it, in `wait_columns!` order.
    #[derive(Debug)]
    pub(super) struct WaitDbRow {
        pub namespace: String,
        pub turn_id: String,
        pub name: String,
        pub status: i64,
        pub metadata: Option<String>,
        pub created_at_ns: i64,
        pub expire_at_ns: Option<i64>,
        pub resolve_at_ns: Option<i64>,
        pub settled_at_ns: Option<i64>,
        pub payload: Vec<u8>,
        pub content_type: String,
        pub settled_by: String,
        pub settled_span: Option<String>,
    }
}

impl WaitDbRow {
    pub fn from_sqlite(row: &rusqlite::Row<'_>) -> rusqlite::Result<WaitDbRow> {
        Ok(WaitDbRow {
            namespace: row.get(0)?,
            turn_id: row.get(1)?,
            name: row.get(2)?,
            status: row.get(3)?,
            metadata: row.get(4)?,
            created_at_ns: row.get(5)?,
            expire_at_ns: row.get(6)?,
            resolve_at_ns: row.get(7)?,
            settled_at_ns: row.get(8)?,
            payload: row.get(9)?,
            content_type: row.get(10)?,
            settled_by: row.get(11)?,
            settled_span: row.get(12)?,
        })
    }

    pub fn into_wait(self) -> Result<Wait, DbError> {
        let status = WaitStatus::from_code(self.status)
            .ok_or_else(|| DbError::decode(format!("wait status {} is not known", self.status)))?;
        Ok(Wait {
            key: WaitKey { namespace: self.namespace, turn_id: self.turn_id, name: self.name },
            status,
            metadata: self.metadata,
            created_at: self.created_at_ns,
            expire_at: self.expire_at_ns,
            resolve_at: self.resolve_at_ns,
            settled_at: self.settled_at_ns,
            payload: self.payload,
            content_type: self.content_type,
            settled_by: self.settled_by,
            settled_span: self.settled_span,
        })
    }
}

/// Rows into waits.
pub(super) fn into_waits(rows: Vec<WaitDbRow>) -> Result<Vec<Wait>, DbError> {
    rows.into_iter().map(WaitDbRow::into_wait).collect()
}

/// The statements a backend runs for wait writes, on a batch's connection.
#[async_trait]
pub trait WaitStatements: Send {
    async fn get_wait(&mut self, key: &WaitKey) -> Result<Option<Wait>, DbError>;
    /// How many waits the turn holds, in any status.
    async fn count_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<i64, DbError>;
    /// Inserts a new PENDING wait created at `at`; `None` if the key has one.
    async fn insert_wait(&mut self, new: &NewWait, at: UnixNanos) -> Result<Option<Wait>, DbError>;
    /// `SETTLE_WAIT`: settles the wait if it is PENDING.
    async fn settle_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError>;
    /// `INSERT_SETTLED_WAIT`: creates the wait settled, or settles it if PENDING.
    async fn insert_settled_wait(&mut self, settle: &Settle, at: UnixNanos) -> Result<Option<Wait>, DbError>;
    /// Settles up to `limit` waits due by `now`; answers those it settled.
    async fn fire_due(&mut self, now: UnixNanos, limit: u32) -> Result<Vec<Wait>, DbError>;
    /// Deletes every wait of a turn; answers how many went.
    async fn delete_turn_waits(&mut self, namespace: &str, turn_id: &str) -> Result<u64, DbError>;
}

/// A CreateWait: the first creation stands, a repeat finds it.
pub(super) async fn create(
    statements: &mut impl WaitStatements,
    new: &NewWait,
    at: UnixNanos,
) -> Result<Result<WaitDone, WaitRefusal>, DbError> {
    if let Some(wait) = statements.get_wait(&new.key).await? {
        return Ok(Ok(WaitDone::Created { wait, created: false }));
    }
    if statements.count_turn_waits(&new.key.namespace, &new.key.turn_id).await? >= i64::from(new.per_turn_max) {
        return Ok(Err(WaitRefusal::PerTurn { max: new.per_turn_max }));
    }
    if let Some(wait) = statements.insert_wait(new, at).await? {
        return Ok(Ok(WaitDone::Created { wait, created: true }));
    }
    // Another sidecar created it between the read and the insert.
    let wait = statements.get_wait(&new.key).await?.ok_or_else(vanished)?;
    Ok(Ok(WaitDone::Created { wait, created: false }))
}

/// A Signal or CancelWait: settle it if PENDING; else create it settled if
/// absent; else it was settled before, by this settlement (a repeat) or
/// another (a refusal carrying the winner). On Postgres a wait another
/// sidecar is creating is invisible to the settling UPDATE until that
/// creation commits, and then found PENDING (or its insert makes ours a
/// conflict): the settlement is tried again, at most `SETTLE_TRIES` times.
pub(super) async fn settle_one(
    statements: &mut impl WaitStatements,
    settle: &Settle,
    at: UnixNanos,
) -> Result<Result<WaitDone, WaitRefusal>, DbError> {
    for _ in 0..SETTLE_TRIES {
        if let Some(wait) = statements.settle_wait(settle, at).await? {
            return Ok(Ok(WaitDone::Settled { wait, settled: true }));
        }
        match statements.get_wait(&settle.key).await? {
            Some(wait) if wait.status == WaitStatus::Pending => continue,
            Some(wait) if settle.repeats(&wait) => return Ok(Ok(WaitDone::Settled { wait, settled: false })),
            Some(wait) => return Ok(Err(WaitRefusal::Settled(Box::new(wait)))),
            None => {}
        }
        let (namespace, turn_id) = (&settle.key.namespace, &settle.key.turn_id);
        if statements.count_turn_waits(namespace, turn_id).await? >= i64::from(settle.per_turn_max) {
            return Ok(Err(WaitRefusal::PerTurn { max: settle.per_turn_max }));
        }
        if let Some(wait) = statements.insert_settled_wait(settle, at).await? {
            return Ok(Ok(WaitDone::Settled { wait, settled: true }));
        }
    }
    Err(vanished())
}

/// How many times a settlement reads a wait that another writer is
/// creating or deleting under it before it fails as contention (the batch is
/// then tried again).
const SETTLE_TRIES: usize = 3;

/// A wait that a conflict showed was there, gone when read: its turn was
/// deleted meanwhile. The batch fails as contention and is tried again.
fn vanished() -> DbError {
    DbError::new(super::Cause::DeletedMeanwhile, None, "a wait was deleted with its turn during the batch")
}
