//! IdempotencyService end to end, over real gRPC on a real SQLite file: the
//! lease and its fencing token (exactly one of many concurrent Begins
//! acquires, a stale holder is refused once another took over), the life
//! cycle through Complete, Release and Extend, what Get reports, fingerprints,
//! namespaces, retention and the sweeper, a table of invalid input, and
//! recorded results surviving a SIGKILL of the real binary. Leases and
//! retention are crossed by moving the store's clock, never by sleeping.

use std::sync::Arc;
use std::time::Duration;

use stepwell::api::pb::{
    BeginOutcome, BeginRequest, BeginResponse, CompleteRequest, ExtendRequest, GetRequest, GetResponse, RecordState,
    ReleaseRequest,
};
use stepwell::clock::Clock;
use stepwell::config::{Config, Sweep};
use tokio::sync::Barrier;
use tonic::{Code, Status};

use crate::backend::{Inspector, TestStore};
use crate::harness::{ChildServer, IdempotencyClient, TestServer, WAIT_LIMIT};
use crate::support::{Rejection, assert_error, begin, begin_leased, complete, duration, extend, get, nanos, release};

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
async fn start_on_clock(configure: impl FnOnce(&mut Config)) -> (TestServer, Clock) {
    let clock = Clock::system();
    let server = TestServer::start_with(|config| {
        config.clock = clock.clone();
        configure(config);
    })
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

/// Begin, which must acquire the lease.
async fn acquire(client: &mut IdempotencyClient, request: BeginRequest) -> BeginResponse {
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

// Acquisition and the life cycle.

const CALLERS: usize = 200;

/// Sends `CALLERS` concurrent Begins for the new `key`, spread over
/// `clients` in turn, and asserts that exactly one acquires while every
/// other sees the winner's lease in progress.
async fn assert_exactly_one_acquires(clients: &[IdempotencyClient], key: &str) {
    // The barrier lets every caller go at once, so that the Begins overlap.
    let barrier = Arc::new(Barrier::new(CALLERS));
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (mut client, barrier, request) = (clients[i % clients.len()].clone(), barrier.clone(), begin(key));
            tokio::spawn(async move {
                barrier.wait().await;
                client.begin(request).await.map(tonic::Response::into_inner)
            })
        })
        .collect();
    let mut responses = Vec::with_capacity(CALLERS);
    for caller in callers {
        responses.push(caller.await.expect("a caller does not panic").expect("Begin succeeds"));
    }

    let (winners, others): (Vec<_>, Vec<_>) =
        responses.into_iter().partition(|r| r.outcome() == BeginOutcome::Acquired);
    assert_eq!(winners.len(), 1, "exactly one Begin acquires: {winners:?}");
    let winner = &winners[0];
    assert_eq!(winner.attempt, 1, "{winner:?}");
    assert_eq!(others.len(), CALLERS - 1);
    for other in &others {
        assert_eq!(other.outcome(), BeginOutcome::InProgress, "{other:?}");
        assert_eq!(other.lease_expires_at, winner.lease_expires_at, "the winner's lease: {other:?}");
        assert_eq!((other.attempt, other.lease_token), (1, 0), "the winner's attempt and no token: {other:?}");
    }
    for client in clients {
        let stored = record(&mut client.clone(), key).await;
        assert_eq!((stored.state(), stored.attempt), (RecordState::InProgress, 1));
        assert_eq!(stored.lease_expires_at, winner.lease_expires_at);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_200_concurrent_begins_on_a_new_key_exactly_one_acquires() {
    let server = TestServer::start().await;
    assert_exactly_one_acquires(&[server.idempotency()], KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_begins_through_two_sidecars_sharing_a_store_exactly_one_acquires() {
    let first = TestServer::start().await;
    let second = first.start_beside().await;
    let clients = [first.idempotency(), second.idempotency()];
    // Only the first Begins on each sidecar can race, so the race is run
    // on several keys to make a lost one likely to show.
    for round in 0..10 {
        assert_exactly_one_acquires(&clients, &format!("{KEY}/{round}")).await;
    }
}

#[tokio::test]
async fn a_completed_key_answers_its_result_to_every_later_begin() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    // Bytes that are not UTF-8 must come back unchanged, and so must nothing.
    let results: [(&str, &[u8]); 2] = [("bytes", b"receipt\x00\xff\xfe#42"), ("empty", b"")];
    for (key, result) in results {
        let held = acquire(&mut client, begin(key)).await;
        complete_ok(&mut client, complete(key, held.lease_token, result)).await;
        for _ in 0..3 {
            let answer = begin_ok(&mut client, begin(key)).await;
            assert_eq!(answer.outcome(), BeginOutcome::Completed, "{key}: {answer:?}");
            assert_eq!(answer.result, result, "{key}: the recorded result, byte for byte");
            assert_eq!((answer.attempt, answer.lease_token), (1, 0), "{key}: no new attempt and no token");
        }
    }
}

#[tokio::test]
async fn a_released_key_is_acquired_again_with_a_greater_token() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let first = acquire(&mut client, begin(KEY)).await;
    let state = release_ok(&mut client, release(KEY, first.lease_token, false, "bank timed out")).await;
    assert_eq!(state, RecordState::Released);

    let second = acquire(&mut client, begin(KEY)).await;
    assert_eq!(second.attempt, 2, "{second:?}");
    assert!(!second.previous_lease_expired, "the first holder gave the key back: {second:?}");
    assert!(second.lease_token > first.lease_token, "{second:?} after {first:?}");
    // The first holder's token no longer holds the key.
    let late = Call::Complete(complete(KEY, first.lease_token, b"late"));
    assert_all_refused(&mut client, KEY, vec![late], Code::Aborted, LEASE_LOST).await;
}

#[tokio::test]
async fn a_permanent_release_records_the_failure_for_every_later_begin() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let held = acquire(&mut client, begin(KEY)).await;
    let state = release_ok(&mut client, release(KEY, held.lease_token, true, "card declined")).await;
    assert_eq!(state, RecordState::Failed);
    for _ in 0..2 {
        let answer = begin_ok(&mut client, begin(KEY)).await;
        assert_eq!(answer.outcome(), BeginOutcome::Failed, "{answer:?}");
        assert_eq!(answer.error, "card declined");
        assert_eq!((answer.attempt, answer.lease_token), (1, 0), "no new attempt and no token");
    }
}

// Expiry, takeover and Extend, on the injected clock.

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_stale_holder_is_fenced_off() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let stale = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(11));

    let taker = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    assert_eq!(taker.attempt, 2, "{taker:?}");
    assert!(taker.lease_token > stale.lease_token, "{taker:?} after {stale:?}");
    assert!(taker.previous_lease_expired, "the effect may have happened: {taker:?}");
    assert!(nanos(taker.lease_expires_at) > nanos(stale.lease_expires_at), "{taker:?} after {stale:?}");

    let stale_calls = holder_calls(KEY, stale.lease_token);
    assert_all_refused(&mut client, KEY, stale_calls, Code::Aborted, LEASE_LOST).await;

    complete_ok(&mut client, complete(KEY, taker.lease_token, b"the taker's result")).await;
    let answer = begin_ok(&mut client, begin(KEY)).await;
    assert_eq!(answer.outcome(), BeginOutcome::Completed, "{answer:?}");
    assert_eq!(answer.result, b"the taker's result");
    assert_eq!(answer.attempt, 2);
    // The token is checked before the state, so the stale holder still
    // learns that it lost the lease, not merely that the key is finished.
    let stale_complete = Call::Complete(complete(KEY, stale.lease_token, b"stale"));
    assert_all_refused(&mut client, KEY, vec![stale_complete], Code::Aborted, LEASE_LOST).await;
}

