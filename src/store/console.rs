//! The web console's reads, written once for both backends: each builds a
//! `Statement` (SQL with `$N` parameters, and the values to bind) that a
//! backend runs through `Store::read_rows`, and decodes the `Value`s of its
//! rows into the domain's console types. Every statement reads an index
//! (migrations `*_console_indexes.sql`), and every page is bounded.
//!
//! A page's cursor is a row value, `(a, b) < ($1, $2)`, which both planners
//! read as a range of the index rather than a filter over its rows.
//!
//! "Now" is the store's clock: SQLite's `Clock`, Postgres's server time, as
//! leases are read everywhere else; a statement asks for it with
//! `Param::Now` and the dialect's expression.

use super::sql::Dialect;
use super::{Error, Store};
use crate::domain::console::{
    ActivityQuery, KeyFilter, KeyPage, KeyQuery, Mark, MarkQuery, Overview, RecordMark, WaitFilter, WaitPageQuery,
    prefix_upper,
};
use crate::domain::keys::{Held, KeyRecord};
use crate::domain::model::{TurnStatus, TurnSummary, UnixNanos};
use crate::domain::waits::{Wait, WaitKey, WaitStatus};
use crate::store::DbError;

/// A value bound to a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(i64),
    Text(String),
    Bool(bool),
    /// The store's time in nanoseconds (Postgres: the clock's offset, which
    /// the dialect's expression adds to the server's time).
    Now,
}

/// A value read from a row: booleans read as 0 or 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

/// One read statement and its parameters, `$1` first.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Param>,
}

impl Statement {
    fn new() -> Statement {
        Statement { sql: String::new(), params: Vec::new() }
    }

    /// Binds `param`, returning its placeholder.
    fn bind(&mut self, param: Param) -> String {
        self.params.push(param);
        format!("${}", self.params.len())
    }

    /// Binds the store's time, returning the expression that reads it.
    fn now(&mut self, dialect: Dialect) -> String {
        let n = self.bind(Param::Now);
        match dialect {
            Dialect::Sqlite => n,
            Dialect::Postgres => format!("({} + {n})", super::sql::DB_NOW_NS),
        }
    }
}

/// The columns of a row, read by position.
struct Columns(Vec<Value>);

impl Columns {
    fn int(&self, i: usize) -> Result<i64, DbError> {
        match self.0.get(i) {
            Some(Value::Int(n)) => Ok(*n),
            other => Err(super::rows::decode_error(format!("column {i}: expected an integer, found {other:?}"))),
        }
    }

    fn count(&self, i: usize) -> Result<u64, DbError> {
        let n = self.int(i)?;
        u64::try_from(n).map_err(|_| super::rows::decode_error(format!("column {i}: {n} < 0")))
    }

    fn bytes(&self, i: usize) -> Result<Vec<u8>, DbError> {
        match self.0.get(i) {
            Some(Value::Bytes(b)) => Ok(b.clone()),
            Some(Value::Text(t)) => Ok(t.clone().into_bytes()),
            other => Err(super::rows::decode_error(format!("column {i}: expected bytes, found {other:?}"))),
        }
    }

    fn text(&self, i: usize) -> Result<String, DbError> {
        String::from_utf8(self.bytes(i)?).map_err(|_| super::rows::decode_error(format!("column {i} is not UTF-8")))
    }

    fn optional_int(&self, i: usize) -> Result<Option<i64>, DbError> {
        if matches!(self.0.get(i), Some(Value::Null)) { Ok(None) } else { self.int(i).map(Some) }
    }

    fn optional_text(&self, i: usize) -> Result<Option<String>, DbError> {
        if matches!(self.0.get(i), Some(Value::Null)) { Ok(None) } else { self.text(i).map(Some) }
    }
}

async fn rows(store: &dyn Store, statement: &Statement) -> Result<Vec<Columns>, Error> {
    Ok(store.read_rows(statement).await?.into_iter().map(Columns).collect())
}

