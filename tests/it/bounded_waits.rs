//! Waits in the store are bounded. A sidecar starting while another holds
//! the store's migration lock (SQLite's lock file beside the database,
//! Postgres's advisory lock, or with the portable profile or behind a
//! pooler the row of `stepwell_migration_lock`) waits `--migration-lock-timeout-ms`, then fails
//! to start with a message naming the lock; once the lock is free it starts.
//! ListTurns' filters read their own index, never the whole namespace: the
//! query plans of the statements the store runs show it, on both backends.
//! So do retention rules: a namespace's reads an index, and on Postgres a
//! rule across namespaces reads `turns_expiry`.
//! (Postgres's statement and lock timeouts are in `postgres_only`.)

use sqlx::Connection;
use stepwell::domain::model::{ListTurnsQuery, TurnStatus};
use stepwell::store::{Database, Pooler, PostgresProfile};
use stepwell::store::{Dialect, Expired, ExpiredQuery, expired_turns_sql, list_turns_sql};

use stepwell_test_support::backend::{Inspector, TestStore};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

/// Another sidecar's hold on the migration lock, until dropped.
enum HeldLock {
    Sqlite(std::fs::File),
    Postgres(sqlx::PgConnection),
    /// A transaction holding the lock row.
    PostgresRow(sqlx::PgConnection),
}

impl HeldLock {
    /// Lets the lock go, as the other sidecar would once migrated.
    async fn release(self) {
        match self {
            HeldLock::Sqlite(file) => file.unlock().expect("release the migration lock"),
            HeldLock::Postgres(mut conn) => {
                sqlx::query("SELECT pg_advisory_unlock_all()").execute(&mut conn).await.expect("release the lock");
            }
            HeldLock::PostgresRow(mut conn) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.expect("release the lock row");
            }
        }
    }
}

/// Takes the migration lock of `store` as a sidecar migrating it would.
async fn hold_migration_lock(store: &TestStore) -> HeldLock {
    match store.database() {
        Database::Sqlite { path } => {
            let mut lock_path = path.into_os_string();
            lock_path.push("-migrate.lock");
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(lock_path)
                .expect("open the migration lock file");
            file.lock().expect("take the migration lock");
            HeldLock::Sqlite(file)
        }
        Database::Postgres { url } if locks_a_row(store) => {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect to the test's database");
            sqlx::raw_sql(
                "CREATE TABLE stepwell_migration_lock (id integer PRIMARY KEY); \
                 INSERT INTO stepwell_migration_lock VALUES (1)",
            )
            .execute(&mut conn)
            .await
            .expect("make the lock row");
            sqlx::raw_sql("BEGIN; SELECT id FROM stepwell_migration_lock WHERE id = 1 FOR UPDATE")
                .execute(&mut conn)
                .await
                .expect("take the lock row");
            HeldLock::PostgresRow(conn)
        }
        Database::Postgres { url } => {
            let mut conn = sqlx::PgConnection::connect(&url).await.expect("connect to the test's database");
            let name: String =
                sqlx::query_scalar("SELECT current_database()").fetch_one(&mut conn).await.expect("database name");
            // The id the schema migrator locks for this database.
            const CRC: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISO_HDLC);
            let id = 0x3d32ad9e * i64::from(CRC.checksum(name.as_bytes()));
            sqlx::query("SELECT pg_advisory_lock($1)").bind(id).execute(&mut conn).await.expect("take the lock");
            HeldLock::Postgres(conn)
        }
    }
}

/// Whether the store's sidecars migrate under the lock row rather than the
/// advisory lock: with the portable profile, or behind a pooler.
fn locks_a_row(store: &TestStore) -> bool {
    let mode = store.postgres_mode();
    mode.profile == PostgresProfile::Portable || mode.pooler == Pooler::Transaction
}

