//! Why a store operation failed, in one word an operator can act on: which
//! wait ran out (the pool's acquire timeout, Postgres's lock or statement
//! timeout, SQLite's busy timeout), a deadlock or serialization failure the
//! database broke off, a lost connection, or the breaker the health monitor
//! opened. The log line of every STORE_UNAVAILABLE names it with the
//! database's own code (a Postgres SQLSTATE, an SQLite result code); the
//! client hears only the reason. The causes that come from contention
//! between writers (`Cause::is_contention`) leave nothing of the batch
//! behind, and the writer tries such a batch again.

use super::{Error, Misconfigured};

/// Why a store operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Postgres found the batch in a deadlock and rolled it back (SQLSTATE 40P01).
    Deadlock,
    /// Postgres could not serialize the batch with another (SQLSTATE 40001).
    SerializationFailure,
    /// A lock was not granted within `--postgres-lock-timeout-ms` (SQLSTATE 55P03).
    LockTimeout,
    /// Another connection held SQLite's write lock past `--sqlite-busy-timeout-ms`
    /// (SQLITE_BUSY), or a table was locked (SQLITE_LOCKED).
    SqliteBusy,
    /// A row the batch found was deleted by another sidecar before the batch
    /// could read it back.
    DeletedMeanwhile,
    /// A statement ran past `--postgres-statement-timeout-ms`, or was cancelled (SQLSTATE 57014).
    StatementTimeout,
    /// No connection came out of the pool within `--pool-acquire-timeout-ms`.
    PoolAcquireTimeout,
    /// The connection to the database broke, or the server shut it down.
    ConnectionLost,
    /// The health monitor's last check failed, so nothing was tried.
    StoreDown,
    /// The database has no room left.
    StoreFull,
    /// The sidecar is stopping.
    ShuttingDown,
    /// Anything else the database answered; its code says more.
    DatabaseError,
}

