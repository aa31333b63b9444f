//! A sidecar behind PgBouncer in transaction mode (Debian's package, on a
//! private instance in front of the test server). Told nothing, it stops at
//! start-up with exit 64 and names `--postgres-pooler transaction`, whether
//! the pooler refuses the startup parameters (its defaults) or drops them
//! (`ignore_startup_parameters`), rather than retrying as if Postgres were
//! down, or serving without its timeouts. Told, every write transaction
//! runs under the sidecar's settings even where other clients of the pooler
//! left theirs on the server sessions; and with no `--postgres-listen-url`
//! nothing LISTENs, and an Await on one sidecar is woken by a Signal on
//! another through the poll. Runs in the Postgres pass only (its module
//! name is skipped in the SQLite one).

use std::time::Duration;

use futures::future::join_all;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use stepwell::api::pb::{AwaitRequest, CreateWaitRequest, SignalRequest, WaitStatus};
use stepwell::store::postgres::waits::LISTENER_APPLICATION_NAME;
use stepwell::store::{Database, Pooler};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::pg_bouncer::PgBouncer;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, duration};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

/// The test's fresh database, and a PgBouncer in front of its server with
/// `extra` settings; answers the database's URL through it.
async fn behind_a_pooler(extra: &[&str]) -> (TestStore, PgBouncer, String) {
    let store = TestStore::new().await;
    let url = store.url();
    let bouncer = PgBouncer::start(&url, extra);
    let name = url.rsplit('/').next().and_then(|tail| tail.split('?').next()).expect("a database name").to_owned();
    let pooled = bouncer.url(&name);
    (store, bouncer, pooled)
}

/// Starts a sidecar on `pooled` without saying a pooler is there, and
/// asserts that it exits 64 naming the flag that fixes it.
fn assert_stops_naming_the_flag(pooled: &str, bouncer: &PgBouncer) -> String {
    let unaware = TestStore::on(Database::Postgres { url: pooled.to_owned() });
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &unaware).run_until_exit();
    assert_eq!(status.code(), Some(64), "a wrong setting, not an outage: {stderr}\n{}", bouncer.log());
    assert!(stderr.contains("--postgres-pooler transaction"), "the message names the flag: {stderr}");
    stderr
}

#[tokio::test]
async fn a_pooler_that_refuses_the_startup_parameters_stops_start_up_naming_the_flag() {
    let (_store, bouncer, pooled) = behind_a_pooler(&[]).await;
    let stderr = assert_stops_naming_the_flag(&pooled, &bouncer);
    assert!(stderr.contains("unsupported startup parameter"), "and what the pooler said: {stderr}");
}

#[tokio::test]
async fn a_pooler_that_drops_the_connections_options_stops_start_up_naming_the_flag() {
    let (_store, bouncer, pooled) = behind_a_pooler(&["ignore_startup_parameters = extra_float_digits,options"]).await;
    assert_stops_naming_the_flag(&pooled, &bouncer);
}

/// Session settings another client of the pooler leaves on a server
/// session, as a `SET` outside a transaction does in transaction mode.
async fn leave_settings_behind(pooled: &str) {
    let options: PgConnectOptions = pooled.parse().expect("a URL");
    let mut conn = options.extra_float_digits(None).connect().await.expect("connect through the pooler");
    sqlx::raw_sql("SET statement_timeout = '1h'; SET lock_timeout = '1h'; SET synchronous_commit = 'local'")
        .execute(&mut conn)
        .await
        .expect("set session settings");
    conn.close().await.ok();
}

#[tokio::test]
async fn behind_a_pooler_every_write_transaction_runs_under_the_sidecars_settings() {
    let (store, _bouncer, pooled) = behind_a_pooler(&["default_pool_size = 4"]).await;
    let on_pooler = TestStore::on(Database::Postgres { url: pooled.clone() });
    let flags = ["--postgres-pooler", "transaction", "--postgres-statement-timeout-ms", "1234"];
    let server = SidecarProcess::builder(STEPWELL, &on_pooler).flags(&flags).spawn().await;
    // A row per checkpoint inserted, with the settings its transaction saw.
    store
        .execute(
            "",
            "CREATE TABLE seen (statement_timeout text, lock_timeout text, synchronous_commit text); \
             CREATE FUNCTION note_settings() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               INSERT INTO seen VALUES (current_setting('statement_timeout'), current_setting('lock_timeout'), \
                                        current_setting('synchronous_commit')); \
               RETURN NEW; END $$; \
             CREATE TRIGGER note AFTER INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION note_settings()",
        )
        .await;
    for round in 0..10 {
        leave_settings_behind(&pooled).await;
        let writes = (0..8).map(|n| {
            let mut client = server.client();
            async move { assert_inserted(&mut client, checkpoint(&format!("t{n}"), "step", T0 + round, "{}")).await }
        });
        join_all(writes).await;
    }
    let mut direct = PgConnection::connect(&store.url()).await.expect("connect to the test's database");
    let seen: Vec<(String, String, String)> =
        sqlx::query_as("SELECT * FROM seen").fetch_all(&mut direct).await.expect("read what the trigger saw");
    assert_eq!(seen.len(), 80, "a row per checkpoint");
    for row in seen {
        assert_eq!(row, ("1234ms".to_owned(), "5s".to_owned(), "on".to_owned()), "every transaction's settings");
    }
}

#[tokio::test]
async fn behind_a_pooler_without_a_listen_url_an_await_is_woken_through_the_poll() {
    let (store, _bouncer, pooled) = behind_a_pooler(&[]).await;
    let on_pooler = TestStore::on(Database::Postgres { url: pooled });
    let mut sidecars = Vec::new();
    for _ in 0..2 {
        let server = Sidecar::builder()
            .store(&on_pooler)
            .configure(|config| {
                config.store.postgres.pooler = Pooler::Transaction;
                config.store.postgres.listen_url = None;
            })
            .start()
            .await;
        sidecars.push(server);
    }
    let (turn, name) = ("t1", "approval");
    let create = CreateWaitRequest { turn_id: turn.into(), name: name.into(), ..Default::default() };
    sidecars[0].waits().create_wait(create).await.expect("CreateWait");
    let mut waiter = sidecars[1].waits();
    let request = AwaitRequest {
        turn_id: turn.into(),
        name: name.into(),
        timeout: Some(duration(Duration::from_secs(60))),
        ..Default::default()
    };
    let awaited = tokio::spawn(async move { waiter.r#await(request).await.expect("Await").into_inner() });
    let signal =
        SignalRequest { turn_id: turn.into(), name: name.into(), payload: b"yes".to_vec(), ..Default::default() };
    sidecars[0].waits().signal(signal).await.expect("Signal");
    let wait = awaited.await.expect("the Await's task").wait.expect("a wait");
    assert_eq!(wait.status(), WaitStatus::Resolved, "woken with the signal");
    assert_eq!(wait.payload, b"yes");
    let mut direct = PgConnection::connect(&store.url()).await.expect("connect to the test's database");
    let listeners: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database()",
    )
    .bind(LISTENER_APPLICATION_NAME)
    .fetch_one(&mut direct)
    .await
    .expect("read pg_stat_activity");
    assert_eq!(listeners, 0, "nothing listens behind a pooler without --postgres-listen-url");
}
