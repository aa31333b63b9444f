//! The one `Store` trait every backend implements, its error type, where a
//! store lives (`Database`) and what it is opened with (`Options`), and
//! `open`, which picks the backend once at start-up. Only `store` and its
//! submodules contain SQL, and they never read the configuration.
//!
//! Writes reach a backend in batches (`Store::attempt`), one transaction
//! each, from the group-commit `writer`; `batch` holds what a batch means. A
//! write is answered only after the store committed its batch; an error
//! means nothing of the batch was committed, and the batch comes back with
//! it, whole, for the writer to try again when the error's `Cause` was
//! contention.

pub mod batch;
pub mod bulk;
mod cause;
pub mod console;
mod handle;
pub mod hub;
pub(crate) mod migrations;
pub mod postgres;
mod rows;
mod sql;
pub(crate) mod sql_row;
pub mod sqlite;
pub mod waits;
pub mod writer;

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use cause::{Cause, DbError};
pub use handle::Handle;
pub use sql::Dialect;

use crate::domain::clock::Clock;
use crate::domain::keys::{BeginArgs, BeginOutcome, Fence, KeyRecord, KeyState, Refusal};
use crate::domain::memory::search::Searched;
use crate::domain::memory::{ItemsPut, ItemsQuery, ItemsTouch, Path, StoredItem};
use crate::domain::model::{
    Appended, Cursor, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnSummary, UnixNanos,
};
use crate::domain::records::{PutRefusal, RecordDelete, RecordEntry, RecordPut, RecordQuery};
use crate::domain::waits::{Wait, WaitAnswer, WaitKey, WaitQuery, WaitWrite};

/// Why the store could not do what it was asked. The message is for logs
/// only: it may hold SQL or paths, so it never reaches a client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database refused or failed the operation (unreachable, I/O error,
    /// disk full, locked past the busy timeout).
    #[error("database error: {0}")]
    Database(#[from] DbError),
    /// The schema could not be created or upgraded.
    #[error("migration failed: {0}")]
    Migrate(#[source] DbError),
    /// Another sidecar's migration could not be waited for.
    #[error("could not take the migration lock: {0}")]
    MigrationLock(#[source] std::io::Error),
    /// Another sidecar held the migration lock longer than start-up waits.
    #[error(
        "another stepwell has held the migration lock {lock} for {waited:?}, longer than \
         --migration-lock-timeout-ms allows; if no sidecar is still starting on this store, stop the one holding it"
    )]
    MigrationLockTimeout { lock: String, waited: Duration },
    /// The SQLite file could not be created.
    #[error("could not create the database file: {0}")]
    CreateFile(#[source] std::io::Error),
    /// The database would not keep acknowledged writes; stepwell refuses it.
    #[error(
        "refusing a database that would lose acknowledged writes: {0}. Fix the server's settings, or pass \
         --unsafe-accept-nondurable-postgres for a throwaway database"
    )]
    NotDurable(String),
    /// The batch this write was in failed; every request in it gets this.
    #[error("{0}")]
    Batch(Arc<Error>),
    /// A checkpoint that conflicted on insert was gone when fetched: deleted
    /// meanwhile by another sidecar. Nothing of the batch was acknowledged.
    #[error("a conflicting checkpoint was deleted during the batch")]
    Vanished,
    /// The last health check found the store down; nothing was tried.
    #[error("the store did not answer the last health check")]
    Down,
    /// The write queue is full: the store is not keeping up.
    #[error("the write queue is full")]
    QueueFull,
    /// The writes waiting hold the write queue's whole byte budget.
    #[error("the write queue's bytes are full")]
    QueueBytesFull,
    /// The writer stopped (the server is shutting down).
    #[error("the writer has stopped")]
    WriterStopped,
}

/// Why a store cannot open however long stepwell waits: what it was told to
/// use is wrong, so retrying as if the database were down would only hide it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misconfigured {
    /// The database URL or a file it names cannot be used.
    Url,
    /// TLS could not be set up: the server's certificate failed verification,
    /// or the server does not offer TLS where the URL requires it.
    Tls,
    /// The server refused the user or its password (SQLSTATE 28P01, 28000).
    Authentication,
    /// The database named does not exist (SQLSTATE 3D000).
    NoDatabase,
    /// A connection pooler in transaction mode stands in front of Postgres
    /// and `--postgres-pooler transaction` was not given: it refused a
    /// startup parameter, dropped the connection's settings, or mixed two
    /// clients' prepared statements.
    Pooler,
}