/// The namespaces that hold anything, in order, at most `limit`: a skip
/// through each table's index, one namespace at a time, however many rows
/// each holds.
pub async fn namespaces(store: &dyn Store, limit: u32) -> Result<Vec<String>, Error> {
    let skip = |table: &str| {
        format!(
            "SELECT n FROM (WITH RECURSIVE s(n) AS (SELECT MIN(namespace) FROM {table} UNION ALL \
             SELECT (SELECT MIN(namespace) FROM {table} WHERE namespace > s.n) FROM s WHERE s.n IS NOT NULL) \
             SELECT n FROM s WHERE n IS NOT NULL LIMIT $1) AS {table}_namespaces"
        )
    };
    let sql = ["turns", "idempotency", "waits", "records"].map(skip).join(" UNION ") + " ORDER BY 1 LIMIT $1";
    let statement = Statement { sql, params: vec![Param::Int(i64::from(limit))] };
    rows(store, &statement).await?.iter().map(|row| Ok(row.text(0)?)).collect()
}

/// The overview's counts for `namespace`; `stalled_before` bounds the last
/// activity of an open turn that counts as stalled.
pub async fn overview(store: &dyn Store, namespace: &str, stalled_before: UnixNanos) -> Result<Overview, Error> {
    let mut s = Statement::new();
    let (ns, open, terminal) =
        (s.bind(Param::Text(namespace.into())), s.bind(Param::Bool(false)), s.bind(Param::Bool(true)));
    let stalled = s.bind(Param::Int(stalled_before));
    let now = s.now(store.dialect());
    let (leased, failed) = (Held::Leased.code(), Held::Failed.code());
    let counts = [
        format!("turns WHERE namespace = {ns} AND terminal = {open}"),
        format!("turns WHERE namespace = {ns} AND terminal = {open} AND last_ts_ns < {stalled}"),
        format!("turns WHERE namespace = {ns} AND terminal = {terminal}"),
        format!("idempotency WHERE namespace = {ns} AND held = {leased} AND lease_expires_at_ns > {now}"),
        format!("idempotency WHERE namespace = {ns} AND held = {leased} AND lease_expires_at_ns <= {now}"),
        format!("idempotency WHERE namespace = {ns} AND held = {failed} AND purge_after_ns > {now}"),
        format!("waits WHERE namespace = {ns} AND status = 1"),
        format!("waits WHERE namespace = {ns} AND status = 1 AND resolve_at_ns IS NOT NULL"),
    ];
    s.sql = format!("SELECT {}", counts.map(|c| format!("(SELECT COUNT(*) FROM {c})")).join(", "));
    let found = rows(store, &s).await?;
    let row = found.first().ok_or_else(|| super::rows::decode_error("the counts returned no row".into()))?;
    Ok(Overview {
        open_turns: row.count(0)?,
        stalled_turns: row.count(1)?,
        terminal_turns: row.count(2)?,
        keys_in_progress: row.count(3)?,
        keys_expired: row.count(4)?,
        keys_failed: row.count(5)?,
        waits_pending: row.count(6)?,
        timers_pending: row.count(7)?,
    })
}

const TURN_COLUMNS: &str =
    "turn_id, session_id, first_ts_ns, last_ts_ns, last_phase, checkpoint_count, terminal, workflow_version";

