//! Postgres's side of the console's reads (`store::console`): binds a
//! statement's parameters in order and reads each column by its type.
//! `Param::Now` binds the clock's offset, which the statement adds to the
//! server's time.

use sqlx::postgres::{PgConnection, PgRow};
use sqlx::{Column, Row, TypeInfo};

use crate::store::DbError;
use crate::store::console::{Param, Statement, Value};

/// Runs `statement` on `conn`; `offset` is the store clock's offset.
pub(super) async fn read_rows(
    conn: &mut PgConnection,
    statement: &Statement,
    offset: i64,
) -> Result<Vec<Vec<Value>>, DbError> {
    let mut query = sqlx::query(sqlx::AssertSqlSafe(statement.sql.clone()));
    for param in &statement.params {
        query = match param {
            Param::Int(n) => query.bind(*n),
            Param::Text(t) => query.bind(t.clone()),
            Param::Bool(b) => query.bind(*b),
            Param::Now => query.bind(offset),
        };
    }
    let rows = query.fetch_all(conn).await.map_err(DbError::sqlx)?;
    rows.iter().map(columns).collect()
}

fn columns(row: &PgRow) -> Result<Vec<Value>, DbError> {
    let mut values = Vec::with_capacity(row.len());
    for (i, column) in row.columns().iter().enumerate() {
        let value = match column.type_info().name() {
            "INT8" => row.try_get::<Option<i64>, _>(i).map(|v| v.map(Value::Int)),
            "INT4" => row.try_get::<Option<i32>, _>(i).map(|v| v.map(|n| Value::Int(n.into()))),
            "BOOL" => row.try_get::<Option<bool>, _>(i).map(|v| v.map(|b| Value::Int(b.into()))),
            "BYTEA" => row.try_get::<Option<Vec<u8>>, _>(i).map(|v| v.map(Value::Bytes)),
            _ => row.try_get::<Option<String>, _>(i).map(|v| v.map(Value::Text)),
        };
        values.push(value.map_err(DbError::sqlx)?.unwrap_or(Value::Null));
    }
    Ok(values)
}