impl Misconfigured {
    /// What the operator should change.
    pub fn fix(self) -> &'static str {
        match self {
            Misconfigured::Url => "fix --database-url (STEPWELL_DATABASE_URL) or the file it names",
            Misconfigured::Tls => {
                "check sslmode and sslrootcert in --database-url: the server must offer TLS, its certificate must \
                 be signed by a CA in sslrootcert, and with verify-full it must name the host in the URL"
            }
            Misconfigured::Authentication => {
                "check the user and password (in the URL, PGPASSWORD or ~/.pgpass) and the server's pg_hba.conf"
            }
            Misconfigured::NoDatabase => "create the database, or fix its name in --database-url",
            Misconfigured::Pooler => {
                "the URL reaches Postgres through a connection pooler (such as PgBouncer) in transaction mode: \
                 run with --postgres-pooler transaction, which sends neither extra_float_digits nor options and \
                 sets the connection's settings in every transaction; see docs/guides/postgres.md"
            }
        }
    }
}

impl Error {
    /// Whether this failure is a wrong setting rather than an outage: a bad
    /// URL, a TLS failure, a refused login, or a missing database. A refused
    /// or lost connection is not; the server may yet come back.
    pub fn misconfigured(&self) -> Option<Misconfigured> {
        match self {
            Error::Database(error) | Error::Migrate(error) => error.misconfigured(),
            Error::Batch(error) => error.misconfigured(),
            _ => None,
        }
    }

    /// Whether this is the open breaker's refusal, not a new failure.
    pub fn is_down(&self) -> bool {
        match self {
            Error::Down => true,
            Error::Batch(error) => error.is_down(),
            _ => false,
        }
    }

    /// Whether the database refused for want of space: SQLite's SQLITE_FULL
    /// (a full disk, or the `--sqlite-bytes-max` cap) or Postgres's disk_full.
    pub fn is_full(&self) -> bool {
        match self {
            Error::Database(error) => error.cause() == Cause::StoreFull,
            Error::Batch(error) => error.is_full(),
            _ => false,
        }
    }
}

/// The statement ListTurns runs for `q`'s filters in `dialect`, for the
/// tests that show its query plan.
pub fn list_turns_sql(dialect: Dialect, q: &ListTurnsQuery) -> &'static str {
    sql::list_turns(dialect, q)
}

/// The statement retention runs to find the turns past a rule in
/// `dialect`, for the tests as `list_turns_sql`.
pub fn expired_turns_sql(dialect: Dialect, q: &ExpiredQuery) -> String {
    sql::expired_turns(dialect, q)
}

/// The answer to a request on an idempotency key: the value, or why the
/// record refused it (nothing changed).
pub type Fenced<T> = Result<T, Refusal>;

/// One write request.
#[derive(Debug, Clone)]
pub enum Write {
    /// Append a checkpoint unless its (namespace, turn_id, phase, timestamp)
    /// is stored already, and update its turn's summary.
    Append(NewCheckpoint),
    /// Delete one chunk of a turn: up to `rows` of its oldest checkpoints
    /// after `after` (from the start if `None`), keeping its summary true to
    /// what is left (or deleting it with the last). Always committed alone,
    /// never in a batch with other writes.
    /// With `only_if`, a chunk deletes only while the turn still meets it.
    DeleteTurn { namespace: String, turn_id: String, rows: u32, after: Option<Cursor>, only_if: Option<Expired> },
    /// Acquire a key's lease, or say why not.
    Begin(BeginArgs),
    /// KeyRecord the result under a lease.
    Complete { fence: Fence, result: Vec<u8> },
    /// Give the key back, or fail it permanently with `error`.
    Release { fence: Fence, error: String, permanent: bool },
    /// Move a live lease's expiry to `lease` nanoseconds from now.
    Extend { fence: Fence, lease: i64 },
    /// Write records, all or none; with a fence, only while its lease is held.
    PutRecords(RecordPut),
    /// Delete the records a DeleteRecords selects. Always committed alone.
    DeleteRecords(RecordDelete),
    /// Copy every record of a turn to another. Always committed alone.
    CopyTurn { namespace: String, source: String, target: String },
    /// Create, settle, or fire the timers of waits.
    Wait(WaitWrite),
    /// Put and delete memory items, all or none.
    PutItems(ItemsPut),
    /// Move the expiry of memory items a read returned.
    TouchItems(ItemsTouch),
    /// Delete every memory item under a path prefix. Always committed alone.
    DeleteItems { namespace: String, prefix: Path },
}