#[tokio::test]
async fn a_holder_whose_lease_ran_out_may_complete_while_no_one_took_over() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let held = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(11));
    assert_eq!(record(&mut client, KEY).await.state(), RecordState::Expired);

    complete_ok(&mut client, complete(KEY, held.lease_token, b"late but first")).await;
    let answer = begin_ok(&mut client, begin(KEY)).await;
    assert_eq!(answer.outcome(), BeginOutcome::Completed, "{answer:?}");
    assert_eq!((answer.result.as_slice(), answer.attempt), (&b"late but first"[..], 1));
}

#[tokio::test]
async fn extend_keeps_a_lease_alive_past_its_original_expiry() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let held = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(8));
    let extended = extend_ok(&mut client, extend(KEY, held.lease_token, secs(10))).await;
    // Counted from the Extend, at least 8 s after the Begin.
    assert!(nanos(Some(extended)) - nanos(held.lease_expires_at) >= ns(secs(8)), "{extended:?} after {held:?}");

    // Now past the original expiry, but not the extended one.
    clock.advance(secs(8));
    let answer = begin_ok(&mut client, begin(KEY)).await;
    assert_eq!(answer.outcome(), BeginOutcome::InProgress, "{answer:?}");
    assert_eq!(answer.lease_expires_at, Some(extended));
    let stored = record(&mut client, KEY).await;
    assert_eq!((stored.state(), stored.lease_expires_at), (RecordState::InProgress, Some(extended)));
    complete_ok(&mut client, complete(KEY, held.lease_token, b"done")).await;
}

