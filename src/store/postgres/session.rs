//! How the store's work reaches Postgres: the connection's settings, and
//! the unit each read or batch runs in.
//!
//! Connected directly, a pooled connection is a Postgres session of its
//! own: the settings (`statement_timeout`, `lock_timeout`,
//! `synchronous_commit`) go in the startup packet's `options`, statements
//! are prepared once per connection and kept by name, and a read runs
//! alone, autocommitted.
//!
//! Behind a pooler in transaction mode (`--postgres-pooler transaction`) a
//! server session lasts one transaction, and the next may be another
//! client's. So the startup packet carries nothing PgBouncer refuses
//! (neither `extra_float_digits` nor `options`), no statement is kept past
//! its transaction, and every unit of work, reads included, is one
//! transaction that begins by dropping what other clients left prepared
//! (`DEALLOCATE ALL`) and setting the connection's settings for itself
//! (`SET LOCAL`), in the same round trip as its `BEGIN`. sqlx prepares a
//! statement in one round trip and runs it in the next; inside a
//! transaction both reach the same server session.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{AssertSqlSafe, Postgres, SqlSafeStr, Transaction};

use crate::store::{DbError, Pooler, PostgresMode, PostgresProfile};

/// How this store's units of work run.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// Behind a pooler in transaction mode.
    pooled: bool,
    /// The portable profile: no session locks, no `ctid`, no sequence.
    portable: bool,
    /// The settings every unit of work runs under, as (name, value).
    settings: Vec<(&'static str, String)>,
    /// What a transaction begins with behind a pooler (directly, sqlx's
    /// own `BEGIN`).
    begin: Arc<str>,
}

impl Session {
    /// The session `mode` asks for, with these timeouts.
    pub(super) fn new(mode: &PostgresMode, statement_timeout: Duration, lock_timeout: Duration) -> Session {
        let settings = vec![
            ("synchronous_commit", "on".to_owned()),
            ("statement_timeout", statement_timeout.as_millis().to_string()),
            ("lock_timeout", lock_timeout.as_millis().to_string()),
        ];
        let pooled = mode.pooler == Pooler::Transaction;
        let begin = if pooled { begin_pooled(&settings) } else { "BEGIN".to_owned() }.into();
        let portable = mode.profile == PostgresProfile::Portable;
        Session { pooled, portable, settings, begin }
    }

    /// Behind a pooler in transaction mode.
    pub(super) fn pooled(&self) -> bool {
        self.pooled
    }

    /// The portable profile.
    pub(super) fn portable(&self) -> bool {
        self.portable
    }

    /// The settings every unit of work runs under.
    pub(super) fn settings(&self) -> &[(&'static str, String)] {
        &self.settings
    }

    /// `base` as this session connects: with the settings in the startup
    /// packet, or, behind a pooler, with nothing it refuses and no
    /// statement kept by name.
    pub(super) fn connect_options(&self, base: PgConnectOptions) -> PgConnectOptions {
        if self.pooled {
            return pooler_safe(base);
        }
        let settings: Vec<(&str, &str)> = self.settings.iter().map(|(k, v)| (*k, v.as_str())).collect();
        base.options(settings)
    }

    /// `base` without the session's settings, as this session may connect
    /// with it: behind a pooler, with nothing the pooler refuses.
    pub(super) fn bare_options(&self, base: &PgConnectOptions) -> PgConnectOptions {
        if self.pooled { pooler_safe(base.clone()) } else { base.clone() }
    }

    /// A transaction on `conn`, begun as this session begins one.
    pub(super) async fn begin<'c>(&self, conn: &'c mut PgConnection) -> Result<Transaction<'c, Postgres>, sqlx::Error> {
        let statement = self.pooled.then(|| AssertSqlSafe(self.begin.clone()).into_sql_str());
        Transaction::begin(conn, statement).await
    }

    /// A session of the given kind with the default settings.
    #[cfg(test)]
    pub(super) fn of(pooled: bool, portable: bool) -> Session {
        use crate::store::{PostgresMode, PostgresProfile};
        let postgres = PostgresMode {
            profile: if portable { PostgresProfile::Portable } else { PostgresProfile::Standard },
            pooler: if pooled { Pooler::Transaction } else { Pooler::None },
            listen_url: None,
            vector_index_dims: Vec::new(),
        };
        let timeout = std::time::Duration::from_secs(5);
        Session::new(&postgres, timeout, timeout)
    }

    /// A unit of work on `conn`: the connection itself, or, behind a
    /// pooler, a transaction on it.
    pub(super) async fn unit(&self, conn: PoolConnection<Postgres>) -> Result<Unit, DbError> {
        self.unit_as(conn, None).await
    }

    /// `unit`, whose transaction, behind a pooler, has these
    /// characteristics (`ISOLATION LEVEL ...`).
    pub(super) async fn unit_as(
        &self,
        conn: PoolConnection<Postgres>,
        characteristics: Option<&str>,
    ) -> Result<Unit, DbError> {
        if !self.pooled {
            return Ok(Unit::Direct(conn));
        }
        let begin = with_characteristics(&self.begin, characteristics);
        let statement = AssertSqlSafe(begin).into_sql_str();
        Ok(Unit::Pooled(Transaction::begin(conn, Some(statement)).await.map_err(DbError::sqlx)?))
    }
}

