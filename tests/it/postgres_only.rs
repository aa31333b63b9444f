//! Behaviour that exists only with Postgres: the durability guard that
//! refuses a server which could lose acknowledged writes, and failing closed
//! while the database is down, then serving again by itself. These tests run
//! in the Postgres pass of scripts/test; those that must stop the server or
//! change its settings use a private cluster.

use std::time::Duration;

use stepwell::store::Database;
use tonic::{Code, Streaming};
use tonic_health::pb::HealthCheckResponse;
use tonic_health::pb::health_check_response::ServingStatus;

use stepwell_test_support::backend::{
    TestStore, fresh_database_on, fresh_postgres_database, postgres_admin_url, with_database,
};
use stepwell_test_support::health::{next_status, watch_health};
use stepwell_test_support::pg_cluster::PgCluster;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all, states};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

const OVERRIDE: &str = "--unsafe-accept-nondurable-postgres";

async fn postgres_store(url: String) -> TestStore {
    TestStore::on(Database::Postgres { url })
}

#[tokio::test]
async fn a_database_with_synchronous_commit_off_is_refused_unless_overridden() {
    let url = fresh_postgres_database().await;
    let name = url.rsplit('/').next().expect("a database name").to_owned();
    let mut admin = sqlx::PgConnection::connect(&postgres_admin_url()).await.expect("connect");
    use sqlx::Connection;
    sqlx::query(sqlx::AssertSqlSafe(format!("ALTER DATABASE {name} SET synchronous_commit = off")))
        .execute(&mut admin)
        .await
        .expect("turn synchronous_commit off for the database");
    let store = postgres_store(url).await;

    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).name("refused").run_until_exit();
    assert_eq!(status.code(), Some(64), "a non-durable database is refused as a configuration error");
    assert!(stderr.contains("synchronous_commit is off"), "the refusal says why: {stderr}");
    assert!(stderr.contains(OVERRIDE), "the refusal names the override: {stderr}");

    // The loudly named flag overrides the refusal.
    let server = SidecarProcess::builder(STEPWELL, &store).name("unsafe").flags(&[OVERRIDE]).spawn().await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("t", "started", T0, "{}")).await;
}

#[tokio::test]
async fn a_server_with_fsync_off_is_refused() {
    let cluster = PgCluster::start(&["fsync=off"]);
    let store = postgres_store(fresh_database_on(&cluster.url()).await).await;
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).name("refused").run_until_exit();
    assert_eq!(status.code(), Some(64), "a server with fsync=off is refused as a configuration error");
    assert!(stderr.contains("fsync is off"), "the refusal says why: {stderr}");
}

/// A server on `cluster`'s `postgres` database that checks health every
/// `interval`, and its health Watch, asserted to report SERVING first.
async fn start_asserting_serving(cluster: &PgCluster, interval: Duration) -> (Sidecar, Streaming<HealthCheckResponse>) {
    let store = postgres_store(with_database(&cluster.url(), "postgres")).await;
    let server =
        Sidecar::builder().store(&store).configure(|config| config.health.check_interval = interval).start().await;
    let mut health = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut health).await, Some(ServingStatus::Serving));
    (server, health)
}

#[tokio::test]
async fn an_outage_fails_closed_and_the_sidecar_recovers_without_a_restart() {
    let cluster = PgCluster::start(&[]);
    let (server, mut health) = start_asserting_serving(&cluster, Duration::from_millis(50)).await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("t", "before", T0, r#"{"n":1}"#)).await;

    cluster.stop_immediate();
    let refused = client.checkpoint(checkpoint("t", "during", T0 + 1, r#"{"n":2}"#)).await;
    let status = refused.expect_err("a write while the database is down is not acknowledged");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!status.message().contains("postgres://"), "no URL or SQL reaches the client: {status:?}");
    assert_eq!(next_status(&mut health).await, Some(ServingStatus::NotServing));

    cluster.start_again();
    assert_eq!(next_status(&mut health).await, Some(ServingStatus::Serving));
    assert_inserted(&mut client, checkpoint("t", "after", T0 + 2, r#"{"n":3}"#)).await;
    let log = restore_all(&mut client, restore("t")).await;
    assert_eq!(states(&log), [r#"{"n":1}"#, r#"{"n":3}"#], "the refused write is absent, the others present");
}

#[tokio::test]
async fn while_health_is_not_serving_requests_are_refused_at_once_and_touch_nothing() {
    let cluster = PgCluster::start(&[]);
    // No periodic health check within the test: only a failing request
    // triggers one, so the breaker's state is the test's to decide.
    let (server, mut health) = start_asserting_serving(&cluster, Duration::from_secs(3600)).await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("t", "before", T0, r#"{"n":1}"#)).await;

    cluster.stop_immediate();
    let status = client.checkpoint(checkpoint("t", "during", T0 + 1, "{}")).await.expect_err("down");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(next_status(&mut health).await, Some(ServingStatus::NotServing));

    // Postgres is back, but no health check has seen it yet: the breaker is
    // still open, so requests are refused without reaching the database.
    cluster.start_again();
    let status = client.checkpoint(checkpoint("t", "refused", T0 + 2, "{}")).await.expect_err("breaker open");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let status = client.restore(restore("t")).await.expect_err("reads are refused too");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");

    // What was refused is absent once the store is back.
    drop(server);
    let url = with_database(&cluster.url(), "postgres");
    let server = Sidecar::builder().store(&postgres_store(url).await).start().await;
    let log = restore_all(&mut server.client(), restore("t")).await;
    assert_eq!(states(&log), [r#"{"n":1}"#], "only the acknowledged write is stored");
}

#[tokio::test]
async fn a_write_that_waits_past_the_lock_or_statement_timeout_is_unavailable_and_its_retry_succeeds() {
    type Bound = fn(&mut stepwell::config::sections::Config);
    let bounds: [(&str, Bound); 2] = [
        ("lock_timeout", |config| config.store.postgres_lock_timeout = Duration::from_millis(200)),
        ("statement_timeout", |config| {
            config.store.postgres_lock_timeout = Duration::from_secs(600);
            config.store.postgres_statement_timeout = Duration::from_millis(200);
        }),
    ];
    for (bound, configure) in bounds {
        let store = postgres_store(fresh_postgres_database().await).await;
        let server = Sidecar::builder().store(&store).configure(configure).start().await;
        let mut client = server.client();
        let request = checkpoint("t", "started", T0, r#"{"step":1}"#);

        // Another session holds the log's table lock; each attempt at the
        // write waits on it until its bound, never longer. A lock wait is
        // contention, which the writer tries again, but only so many times:
        // the write is then not acknowledged.
        let lock = store.hold_write_lock().await;
        let status = client.checkpoint(request.clone()).await.expect_err("the write cannot commit");
        stepwell_test_support::errors::assert_error(&status, Code::Unavailable, "STORE_UNAVAILABLE");
        lock.release().await;

        let retried = client.checkpoint(request.clone()).await.unwrap_or_else(|e| panic!("{bound}: retry: {e:?}"));
        assert!(retried.into_inner().inserted, "{bound}: the timed-out write left nothing behind");
        let restored = restore_all(&mut client, restore("t")).await;
        let stored = states(&restored);
        assert_eq!(stored, [r#"{"step":1}"#], "{bound}: stored once");
    }
}