#[tokio::test]
async fn extend_is_refused_once_the_lease_ran_out_or_was_taken_over() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let first = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(11));
    // A refused Extend must not revive the expired lease.
    let late = || vec![Call::Extend(extend(KEY, first.lease_token, secs(10)))];
    assert_all_refused(&mut client, KEY, late(), Code::Aborted, LEASE_LOST).await;
    assert_eq!(record(&mut client, KEY).await.state(), RecordState::Expired);

    let taker = acquire(&mut client, begin_leased(KEY, secs(10))).await;
    assert_eq!((taker.attempt, taker.previous_lease_expired), (2, true), "{taker:?}");
    assert_all_refused(&mut client, KEY, late(), Code::Aborted, LEASE_LOST).await;
    extend_ok(&mut client, extend(KEY, taker.lease_token, secs(10))).await;
}

#[tokio::test]
async fn unset_lease_and_retention_take_the_contract_defaults() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let held = acquire(&mut client, begin(KEY)).await;
    let stored = record(&mut client, KEY).await;
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.created_at), ns(secs(30)), "{stored:?}");

    let unset = ExtendRequest { lease: None, ..extend(KEY, held.lease_token, secs(1)) };
    extend_ok(&mut client, unset).await;
    let stored = record(&mut client, KEY).await;
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.updated_at), ns(secs(30)), "{stored:?}");

    complete_ok(&mut client, complete(KEY, held.lease_token, b"done")).await;
    let stored = record(&mut client, KEY).await;
    assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(secs(7 * 24 * 3600)), "{stored:?}");
}

// Calls that find no lease to act on.

#[tokio::test]
async fn a_finished_key_refuses_the_calls_of_its_last_holder() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();

    let held = acquire(&mut client, begin("completed")).await;
    let completed_at = complete_ok(&mut client, complete("completed", held.lease_token, b"ok")).await;
    let mut calls = holder_calls("completed", held.lease_token);
    // A Complete by the same token is the idempotent repeat, checked below.
    calls.retain(|call| !matches!(call, Call::Complete(_)));
    assert_all_refused(&mut client, "completed", calls, Code::FailedPrecondition, NOT_ACQUIRED).await;
    let repeat = complete_ok(&mut client, complete("completed", held.lease_token, b"ok")).await;
    assert_eq!(repeat, completed_at, "the repeat answers the first completion's time");
    let different = vec![Call::Complete(complete("completed", held.lease_token, b"not ok"))];
    assert_all_refused(&mut client, "completed", different, Code::AlreadyExists, RESULT_MISMATCH).await;
    assert_eq!(record(&mut client, "completed").await.result, b"ok");

    for (key, permanent) in [("failed", true), ("released", false)] {
        let held = acquire(&mut client, begin(key)).await;
        release_ok(&mut client, release(key, held.lease_token, permanent, "declined")).await;
        let calls = holder_calls(key, held.lease_token);
        assert_all_refused(&mut client, key, calls, Code::FailedPrecondition, NOT_ACQUIRED).await;
    }
}

#[tokio::test]
async fn calls_on_a_key_without_a_record_are_not_acquired() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let other = acquire(&mut client, begin("other")).await;
    // Neither a token issued for another key nor one never issued holds the key.
    for token in [other.lease_token, u64::MAX] {
        for call in holder_calls("unknown", token) {
            assert_refused(&mut client, call, Code::FailedPrecondition, NOT_ACQUIRED).await;
        }
    }
    assert_refused(&mut client, Call::Get(get("unknown")), Code::NotFound, KEY_NOT_FOUND).await;
    // On a held key, a token never issued is a lost lease.
    let never_issued = holder_calls("other", u64::MAX);
    assert_all_refused(&mut client, "other", never_issued, Code::Aborted, LEASE_LOST).await;
}

// Get, fingerprints and namespaces.

