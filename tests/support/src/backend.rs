//! The store a test runs on, and the one place that picks the backend. The
//! suite runs once per backend: SQLite by default, Postgres when
//! `STEPWELL_TEST_BACKEND=postgres`, each test then getting a database of its
//! own on the server at `STEPWELL_TEST_POSTGRES_URL` (scripts/test starts a
//! throwaway cluster for it). Asking for Postgres without a server fails
//! loudly; nothing is skipped.
//!
//! Two settings change how the sidecars a test starts reach that server:
//! `STEPWELL_TEST_POSTGRES_PROFILE` (`--postgres-profile`), and
//! `STEPWELL_TEST_POSTGRES_POOLER_URL`, a pooler in transaction mode in
//! front of it (scripts/with-pgbouncer starts one), through which the
//! sidecars connect, with `--postgres-listen-url` on the server itself. A
//! test's own look at what is stored always goes to the server directly.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sqlx::postgres::PgConnection;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, PgPool, SqlitePool};
use stepwell::store::Database;
use tempfile::TempDir;

/// Which backend this run of the suite tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn backend() -> Backend {
    match crate::setting("STEPWELL_TEST_BACKEND").as_deref() {
        Some("postgres") => Backend::Postgres,
        Some("sqlite") | None => Backend::Sqlite,
        Some(other) => panic!("STEPWELL_TEST_BACKEND={other:?}: use sqlite or postgres"),
    }
}

/// A fresh store, and a directory for sockets (and the SQLite file).
/// Clones share one store: every sidecar started on it holds a clone, so the
/// directory is removed only when the test and its last sidecar are done.
#[derive(Clone)]
pub struct TestStore(Arc<Place>);

struct Place {
    dir: TempDir,
    /// The database itself.
    database: Database,
    /// The same database through a pooler, which the sidecars are given.
    pooled: Option<String>,
}

impl TestStore {
    pub async fn new() -> TestStore {
        let dir = tempfile::tempdir().expect("create a temporary directory");
        let (database, pooled) = match backend() {
            Backend::Sqlite => (Database::Sqlite { path: dir.path().join("stepwell.db") }, None),
            Backend::Postgres => {
                let url = fresh_postgres_database().await;
                let pooled = crate::setting("STEPWELL_TEST_POSTGRES_POOLER_URL").map(|pooler| {
                    let name = url.rsplit('/').next().and_then(|tail| tail.split('?').next()).unwrap_or_default();
                    with_database(&pooler, name)
                });
                (Database::Postgres { url }, pooled)
            }
        };
        TestStore(Arc::new(Place { dir, database, pooled }))
    }

    /// The store as a sidecar is given it: through the pooler, if the run has one.
    pub fn sidecar_database(&self) -> Database {
        match &self.0.pooled {
            Some(url) => Database::Postgres { url: url.clone() },
            None => self.database(),
        }
    }

    /// `sidecar_database` as the binary's --database-url.
    pub fn sidecar_url(&self) -> String {
        self.0.pooled.clone().unwrap_or_else(|| self.url())
    }

    /// How a sidecar on this store reaches Postgres: the profile the run
    /// asks for, and behind a pooler, LISTEN on the server itself.
    pub fn postgres_mode(&self) -> stepwell::store::PostgresMode {
        use stepwell::store::{Pooler, PostgresMode, PostgresProfile};
        let profile = match crate::setting("STEPWELL_TEST_POSTGRES_PROFILE").as_deref() {
            None | Some("standard") => PostgresProfile::Standard,
            Some("portable") => PostgresProfile::Portable,
            Some(other) => panic!("STEPWELL_TEST_POSTGRES_PROFILE={other:?}: use standard or portable"),
        };
        let pooler = if self.0.pooled.is_some() { Pooler::Transaction } else { Pooler::None };
        let listen_url = self.0.pooled.as_ref().map(|_| self.url());
        PostgresMode { profile, pooler, listen_url, vector_index_dims: vector_index_dims() }
    }