impl Write {
    /// Whether the writer commits this write in a transaction of its own,
    /// never in a batch with others: it may touch many rows of one turn.
    pub fn alone(&self) -> bool {
        matches!(
            self,
            Write::DeleteTurn { .. } | Write::DeleteRecords(_) | Write::CopyTurn { .. } | Write::DeleteItems { .. }
        )
    }
}

/// The answers to a batch, once it committed: one list per kind of request,
/// each in the order those requests stand in the batch. Typed per kind, so
/// the writer hands each caller an answer of the type it waits for.
#[derive(Debug, Default)]
pub struct Written {
    pub appended: Vec<Appended>,
    /// What each deletion chunk removed.
    pub deleted: Vec<Deleted>,
    pub begun: Vec<Fenced<BeginOutcome>>,
    /// When each result was recorded.
    pub completed: Vec<Fenced<UnixNanos>>,
    pub released: Vec<Fenced<KeyState>>,
    /// Each new lease expiry.
    pub extended: Vec<Fenced<UnixNanos>>,
    /// When each PutRecords was recorded, or why it was refused.
    pub put: Vec<Result<UnixNanos, PutRefusal>>,
    /// How many records each DeleteRecords deleted.
    pub records_deleted: Vec<u64>,
    /// How many records each CopyTurn copied.
    pub copied: Vec<u64>,
    /// What each wait write did, or why it changed nothing.
    pub waits: Vec<WaitAnswer>,
    /// When each PutItems and TouchItems was recorded, in batch order.
    pub items: Vec<UnixNanos>,
    /// How many memory items each DeleteItems deleted.
    pub items_deleted: Vec<u64>,
}

/// A batch the store did not commit, nothing of it: why, and the batch
/// itself, handed back unchanged.
pub struct NotCommitted {
    pub error: Error,
    pub batch: Vec<Write>,
}

impl std::fmt::Debug for NotCommitted {
    /// The reason and the batch's size: a batch's states are not for logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotCommitted").field("error", &self.error).field("writes", &self.batch.len()).finish()
    }
}

/// What a turn must still be for retention to delete it, checked by each
/// chunk under the turn's lock: not written at or after `last_before` (its
/// newest checkpoint older), and still terminal (or still open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub last_before: UnixNanos,
    pub terminal: bool,
}

/// Which turns retention looks for: the terminal (or open) turns whose
/// newest checkpoint is older than `last_before`, in `namespace` or, without
/// one, in every namespace but those in `except` (which have rules of their own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredQuery {
    pub namespace: Option<String>,
    pub except: Vec<String>,
    pub expired: Expired,
    pub limit: u32,
}

/// Which turns record retention looks for: those none of whose records was
/// written at or after `idle_before`, in `namespace` or, without one, in
/// every namespace but those in `except`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdleQuery {
    pub namespace: Option<String>,
    pub except: Vec<String>,
    pub idle_before: UnixNanos,
    pub limit: u32,
}

/// What a whole DeleteTurn deleted, over all its chunks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TurnDeleted {
    pub checkpoints: u64,
    pub waits: u64,
    /// The turn's records, when the delete asked for them.
    pub records: u64,
}

/// What one chunk of a DeleteTurn did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deleted {
    /// How many checkpoints went.
    pub checkpoints: u64,
    /// How many waits went: the turn's every wait, in the chunk that found
    /// it gone.
    pub waits: u64,
    /// Whether the turn is gone: no checkpoint of it and no summary is left.
    pub gone: bool,
    /// Where the next chunk starts: after the last checkpoint this one
    /// deleted, or from the start again (`None`) when checkpoints appended
    /// meanwhile with older timestamps are all that is left.
    pub next: Option<Cursor>,
    /// The turn no longer met the chunk's `only_if` (it was written since,
    /// or its status changed): nothing was deleted, and it is kept.
    pub kept: bool,
}

