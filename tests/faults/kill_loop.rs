//! The kill loop: 32 writers (checkpoints, idempotent operations, record
//! puts, and waits with their timers, contended Signals and Awaits) run
//! while the real sidecar binary is killed with SIGKILL at random intervals
//! of 10 to 500 ms and restarted on the same store, 100 times per backend in
//! the CI profile and 1,000 in the long one. Nothing acknowledged may be
//! lost or duplicated; how long each restart takes to serve again is
//! reported. Once the run's timers have fired, the sidecar is killed and
//! restarted once more and every wait read again: a settled wait never
//! changes.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::channel::lazy_unix_channel;
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;
use crate::checker::History;
use crate::profile::{Profile, fault_rng, quantiles};
use crate::waits::read_waits;
use crate::workload::{Workload, assert_clean, settle};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loop_loses_and_duplicates_nothing() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    let store = TestStore::new().await;
    let mut server = SidecarProcess::builder(STEPWELL, &store).name("killed").spawn().await;
    let socket = server.socket_path().to_owned();
    let history = Arc::new(History::default());
    let workload = Workload::start(profile.writers, seed, &history, || lazy_unix_channel(&socket));

    let mut restarts = Vec::with_capacity(profile.kill_cycles);
    let started = Instant::now();
    for _ in 0..profile.kill_cycles {
        // The fault schedule, not a synchronisation: how long the sidecar lives.
        tokio::time::sleep(rng.millis(10, 500)).await;
        let killed = Instant::now();
        server.kill().await;
        let restarting = Instant::now();
        server = SidecarProcess::builder(STEPWELL, &store).name("killed").spawn().await;
        restarts.push(restarting.elapsed());
        history.window(killed, Instant::now());
    }
    let elapsed = started.elapsed();
    workload.stop().await;

    let (p50, p99, max) = quantiles(&restarts);
    let figures = json!({
        "cycles": restarts.len(),
        "seconds": elapsed.as_secs_f64().round(),
        "ready_after_restart_ms": { "p50": p50.round(), "p99": p99.round(), "max": max.round() },
        "ready_within_2s": max <= 2000.0,
    });
    let mut read = settle(server.channel(), &history).await;
    server.kill().await;
    let server = SidecarProcess::builder(STEPWELL, &store).name("killed").spawn().await;
    read.waits_again = Some(read_waits(server.channel()).await);
    assert_clean("kill loop", seed, &history, &read, figures);
}