/// Connect options a pooler in transaction mode accepts: no startup
/// parameter PgBouncer refuses, and no statement cache, so that no
/// statement is looked for by name in a later transaction.
fn pooler_safe(base: PgConnectOptions) -> PgConnectOptions {
    base.extra_float_digits(None).statement_cache_capacity(0)
}

/// The `BEGIN` of a transaction behind a pooler: one simple query that
/// drops the statements other clients left on the server session and sets
/// this connection's settings for the transaction.
fn begin_pooled(settings: &[(&'static str, String)]) -> String {
    let mut begin = "BEGIN; DEALLOCATE ALL".to_owned();
    for (name, value) in settings {
        begin.push_str(&format!("; SET LOCAL {name} = '{value}'"));
    }
    begin
}

/// `begin` with the transaction's characteristics after its `BEGIN`.
fn with_characteristics(begin: &str, characteristics: Option<&str>) -> String {
    match characteristics {
        Some(mode) => begin.replacen("BEGIN", &format!("BEGIN {mode}"), 1),
        None => begin.to_owned(),
    }
}

/// A read's or a batch's connection: the pooled connection, or behind a
/// pooler a transaction on it, which `done` commits.
pub(super) enum Unit {
    Direct(PoolConnection<Postgres>),
    Pooled(Transaction<'static, Postgres>),
}

impl Unit {
    /// Ends the unit of work: commits its transaction, if it has one.
    pub(super) async fn done(self) -> Result<(), DbError> {
        match self {
            Unit::Direct(_) => Ok(()),
            Unit::Pooled(tx) => tx.commit().await.map_err(DbError::sqlx),
        }
    }
}

impl Deref for Unit {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Unit::Direct(conn) => conn,
            Unit::Pooled(tx) => tx,
        }
    }
}

impl DerefMut for Unit {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Unit::Direct(conn) => conn,
            Unit::Pooled(tx) => tx,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_behind_a_pooler_may_begin_with_its_own_isolation() {
        let session = Session::of(true, false);
        let begin = with_characteristics(&session.begin, Some("ISOLATION LEVEL REPEATABLE READ"));
        assert!(begin.starts_with("BEGIN ISOLATION LEVEL REPEATABLE READ; DEALLOCATE ALL; SET LOCAL"), "{begin}");
        assert_eq!(with_characteristics(&session.begin, None), &*session.begin);
    }

    #[test]
    fn a_pooled_begin_sets_every_setting_for_its_transaction_in_one_query() {
        let settings = [("statement_timeout", "20000".to_owned()), ("lock_timeout", "5000".to_owned())];
        assert_eq!(
            begin_pooled(&settings),
            "BEGIN; DEALLOCATE ALL; SET LOCAL statement_timeout = '20000'; SET LOCAL lock_timeout = '5000'"
        );
    }
}