/// A backend that stores checkpoint logs and idempotency keys. The lease
/// rules are `crate::domain::keys`'s and the meaning of a batch is
/// `batch`'s; a backend loads what a batch needs under its write lock,
/// follows their plans, and commits.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Commits a batch of writes in one transaction and answers each; or,
    /// when nothing of it was committed, hands the batch back whole with the
    /// reason, so that the writer can try it again.
    async fn attempt(&self, batch: Vec<Write>) -> Result<Written, NotCommitted>;

    /// `attempt`, for a caller that will not try again. An error means
    /// nothing of the batch was committed.
    async fn write(&self, batch: Vec<Write>) -> Result<Written, Error> {
        self.attempt(batch).await.map_err(|not_committed| not_committed.error)
    }

    /// Whether `attempt` does its work on the thread that polls it, blocking
    /// that thread until the commit (SQLite's, whose connection is
    /// synchronous): the writer then runs on a thread of its own, never on
    /// the runtime's workers. A store that awaits its database says no.
    fn writes_block(&self) -> bool {
        false
    }

    /// One page of a turn's checkpoints in restore order, and whether more follow.
    async fn restore(&self, query: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error>;

    /// One page of records of a kind, newest id first, each with its
    /// related records, and whether more follow.
    async fn list_records(&self, query: &RecordQuery) -> Result<(Vec<RecordEntry>, bool), Error>;

    /// The summary of one turn, if it has checkpoints.
    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error>;

    /// One page of turn summaries ordered by turn id, and whether more follow.
    async fn list_turns(&self, query: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error>;

    /// Up to `query.limit` turns past a retention rule, oldest first, as
    /// (namespace, turn id).
    async fn expired_turns(&self, query: &ExpiredQuery) -> Result<Vec<(String, String)>, Error>;

    /// Up to `query.limit` turns of records idle since before `query.idle_before`, as (namespace, turn id).
    async fn idle_record_turns(&self, query: &IdleQuery) -> Result<Vec<(String, String)>, Error>;

    /// The key's record, unless absent or past its retention, with the store's time.
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(KeyRecord, UnixNanos)>, Error>;

    /// The live memory items at `addresses`, each once, in the order first named.
    async fn get_items(&self, namespace: &str, addresses: &[(Path, String)]) -> Result<Vec<StoredItem>, Error>;

    /// One page of a memory search (`memory::search` orders and pages it).
    async fn search_items(&self, query: &ItemsQuery) -> Result<Searched, Error>;

    /// The distinct paths under `prefix` that hold live memory items.
    async fn item_paths(&self, namespace: &str, prefix: &Path) -> Result<Vec<Path>, Error>;

    /// Deletes up to `limit` idempotency records past their retention, and
    /// as many expired memory items; returns how many went.
    async fn purge_expired(&self, limit: u32) -> Result<u64, Error>;

    /// Refreshes the query planner's statistics where the database does not
    /// keep them itself (SQLite's `PRAGMA optimize`; Postgres's autovacuum
    /// needs nothing), so that ListTurns' filters keep reading their indexes
    /// as the tables grow. Cheap when little has changed.
    async fn optimize(&self) -> Result<(), Error>;

    /// A wait, if it exists.
    async fn get_wait(&self, key: &WaitKey) -> Result<Option<Wait>, Error>;

    /// Those of `keys` that are settled: the poll's one read for every wait
    /// this sidecar's Awaits wait for.
    async fn settled_waits(&self, keys: &[WaitKey]) -> Result<Vec<Wait>, Error>;

    /// One page of waits in (turn_id, name) order, and whether more follow.
    async fn list_waits(&self, query: &WaitQuery) -> Result<(Vec<Wait>, bool), Error>;

    /// When the next pending wait falls due (its timer or its expiry), if any does.
    async fn next_due(&self) -> Result<Option<UnixNanos>, Error>;

    /// Wakes `hub`'s waiters of the settlements other sidecars of the store
    /// announce, forever. A backend whose store has no other sidecars to
    /// hear from (SQLite; those sharing its file are found by the poll)
    /// waits forever doing nothing.
    async fn listen(&self, hub: Arc<hub::Hub>) {
        let _ = hub;
        std::future::pending::<()>().await
    }

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), Error>;

    /// The SQL dialect the backend speaks, for the statements `console` builds.
    fn dialect(&self) -> Dialect;

    /// Runs one of `console`'s read statements and returns its rows, each
    /// column as a `console::Value`. Only statements the store layer builds
    /// reach it: nothing outside `store` writes SQL.
    async fn read_rows(&self, statement: &console::Statement) -> Result<Vec<Vec<console::Value>>, Error>;

    /// The backend's own figures for a metrics scrape (file sizes, or the
    /// connection pool's state), read at that moment.
    async fn figures(&self) -> crate::observe::metrics::StoreState;

    /// Finishes in-flight work and closes connections.
    async fn close(&self);
}

