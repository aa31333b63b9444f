//! Database outages: the Postgres server under a running sidecar is stopped
//! with `pg_ctl stop -m immediate` (a crash: no shutdown checkpoint) and
//! started again, 10 times in the CI profile and 50 in the long one, while
//! 32 writers run. Clients must hear UNAVAILABLE, never OK without the row;
//! health must turn NOT_SERVING once the sidecar notices, and SERVING again
//! after Postgres returns, with no restart of the sidecar. The times from a
//! client's first failure to NOT_SERVING, and from Postgres's return to
//! SERVING, are reported.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use stepwell::store::Database;
use tokio::sync::watch;
use tonic_health::pb::health_check_response::ServingStatus;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::{TestStore, fresh_database_on};
use stepwell_test_support::channel::lazy_unix_channel;
use stepwell_test_support::health::{next_status, watch_health};
use stepwell_test_support::pg_cluster::PgCluster;
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;
use crate::checker::History;
use crate::profile::{Profile, fault_rng, quantiles};
use crate::workload::{Workload, settle_and_assert_clean};

/// Follows the sidecar's health, publishing each status with when it arrived.
async fn follow_health(server: &SidecarProcess) -> watch::Receiver<(ServingStatus, Instant)> {
    let mut stream = watch_health(&server.channel()).await;
    let first = next_status(&mut stream).await.expect("a first health status");
    let (tx, rx) = watch::channel((first, Instant::now()));
    tokio::spawn(async move {
        while let Ok(Some(message)) = stream.message().await {
            let status = ServingStatus::try_from(message.status).expect("a known ServingStatus");
            tx.send_replace((status, Instant::now()));
        }
    });
    rx
}

/// Waits until health reports `status` at or after `since`, and says when.
async fn health_became(
    health: &mut watch::Receiver<(ServingStatus, Instant)>,
    status: ServingStatus,
    since: Instant,
) -> Instant {
    let seen = tokio::time::timeout(WAIT_LIMIT, health.wait_for(|(s, at)| *s == status && *at >= since))
        .await
        .unwrap_or_else(|_| panic!("health never reported {status:?}"))
        .expect("the health follower runs");
    seen.1
}

/// Runs a blocking `pg_ctl` off the async threads.
async fn blocking(cluster: &Arc<PgCluster>, action: fn(&PgCluster)) {
    let cluster = cluster.clone();
    tokio::task::spawn_blocking(move || action(&cluster)).await.expect("pg_ctl does not panic");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crashes_under_load_lose_nothing_and_the_sidecar_recovers_by_itself() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    let cluster = Arc::new(tokio::task::spawn_blocking(|| PgCluster::start(&[])).await.expect("start a cluster"));
    let store = TestStore::on(Database::Postgres { url: fresh_database_on(&cluster.url()).await });
    let mut server = SidecarProcess::builder(STEPWELL, &store).name("outage").spawn().await;
    let mut health = follow_health(&server).await;
    let socket = server.socket_path().to_owned();
    let history = Arc::new(History::default());
    let workload = Workload::start(profile.writers, seed, &history, || lazy_unix_channel(&socket));

    let (mut noticed, mut recovered, mut downtime) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..profile.outages {
        // The fault schedule: how long Postgres is up, then down.
        tokio::time::sleep(rng.millis(200, 1000)).await;
        let stopped = Instant::now();
        blocking(&cluster, PgCluster::stop_immediate).await;
        let not_serving = health_became(&mut health, ServingStatus::NotServing, stopped).await;
        tokio::time::sleep(rng.millis(100, 1000)).await;
        let returned = Instant::now();
        blocking(&cluster, PgCluster::start_again).await;
        let returned_at = Instant::now();
        let serving = health_became(&mut health, ServingStatus::Serving, returned).await;
        // The sidecar noticed when a client first heard of it, or when its own
        // health check did, whichever came first.
        let first_failure = history.first_failure_after(stopped).unwrap_or(not_serving).min(not_serving);
        noticed.push(not_serving.duration_since(first_failure));
        recovered.push(serving.saturating_duration_since(returned_at));
        downtime.push(serving.duration_since(stopped));
        history.window(stopped, serving);
    }
    // The last round's writes go on for a moment after the last recovery.
    tokio::time::sleep(Duration::from_millis(300)).await;
    workload.stop().await;
    assert!(server.is_running(), "the sidecar served through every outage without a restart");

    let (notice_p50, notice_p99, notice_max) = quantiles(&noticed);
    let (back_p50, back_p99, back_max) = quantiles(&recovered);
    let figures = json!({
        "outages": recovered.len(),
        "not_serving_after_notice_ms": { "p50": notice_p50.round(), "p99": notice_p99.round(), "max": notice_max.round() },
        "serving_after_postgres_returned_ms": { "p50": back_p50.round(), "p99": back_p99.round(), "max": back_max.round() },
        "not_serving_within_1s": notice_max <= 1000.0,
        "serving_within_5s": back_max <= 5000.0,
        "outage_ms": quantiles(&downtime).1.round(),
    });
    settle_and_assert_clean("postgres outage", seed, server.channel(), &history, figures).await;
    let codes = history.error_codes();
    assert!(
        codes.keys().all(|code| code == "Unavailable" || code == "Aborted"),
        "clients hear UNAVAILABLE (or, for a holder whose lease ran out meanwhile, LEASE_LOST), nothing else: {codes:?}"
    );
}
