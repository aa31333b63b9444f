//! On Postgres, Awaits and timers across three sidecars sharing one store:
//! an Await on one is woken by a Signal through another (the settling
//! transaction's NOTIFY, heard on each sidecar's listening connection);
//! with the listening connections killed, and with a settlement that
//! announces nothing, the poll still wakes it, and the listener connects
//! again; and timers due on all three fire exactly once each. Runs in the
//! Postgres pass only (its module name is skipped in the SQLite one).

use std::time::Duration;

use futures::future::join_all;
use stepwell::api::pb::{ListWaitsRequest, WaitStatus};
use stepwell::domain::clock::{Clock, system_now};
use stepwell::store::Database;
use stepwell::store::postgres::waits::LISTENER_APPLICATION_NAME;
use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::admin::{Scrape, free_local_address};
use stepwell_test_support::backend::{TestStore, fresh_postgres_database};
use stepwell_test_support::requests::ts;
use stepwell_test_support::sidecar::Sidecar;

use super::{await_for, create, signal, signalled, until_metric};

/// Three sidecars on one fresh Postgres store, each with an admin
/// listener and `clock`; answers them and their admin addresses.
async fn three(clock: &Clock) -> (TestStore, Vec<(Sidecar, String)>) {
    let store = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });
    let mut sidecars = Vec::new();
    for _ in 0..3 {
        let admin = free_local_address();
        let address = admin.parse().expect("an address");
        let clock = clock.clone();
        let server = Sidecar::builder()
            .store(&store)
            .configure(move |config| {
                config.observability.admin_listen = Some(address);
                config.store.clock = clock;
            })
            .start()
            .await;
        sidecars.push((server, admin));
    }
    (store, sidecars)
}

/// An Await of `name` in `turn` on `server`, pending once the function returns.
async fn pending_await(
    server: &Sidecar,
    admin: &str,
    turn: &str,
    name: &str,
) -> tokio::task::JoinHandle<stepwell::api::pb::Wait> {
    let mut client = server.waits();
    let request = await_for(turn, name, Duration::from_secs(120));
    let awaited =
        tokio::spawn(async move { client.r#await(request).await.expect("Await").into_inner().wait.expect("a wait") });
    until_metric(admin, "stepwell_awaits_pending", &[], 1.0).await;
    awaited
}

/// The backend pids of the sidecars' listening connections.
async fn listeners(store: &TestStore) -> Vec<i32> {
    let pool = sqlx::PgPool::connect(&store.url()).await.expect("connect");
    let sql = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database() \
               ORDER BY pid";
    let pids = sqlx::query_scalar(sql).bind(LISTENER_APPLICATION_NAME).fetch_all(&pool).await.expect("read");
    pool.close().await;
    pids
}

#[tokio::test]
async fn an_await_on_one_sidecar_is_woken_by_a_signal_through_another() {
    let (_store, sidecars) = three(&Clock::system()).await;
    let (a, admin_a) = &sidecars[0];
    sidecars[1].0.waits().create_wait(create("t1", "approve")).await.expect("CreateWait through B");
    let awaited = pending_await(a, admin_a, "t1", "approve").await;
    assert!(signalled(&mut sidecars[2].0.waits(), signal("t1", "approve", b"from C")).await.settled);
    let wait = awaited.await.expect("the Await task");
    assert_eq!((wait.status(), wait.payload.as_slice()), (WaitStatus::Resolved, &b"from C"[..]));
}

#[tokio::test]
async fn with_the_listening_connections_killed_and_no_notification_the_poll_still_wakes_the_await() {
    let (store, sidecars) = three(&Clock::system()).await;
    let (a, admin_a) = &sidecars[0];
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let before = loop {
        let pids = listeners(&store).await;
        if pids.len() == 3 {
            break pids;
        }
        assert!(tokio::time::Instant::now() < deadline, "three listening connections, found {pids:?}");
        tokio::task::yield_now().await;
    };
    a.waits().create_wait(create("t1", "w")).await.expect("CreateWait");
    let awaited = pending_await(a, admin_a, "t1", "w").await;
    store
        .execute(
            "unused: this test runs on Postgres only",
            &format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = '{LISTENER_APPLICATION_NAME}' AND datname = current_database()"
            ),
        )
        .await;
    // A settlement that announces nothing: only the poll can find it.
    store
        .execute(
            "unused: this test runs on Postgres only",
            "UPDATE waits SET status = 2, settled_at_ns = 1, payload = '\\x6f6b', settled_by = 'by hand' \
             WHERE turn_id = 't1' AND name = 'w'",
        )
        .await;
    let wait = awaited.await.expect("the Await task");
    assert_eq!(
        (wait.status(), wait.settled_by.as_str(), wait.payload.as_slice()),
        (WaitStatus::Resolved, "by hand", &b"ok"[..])
    );
    // Each sidecar listens again, on a connection of its own.
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let pids = listeners(&store).await;
        if pids.len() == 3 && pids.iter().all(|pid| !before.contains(pid)) {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the listeners reconnect; found {pids:?} after {before:?}");
        tokio::task::yield_now().await;
    }
    // And a Signal through another sidecar wakes an Await again.
    a.waits().create_wait(create("t1", "again")).await.expect("CreateWait");
    let awaited = pending_await(a, admin_a, "t1", "again").await;
    signalled(&mut sidecars[1].0.waits(), signal("t1", "again", b"2")).await;
    assert_eq!(awaited.await.expect("the Await task").payload, b"2");
}

#[tokio::test]
async fn fifty_timers_due_on_three_sidecars_each_fire_exactly_once() {
    const TIMERS: usize = 50;
    let clock = Clock::system();
    let (_store, sidecars) = three(&clock).await;
    let creates = (0..TIMERS).map(|i| {
        let mut client = sidecars[i % 3].0.waits();
        let mut request = create("t1", &format!("timer-{i:02}"));
        request.resolve_at = Some(ts(system_now() + 3_600_000_000_000 + i as i64));
        async move { client.create_wait(request).await.expect("CreateWait") }
    });
    join_all(creates).await;
    clock.advance(Duration::from_secs(2 * 3600));
    let settled = |admins: Vec<String>| async move {
        let mut sum = 0.0;
        for admin in &admins {
            sum += Scrape::of(admin).await.value("stepwell_wait_settlements_total", &[("by", "timer")]);
        }
        sum
    };
    let admins: Vec<String> = sidecars.iter().map(|(_, admin)| admin.clone()).collect();
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let request = ListWaitsRequest { status: WaitStatus::Resolved as i32, ..Default::default() };
        let resolved = sidecars[0].0.waits().list_waits(request).await.expect("ListWaits").into_inner().waits;
        if resolved.len() == TIMERS && settled(admins.clone()).await >= TIMERS as f64 {
            assert!(resolved.iter().all(|wait| wait.settled_by == "stepwell:timer"));
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{} of {TIMERS} timers fired", resolved.len());
        tokio::task::yield_now().await;
    }
    assert_eq!(settled(admins).await, TIMERS as f64, "each timer was settled by exactly one sidecar, once");
}