    /// `postgres_mode` as the binary's flags.
    pub fn postgres_flags(&self) -> Vec<String> {
        if !matches!(self.0.database, Database::Postgres { .. }) {
            return Vec::new();
        }
        let mode = self.postgres_mode();
        let mut flags = Vec::new();
        if mode.profile == stepwell::store::PostgresProfile::Portable {
            flags.extend(["--postgres-profile".to_owned(), "portable".to_owned()]);
        }
        if let Some(direct) = mode.listen_url {
            flags.extend(["--postgres-pooler".to_owned(), "transaction".to_owned()]);
            flags.extend(["--postgres-listen-url".to_owned(), direct]);
        }
        flags
    }

    /// `postgres_mode`'s vector index lengths as the binary's environment,
    /// which a test's own `--postgres-vector-index-dims` overrides.
    pub fn postgres_env(&self) -> Vec<(String, String)> {
        let dims = vector_index_dims();
        if !matches!(self.0.database, Database::Postgres { .. }) || dims.is_empty() {
            return Vec::new();
        }
        let dims: Vec<String> = dims.iter().map(u32::to_string).collect();
        vec![("STEPWELL_POSTGRES_VECTOR_INDEX_DIMS".to_owned(), dims.join(","))]
    }

    /// A store on a given database, e.g. on a private cluster.
    pub fn on(database: Database) -> TestStore {
        TestStore(Arc::new(Place {
            dir: tempfile::tempdir().expect("create a temporary directory"),
            database,
            pooled: None,
        }))
    }

    pub fn dir(&self) -> &Path {
        self.0.dir.path()
    }

    pub fn database(&self) -> Database {
        self.0.database.clone()
    }

    /// The store as the binary's --database-url.
    pub fn url(&self) -> String {
        match &self.0.database {
            Database::Sqlite { path } => format!("sqlite://{}", path.display()),
            Database::Postgres { url } => url.clone(),
        }
    }

    /// A connection to the store itself, for tests that check what is
    /// physically stored rather than what the API shows.
    pub async fn inspect(&self) -> Inspector {
        match &self.0.database {
            Database::Sqlite { path } => Inspector::Sqlite(
                SqlitePool::connect_with(SqliteConnectOptions::new().filename(path).read_only(true))
                    .await
                    .expect("open the test's store read-only"),
            ),
            Database::Postgres { url } => {
                Inspector::Postgres(PgPool::connect(url).await.expect("connect to the test's database"))
            }
        }
    }
}

impl TestStore {
    /// Runs a statement on the store itself, in the backend's own dialect:
    /// how tests inject faults (e.g. a trigger that fails some inserts).
    pub async fn execute(&self, sqlite: &str, postgres: &str) {
        match &self.0.database {
            Database::Sqlite { path } => {
                let mut conn = sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
                    .await
                    .expect("open the test's store");
                sqlx::raw_sql(sqlx::AssertSqlSafe(sqlite.to_owned())).execute(&mut conn).await.expect("run SQL");
            }
            Database::Postgres { url } => {
                let mut conn = PgConnection::connect(url).await.expect("connect to the test's database");
                sqlx::raw_sql(sqlx::AssertSqlSafe(postgres.to_owned())).execute(&mut conn).await.expect("run SQL");
            }
        }
    }

    /// Takes the store's write lock from outside the sidecar, so its writes
    /// wait until `WriteLock::release`.
    pub async fn hold_write_lock(&self) -> WriteLock {
        match &self.0.database {
            Database::Sqlite { path } => {
                let mut conn = sqlx::SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
                    .await
                    .expect("open the test's store");
                sqlx::raw_sql("BEGIN EXCLUSIVE").execute(&mut conn).await.expect("take the write lock");
                WriteLock::Sqlite(conn)
            }
            Database::Postgres { url } => {
                let mut conn = PgConnection::connect(url).await.expect("connect to the test's database");
                sqlx::raw_sql("BEGIN; LOCK TABLE checkpoints IN ACCESS EXCLUSIVE MODE")
                    .execute(&mut conn)
                    .await
                    .expect("take the write lock");
                WriteLock::Postgres(conn)
            }
        }
    }
}

