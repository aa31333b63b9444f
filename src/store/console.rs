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
    ActivityQuery, Holdings, KeyFilter, KeyPage, KeyQuery, Mark, MarkQuery, Overview, RecordMark, Run, RunKind,
    WaitFilter, WaitPageQuery, pending, prefix_upper,
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
/// activity of an open run that counts as stalled.
pub async fn overview(store: &dyn Store, namespace: &str, stalled_before: UnixNanos) -> Result<Overview, Error> {
    let mut runs = Statement::new();
    let ns = runs.bind(Param::Text(namespace.into()));
    runs.sql = run_counts(&mut runs, store.dialect(), &ns, stalled_before);
    let mut s = Statement::new();
    let ns = s.bind(Param::Text(namespace.into()));
    let now = s.now(store.dialect());
    let (leased, failed) = (Held::Leased.code(), Held::Failed.code());
    let counts = [
        format!("idempotency WHERE namespace = {ns} AND held = {leased} AND lease_expires_at_ns > {now}"),
        format!("idempotency WHERE namespace = {ns} AND held = {leased} AND lease_expires_at_ns <= {now}"),
        format!("idempotency WHERE namespace = {ns} AND held = {failed} AND purge_after_ns > {now}"),
        format!("waits WHERE namespace = {ns} AND status = 1"),
        format!("waits WHERE namespace = {ns} AND status = 1 AND resolve_at_ns IS NOT NULL"),
    ];
    s.sql = format!("SELECT {}", counts.map(|c| format!("(SELECT COUNT(*) FROM {c})")).join(", "));
    let no_row = || super::rows::decode_error("the counts returned no row".into());
    let (found_runs, found) = (rows(store, &runs).await?, rows(store, &s).await?);
    let (run, row) = (found_runs.first().ok_or_else(no_row)?, found.first().ok_or_else(no_row)?);
    Ok(Overview {
        open_turns: run.count(0)?,
        stalled_turns: run.count(1)?,
        terminal_turns: run.count(2)?,
        record_runs: run.count(3)?,
        keys_in_progress: row.count(0)?,
        keys_expired: row.count(1)?,
        keys_failed: row.count(2)?,
        waits_pending: row.count(3)?,
        timers_pending: row.count(4)?,
    })
}

/// The statement's `WITH` of every run of `namespace` (bound as `ns`): one
/// row per turn that holds checkpoints, records or waits, with what it
/// holds, its first and last activity and whether work is pending (`open`).
/// Records and waits are grouped by turn through their primary keys, which
/// start (namespace, turn_id); a LangGraph thread's pending writes are two
/// probes of the records' address and children indexes.
fn runs_with(s: &mut Statement, dialect: Dialect, ns: &str, turn_id: Option<&str>) -> String {
    let (greatest, least) = match dialect {
        Dialect::Sqlite => ("MAX", "MIN"),
        Dialect::Postgres => ("GREATEST", "LEAST"),
    };
    let open = s.bind(Param::Bool(false));
    // A write's id ends in its index + 2^31, ten digits (the savers'
    // layout): -1 an error, -3 an interrupt, -4 a resume.
    let bit = |idx: i64, bit: i64| format!("WHEN SUBSTR(x.id, LENGTH(x.id) - 9) = '{}' THEN {bit}", idx + (1 << 31));
    let bits = format!(
        "CASE {} {} {} ELSE {} END",
        bit(-1, pending::ERROR),
        bit(-3, pending::INTERRUPT),
        bit(-4, pending::RESUME),
        pending::WRITES
    );
    let (lo, hi) = (-i64::MAX, i64::MAX);
    let only = turn_id.map(|t| format!(" AND turn_id = {}", s.bind(Param::Text(t.to_owned())))).unwrap_or_default();
    format!(
        "WITH r AS (SELECT turn_id, MIN(recorded_at_ns) AS first_ns, MAX(recorded_at_ns) AS last_ns, \
           CAST(COUNT(*) AS BIGINT) AS n, \
           CAST(MAX(CASE WHEN kind = 'checkpoint' THEN 1 ELSE 0 END) AS BIGINT) AS lg, \
           CAST(MAX(CASE WHEN kind = 'agent-item' THEN 1 ELSE 0 END) AS BIGINT) AS ag, \
           CAST(MAX(CASE WHEN kind IN ('adk-session', 'adk-event') THEN 1 ELSE 0 END) AS BIGINT) AS adk \
           FROM records WHERE namespace = {ns}{only} GROUP BY turn_id), \
         w AS (SELECT turn_id, MIN(created_at_ns) AS first_ns, MAX(COALESCE(settled_at_ns, created_at_ns)) AS last_ns, \
           CAST(COUNT(*) AS BIGINT) AS n, CAST(SUM(CASE WHEN status = 1 THEN 1 ELSE 0 END) AS BIGINT) AS pending \
           FROM waits WHERE namespace = {ns}{only} GROUP BY turn_id), \
         ids AS (SELECT turn_id FROM turns WHERE namespace = {ns}{only} UNION SELECT turn_id FROM r UNION SELECT turn_id FROM w), \
         joined AS (SELECT ids.turn_id AS turn_id, t.session_id, t.first_ts_ns, t.last_ts_ns, t.last_phase, \
           t.checkpoint_count, t.terminal, t.workflow_version, \
           CASE WHEN t.turn_id IS NULL THEN 0 ELSE 1 END AS has_log, \
           COALESCE(r.n, 0) AS r_n, COALESCE(r.lg, 0) AS lg, COALESCE(r.ag, 0) AS ag, COALESCE(r.adk, 0) AS adk, \
           COALESCE(w.n, 0) AS w_n, COALESCE(w.pending, 0) AS w_pending, \
           CASE WHEN r.lg = 1 THEN (SELECT CAST(SUM(DISTINCT {bits}) AS BIGINT) FROM records x \
             WHERE x.namespace = {ns} AND x.turn_id = ids.turn_id AND x.kind = 'write' AND x.scope = '' \
             AND x.parent_id = (SELECT MAX(c.id) FROM records c WHERE c.namespace = {ns} \
               AND c.turn_id = ids.turn_id AND c.kind = 'checkpoint' AND c.scope = '')) END AS lg_bits, \
           {greatest}(COALESCE(t.last_ts_ns, {lo}), COALESCE(r.last_ns, {lo}), COALESCE(w.last_ns, {lo})) AS last_ns, \
           {least}(COALESCE(t.first_ts_ns, {hi}), COALESCE(r.first_ns, {hi}), COALESCE(w.first_ns, {hi})) AS first_ns \
           FROM ids LEFT JOIN turns t ON t.namespace = {ns} AND t.turn_id = ids.turn_id \
           LEFT JOIN r ON r.turn_id = ids.turn_id LEFT JOIN w ON w.turn_id = ids.turn_id), \
         runs AS (SELECT joined.*, CASE WHEN (has_log = 1 AND terminal = {open}) OR w_pending > 0 \
           OR COALESCE(lg_bits, 0) > 0 THEN 1 ELSE 0 END AS is_open FROM joined) "
    )
}

