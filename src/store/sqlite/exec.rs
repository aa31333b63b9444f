//! Running statements on a rusqlite connection: binding `$N` and `?`
//! parameters, decoding rows, building multi-row `VALUES` lists, and
//! rusqlite's errors as `DbError`s.

use std::borrow::Cow;

use rusqlite::types::ToSql;
use rusqlite::{Connection, Statement};

use crate::store::cause::sqlite_cause;
use crate::store::rows::decode_error;
use crate::store::{Cause, DbError};

/// What SQLite's failure says in the logs: rusqlite's message, worded as
/// a database's answer.
#[derive(Debug, thiserror::Error)]
#[error("error returned from database: {0}")]
pub(super) struct Failure(String);

/// rusqlite's error as the `DbError` the batch code and `store::Error`
/// speak: a value that does not decode is a decode error; anything else is
/// the database's, its extended result code naming the cause (13,
/// SQLITE_FULL, is what `Error::is_full` looks for).
pub(super) fn sqlite(error: rusqlite::Error) -> DbError {
    match error {
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::InvalidColumnType(..)
        | rusqlite::Error::IntegralValueOutOfRange(..) => decode_error(error.to_string()),
        rusqlite::Error::SqliteFailure(failure, _) => {
            let code = failure.extended_code;
            DbError::new(sqlite_cause(code), Some(code.to_string()), Failure(error.to_string()))
        }
        other => DbError::new(Cause::DatabaseError, None, Failure(other.to_string())),
    }
}

/// No read connection came free within `--pool-acquire-timeout-ms`.
pub(super) fn readers_timed_out() -> DbError {
    DbError::new(Cause::PoolAcquireTimeout, None, "pool timed out while waiting for an open connection")
}

/// The store was closed: its connections are gone.
pub(super) fn closed() -> DbError {
    DbError::new(Cause::ShuttingDown, None, "attempted to acquire a connection on a closed pool")
}

/// The blocking thread a statement ran on panicked or was cancelled.
pub(super) fn crashed() -> DbError {
    DbError::new(Cause::ShuttingDown, None, "attempted to communicate with a crashed background worker")
}

/// The names SQLite gives `$1`, `$2`, … parameters.
pub(super) const NUMBERED: [&str; 12] = ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12"];

/// Binds `values` to a statement written with `$N` parameters (the shared
/// statements), each by its name, since a statement may name `$8` before `$7`.
pub(super) fn bind_numbered(statement: &mut Statement<'_>, values: &[&dyn ToSql]) -> rusqlite::Result<()> {
    for (i, value) in values.iter().enumerate() {
        let name: Cow<'_, str> =
            NUMBERED.get(i).map_or_else(|| Cow::Owned(format!("${}", i + 1)), |n| Cow::Borrowed(*n));
        if let Some(index) = statement.parameter_index(&name)? {
            statement.raw_bind_parameter(index, value)?;
        }
    }
    Ok(())
}

/// Runs a `$N` statement and decodes every row it returns.
pub(super) fn query_numbered<T>(
    conn: &Connection,
    sql: &str,
    values: &[&dyn ToSql],
    decode: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> rusqlite::Result<Vec<T>> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    let mut rows = statement.raw_query();
    let mut found = Vec::new();
    while let Some(row) = rows.next()? {
        found.push(decode(row)?);
    }
    Ok(found)
}

/// Runs a `$N` statement that returns no rows; answers the rows it changed.
pub(super) fn execute_numbered(conn: &Connection, sql: &str, values: &[&dyn ToSql]) -> rusqlite::Result<usize> {
    let mut statement = conn.prepare_cached(sql)?;
    bind_numbered(&mut statement, values)?;
    statement.raw_execute()
}

/// `head`, then `rows` groups of `columns` `?` parameters, then `tail`.
pub(super) fn values_sql(head: &str, columns: usize, rows: usize, tail: &str) -> String {
    let group = format!("({})", vec!["?"; columns].join(", "));
    let mut sql = String::with_capacity(head.len() + tail.len() + rows * (group.len() + 2));
    sql.push_str(head);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&group);
    }
    sql.push_str(tail);
    sql
}

/// Runs a `?` statement with `params` and decodes every row it returns.
pub(super) fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: &[&dyn ToSql],
    decode: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> Result<Vec<T>, DbError> {
    let mut statement = conn.prepare_cached(sql).map_err(sqlite)?;
    let rows = statement.query_map(params, |row| decode(row)).map_err(sqlite)?;
    rows.collect::<rusqlite::Result<Vec<T>>>().map_err(sqlite)
}