/// A page of turns, newest activity first, and whether more follow.
pub async fn turns(store: &dyn Store, q: &ActivityQuery) -> Result<(Vec<TurnSummary>, bool), Error> {
    let mut s = Statement::new();
    let mut sql =
        format!("SELECT {TURN_COLUMNS} FROM turns WHERE namespace = {}", s.bind(Param::Text(q.namespace.clone())));
    let status = match (q.status, q.stalled_before) {
        (_, Some(_)) | (TurnStatus::Open, None) => Some(false),
        (TurnStatus::Terminal, None) => Some(true),
        (TurnStatus::Any, None) => None,
    };
    if let Some(terminal) = status {
        sql += &format!(" AND terminal = {}", s.bind(Param::Bool(terminal)));
    }
    for (bound, op) in [(q.stalled_before, "<"), (q.from, ">="), (q.to, "<")] {
        if let Some(at) = bound {
            sql += &format!(" AND last_ts_ns {op} {}", s.bind(Param::Int(at)));
        }
    }
    if let Some(session) = &q.session_id {
        sql += &format!(" AND session_id = {}", s.bind(Param::Text(session.clone())));
    }
    if let Some(prefix) = q.prefix.as_ref().filter(|p| !p.is_empty()) {
        sql += &format!(" AND turn_id >= {}", s.bind(Param::Text(prefix.clone())));
        if let Some(upper) = prefix_upper(prefix) {
            sql += &format!(" AND turn_id < {}", s.bind(Param::Text(upper)));
        }
    }
    if let Some((at, turn_id)) = &q.after {
        let (a, t) = (s.bind(Param::Int(*at)), s.bind(Param::Text(turn_id.clone())));
        sql += &format!(" AND (last_ts_ns, turn_id) < ({a}, {t})");
    }
    sql += &format!(" ORDER BY last_ts_ns DESC, turn_id DESC LIMIT {}", s.bind(Param::Int(i64::from(q.limit) + 1)));
    s.sql = sql;
    let mut turns = Vec::new();
    for row in rows(store, &s).await? {
        turns.push(TurnSummary {
            turn_id: row.text(0)?,
            session_id: row.text(1)?,
            first_timestamp: row.int(2)?,
            last_timestamp: row.int(3)?,
            last_phase: row.text(4)?,
            checkpoint_count: row.count(5)?,
            terminal: row.int(6)? != 0,
            workflow_version: row.text(7)?,
        });
    }
    Ok(super::rows::page(turns, q.limit))
}

/// A page of a turn's checkpoints without their states, newest first.
pub async fn marks(store: &dyn Store, q: &MarkQuery) -> Result<(Vec<Mark>, bool), Error> {
    let mut s = Statement::new();
    let (ns, turn) = (s.bind(Param::Text(q.namespace.clone())), s.bind(Param::Text(q.turn_id.clone())));
    let mut sql = format!(
        "SELECT seq, phase, ts_ns, recorded_at_ns, LENGTH(state), terminal, workflow_version, session_id \
         FROM checkpoints WHERE namespace = {ns} AND turn_id = {turn}"
    );
    if let Some((ts, seq)) = q.before {
        let (t, n) = (s.bind(Param::Int(ts)), s.bind(Param::Int(seq)));
        sql += &format!(" AND (ts_ns, seq) < ({t}, {n})");
    }
    sql += &format!(" ORDER BY ts_ns DESC, seq DESC LIMIT {}", s.bind(Param::Int(i64::from(q.limit) + 1)));
    s.sql = sql;
    let mut marks = Vec::new();
    for row in rows(store, &s).await? {
        marks.push(Mark {
            seq: row.int(0)?,
            phase: row.text(1)?,
            timestamp: row.int(2)?,
            recorded_at: row.int(3)?,
            state_bytes: row.count(4)?,
            terminal: row.int(5)? != 0,
            workflow_version: row.text(6)?,
            session_id: row.text(7)?,
        });
    }
    Ok(super::rows::page(marks, q.limit))
}

/// The state of the checkpoint `seq` of a turn, if it is stored.
pub async fn state(store: &dyn Store, namespace: &str, turn_id: &str, seq: i64) -> Result<Option<Vec<u8>>, Error> {
    let mut s = Statement::new();
    let (ns, turn, n) =
        (s.bind(Param::Text(namespace.into())), s.bind(Param::Text(turn_id.into())), s.bind(Param::Int(seq)));
    s.sql = format!("SELECT state FROM checkpoints WHERE namespace = {ns} AND turn_id = {turn} AND seq = {n}");
    match rows(store, &s).await?.first() {
        Some(row) => Ok(Some(row.bytes(0)?)),
        None => Ok(None),
    }
}

