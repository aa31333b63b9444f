//! The one `Store` trait every backend implements, its error type, and
//! `open`, which picks the backend from the configured database once at
//! start-up. Only `store` and its submodules contain SQL.
//!
//! Every write method returns only after the store committed the write; an
//! error means nothing of it was committed.

pub mod postgres;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

use crate::config::{Config, Database};
use crate::idempotency::{BeginArgs, BeginOutcome, Fence, Record, RecordState, Refusal};
use crate::model::{Appended, ListTurnsQuery, NewCheckpoint, RestoreQuery, StoredCheckpoint, TurnSummary, UnixNanos};

/// Why the store could not do what it was asked. The message is for logs
/// only: it may hold SQL or paths, so it never reaches a client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The database refused or failed the operation (unreachable, I/O error,
    /// disk full, locked past the busy timeout).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// The schema could not be created or upgraded.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Another sidecar's migration could not be waited for.
    #[error("could not take the migration lock: {0}")]
    MigrationLock(#[source] std::io::Error),
    /// The database would not keep acknowledged writes; stepwell refuses it.
    #[error(
        "refusing a database that would lose acknowledged writes: {0}. Fix the server's settings, or pass \
         --unsafe-accept-nondurable-postgres for a throwaway database"
    )]
    NotDurable(String),
}

/// The answer to a request on an idempotency record: the value, or why the
/// record refused it (nothing changed).
pub type Fenced<T> = Result<T, Refusal>;

/// A backend that stores checkpoint logs and idempotency records. The lease
/// rules are `crate::idempotency`'s; a backend loads the record under its
/// write lock, follows the plan, and commits.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Appends a checkpoint unless its (namespace, turn_id, phase, timestamp)
    /// is stored already, and updates its turn's summary, in one commit.
    async fn append(&self, checkpoint: NewCheckpoint) -> Result<Appended, Error>;

    /// One page of a turn's checkpoints in restore order, and whether more follow.
    async fn restore(&self, query: &RestoreQuery) -> Result<(Vec<StoredCheckpoint>, bool), Error>;

    /// The summary of one turn, if it has checkpoints.
    async fn turn(&self, namespace: &str, turn_id: &str) -> Result<Option<TurnSummary>, Error>;

    /// One page of turn summaries ordered by turn id, and whether more follow.
    async fn list_turns(&self, query: &ListTurnsQuery) -> Result<(Vec<TurnSummary>, bool), Error>;

    /// Deletes a turn's checkpoints and summary; returns how many checkpoints went.
    async fn delete_turn(&self, namespace: &str, turn_id: &str) -> Result<u64, Error>;

    /// Begin: acquire the key's lease, or say why not.
    async fn begin(&self, args: BeginArgs) -> Result<Fenced<BeginOutcome>, Error>;

    /// Complete: record the result; answers when it was recorded.
    async fn complete(&self, fence: Fence, result: Vec<u8>) -> Result<Fenced<UnixNanos>, Error>;

    /// Release: give the key back, or fail it permanently with `error`.
    async fn release(&self, fence: Fence, error: String, permanent: bool) -> Result<Fenced<RecordState>, Error>;

    /// Extend: move a live lease's expiry to `lease` nanoseconds from now.
    async fn extend(&self, fence: Fence, lease: i64) -> Result<Fenced<UnixNanos>, Error>;

    /// The key's record, unless absent or past its retention, with the store's time.
    async fn get(&self, namespace: &str, key: &str) -> Result<Option<(Record, UnixNanos)>, Error>;

    /// Deletes up to `limit` records past their retention; returns how many went.
    async fn purge_expired(&self, limit: u32) -> Result<u64, Error>;

    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), Error>;

    /// Finishes in-flight work and closes connections.
    async fn close(&self);
}

/// Opens the configured store and brings its schema up to date.
pub async fn open(config: &Config) -> Result<Arc<dyn Store>, Error> {
    match &config.database {
        Database::Sqlite { path } => {
            Ok(Arc::new(sqlite::SqliteStore::open(path, config.pool_max, config.clock.clone()).await?))
        }
        Database::Postgres { url } => Ok(Arc::new(
            postgres::PostgresStore::open(
                url,
                config.pool_max,
                config.clock.clone(),
                config.unsafe_accept_nondurable_postgres,
            )
            .await?,
        )),
    }
}
