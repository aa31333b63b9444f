//! 10,000 pending Awaits on one sidecar (the real binary), each woken after
//! its Signal with its own payload. The test prints what it measured, the
//! wake latency (from sending a Signal to its Await's answer) at p50 and
//! p99 and the sidecar's resident memory before and with the Awaits
//! pending, and asserts only that every Await woke with the right payload:
//! timings on a shared machine are for reading, not for failing.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream;
use stepwell::api::pb::WaitStatus;
use stepwell_test_support::WaitClient;
use stepwell_test_support::admin::free_local_address;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::channel::connect;
use stepwell_test_support::sidecar::SidecarProcess;

use super::{await_for, create, signal, until_count};
use crate::STEPWELL;

const AWAITS: usize = 10_000;
/// Connections the Awaits share, each holding `AWAITS / CONNECTIONS` streams.
const CONNECTIONS: usize = 10;
/// Requests in flight at once while creating and signalling.
const IN_FLIGHT: usize = 200;

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the process's status");
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).expect("a VmRSS line");
    line.split_whitespace().nth(1).and_then(|kib| kib.parse().ok()).expect("VmRSS in kB")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1]
}

#[tokio::test]
async fn ten_thousand_pending_awaits_are_each_woken_with_their_signal() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&[
            "--connection-streams-max",
            "2000",
            "--connection-requests-max",
            "2000",
            // The first reads of a thousand Awaits arriving at once queue
            // for the pool; behind a pooler each read is four round trips,
            // and on a busy machine they may queue past the 2 s default.
            // The test is about the wakes, not that queue.
            "--pool-acquire-timeout-ms",
            "30000",
            "--log",
            "warn,stepwell::server::monitor=debug",
        ])
        .admin_listen(&admin)
        .stderr_to(store.dir().join("sidecar.log"))
        .spawn()
        .await;
    let mut clients = Vec::new();
    for _ in 0..CONNECTIONS {
        clients.push(WaitClient::new(connect(server.target()).await));
    }
    // Ten waits a turn, within --waits-per-turn-max.
    let turn = |i: usize| format!("t{:04}", i / 10);
    let name = |i: usize| format!("w{i:05}");
    stream::iter(0..AWAITS)
        .for_each_concurrent(IN_FLIGHT, |i| {
            let mut client = clients[i % CONNECTIONS].clone();
            async move {
                client.create_wait(create(&turn(i), &name(i))).await.expect("CreateWait");
            }
        })
        .await;
    let before = rss_kib(server.pid());
    let started = Instant::now();
    // The Awaits arrive a thousand at a time, so that their first reads do
    // not starve the other tests' sidecars sharing this machine.
    let mut awaits = Vec::with_capacity(AWAITS);
    for i in 0..AWAITS {
        let mut client = clients[i % CONNECTIONS].clone();
        let request = await_for(&turn(i), &name(i), Duration::from_secs(280));
        awaits.push(tokio::spawn(async move {
            let wait = client.r#await(request).await.expect("Await").into_inner().wait.expect("a wait");
            (wait, Instant::now())
        }));
        if (i + 1) % 1000 == 0 {
            until_count(&admin, "stepwell_awaits_pending", (i + 1) as f64, Duration::from_secs(120)).await;
        }
    }
    let pending = rss_kib(server.pid());
    println!("{AWAITS} Awaits pending after {:?}", started.elapsed());
    let log = store.dir().join("sidecar.log");
    let log_path = &log;
    let sent: Vec<(Instant, Instant)> = stream::iter(0..AWAITS)
        .map(|i| {
            let mut client = clients[i % CONNECTIONS].clone();
            async move {
                let sent = Instant::now();
                let signalled = client.signal(signal(&turn(i), &name(i), name(i).as_bytes())).await;
                if let Err(status) = signalled {
                    let log = std::fs::read_to_string(log_path).unwrap_or_default();
                    panic!("Signal: {status:?}; the sidecar's log:\n{log}");
                }
                (sent, Instant::now())
            }
        })
        .buffered(IN_FLIGHT)
        .collect()
        .await;
    // From the Signal sent (its queueing behind the other Signals in flight
    // included), and from its answer: the settlement committed, how long
    // after it the Await's answer came (0 when it came first).
    let (mut latencies, mut after_commit) = (Vec::with_capacity(AWAITS), Vec::with_capacity(AWAITS));
    for (i, (awaited, (sent, acked))) in awaits.into_iter().zip(sent).enumerate() {
        let (wait, woken) = awaited.await.expect("the Await task");
        assert_eq!(wait.status(), WaitStatus::Resolved, "{}", name(i));
        assert_eq!(wait.payload, name(i).as_bytes(), "each Await wakes with its own payload");
        latencies.push(woken.saturating_duration_since(sent));
        after_commit.push(woken.saturating_duration_since(acked));
    }
    latencies.sort();
    after_commit.sort();
    println!(
        "{AWAITS} Awaits on {CONNECTIONS} connections: Signal sent to wake p50 {:?}, p99 {:?}, max {:?}; \
         Signal answered to wake p50 {:?}, p99 {:?}; \
         sidecar RSS {before} KiB with the waits created, {pending} KiB with the Awaits pending \
         (+{} bytes an Await)",
        percentile(&latencies, 0.50),
        percentile(&latencies, 0.99),
        latencies.last().expect("latencies"),
        percentile(&after_commit, 0.50),
        percentile(&after_commit, 0.99),
        (pending.saturating_sub(before) * 1024) / AWAITS as u64,
    );
}
