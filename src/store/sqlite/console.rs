//! SQLite's side of the console's reads (`store::console`): binds a
//! statement's parameters by their `$N` names and reads each column as
//! the type SQLite stored it in.

use rusqlite::Connection;
use rusqlite::types::{ToSql, ValueRef};

use super::sqlite;
use crate::domain::model::UnixNanos;
use crate::store::DbError;
use crate::store::console::{Param, Statement, Value};

/// Runs `statement` on `conn`, with `now` as the store's time.
pub(super) fn read_rows(conn: &Connection, statement: &Statement, now: UnixNanos) -> Result<Vec<Vec<Value>>, DbError> {
    let mut prepared = conn.prepare_cached(&statement.sql).map_err(sqlite)?;
    for (i, param) in statement.params.iter().enumerate() {
        let value: &dyn ToSql = match param {
            Param::Int(n) => n,
            Param::Text(t) => t,
            Param::Bool(b) => b,
            Param::Now => &now,
        };
        if let Some(index) = prepared.parameter_index(&format!("${}", i + 1)).map_err(sqlite)? {
            prepared.raw_bind_parameter(index, value).map_err(sqlite)?;
        }
    }
    let width = prepared.column_count();
    let mut rows = prepared.raw_query();
    let mut found = Vec::new();
    while let Some(row) = rows.next().map_err(sqlite)? {
        let mut columns = Vec::with_capacity(width);
        for i in 0..width {
            columns.push(match row.get_ref(i).map_err(sqlite)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(n) => Value::Int(n),
                ValueRef::Real(x) => Value::Int(x as i64),
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
            });
        }
        found.push(columns);
    }
    Ok(found)
}