/// Up to `limit` of a turn's records in address order, without payloads.
pub async fn records(store: &dyn Store, namespace: &str, turn_id: &str, limit: u32) -> Result<Vec<RecordMark>, Error> {
    let mut s = Statement::new();
    let (ns, turn) = (s.bind(Param::Text(namespace.into())), s.bind(Param::Text(turn_id.into())));
    let limit = s.bind(Param::Int(i64::from(limit)));
    s.sql = format!(
        "SELECT kind, scope, id, parent_id, content_type, LENGTH(payload), CAST(metadata AS TEXT), recorded_at_ns \
         FROM records WHERE namespace = {ns} AND turn_id = {turn} ORDER BY kind, scope, id LIMIT {limit}"
    );
    let mut records = Vec::new();
    for row in rows(store, &s).await? {
        records.push(RecordMark {
            kind: row.text(0)?,
            scope: row.text(1)?,
            id: row.text(2)?,
            parent_id: row.text(3)?,
            content_type: row.text(4)?,
            bytes: row.count(5)?,
            metadata: row.optional_text(6)?,
            recorded_at: row.int(7)?,
        });
    }
    Ok(records)
}

const KEY_COLUMNS: &str = "key, held, attempt, lease_token, lease_expires_at_ns, result, error, retention_ns, \
                           created_at_ns, updated_at_ns, purge_after_ns, fingerprint";

/// A page of keys in key order, with the time their states are read at.
pub async fn keys(store: &dyn Store, q: &KeyQuery) -> Result<KeyPage, Error> {
    let mut s = Statement::new();
    let now = s.now(store.dialect());
    let ns = s.bind(Param::Text(q.namespace.clone()));
    let mut sql = format!("SELECT {now} AS now_ns, {KEY_COLUMNS} FROM idempotency WHERE namespace = {ns}");
    let held = |s: &mut Statement, held: Held| s.bind(Param::Int(held.code()));
    let filter = match q.filter {
        KeyFilter::InProgress => format!(" AND held = {} AND lease_expires_at_ns > {now}", held(&mut s, Held::Leased)),
        KeyFilter::Expired => format!(" AND held = {} AND lease_expires_at_ns <= {now}", held(&mut s, Held::Leased)),
        KeyFilter::Failed => format!(" AND held = {} AND purge_after_ns > {now}", held(&mut s, Held::Failed)),
        KeyFilter::Completed => format!(" AND held = {} AND purge_after_ns > {now}", held(&mut s, Held::Completed)),
        KeyFilter::Released => format!(" AND held = {} AND purge_after_ns > {now}", held(&mut s, Held::Released)),
        KeyFilter::All => format!(" AND (held = {} OR purge_after_ns > {now})", held(&mut s, Held::Leased)),
    };
    sql += &filter;
    if let Some(prefix) = q.prefix.as_ref().filter(|p| !p.is_empty()) {
        sql += &format!(" AND key >= {}", s.bind(Param::Text(prefix.clone())));
        if let Some(upper) = prefix_upper(prefix) {
            sql += &format!(" AND key < {}", s.bind(Param::Text(upper)));
        }
    }
    if let Some(after) = &q.after {
        sql += &format!(" AND key > {}", s.bind(Param::Text(after.clone())));
    }
    sql += &format!(" ORDER BY key LIMIT {}", s.bind(Param::Int(i64::from(q.limit) + 1)));
    s.sql = sql;
    let found = rows(store, &s).await?;
    let now = found.first().map(|row| row.int(0)).transpose()?.unwrap_or_default();
    let keys = found.iter().map(|row| key_record(&q.namespace, row)).collect::<Result<Vec<_>, _>>()?;
    let (keys, more) = super::rows::page(keys, q.limit);
    Ok(KeyPage { keys, now, more })
}

fn key_record(namespace: &str, row: &Columns) -> Result<KeyRecord, DbError> {
    let held = row.int(2)?;
    let number = |i: usize, what: &str| -> Result<u64, DbError> {
        let n = row.int(i)?;
        u64::try_from(n).map_err(|_| super::rows::decode_error(format!("{what} {n} < 0")))
    };
    Ok(KeyRecord {
        namespace: namespace.to_owned(),
        key: row.text(1)?,
        held: Held::from_code(held).ok_or_else(|| super::rows::decode_error(format!("unknown held state {held}")))?,
        attempt: u32::try_from(number(3, "attempt")?)
            .map_err(|_| super::rows::decode_error("attempt out of range".into()))?,
        lease_token: number(4, "lease token")?,
        lease_expires_at: row.int(5)?,
        result: row.bytes(6)?,
        error: row.text(7)?,
        retention: row.int(8)?,
        created_at: row.int(9)?,
        updated_at: row.int(10)?,
        purge_after: row.int(11)?,
        fingerprint: row.bytes(12)?,
    })
}