/// A write lock on a store, held by a test.
pub enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(PgConnection),
}

impl WriteLock {
    pub async fn release(self) {
        match self {
            WriteLock::Sqlite(mut conn) => sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.map(drop),
            WriteLock::Postgres(mut conn) => sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.map(drop),
        }
        .expect("release the write lock");
    }
}

/// Reads a store directly.
pub enum Inspector {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Inspector {
    /// The idempotency keys stored, in order.
    pub async fn idempotency_keys(&self) -> Vec<String> {
        let sql = "SELECT key FROM idempotency ORDER BY key";
        match self {
            Inspector::Sqlite(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
            Inspector::Postgres(pool) => sqlx::query_scalar(sql).fetch_all(pool).await,
        }
        .expect("read the store")
    }

    /// Waits until no other connection to the store is inside a transaction
    /// or running a statement. A killed sidecar's Postgres backend may still
    /// be finishing what it was sent before the kill (a COMMIT, say): a test
    /// that reads what the kill left reads it after that. On SQLite the
    /// killed process's transaction ended with it, so there is nothing to
    /// wait for.
    pub async fn until_other_transactions_end(&self) {
        let Inspector::Postgres(pool) = self else { return };
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                   AND backend_type = 'client backend' AND pid <> pg_backend_pid() \
                   AND state IS DISTINCT FROM 'idle'";
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let busy: i64 = sqlx::query_scalar(sql).fetch_one(pool).await.expect("read pg_stat_activity");
            if busy == 0 {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "{busy} other connections stayed busy for a minute");
            tokio::task::yield_now().await;
        }
    }

    /// How many rows `table` holds.
    pub async fn count(&self, table: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}"));
        match self {
            Inspector::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Inspector::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .expect("count the rows")
    }
}

/// The server every Postgres test database lives on.
pub fn postgres_admin_url() -> String {
    crate::setting("STEPWELL_TEST_POSTGRES_URL").unwrap_or_else(|| {
        panic!(
            "STEPWELL_TEST_BACKEND=postgres needs STEPWELL_TEST_POSTGRES_URL (postgres://USER@HOST:PORT/DB); \
             scripts/test starts a throwaway server and sets it"
        )
    })
}

/// Creates an empty database for one test on the shared test server and
/// returns its URL.
pub async fn fresh_postgres_database() -> String {
    fresh_database_on(&postgres_admin_url()).await
}

/// Creates an empty database on the server at `admin` and returns its URL.
pub async fn fresh_database_on(admin: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let name = format!("stepwell_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
    let mut conn = PgConnection::connect(admin).await.expect("connect to the Postgres test server");
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut conn)
        .await
        .expect("create a test database");
    conn.close().await.ok();
    with_database(admin, &name)
}

/// `url` with its database replaced by `name`.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{host_part}/{name}?{query}"),
        None => format!("{host_part}/{name}"),
    }
}

/// The vector lengths a Postgres sidecar indexes with pgvector:
/// STEPWELL_TEST_VECTOR_INDEX_DIMS (comma-separated; the pgvector lane sets
/// it to the lengths the memory suite's vectors have, so that its searches
/// go through the index), none by default.
pub fn vector_index_dims() -> Vec<u32> {
    let Some(text) = crate::setting("STEPWELL_TEST_VECTOR_INDEX_DIMS") else { return Vec::new() };
    text.split(',')
        .map(|d| {
            d.trim().parse().unwrap_or_else(|_| panic!("STEPWELL_TEST_VECTOR_INDEX_DIMS={text:?}: give lengths, 3,768"))
        })
        .collect()
}