impl Cause {
    /// The name the log line gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Deadlock => "deadlock",
            Cause::SerializationFailure => "serialization_failure",
            Cause::LockTimeout => "lock_timeout",
            Cause::SqliteBusy => "sqlite_busy",
            Cause::DeletedMeanwhile => "deleted_meanwhile",
            Cause::StatementTimeout => "statement_timeout",
            Cause::PoolAcquireTimeout => "pool_acquire_timeout",
            Cause::ConnectionLost => "connection_lost",
            Cause::StoreDown => "store_down",
            Cause::StoreFull => "store_full",
            Cause::ShuttingDown => "shutting_down",
            Cause::DatabaseError => "database_error",
        }
    }

    /// Whether the failure came from contention with another writer: the
    /// database rolled the whole transaction back (or the batch rolled itself
    /// back), so nothing of it was committed, and the same batch may well
    /// commit a moment later. Timeouts of a statement or of the pool are not:
    /// they say that the database is slow or away, and trying again at once
    /// would only add to its load.
    pub fn is_contention(self) -> bool {
        matches!(
            self,
            Cause::Deadlock
                | Cause::SerializationFailure
                | Cause::LockTimeout
                | Cause::SqliteBusy
                | Cause::DeletedMeanwhile
        )
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Error {
    /// Why this failed.
    pub fn cause(&self) -> Cause {
        match self {
            Error::Database(error) => error.cause(),
            Error::Batch(error) => error.cause(),
            Error::Vanished => Cause::DeletedMeanwhile,
            Error::Down => Cause::StoreDown,
            Error::WriterStopped => Cause::ShuttingDown,
            Error::Migrate(_)
            | Error::MigrationLock(_)
            | Error::MigrationLockTimeout { .. }
            | Error::CreateFile(_)
            | Error::NotDurable(_)
            | Error::QueueFull
            | Error::QueueBytesFull => Cause::DatabaseError,
        }
    }

    /// The database's own code for the failure, if it gave one: a Postgres
    /// SQLSTATE, or an SQLite extended result code.
    pub fn code(&self) -> Option<String> {
        match self {
            Error::Database(error) => error.code().map(str::to_owned),
            Error::Batch(error) => error.code(),
            _ => None,
        }
    }
}

/// A database's failure as the rest of stepwell sees it, whichever driver
/// reported it: its `Cause`, the setting to fix if a wrong one caused it,
/// the database's own code, and the driver's error, whose text is for logs
/// only (it may hold SQL or paths). Each backend builds it from its
/// driver's error, so no driver's type leaves `store`.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct DbError {
    cause: Cause,
    misconfigured: Option<Misconfigured>,
    code: Option<String>,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl DbError {
    /// A failure of `cause`, with the database's `code` if it gave one.
    pub(super) fn new(
        cause: Cause,
        code: Option<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> DbError {
        DbError { cause, misconfigured: None, code, source: source.into() }
    }

    /// This failure, as the wrong setting `kind` (if any) caused it.
    pub(super) fn misconfigured_as(self, kind: Option<Misconfigured>) -> DbError {
        DbError { misconfigured: kind, ..self }
    }

    /// Something between the sidecar and Postgres, a pooler, undid what the
    /// sidecar set up: a wrong setting, `--postgres-pooler`.
    pub(super) fn pooler(message: String) -> DbError {
        DbError::new(Cause::DatabaseError, None, sqlx::Error::Configuration(message.into()))
            .misconfigured_as(Some(Misconfigured::Pooler))
    }

    /// A row the model cannot represent: the database holds what stepwell never writes.
    pub(super) fn decode(what: impl Into<String>) -> DbError {
        DbError::new(Cause::DatabaseError, None, Undecodable(what.into()))
    }

    /// Why this failed.
    pub fn cause(&self) -> Cause {
        self.cause
    }

    /// The database's own code: a Postgres SQLSTATE, or an SQLite extended result code.
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The setting to fix, when a wrong one (not an outage) caused this.
    pub fn misconfigured(&self) -> Option<Misconfigured> {
        self.misconfigured
    }

    /// sqlx's error (the Postgres backend's, and the SQLite migrations'):
    /// its SQLSTATE or SQLite result code, or its own kind, names the cause.
    pub(super) fn sqlx(error: sqlx::Error) -> DbError {
        let (cause, code) = match &error {
            sqlx::Error::Database(database) => {
                let code = database.code().map(|code| code.into_owned());
                let sqlite = database.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some();
                let cause = match code.as_deref() {
                    Some(code) if sqlite => code.parse().map_or(Cause::DatabaseError, sqlite_cause),
                    Some(code) => sqlstate_cause(code),
                    None => Cause::DatabaseError,
                };
                (cause, code)
            }
            sqlx::Error::PoolTimedOut => (Cause::PoolAcquireTimeout, None),
            sqlx::Error::PoolClosed | sqlx::Error::WorkerCrashed => (Cause::ShuttingDown, None),
            sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => (Cause::ConnectionLost, None),
            _ => (Cause::DatabaseError, None),
        };
        let kind = sqlx_misconfigured(&error);
        DbError::new(cause, code, error).misconfigured_as(kind)
    }
}

/// A migration's failure, whatever went wrong in it: `Error::Migrate`.
/// A statement of it that failed for a wrong setting (a pooler in the way,
/// say) keeps that setting, so that start-up stops and names it.
pub(super) fn migration_failed(error: sqlx::migrate::MigrateError) -> Error {
    use sqlx::migrate::MigrateError::{Execute, ExecuteMigration};
    let kind = match &error {
        Execute(inner) | ExecuteMigration(inner, _) => sqlx_misconfigured(inner),
        _ => None,
    };
    Error::Migrate(DbError::new(Cause::DatabaseError, None, error).misconfigured_as(kind))
}

/// What a row that does not decode says, as it always has in the logs.
#[derive(Debug, thiserror::Error)]
#[error("error occurred while decoding: {0}")]
struct Undecodable(String);

/// sqlx reports a failed TLS handshake as an I/O error carrying rustls's
/// error, and its own TLS refusals (no TLS on the server, an unreadable
/// certificate) as `Tls`.
fn sqlx_misconfigured(error: &sqlx::Error) -> Option<Misconfigured> {
    match error {
        sqlx::Error::Configuration(_) => Some(Misconfigured::Url),
        sqlx::Error::Tls(_) => Some(Misconfigured::Tls),
        sqlx::Error::Io(io) => {
            io.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()).then_some(Misconfigured::Tls)
        }
        sqlx::Error::Database(error) => match error.code().as_deref() {
            Some("28P01" | "28000") => Some(Misconfigured::Authentication),
            Some("3D000") => Some(Misconfigured::NoDatabase),
            // Another client's prepared statement on this server session: a
            // pooler in transaction mode handed it over mid-way.
            Some("42P05") => Some(Misconfigured::Pooler),
            // PgBouncer's refusal of a startup parameter it does not track
            // (extra_float_digits, options): a protocol violation to it.
            Some("08P01") if error.message().starts_with("unsupported startup parameter") => {
                Some(Misconfigured::Pooler)
            }
            _ => None,
        },
        _ => None,
    }
}

/// The cause of a Postgres error, by its SQLSTATE.
fn sqlstate_cause(code: &str) -> Cause {
    match code {
        "40P01" => Cause::Deadlock,
        "40001" => Cause::SerializationFailure,
        "55P03" => Cause::LockTimeout,
        "57014" => Cause::StatementTimeout,
        "53100" => Cause::StoreFull,
        // admin_shutdown, crash_shutdown, cannot_connect_now, and the
        // connection exceptions of class 08.
        "57P01" | "57P02" | "57P03" => Cause::ConnectionLost,
        code if code.starts_with("08") => Cause::ConnectionLost,
        _ => Cause::DatabaseError,
    }
}

/// The cause of an SQLite error, by its primary result code (the low byte
/// of the extended one).
pub(super) fn sqlite_cause(code: i32) -> Cause {
    const SQLITE_BUSY: i32 = 5;
    const SQLITE_LOCKED: i32 = 6;
    const SQLITE_FULL: i32 = 13;
    match code & 0xff {
        SQLITE_BUSY | SQLITE_LOCKED => Cause::SqliteBusy,
        SQLITE_FULL => Cause::StoreFull,
        _ => Cause::DatabaseError,
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use super::*;

    /// A Postgres error with `code` as its SQLSTATE, as sqlx reports one.
    #[derive(Debug, thiserror::Error)]
    #[error("a Postgres error")]
    struct Sqlstate(&'static str);

    impl sqlx::error::DatabaseError for Sqlstate {
        fn message(&self) -> &str {
            "a Postgres error"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn postgres(code: &'static str) -> Error {
        Error::Database(DbError::sqlx(sqlx::Error::Database(Box::new(Sqlstate(code)))))
    }

    #[test]
    fn deadlocks_serialization_failures_and_lock_timeouts_are_contention_and_carry_their_sqlstate() {
        for (code, cause) in
            [("40P01", Cause::Deadlock), ("40001", Cause::SerializationFailure), ("55P03", Cause::LockTimeout)]
        {
            let error = postgres(code);
            assert_eq!(error.cause(), cause, "{code}");
            assert!(error.cause().is_contention(), "{code} is retried");
            assert_eq!(error.code().as_deref(), Some(code));
            // A batch's callers each get the batch's error, cause and all.
            let batch = Error::Batch(Arc::new(postgres(code)));
            assert_eq!((batch.cause(), batch.code().as_deref()), (cause, Some(code)));
        }
        assert_eq!(Error::Vanished.cause(), Cause::DeletedMeanwhile);
        assert!(Error::Vanished.cause().is_contention());
    }

    #[test]
    fn timeouts_outages_and_other_errors_are_named_and_not_retried() {
        let cases = [
            (postgres("57014"), Cause::StatementTimeout, "statement_timeout"),
            (postgres("57P01"), Cause::ConnectionLost, "connection_lost"),
            (postgres("08006"), Cause::ConnectionLost, "connection_lost"),
            (postgres("53100"), Cause::StoreFull, "store_full"),
            (postgres("23505"), Cause::DatabaseError, "database_error"),
            (postgres("P0001"), Cause::DatabaseError, "database_error"),
            (
                Error::Database(DbError::sqlx(sqlx::Error::PoolTimedOut)),
                Cause::PoolAcquireTimeout,
                "pool_acquire_timeout",
            ),
            (
                Error::Database(DbError::sqlx(sqlx::Error::Io(std::io::ErrorKind::ConnectionReset.into()))),
                Cause::ConnectionLost,
                "connection_lost",
            ),
            (Error::Down, Cause::StoreDown, "store_down"),
            (Error::WriterStopped, Cause::ShuttingDown, "shutting_down"),
        ];
        for (error, cause, name) in cases {
            assert_eq!(error.cause(), cause, "{error}");
            assert_eq!(cause.as_str(), name);
            assert!(!cause.is_contention(), "{error} is not retried");
        }
    }

    #[test]
    fn sqlite_busy_and_locked_are_contention_whatever_their_extended_code() {
        // SQLITE_BUSY, _RECOVERY, _SNAPSHOT, _TIMEOUT; SQLITE_LOCKED, _SHAREDCACHE.
        for code in [5, 261, 517, 773, 6, 262] {
            assert_eq!(sqlite_cause(code), Cause::SqliteBusy, "{code}");
        }
        assert_eq!(sqlite_cause(13), Cause::StoreFull);
        assert_eq!(sqlite_cause(10), Cause::DatabaseError, "an I/O error is not contention");
    }
}