const WAIT_COLUMNS: &str = "turn_id, name, status, metadata, created_at_ns, expire_at_ns, resolve_at_ns, \
                            settled_at_ns, payload, content_type, settled_by, settled_span";

/// A page of waits in (turn id, name) order, and whether more follow.
pub async fn waits(store: &dyn Store, q: &WaitPageQuery) -> Result<(Vec<Wait>, bool), Error> {
    let mut s = Statement::new();
    let mut sql =
        format!("SELECT {WAIT_COLUMNS} FROM waits WHERE namespace = {}", s.bind(Param::Text(q.namespace.clone())));
    sql += match q.filter {
        WaitFilter::Pending => " AND status = 1",
        WaitFilter::Timers => " AND status = 1 AND resolve_at_ns IS NOT NULL",
        WaitFilter::Settled => " AND status <> 1",
        WaitFilter::All => "",
    };
    if let Some(turn_id) = &q.turn_id {
        sql += &format!(" AND turn_id = {}", s.bind(Param::Text(turn_id.clone())));
    }
    if let Some((turn_id, name)) = &q.after {
        let (t, n) = (s.bind(Param::Text(turn_id.clone())), s.bind(Param::Text(name.clone())));
        sql += &format!(" AND (turn_id, name) > ({t}, {n})");
    }
    sql += &format!(" ORDER BY turn_id, name LIMIT {}", s.bind(Param::Int(i64::from(q.limit) + 1)));
    s.sql = sql;
    let found = rows(store, &s).await?;
    let waits = found.iter().map(|row| wait(&q.namespace, row)).collect::<Result<Vec<_>, _>>()?;
    Ok(super::rows::page(waits, q.limit))
}

fn wait(namespace: &str, row: &Columns) -> Result<Wait, DbError> {
    let status = row.int(2)?;
    Ok(Wait {
        key: WaitKey { namespace: namespace.to_owned(), turn_id: row.text(0)?, name: row.text(1)? },
        status: WaitStatus::from_code(status)
            .ok_or_else(|| super::rows::decode_error(format!("unknown wait status {status}")))?,
        metadata: row.optional_text(3)?,
        created_at: row.int(4)?,
        expire_at: row.optional_int(5)?,
        resolve_at: row.optional_int(6)?,
        settled_at: row.optional_int(7)?,
        payload: row.bytes(8)?,
        content_type: row.text(9)?,
        settled_by: row.text(10)?,
        settled_span: row.optional_text(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_read_integers_text_and_bytes_and_name_a_wrong_type() {
        let row = Columns(vec![Value::Int(3), Value::Text("é".into()), Value::Bytes(vec![0xff]), Value::Null]);
        assert_eq!(row.int(0).unwrap(), 3);
        assert_eq!(row.count(0).unwrap(), 3);
        assert_eq!(row.text(1).unwrap(), "é");
        assert_eq!(row.bytes(1).unwrap(), "é".as_bytes());
        assert_eq!(row.bytes(2).unwrap(), vec![0xff]);
        assert!(row.text(2).is_err(), "bytes that are not UTF-8 are not text");
        assert_eq!(row.optional_text(3).unwrap(), None);
        assert!(row.int(1).is_err());
        assert!(row.int(9).is_err());
    }

    #[test]
    fn a_statement_numbers_its_parameters_and_reads_now_in_each_dialect() {
        let mut s = Statement::new();
        assert_eq!(s.bind(Param::Int(1)), "$1");
        assert_eq!(s.now(Dialect::Sqlite), "$2");
        assert!(s.now(Dialect::Postgres).ends_with("+ $3)"));
        assert_eq!(s.params, vec![Param::Int(1), Param::Now, Param::Now]);
    }
}