#[tokio::test]
async fn start_up_waits_a_bounded_time_for_another_sidecars_migration_lock() {
    let store = TestStore::new().await;
    let held = hold_migration_lock(&store).await;

    let (status, stderr) =
        SidecarProcess::builder(STEPWELL, &store).flags(&["--migration-lock-timeout-ms", "300"]).run_until_exit();
    assert_eq!(status.code(), Some(1), "start-up fails once the wait is over: {stderr}");
    assert!(
        stderr.contains("migration lock") && stderr.contains("--migration-lock-timeout-ms"),
        "the message names the lock and the flag: {stderr}"
    );
    if let Database::Sqlite { path } = store.database() {
        assert!(stderr.contains(&format!("{}-migrate.lock", path.display())), "and the lock file: {stderr}");
    }

    held.release().await;
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&["--migration-lock-timeout-ms", "300"]).spawn().await;
    assert_inserted(&mut server.client(), checkpoint("after", "started", T0, "{}")).await;
}

/// Turns in the namespace for the plans below.
const TURNS: i64 = 20_000;
/// Nanoseconds between two turns' last writes: a minute, so that Postgres's
/// index of the minute tells them apart.
const MINUTE: i64 = 60_000_000_000;

/// Fills the store's summaries with `TURNS` turns, one in a hundred open.
/// Postgres's autovacuum would gather the planner's statistics by itself in
/// time; here `ANALYZE` does it at once.
async fn fill(store: &TestStore) {
    store
        .execute(
            &format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {TURNS}) \
                 INSERT INTO turns SELECT 'default', printf('turn-%06d', i), '', i * {MINUTE}, i * {MINUTE}, i, 'p', 1, \
                 i % 100 <> 0, '', i * {MINUTE}, i * {MINUTE} \
                 FROM n;"
            ),
            &format!(
                "INSERT INTO turns SELECT 'default', 'turn-' || lpad(i::text, 6, '0'), '', i * {MINUTE}, i * {MINUTE}, i, \
                 'p', 1, i % 100 <> 0, '', i * {MINUTE}, i * {MINUTE} FROM generate_series(1, {TURNS}) i; ANALYZE turns;"
            ),
        )
        .await;
}

/// The plan of the ListTurns statement for `q`, one line per step.
async fn plan(inspector: &Inspector, q: &ListTurnsQuery) -> Vec<String> {
    let sql = list_turns_sql(dialect_of(inspector), q);
    let status = (q.status != TurnStatus::Any).then_some(q.status == TurnStatus::Terminal);
    match inspector {
        Inspector::Sqlite(pool) => {
            let mut query =
                sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(&q.namespace)
                    .bind("");
            if let Some(terminal) = status {
                query = query.bind(terminal);
            }
            if let Some(before) = q.updated_before {
                query = query.bind(before);
            }
            let rows = query.bind(i64::from(q.limit) + 1).fetch_all(pool).await.expect("explain");
            rows.into_iter().map(|(_, _, _, detail)| detail).collect()
        }
        Inspector::Postgres(pool) => {
            let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                .bind(&q.namespace)
                .bind("");
            if let Some(terminal) = status {
                query = query.bind(terminal);
            }
            if let Some(before) = q.updated_before {
                query = query.bind(before);
            }
            query.bind(i64::from(q.limit) + 1).fetch_all(pool).await.expect("explain")
        }
    }
}

/// Whether a plan reads the whole namespace: the table, or its primary key
/// (namespace, turn_id) with the filter applied row by row.
fn scans_the_namespace(plan: &[String]) -> bool {
    plan.iter().any(|step| {
        step.contains("Seq Scan")
            || step.contains("turns_pkey")
            || step.starts_with("SCAN turns")
            || step.contains("PRIMARY KEY")
    })
}

#[tokio::test]
async fn list_turns_by_status_or_by_updated_before_reads_its_index_not_the_namespace() {
    let server = Sidecar::builder().start().await;
    assert_inserted(&mut server.client(), checkpoint("migrated", "started", T0, "{}")).await;
    fill(server.store()).await;
    // A sidecar opening the store gathers SQLite's statistics (as its
    // sweeper does while serving).
    let store = server.store().clone();
    server.stop().await.expect("stop the sidecar");
    let _reopened = Sidecar::builder().store(&store).start().await;
    let inspector = store.inspect().await;
    let query = |status, updated_before| ListTurnsQuery {
        namespace: "default".into(),
        status,
        session_id: None,
        updated_before,
        after_turn_id: None,
        limit: 1000,
    };

    let open = plan(&inspector, &query(TurnStatus::Open, None)).await;
    assert!(open.iter().any(|step| step.contains("turns_status")), "ListTurns(OPEN) reads turns_status: {open:#?}");
    assert!(!scans_the_namespace(&open), "and never the whole namespace: {open:#?}");

    let stale = plan(&inspector, &query(TurnStatus::Any, Some(TURNS / 100 * MINUTE))).await;
    assert!(stale.iter().any(|step| step.contains("turns_updated")), "updated_before reads turns_updated: {stale:#?}");
    assert!(!scans_the_namespace(&stale), "and never the whole namespace: {stale:#?}");
}

