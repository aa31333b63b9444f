//! Who acquires a key, and its life cycle: of many concurrent Begins exactly
//! one acquires (through one sidecar, and through two sharing a store); a
//! completed key answers its result, a released one is acquired again with a
//! greater token, and a permanent release records the failure.

use std::sync::Arc;

use stepwell::api::pb::{BeginOutcome, RecordState};
use stepwell_test_support::IdempotencyClient;
use stepwell_test_support::requests::{begin, complete, release};
use stepwell_test_support::sidecar::Sidecar;
use tokio::sync::Barrier;
use tonic::Code;

use super::{Call, KEY, LEASE_LOST, assert_acquired, assert_all_refused, begin_ok, complete_ok, record, release_ok};

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
    let server = Sidecar::builder().start().await;
    assert_exactly_one_acquires(&[server.idempotency()], KEY).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_begins_through_two_sidecars_sharing_a_store_exactly_one_acquires() {
    let first = Sidecar::builder().start().await;
    let second = Sidecar::builder().store(first.store()).start().await;
    let clients = [first.idempotency(), second.idempotency()];
    // Only the first Begins on each sidecar can race, so the race is run
    // on several keys to make a lost one likely to show.
    for round in 0..10 {
        assert_exactly_one_acquires(&clients, &format!("{KEY}/{round}")).await;
    }
}

#[tokio::test]
async fn a_completed_key_answers_its_result_to_every_later_begin() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    // Bytes that are not UTF-8 must come back unchanged, and so must nothing.
    let results: [(&str, &[u8]); 2] = [("bytes", b"receipt\x00\xff\xfe#42"), ("empty", b"")];
    for (key, result) in results {
        let held = assert_acquired(&mut client, begin(key)).await;
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
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let first = assert_acquired(&mut client, begin(KEY)).await;
    let state = release_ok(&mut client, release(KEY, first.lease_token, false, "bank timed out")).await;
    assert_eq!(state, RecordState::Released);

    let second = assert_acquired(&mut client, begin(KEY)).await;
    assert_eq!(second.attempt, 2, "{second:?}");
    assert!(!second.previous_lease_expired, "the first holder gave the key back: {second:?}");
    assert!(second.lease_token > first.lease_token, "{second:?} after {first:?}");
    // The first holder's token no longer holds the key.
    let late = Call::Complete(complete(KEY, first.lease_token, b"late"));
    assert_all_refused(&mut client, KEY, vec![late], Code::Aborted, LEASE_LOST).await;
}

#[tokio::test]
async fn a_permanent_release_records_the_failure_for_every_later_begin() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let held = assert_acquired(&mut client, begin(KEY)).await;
    let state = release_ok(&mut client, release(KEY, held.lease_token, true, "card declined")).await;
    assert_eq!(state, RecordState::Failed);
    for _ in 0..2 {
        let answer = begin_ok(&mut client, begin(KEY)).await;
        assert_eq!(answer.outcome(), BeginOutcome::Failed, "{answer:?}");
        assert_eq!(answer.error, "card declined");
        assert_eq!((answer.attempt, answer.lease_token), (1, 0), "no new attempt and no token");
    }
}