#[tokio::test]
async fn get_reports_every_state_without_acquiring_anything() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let request = |key: &str| BeginRequest {
        fingerprint: b"fp".to_vec(),
        retention: Some(duration(secs(60))),
        ..begin_leased(key, secs(10))
    };

    let leased = acquire(&mut client, request("in-progress")).await;
    let stored = record(&mut client, "in-progress").await;
    assert_eq!((stored.state(), stored.attempt), (RecordState::InProgress, 1), "{stored:?}");
    assert_eq!(stored.lease_expires_at, leased.lease_expires_at);
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.created_at), ns(secs(10)), "{stored:?}");
    assert_eq!(stored.updated_at, stored.created_at);
    assert_eq!(stored.retained_until, None, "a held lease has no retention yet: {stored:?}");
    assert_eq!(stored.fingerprint, b"fp");

    let held = acquire(&mut client, request("completed")).await;
    let completed_at = complete_ok(&mut client, complete("completed", held.lease_token, b"receipt")).await;
    let stored = record(&mut client, "completed").await;
    assert_eq!((stored.state(), stored.result.as_slice()), (RecordState::Completed, &b"receipt"[..]), "{stored:?}");
    assert_eq!(stored.updated_at, Some(completed_at));
    assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(secs(60)), "{stored:?}");
    assert_eq!(stored.lease_expires_at, None, "{stored:?}");

    for (key, permanent, state) in [("failed", true, RecordState::Failed), ("released", false, RecordState::Released)] {
        let held = acquire(&mut client, request(key)).await;
        release_ok(&mut client, release(key, held.lease_token, permanent, "card declined")).await;
        let stored = record(&mut client, key).await;
        assert_eq!(stored.state(), state, "{stored:?}");
        assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(secs(60)), "{stored:?}");
        if permanent {
            assert_eq!(stored.error, "card declined");
        }
    }

    assert_refused(&mut client, Call::Get(get("unknown")), Code::NotFound, KEY_NOT_FOUND).await;
    // The reads took nothing: the unknown key is still new, the lease still held.
    let fresh = acquire(&mut client, begin("unknown")).await;
    assert_eq!(fresh.attempt, 1);
    assert_eq!(begin_ok(&mut client, begin("in-progress")).await.outcome(), BeginOutcome::InProgress);

    clock.advance(secs(11));
    let stored = record(&mut client, "in-progress").await;
    assert_eq!((stored.state(), stored.attempt), (RecordState::Expired, 1), "{stored:?}");
    assert_eq!(stored.lease_expires_at, leased.lease_expires_at);
    // Reading the expired record did not take it over either.
    let taker = acquire(&mut client, request("in-progress")).await;
    assert_eq!((taker.attempt, taker.previous_lease_expired), (2, true), "{taker:?}");
}

#[tokio::test]
async fn a_key_begun_with_one_fingerprint_refuses_another() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let with = |key: &str, fingerprint: &[u8]| BeginRequest { fingerprint: fingerprint.to_vec(), ..begin(key) };

    let held = acquire(&mut client, with(KEY, b"A")).await;
    let reuse = || vec![Call::Begin(with(KEY, b"B"))];
    assert_all_refused(&mut client, KEY, reuse(), Code::FailedPrecondition, KEY_REUSED).await;
    for same_or_none in [with(KEY, b"A"), begin(KEY)] {
        assert_eq!(begin_ok(&mut client, same_or_none).await.outcome(), BeginOutcome::InProgress);
    }
    complete_ok(&mut client, complete(KEY, held.lease_token, b"done")).await;
    assert_all_refused(&mut client, KEY, reuse(), Code::FailedPrecondition, KEY_REUSED).await;
    for same_or_none in [with(KEY, b"A"), begin(KEY)] {
        assert_eq!(begin_ok(&mut client, same_or_none).await.result, b"done");
    }

    // A new attempt that gives no fingerprint keeps the recorded one.
    let first = acquire(&mut client, with("retried", b"A")).await;
    release_ok(&mut client, release("retried", first.lease_token, false, "")).await;
    acquire(&mut client, begin("retried")).await;
    assert_eq!(record(&mut client, "retried").await.fingerprint, b"A");
    let reuse = vec![Call::Begin(with("retried", b"B"))];
    assert_all_refused(&mut client, "retried", reuse, Code::FailedPrecondition, KEY_REUSED).await;
}