/// The plan of the retention statement for `q`, one line per step.
async fn expiry_plan(inspector: &Inspector, q: &ExpiredQuery) -> Vec<String> {
    let sql = expired_turns_sql(dialect_of(inspector), q);
    let namespaces: Vec<&str> =
        q.namespace.iter().map(String::as_str).chain(q.except.iter().map(String::as_str)).collect();
    match inspector {
        Inspector::Sqlite(pool) => {
            let mut query =
                sqlx::query_as::<_, (i64, i64, i64, String)>(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                    .bind(q.expired.terminal)
                    .bind(q.expired.last_before);
            for namespace in &namespaces {
                query = query.bind(*namespace);
            }
            let rows = query.bind(i64::from(q.limit)).fetch_all(pool).await.expect("explain");
            rows.into_iter().map(|(_, _, _, detail)| detail).collect()
        }
        Inspector::Postgres(pool) => {
            let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!("EXPLAIN {sql}")))
                .bind(q.expired.terminal)
                .bind(q.expired.last_before);
            for namespace in &namespaces {
                query = query.bind(*namespace);
            }
            query.bind(i64::from(q.limit)).fetch_all(pool).await.expect("explain")
        }
    }
}

#[tokio::test]
async fn retention_rules_read_an_index_not_every_turn_of_a_status() {
    let server = Sidecar::builder().start().await;
    assert_inserted(&mut server.client(), checkpoint("migrated", "started", T0, "{}")).await;
    fill(server.store()).await;
    let store = server.store().clone();
    server.stop().await.expect("stop the sidecar");
    let _reopened = Sidecar::builder().store(&store).start().await;
    let inspector = store.inspect().await;
    // Terminal turns last written in the first hundredth of the range.
    let expired = Expired { last_before: TURNS / 100 * MINUTE, terminal: true };

    let one = ExpiredQuery { namespace: Some("default".into()), except: Vec::new(), expired, limit: 100 };
    let plan = expiry_plan(&inspector, &one).await;
    // The console's indexes by last activity (turns_activity, and on
    // Postgres turns_recent) serve the rule as well where the planner takes them.
    assert!(
        plan.iter().any(|step| ["turns_updated", "turns_activity", "turns_recent"].iter().any(|i| step.contains(i))),
        "a namespace's rule reads turns_updated, or the console's turns_activity or turns_recent: {plan:#?}"
    );
    assert!(!scans_the_namespace(&plan), "and never the whole namespace: {plan:#?}");

    // Across namespaces, SQLite skips through turns_updated (or
    // turns_activity) namespace by namespace; Postgres reads turns_expiry.
    let across = ExpiredQuery { namespace: None, except: vec!["other".into()], expired, limit: 100 };
    let plan = expiry_plan(&inspector, &across).await;
    let indexes: &[&str] =
        if let Inspector::Postgres(_) = inspector { &["turns_expiry"] } else { &["turns_updated", "turns_activity"] };
    let reads = |step: &String| indexes.iter().any(|index| step.contains(index));
    assert!(plan.iter().any(reads), "a rule across namespaces reads one of {indexes:?}: {plan:#?}");
    assert!(!scans_the_namespace(&plan), "and not the table: {plan:#?}");
}

/// The dialect of the store the inspector reads.
fn dialect_of(inspector: &Inspector) -> Dialect {
    match inspector {
        Inspector::Sqlite(_) => Dialect::Sqlite,
        Inspector::Postgres(_) => Dialect::Postgres,
    }
}