/// Where the store lives.
#[derive(Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite file.
    Sqlite { path: PathBuf },
    /// A Postgres database; the URL may hold a password, so it is never logged.
    Postgres { url: String },
}

impl Database {
    /// The store, for logs: a Postgres URL without its password, in the
    /// user part or as a query parameter.
    pub fn describe(&self) -> String {
        match self {
            Database::Sqlite { path } => format!("sqlite://{}", path.display()),
            Database::Postgres { url } => redact(url),
        }
    }
}

/// Whether a URL parameter's value may be a secret: a password of any kind
/// (libpq's `password` and `sslpassword`), a token, or a private key given
/// inline in `sslkey`.
fn is_secret_parameter(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "pwd", "secret", "token", "sslkey", "ssl-key"].iter().any(|word| key.contains(word))
}

/// `url` with every secret replaced by `***`. A URL that does not parse is
/// shown only up to its host, since where a secret would sit is unclear.
fn redact(url: &str) -> String {
    const HIDDEN: &str = "***";
    let Ok(mut parsed) = url::Url::parse(url) else {
        let scheme = url.split("://").next().unwrap_or("postgres");
        return format!("{scheme}://{HIDDEN} (a URL that does not parse)");
    };
    if parsed.password().is_some() {
        // Only a URL that cannot have a password refuses one.
        let _ = parsed.set_password(Some(HIDDEN));
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
        let mut query = parsed.query_pairs_mut();
        query.clear();
        for (key, value) in &pairs {
            query.append_pair(key, if is_secret_parameter(key) { HIDDEN } else { value });
        }
    }
    parsed.to_string()
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl FromStr for Database {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(rest) = s.strip_prefix("sqlite:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = path.split('?').next().unwrap_or_default();
            if path.is_empty() || path == ":memory:" {
                return Err("sqlite needs a file path (an in-memory database would not be durable)".into());
            }
            return Ok(Database::Sqlite { path: PathBuf::from(path) });
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(Database::Postgres { url: s.to_owned() });
        }
        Err("the database URL must start with sqlite:// or postgres://".into())
    }
}

/// What a store is opened with; built by `config`, so `store` never reads the configuration.
#[derive(Debug, Clone)]
pub struct Options {
    pub database: Database,
    /// Most connections: Postgres's pool, or SQLite's readers (SQLite writes always use one connection).
    pub pool_max: u32,
    /// How long a request waits for a pooled connection.
    pub acquire_timeout: Duration,
    /// How long an SQLite connection waits on a locked database.
    pub sqlite_busy_timeout: Duration,
    /// How long start-up waits for another sidecar's migration of the store.
    pub migration_lock_timeout: Duration,
    /// Postgres's `statement_timeout` on every pooled connection.
    pub postgres_statement_timeout: Duration,
    /// Postgres's `lock_timeout` on every pooled connection.
    pub postgres_lock_timeout: Duration,
    /// The SQLite file's size cap, if any.
    pub sqlite_bytes_max: Option<u64>,
    /// Serve even on a Postgres that may lose acknowledged writes.
    pub unsafe_accept_nondurable_postgres: bool,
    /// SQLite with `synchronous=NORMAL`, which may lose acknowledged writes
    /// at a power loss (the fault suite's proof that it sees such losses).
    pub unsafe_sqlite_synchronous_normal: bool,
    /// The clock leases are computed on (tests move its offset).
    pub clock: Clock,
    /// How a Postgres store is reached and which of its features it uses.
    pub postgres: PostgresMode,
}

