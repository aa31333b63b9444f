//! IdempotencyService end to end, over real gRPC on a real store, one topic
//! a module: who acquires and the life cycle through Complete and Release
//! (`life_cycle`), expiry, takeover and Extend (`lease`), calls that find no
//! lease to act on (`refusals`), what Get reports (`get`), fingerprints,
//! namespaces and how keys compare (`keys`), retention and the sweeper
//! (`retention`), invalid input and values at each limit (`limits`), and
//! recorded results surviving a SIGKILL of the real binary (`durability`).
//! Leases and retention are crossed by moving the store's clock, never by
//! sleeping. This module holds what they share: the reasons, one request to
//! any RPC (`Call`), and calls that must succeed or be refused.

mod durability;
mod get;
mod keys;
mod lease;
mod life_cycle;
mod limits;
mod refusals;
mod retention;

use std::time::Duration;

use stepwell::api::pb::{
    BeginOutcome, BeginRequest, BeginResponse, CompleteRequest, ExtendRequest, GetRequest, GetResponse, RecordState,
    ReleaseRequest,
};
use stepwell::config::sections::Config;
use stepwell::domain::clock::Clock;
use tonic::{Code, Status};

use stepwell_test_support::IdempotencyClient;
use stepwell_test_support::backend::Inspector;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{complete, extend, get, release};
use stepwell_test_support::sidecar::Sidecar;

/// The key most tests use: the shape the contract suggests.
const KEY: &str = "turn-1/charge-card";

const KEY_REUSED: &str = "KEY_REUSED";
const LEASE_LOST: &str = "LEASE_LOST";
const NOT_ACQUIRED: &str = "NOT_ACQUIRED";
const RESULT_MISMATCH: &str = "RESULT_MISMATCH";
const KEY_NOT_FOUND: &str = "KEY_NOT_FOUND";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Nanoseconds in `d`, to compare with differences of returned timestamps.
fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).expect("a test duration fits i64 nanoseconds")
}

/// A server whose store clock the test moves, configured further by `configure`.
async fn start_on_clock(configure: impl FnOnce(&mut Config)) -> (Sidecar, Clock) {
    let clock = Clock::system();
    let server = Sidecar::builder()
        .configure(|config| {
            config.store.clock = clock.clone();
            configure(config);
        })
        .start()
        .await;
    (server, clock)
}

/// One request to any IdempotencyService RPC, so that lists of requests can
/// be sent and checked alike.
#[derive(Debug, Clone)]
enum Call {
    Begin(BeginRequest),
    Complete(CompleteRequest),
    Release(ReleaseRequest),
    Extend(ExtendRequest),
    Get(GetRequest),
}

impl Call {
    async fn send(self, client: &mut IdempotencyClient) -> Result<(), Status> {
        match self {
            Call::Begin(r) => client.begin(r).await.map(drop),
            Call::Complete(r) => client.complete(r).await.map(drop),
            Call::Release(r) => client.release(r).await.map(drop),
            Call::Extend(r) => client.extend(r).await.map(drop),
            Call::Get(r) => client.get(r).await.map(drop),
        }
    }
}

/// Every call a holder of `lease_token` might make on `key`.
fn holder_calls(key: &str, lease_token: u64) -> Vec<Call> {
    vec![
        Call::Complete(complete(key, lease_token, b"result")),
        Call::Extend(extend(key, lease_token, secs(10))),
        Call::Release(release(key, lease_token, false, "")),
        Call::Release(release(key, lease_token, true, "gave up")),
    ]
}

/// Sends `call`, which must fail with `code` and ErrorInfo `reason`.
async fn assert_refused(client: &mut IdempotencyClient, call: Call, code: Code, reason: &str) {
    let label = format!("{call:?}");
    let status = call.send(client).await.err().unwrap_or_else(|| panic!("{label}: accepted, expected {reason}"));
    assert_error(&status, code, reason);
}

/// Sends every call, each of which must fail with `code` and `reason`, and
/// asserts that none of them changed the record of `key`.
async fn assert_all_refused(client: &mut IdempotencyClient, key: &str, calls: Vec<Call>, code: Code, reason: &str) {
    let before = record(client, key).await;
    for call in calls {
        assert_refused(client, call, code, reason).await;
    }
    assert_eq!(record(client, key).await, before, "the refused calls changed nothing");
}

/// Begin, which must succeed; the outcome is for the caller to check.
async fn begin_ok(client: &mut IdempotencyClient, request: BeginRequest) -> BeginResponse {
    client.begin(request).await.expect("Begin succeeds").into_inner()
}

/// Begin, asserting that it acquires the lease (with a token and an expiry).
async fn assert_acquired(client: &mut IdempotencyClient, request: BeginRequest) -> BeginResponse {
    let response = begin_ok(client, request).await;
    assert_eq!(response.outcome(), BeginOutcome::Acquired, "{response:?}");
    assert!(response.lease_token > 0 && response.lease_expires_at.is_some(), "{response:?}");
    response
}

/// Complete, which must succeed; returns `completed_at`.
async fn complete_ok(client: &mut IdempotencyClient, request: CompleteRequest) -> prost_types::Timestamp {
    let response = client.complete(request).await.expect("Complete succeeds").into_inner();
    response.completed_at.expect("completed_at is set")
}

/// Release, which must succeed; returns the record's state after it.
async fn release_ok(client: &mut IdempotencyClient, request: ReleaseRequest) -> RecordState {
    client.release(request).await.expect("Release succeeds").into_inner().state()
}

/// Extend, which must succeed; returns the new `lease_expires_at`.
async fn extend_ok(client: &mut IdempotencyClient, request: ExtendRequest) -> prost_types::Timestamp {
    let response = client.extend(request).await.expect("Extend succeeds").into_inner();
    response.lease_expires_at.expect("lease_expires_at is set")
}

/// The record of `key` in the default namespace, which must exist.
async fn record(client: &mut IdempotencyClient, key: &str) -> GetResponse {
    read(client, get(key)).await
}

/// The record `request` names, which must exist.
async fn read(client: &mut IdempotencyClient, request: GetRequest) -> GetResponse {
    client.get(request).await.expect("Get finds the record").into_inner()
}

/// How many idempotency rows the store holds.
async fn stored_count(store: &Inspector) -> i64 {
    store.count("idempotency").await
}