/// The SQL condition that a run (a row of `runs_with`) is of `kind`.
fn kind_condition(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Log => "has_log = 1",
        RunKind::LangGraph => "has_log = 0 AND lg = 1",
        RunKind::Agents => "has_log = 0 AND lg = 0 AND ag = 1",
        RunKind::Adk => "has_log = 0 AND lg = 0 AND ag = 0 AND adk = 1",
        RunKind::Records => "has_log = 0 AND lg = 0 AND ag = 0 AND adk = 0 AND r_n > 0",
        RunKind::Waits => "has_log = 0 AND r_n = 0",
    }
}

const RUN_COLUMNS: &str = "turn_id, session_id, first_ts_ns, last_ts_ns, last_phase, checkpoint_count, terminal, \
                           workflow_version, has_log, r_n, lg, ag, adk, w_n, w_pending, lg_bits, first_ns, last_ns, \
                           is_open";

/// A page of runs, newest activity first (oldest first when asked), and
/// whether more follow.
pub async fn runs(store: &dyn Store, q: &ActivityQuery) -> Result<(Vec<Run>, bool), Error> {
    let mut s = Statement::new();
    let ns = s.bind(Param::Text(q.namespace.clone()));
    let with = runs_with(&mut s, store.dialect(), &ns, q.turn_id.as_deref());
    let mut sql = with + &format!("SELECT {RUN_COLUMNS} FROM runs WHERE 1 = 1");
    let open = match (q.status, q.stalled_before) {
        (_, Some(_)) | (TurnStatus::Open, None) => Some(1),
        (TurnStatus::Terminal, None) => Some(0),
        (TurnStatus::Any, None) => None,
    };
    if let Some(open) = open {
        sql += &format!(" AND is_open = {open}");
    }
    if let Some(kind) = q.kind {
        sql += &format!(" AND {}", kind_condition(kind));
    }
    for (bound, op) in [(q.stalled_before, "<"), (q.from, ">="), (q.to, "<")] {
        if let Some(at) = bound {
            sql += &format!(" AND last_ns {op} {}", s.bind(Param::Int(at)));
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
    let (order, cmp) = if q.oldest_first { ("ASC", ">") } else { ("DESC", "<") };
    if let Some((at, turn_id)) = &q.after {
        let (a, t) = (s.bind(Param::Int(*at)), s.bind(Param::Text(turn_id.clone())));
        sql += &format!(" AND (last_ns, turn_id) {cmp} ({a}, {t})");
    }
    let limit = s.bind(Param::Int(i64::from(q.limit) + 1));
    s.sql = sql + &format!(" ORDER BY last_ns {order}, turn_id {order} LIMIT {limit}");
    let runs = rows(store, &s).await?.iter().map(run).collect::<Result<Vec<_>, _>>()?;
    Ok(super::rows::page(runs, q.limit))
}

fn run(row: &Columns) -> Result<Run, DbError> {
    let flag = |i: usize| row.int(i).map(|n| n != 0);
    let log = if flag(8)? {
        Some(TurnSummary {
            turn_id: row.text(0)?,
            session_id: row.text(1)?,
            first_timestamp: row.int(2)?,
            last_timestamp: row.int(3)?,
            last_phase: row.text(4)?,
            checkpoint_count: row.count(5)?,
            terminal: flag(6)?,
            workflow_version: row.text(7)?,
        })
    } else {
        None
    };
    let (records, waits) = (row.count(9)?, row.count(13)?);
    let kind = match (log.is_some(), flag(10)?, flag(11)?, flag(12)?) {
        (true, ..) => RunKind::Log,
        (false, true, _, _) => RunKind::LangGraph,
        (false, false, true, _) => RunKind::Agents,
        (false, false, false, true) => RunKind::Adk,
        _ if records > 0 => RunKind::Records,
        _ => RunKind::Waits,
    };
    Ok(Run {
        turn_id: row.text(0)?,
        kind,
        log,
        records,
        waits,
        waits_pending: row.count(14)?,
        pending: row.optional_int(15)?.unwrap_or(0),
        first_activity: row.int(16)?,
        last_activity: row.int(17)?,
        open: flag(18)?,
    })
}

/// The overview's counts of runs: open, stalled, at rest, in records.
fn run_counts(s: &mut Statement, dialect: Dialect, ns: &str, stalled_before: UnixNanos) -> String {
    let with = runs_with(s, dialect, ns, None);
    let stalled = s.bind(Param::Int(stalled_before));
    format!(
        "{with}SELECT CAST(COALESCE(SUM(is_open), 0) AS BIGINT), \
         CAST(COALESCE(SUM(CASE WHEN is_open = 1 AND last_ns < {stalled} THEN 1 ELSE 0 END), 0) AS BIGINT), \
         CAST(COALESCE(SUM(1 - is_open), 0) AS BIGINT), \
         CAST(COALESCE(SUM(CASE WHEN has_log = 0 AND r_n > 0 THEN 1 ELSE 0 END), 0) AS BIGINT) FROM runs"
    )
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
    rows(store, &s).await?.iter().map(|row| Ok(record_mark(row)?)).collect()
}

/// How many checkpoints, records and waits a turn holds: what deleting it
/// would delete.
pub async fn holdings(store: &dyn Store, namespace: &str, turn_id: &str) -> Result<Holdings, Error> {
    let mut s = Statement::new();
    let (ns, turn) = (s.bind(Param::Text(namespace.into())), s.bind(Param::Text(turn_id.into())));
    let of = |table: &str| format!("(SELECT COUNT(*) FROM {table} WHERE namespace = {ns} AND turn_id = {turn})");
    s.sql = format!("SELECT {}, {}, {}", of("checkpoints"), of("records"), of("waits"));
    let found = rows(store, &s).await?;
    let row = found.first().ok_or_else(|| super::rows::decode_error("the counts returned no row".into()))?;
    Ok(Holdings { checkpoints: row.count(0)?, records: row.count(1)?, waits: row.count(2)? })
}

/// The newest `limit` records of a turn among `kinds` (by id, in address
/// order within a kind), each with up to `bytes` of its payload, oldest
/// first: a session's items in order, a thread's pending writes.
pub async fn payloads(
    store: &dyn Store,
    namespace: &str,
    turn_id: &str,
    kinds: &[&str],
    limit: u32,
    bytes: u32,
) -> Result<Vec<(RecordMark, Vec<u8>)>, Error> {
    let mut s = Statement::new();
    let (ns, turn) = (s.bind(Param::Text(namespace.into())), s.bind(Param::Text(turn_id.into())));
    let kinds = kinds.iter().map(|k| s.bind(Param::Text((*k).to_owned()))).collect::<Vec<_>>().join(", ");
    let (bytes, limit) = (s.bind(Param::Int(i64::from(bytes))), s.bind(Param::Int(i64::from(limit))));
    s.sql = format!(
        "SELECT kind, scope, id, parent_id, content_type, LENGTH(payload), CAST(metadata AS TEXT), recorded_at_ns, \
         SUBSTR(payload, 1, CAST({bytes} AS INTEGER)) FROM records WHERE namespace = {ns} AND turn_id = {turn} AND kind IN ({kinds}) \
         ORDER BY kind DESC, scope DESC, id DESC LIMIT {limit}"
    );
    let mut found = Vec::new();
    for row in rows(store, &s).await? {
        // SQLite's SUBSTR of an empty payload is NULL.
        let payload = if matches!(row.0.get(8), Some(Value::Null)) { Vec::new() } else { row.bytes(8)? };
        found.push((record_mark(&row)?, payload));
    }
    found.reverse();
    Ok(found)
}

fn record_mark(row: &Columns) -> Result<RecordMark, DbError> {
    Ok(RecordMark {
        kind: row.text(0)?,
        scope: row.text(1)?,
        id: row.text(2)?,
        parent_id: row.text(3)?,
        content_type: row.text(4)?,
        bytes: row.count(5)?,
        metadata: row.optional_text(6)?,
        recorded_at: row.int(7)?,
    })
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