/// How a Postgres store is reached and which of Postgres's features it
/// uses: `--postgres-profile`, `--postgres-pooler`, `--postgres-listen-url`.
#[derive(Debug, Clone, Default)]
pub struct PostgresMode {
    pub profile: PostgresProfile,
    pub pooler: Pooler,
    /// A direct URL (not through the pooler) for LISTEN; without one, a
    /// sidecar behind a pooler finds other sidecars' settlements by polling.
    pub listen_url: Option<String>,
    /// The vector lengths pgvector indexes approximately, when the database
    /// has it (`--postgres-vector-index-dims`); none: searches stay exact.
    pub vector_index_dims: Vec<u32>,
}

/// Which of Postgres's features a store may use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PostgresProfile {
    /// All of them: session advisory locks for migrations, `ctid`, a
    /// sequence for fencing tokens, `jsonb_path_ops`.
    #[default]
    Standard,
    /// Only what distributed SQL engines with Postgres's protocol keep:
    /// transaction-scoped locks, a lock row for migrations, a counter row
    /// for fencing tokens, plain `jsonb_ops`.
    Portable,
}

/// What stands between the sidecar and Postgres.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Pooler {
    /// Nothing: each pooled connection is a session of its own.
    #[default]
    None,
    /// A pooler in transaction mode (PgBouncer's `pool_mode = transaction`):
    /// a server session lasts one transaction, so nothing may outlive one.
    Transaction,
}

/// Opens the store `options` name and brings its schema up to date.
pub async fn open(options: &Options) -> Result<Arc<dyn Store>, Error> {
    match &options.database {
        Database::Sqlite { path } => Ok(Arc::new(sqlite::SqliteStore::open(path, options).await?)),
        Database::Postgres { url } => Ok(Arc::new(postgres::PostgresStore::open(url, options).await?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sqlite_urls() {
        assert_eq!("sqlite://a.db".parse(), Ok(Database::Sqlite { path: "a.db".into() }));
        assert_eq!("sqlite:///x/a.db".parse(), Ok(Database::Sqlite { path: "/x/a.db".into() }));
        assert!("sqlite::memory:".parse::<Database>().is_err());
    }

    #[test]
    fn postgres_urls_are_logged_without_their_password() {
        let database: Database = "postgres://app:s3cret@db:5432/stepwell".parse().unwrap();
        assert_eq!(database.describe(), "postgres://app:***@db:5432/stepwell");
        assert!(!format!("{database:?}").contains("s3cret"));
    }

    #[test]
    fn passwords_in_the_query_are_logged_hidden() {
        let database: Database =
            "postgres://app@db/stepwell?sslmode=verify-full&password=s3cret&sslpassword=k3y&sslrootcert=%2Fca.pem"
                .parse()
                .unwrap();
        let described = database.describe();
        assert!(!described.contains("s3cret") && !described.contains("k3y"), "{described}");
        assert!(described.contains("password=***") && described.contains("sslpassword=***"), "{described}");
        assert!(described.contains("sslmode=verify-full") && described.contains("sslrootcert"), "{described}");
    }

    #[test]
    fn a_url_that_does_not_parse_is_logged_without_its_body() {
        let database: Database = "postgres://app:s3cret@db:notaport/x".parse().unwrap();
        let described = database.describe();
        assert!(!described.contains("s3cret"), "{described}");
        assert!(described.starts_with("postgres://"), "{described}");
    }

    #[test]
    fn tls_and_url_failures_are_configuration_errors_and_a_refused_connection_is_not() {
        let database = |error: sqlx::Error| Error::Database(DbError::sqlx(error));
        let tls = database(sqlx::Error::Tls("server does not support TLS".into()));
        assert_eq!(tls.misconfigured(), Some(Misconfigured::Tls));
        let handshake = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        assert_eq!(database(sqlx::Error::Io(handshake)).misconfigured(), Some(Misconfigured::Tls));
        let url = database(sqlx::Error::Configuration("bad port".into()));
        assert_eq!(url.misconfigured(), Some(Misconfigured::Url));

        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(database(sqlx::Error::Io(refused)).misconfigured(), None);
        let other = std::io::Error::new(std::io::ErrorKind::InvalidData, "not a TLS error");
        assert_eq!(database(sqlx::Error::Io(other)).misconfigured(), None);
        assert_eq!(database(sqlx::Error::PoolTimedOut).misconfigured(), None);
    }
}
