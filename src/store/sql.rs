//! The SQL text both backends run alike, in the SQL both dialects accept:
//! the reads of a turn and of a page of turns, the search for expired
//! turns, and a deletion chunk's statements. Each backend runs them through
//! its own driver (`sqlite` through rusqlite, `postgres` through sqlx); only
//! the text is shared, and where the dialects' planners want different
//! statements, `Dialect` says which.
//!
//! The statements are written with `$N` parameters (SQLite binds `$N` by
//! its name, Postgres by its number) and `CAST` rather than Postgres's `::`.

use std::sync::LazyLock;

use super::ExpiredQuery;
use crate::domain::model::{ListTurnsQuery, TurnStatus};

/// Which database a statement is written for, where the two differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Sqlite,
    Postgres,
}

/// Postgres's server time in nanoseconds (microsecond resolution): the
/// store's clock there, which every sidecar of the store shares.
pub(super) const DB_NOW_NS: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT * 1000";

pub(super) const TURN: &str = "SELECT * FROM turns WHERE namespace = $1 AND turn_id = $2";

/// A page of turns after `$2` in turn_id order, one statement for each set
/// of filters, with only the filters asked for: a filter is never written as
/// `$N IS NULL OR ...`, which would keep the planner from its index
/// (`turns_status` for a status, `turns_updated` for `updated_before`). The
/// filters' parameters follow `$2` in the order status, session, updated
/// before; the limit is last. SQLite is told that `updated_before` is
/// selective (`likelihood`): without a histogram of `last_ts_ns` its planner
/// would rather walk the whole namespace in turn_id order than sort a page.
/// Postgres indexes the minute of the last write (`updated_minute`), so the
/// statement asks for the minute first and the nanosecond after.
static LIST_TURNS: LazyLock<[[String; 8]; 2]> = LazyLock::new(|| {
    [Dialect::Postgres, Dialect::Sqlite].map(|dialect| {
        std::array::from_fn(|filters| {
            let mut sql = "SELECT * FROM turns WHERE namespace = $1 AND turn_id > $2".to_owned();
            let mut n = 2;
            for bit in [STATUS, SESSION, UPDATED] {
                if filters & bit != 0 {
                    n += 1;
                    sql.push_str(&match bit {
                        STATUS => format!(" AND terminal = ${n}"),
                        SESSION => format!(" AND session_id = ${n}"),
                        _ if dialect == Dialect::Sqlite => format!(" AND likelihood(last_ts_ns < ${n}, 0.01)"),
                        _ => format!(" AND updated_minute <= ${n} / {NANOS_PER_MINUTE} AND last_ts_ns < ${n}"),
                    });
                }
            }
            sql + &format!(" ORDER BY turn_id LIMIT ${}", n + 1)
        })
    })
});
/// The width of Postgres's `updated_minute`, as its migration computes it.
const NANOS_PER_MINUTE: i64 = 60_000_000_000;
const STATUS: usize = 1;
const SESSION: usize = 2;
const UPDATED: usize = 4;

/// The statement ListTurns runs for `q`'s filters in `dialect`.
pub fn list_turns(dialect: Dialect, q: &ListTurnsQuery) -> &'static str {
    let filters = if q.status == TurnStatus::Any { 0 } else { STATUS }
        | if q.session_id.is_some() { SESSION } else { 0 }
        | if q.updated_before.is_some() { UPDATED } else { 0 };
    &LIST_TURNS[usize::from(dialect == Dialect::Sqlite)][filters]
}

/// Up to `$5` of a turn's checkpoints after the cursor `($3, $4)`, oldest
/// first (restore order), so that the summary's latest checkpoint is the
/// last to go. Starting after the previous chunk, an index seek passes over
/// what earlier chunks deleted instead of reading it again.
pub(super) const DELETE_CHUNK: &str = "\
    DELETE FROM checkpoints WHERE seq IN (\
      SELECT seq FROM checkpoints WHERE namespace = $1 AND turn_id = $2 AND (ts_ns, seq) > ($3, $4) \
      ORDER BY ts_ns, seq LIMIT $5) \
    RETURNING ts_ns, seq";
/// The timestamp of the turn's oldest checkpoint after the cursor `($3, $4)`.
pub(super) const OLDEST_AFTER: &str = "\
    SELECT ts_ns FROM checkpoints WHERE namespace = $1 AND turn_id = $2 AND (ts_ns, seq) > ($3, $4) \
    ORDER BY ts_ns, seq LIMIT 1";
/// The summary less `$3` checkpoints whose oldest was at `$4`: if the turn
/// held an older one (appended after the delete began), its first timestamp
/// stays; otherwise it is `$5`, the oldest after the chunk.
pub(super) const SHRINK_TURN: &str = "\
    UPDATE turns SET checkpoint_count = checkpoint_count - $3, \
      first_ts_ns = CASE WHEN first_ts_ns < $4 THEN first_ts_ns ELSE $5 END \
    WHERE namespace = $1 AND turn_id = $2";
pub(super) const DELETE_TURN: &str = "DELETE FROM turns WHERE namespace = $1 AND turn_id = $2";

/// The statement that finds turns past a retention rule: `$1` terminal,
/// `$2` the cutoff, then the namespace (`= $3`) or the namespaces with rules
/// of their own (`NOT IN ($3, …)`), and the limit last. On Postgres it also
/// bounds the minute of the last write (implied by the cutoff), so a rule
/// reads an index by minute: `turns_updated` within a namespace,
/// `turns_expiry` across namespaces. (SQLite's `turns_updated` holds
/// `last_ts_ns` itself, and its planner skips through it namespace by
/// namespace for a rule across them.)
pub fn expired_turns(dialect: Dialect, q: &ExpiredQuery) -> String {
    let mut sql = String::from("SELECT namespace, turn_id FROM turns WHERE terminal = $1 AND last_ts_ns < $2");
    if dialect == Dialect::Postgres {
        sql.push_str(&format!(" AND updated_minute <= $2 / {NANOS_PER_MINUTE}"));
    }
    let mut next = 3;
    if q.namespace.is_some() {
        sql.push_str(" AND namespace = $3");
        next = 4;
    } else if !q.except.is_empty() {
        let list: Vec<String> = (0..q.except.len()).map(|i| format!("${}", 3 + i)).collect();
        sql.push_str(&format!(" AND namespace NOT IN ({})", list.join(", ")));
        next = 3 + q.except.len();
    }
    sql.push_str(&format!(" LIMIT ${next}"));
    sql
}