#[tokio::test]
async fn the_same_key_in_two_namespaces_is_two_records() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    let tenants = ["tenant-a", "tenant-b"];
    let mut tokens = Vec::new();
    for namespace in tenants {
        let held = acquire(&mut client, BeginRequest { namespace: namespace.into(), ..begin(KEY) }).await;
        assert_eq!(held.attempt, 1, "{namespace}: a record of its own");
        tokens.push(held.lease_token);
    }
    // A token holds only its own namespace's record.
    let crossed = CompleteRequest { namespace: "tenant-b".into(), ..complete(KEY, tokens[0], b"a") };
    assert_refused(&mut client, Call::Complete(crossed), Code::Aborted, LEASE_LOST).await;

    for (namespace, token) in tenants.into_iter().zip(tokens) {
        let done = CompleteRequest { namespace: namespace.into(), ..complete(KEY, token, namespace.as_bytes()) };
        complete_ok(&mut client, done).await;
    }
    for namespace in tenants {
        let answer = begin_ok(&mut client, BeginRequest { namespace: namespace.into(), ..begin(KEY) }).await;
        assert_eq!(answer.result, namespace.as_bytes(), "{namespace}: its own result");
    }

    // Neither is in the default namespace, which an empty namespace names.
    assert_refused(&mut client, Call::Get(get(KEY)), Code::NotFound, KEY_NOT_FOUND).await;
    let default = acquire(&mut client, begin(KEY)).await;
    let stored = read(&mut client, GetRequest { namespace: "default".into(), ..get(KEY) }).await;
    assert_eq!((stored.state(), stored.lease_expires_at), (RecordState::InProgress, default.lease_expires_at));
}

#[tokio::test]
async fn keys_are_compared_byte_for_byte() {
    let server = TestServer::start().await;
    let mut client = server.idempotency();
    // Keys that a case-insensitive, trimming or normalising comparison
    // would merge, and one that would break a query built from text.
    let keys = ["step", "Step", "step ", " step", "café", "cafe\u{301}", "step/1", "x' OR '1'='1"];
    for key in keys {
        let held = acquire(&mut client, begin(key)).await;
        assert_eq!(held.attempt, 1, "{key:?}: a record of its own");
        complete_ok(&mut client, complete(key, held.lease_token, key.as_bytes())).await;
    }
    for key in keys {
        assert_eq!(begin_ok(&mut client, begin(key)).await.result, key.as_bytes(), "{key:?}");
    }
}

// Retention and the sweeper.

#[tokio::test]
async fn a_key_past_its_retention_behaves_as_new() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let request = |key: &str, fingerprint: &[u8]| BeginRequest {
        fingerprint: fingerprint.to_vec(),
        retention: Some(duration(secs(60))),
        ..begin(key)
    };
    let completed = acquire(&mut client, request("completed", b"A")).await;
    complete_ok(&mut client, complete("completed", completed.lease_token, b"done")).await;
    let failed = acquire(&mut client, request("failed", b"A")).await;
    release_ok(&mut client, release("failed", failed.lease_token, true, "declined")).await;

    // Retention counts from the end of the operation: not yet over.
    clock.advance(secs(59));
    assert_eq!(begin_ok(&mut client, request("completed", b"A")).await.outcome(), BeginOutcome::Completed);
    assert_eq!(begin_ok(&mut client, request("failed", b"A")).await.outcome(), BeginOutcome::Failed);

    clock.advance(secs(2));
    let mut newest = failed.lease_token;
    for key in ["completed", "failed"] {
        assert_refused(&mut client, Call::Get(get(key)), Code::NotFound, KEY_NOT_FOUND).await;
        // Another fingerprint is no reuse: the old record is gone.
        let again = acquire(&mut client, request(key, b"B")).await;
        assert_eq!((again.attempt, again.previous_lease_expired), (1, false), "{key}: {again:?}");
        assert!(again.lease_token > newest, "{key}: tokens are never reused: {again:?}");
        newest = again.lease_token;
    }
    // The holder from before the purge does not hold the new record.
    let old = vec![Call::Complete(complete("completed", completed.lease_token, b"done"))];
    assert_all_refused(&mut client, "completed", old, Code::Aborted, LEASE_LOST).await;
}

/// The keys physically stored, in order.
async fn stored_keys(store: &Inspector) -> Vec<String> {
    store.idempotency_keys().await
}

/// How many idempotency rows the store holds.
async fn stored_count(store: &Inspector) -> i64 {
    store.count("idempotency").await
}

#[tokio::test]
async fn the_sweeper_deletes_records_past_their_retention_in_batches() {
    let sweep = Sweep { interval: Duration::from_millis(10), batch_max: 2 };
    let (server, clock) = start_on_clock(|config| config.sweep = sweep).await;
    let mut client = server.idempotency();
    let short = |key: &str| BeginRequest { retention: Some(duration(secs(10))), ..begin(key) };
    for i in 0..5 {
        let key = format!("short-{i}");
        let held = acquire(&mut client, short(&key)).await;
        complete_ok(&mut client, complete(&key, held.lease_token, b"done")).await;
    }
    // Kept: a record whose retention has not run out, and a live lease,
    // whose retention only starts when the lease ends.
    let kept = acquire(&mut client, begin("kept")).await;
    complete_ok(&mut client, complete("kept", kept.lease_token, b"done")).await;
    acquire(&mut client, BeginRequest { lease: Some(duration(secs(60))), ..short("leased") }).await;

    let store = server.inspect_store().await;
    assert_eq!(stored_count(&store).await, 7);
    clock.advance(secs(11));
    // Five rows take three passes of two; polling is bounded by WAIT_LIMIT.
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while stored_count(&store).await > 2 {
        assert!(tokio::time::Instant::now() < deadline, "not swept: {:?}", stored_keys(&store).await);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(stored_keys(&store).await, ["kept", "leased"]);
    assert_eq!(record(&mut client, "kept").await.state(), RecordState::Completed);
    assert_eq!(record(&mut client, "leased").await.state(), RecordState::InProgress);
}

// Invalid input.

/// The limits of the validation server: small, so that they are cheap to reach.
const RESULT_MAX: usize = 1024;
const LEASE_MAX: Duration = Duration::from_secs(120);
const RETENTION_MAX: Duration = Duration::from_secs(3600);
/// The contract's limit on a Release's error.
const ERROR_MAX: usize = 16 * 1024;

async fn start_with_small_limits() -> TestServer {
    TestServer::start_with(|config| {
        config.limits.result_bytes_max = RESULT_MAX;
        config.limits.lease_max = LEASE_MAX;
        config.limits.retention_max = RETENTION_MAX;
    })
    .await
}

const REQUIRED: &str = "FIELD_REQUIRED";
const TOO_LONG: &str = "FIELD_TOO_LONG";
const MALFORMED: &str = "FIELD_MALFORMED";
const OUT_OF_RANGE: &str = "FIELD_OUT_OF_RANGE";

/// A duration from raw protobuf fields, which may be out of range.
fn raw(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

/// `request` with one change.
fn changed<R>(mut request: R, change: fn(&mut R)) -> R {
    change(&mut request);
    request
}

struct Case {
    name: &'static str,
    call: Call,
    field: &'static str,
    reason: &'static str,
}

fn case(name: &'static str, call: Call, field: &'static str, reason: &'static str) -> Case {
    Case { name, call, field, reason }
}

/// The key Begin cases name: it must stay without a record.
const NEW: &str = "new";
/// The key Complete, Release and Extend cases name, held by the table's
/// test, so that a check that let a bad request through would change it.
const HELD: &str = "held";

fn bad_inputs(token: u64) -> Vec<Case> {
    let begin_with = |change: fn(&mut BeginRequest)| Call::Begin(changed(begin(NEW), change));
    let complete_with =
        |change: fn(&mut CompleteRequest)| Call::Complete(changed(complete(HELD, token, b"ok"), change));
    let release_with =
        |change: fn(&mut ReleaseRequest)| Call::Release(changed(release(HELD, token, true, "declined"), change));
    let extend_with = |change: fn(&mut ExtendRequest)| Call::Extend(changed(extend(HELD, token, secs(10)), change));
    let get_with = |change: fn(&mut GetRequest)| Call::Get(changed(get(HELD), change));
    vec![
        // Begin: the key.
        case("key missing", begin_with(|r| r.key.clear()), "key", REQUIRED),
        case("key 513 bytes", begin_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("key 513 bytes of 2-byte chars", begin_with(|r| r.key = format!("k{}", "é".repeat(256))), "key", TOO_LONG),
        case("key with NUL", begin_with(|r| r.key = "a\0b".into()), "key", MALFORMED),
        case("key with a newline", begin_with(|r| r.key = "a\nb".into()), "key", MALFORMED),
        case("key with DEL", begin_with(|r| r.key = "a\u{7f}".into()), "key", MALFORMED),
        case("key with a C1 control", begin_with(|r| r.key = "a\u{85}".into()), "key", MALFORMED),
        // Begin: the namespace.
        case("namespace uppercase", begin_with(|r| r.namespace = "Tenant".into()), "namespace", MALFORMED),
        case("namespace leading dash", begin_with(|r| r.namespace = "-tenant".into()), "namespace", MALFORMED),
        case("namespace with a slash", begin_with(|r| r.namespace = "a/b".into()), "namespace", MALFORMED),
        case("namespace 64 bytes", begin_with(|r| r.namespace = "n".repeat(64)), "namespace", TOO_LONG),
        // Begin: lease and retention.
        case("lease 0", begin_with(|r| r.lease = raw(0, 0)), "lease", OUT_OF_RANGE),
        case("lease negative", begin_with(|r| r.lease = raw(-1, 0)), "lease", OUT_OF_RANGE),
        case("lease negative nanos", begin_with(|r| r.lease = raw(0, -1)), "lease", OUT_OF_RANGE),
        case("lease nanos 1e9", begin_with(|r| r.lease = raw(1, 1_000_000_000)), "lease", OUT_OF_RANGE),
        case("lease 1 ns above the max", begin_with(|r| r.lease = raw(120, 1)), "lease", OUT_OF_RANGE),
        case("retention 0", begin_with(|r| r.retention = raw(0, 0)), "retention", OUT_OF_RANGE),
        case("retention negative", begin_with(|r| r.retention = raw(-60, 0)), "retention", OUT_OF_RANGE),
        case("retention 1 ns above the max", begin_with(|r| r.retention = raw(3600, 1)), "retention", OUT_OF_RANGE),
        case("fingerprint 257 bytes", begin_with(|r| r.fingerprint = vec![7; 257]), "fingerprint", TOO_LONG),
        // Complete.
        case("complete lease_token 0", complete_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("complete result 1 byte over", complete_with(|r| r.result = vec![1; RESULT_MAX + 1]), "result", TOO_LONG),
        case("complete key missing", complete_with(|r| r.key.clear()), "key", REQUIRED),
        case("complete key with a tab", complete_with(|r| r.key = "held\t".into()), "key", MALFORMED),
        case("complete namespace bad", complete_with(|r| r.namespace = "A".into()), "namespace", MALFORMED),
        // Release.
        case("release lease_token 0", release_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("release error 1 byte over", release_with(|r| r.error = "e".repeat(ERROR_MAX + 1)), "error", TOO_LONG),
        case(
            "release error over in 2-byte chars",
            release_with(|r| r.error = "é".repeat(ERROR_MAX / 2 + 1)),
            "error",
            TOO_LONG,
        ),
        case("release key 513 bytes", release_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("release namespace bad", release_with(|r| r.namespace = ".x".into()), "namespace", MALFORMED),
        // Extend.
        case("extend lease_token 0", extend_with(|r| r.lease_token = 0), "lease_token", REQUIRED),
        case("extend lease 0", extend_with(|r| r.lease = raw(0, 0)), "lease", OUT_OF_RANGE),
        case("extend lease negative", extend_with(|r| r.lease = raw(-10, 0)), "lease", OUT_OF_RANGE),
        case("extend lease nanos 1e9", extend_with(|r| r.lease = raw(0, 1_000_000_000)), "lease", OUT_OF_RANGE),
        case("extend lease 1 ns above the max", extend_with(|r| r.lease = raw(120, 1)), "lease", OUT_OF_RANGE),
        case("extend key missing", extend_with(|r| r.key.clear()), "key", REQUIRED),
        // Get.
        case("get key missing", get_with(|r| r.key.clear()), "key", REQUIRED),
        case("get key 513 bytes", get_with(|r| r.key = "k".repeat(513)), "key", TOO_LONG),
        case("get key with NUL", get_with(|r| r.key = "held\0".into()), "key", MALFORMED),
        case("get namespace bad", get_with(|r| r.namespace = "a b".into()), "namespace", MALFORMED),
    ]
}

#[tokio::test]
async fn every_bad_input_is_rejected_with_its_field_and_reason_and_stores_nothing() {
    let server = start_with_small_limits().await;
    let mut client = server.idempotency();
    let store = server.inspect_store().await;
    let held = acquire(&mut client, begin(HELD)).await;
    let before = record(&mut client, HELD).await;

    // Every case runs and every mismatch is reported, so that one failure
    // does not hide the next.
    let mut failures = Vec::new();
    for Case { name, call, field, reason } in bad_inputs(held.lease_token) {
        match call.send(&mut client).await {
            Ok(()) => failures.push(format!("{name}: accepted")),
            Err(status) => {
                let (got, expected) = (Rejection::of(&status), Rejection::invalid(field, reason));
                if got != expected {
                    failures.push(format!("{name}: got {got:?}, expected {expected:?} ({})", status.message()));
                }
            }
        }
        let (count, now) = (stored_count(&store).await, record(&mut client, HELD).await);
        if count != 1 || now != before {
            failures.push(format!("{name}: stored {count} records, the held one now {now:?}"));
        }
    }
    assert!(failures.is_empty(), "{} bad inputs mishandled:\n{}", failures.len(), failures.join("\n"));
}

#[tokio::test]
async fn values_exactly_at_each_limit_are_accepted() {
    let server = start_with_small_limits().await;
    let mut client = server.idempotency();

    let (namespace, key) = (format!("0{}zz", "a._-".repeat(15)), "é".repeat(256));
    assert_eq!((namespace.len(), key.len()), (63, 512));
    let begun = BeginRequest {
        namespace: namespace.clone(),
        key: key.clone(),
        fingerprint: vec![0xab; 256],
        lease: Some(duration(LEASE_MAX)),
        retention: Some(duration(RETENTION_MAX)),
    };
    let held = acquire(&mut client, begun.clone()).await;
    let lease_token = held.lease_token;
    let to_extend = ExtendRequest { namespace: namespace.clone(), key: key.clone(), lease_token, lease: None };
    extend_ok(&mut client, ExtendRequest { lease: Some(duration(LEASE_MAX)), ..to_extend }).await;
    let result = vec![0xcd; RESULT_MAX];
    complete_ok(
        &mut client,
        CompleteRequest { namespace: namespace.clone(), key: key.clone(), lease_token, result: result.clone() },
    )
    .await;
    let stored = read(&mut client, GetRequest { namespace, key }).await;
    assert_eq!(
        (stored.state(), &stored.result, &stored.fingerprint),
        (RecordState::Completed, &result, &begun.fingerprint)
    );
    assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(RETENTION_MAX));
    assert_eq!(begin_ok(&mut client, begun).await.result, result);

    // An error of exactly the limit, with a NUL and non-ASCII text, is
    // recorded as given.
    let error = format!("déclinée\0{}", "x".repeat(ERROR_MAX - 11));
    assert_eq!(error.len(), ERROR_MAX);
    let held = acquire(&mut client, begin("error")).await;
    release_ok(&mut client, release("error", held.lease_token, true, &error)).await;
    assert_eq!(begin_ok(&mut client, begin("error")).await.error, error);

    // The shortest lease there is.
    acquire(&mut client, begin_leased("brief", Duration::from_nanos(1))).await;
    let stored = record(&mut client, "brief").await;
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.created_at), 1);
}

// Durability.

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 25;

/// The result of a writer's i-th key: unique, of varied length, not UTF-8,
/// and empty for the very first, so that any re-encoding or truncation on
/// the way to disk would show.
fn durable_result(writer: usize, i: usize) -> Vec<u8> {
    if (writer, i) == (0, 0) {
        return Vec::new();
    }
    let mut result = format!("w{writer}/i{i}:").into_bytes();
    result.extend(std::iter::repeat_n(0xff - i as u8, i * 13));
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_keys_survive_sigkill() {
    use std::os::unix::process::ExitStatusExt;

    let store = TestStore::new().await;
    let server = ChildServer::spawn(&store).await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let mut client = server.idempotency();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..KEYS_PER_WRITER {
                    let (key, result) = (format!("turn-{writer}/step-{i}"), durable_result(writer, i));
                    let held = acquire(&mut client, begin(&key)).await;
                    complete_ok(&mut client, complete(&key, held.lease_token, &result)).await;
                    acknowledged.push((key, result, held.lease_token));
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("a writer does not panic"));
    }
    let status = server.kill().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the sidecar died by SIGKILL: {status:?}");

    let restarted = ChildServer::spawn(&store).await;
    let mut client = restarted.idempotency();
    assert_eq!(acknowledged.len(), WRITERS * KEYS_PER_WRITER);
    for (key, result, _) in &acknowledged {
        let answer = begin_ok(&mut client, begin(key)).await;
        assert_eq!(answer.outcome(), BeginOutcome::Completed, "{key}: {answer:?}");
        assert_eq!(&answer.result, result, "{key}: the result, byte for byte");
    }
    // The token sequence survived too: no token is handed out twice.
    let newest = acknowledged.iter().map(|(_, _, token)| *token).max().expect("tokens were issued");
    let fresh = acquire(&mut client, begin("after-restart")).await;
    assert!(fresh.lease_token > newest, "{fresh:?} after token {newest}");
}
