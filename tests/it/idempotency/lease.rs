//! Leases on the store's moved clock: an expired lease is taken over and its
//! stale holder fenced off, a holder whose lease ran out may still complete
//! while no one took over, Extend keeps a lease alive and is refused once it
//! ran out, and unset leases and retentions take the contract's defaults.

use stepwell::api::pb::{BeginOutcome, ExtendRequest, RecordState};
use stepwell_test_support::requests::{begin, begin_leased, complete, extend, nanos};
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{
    Call, KEY, LEASE_LOST, assert_acquired, assert_all_refused, begin_ok, complete_ok, extend_ok, holder_calls, ns,
    record, secs, start_on_clock,
};

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_stale_holder_is_fenced_off() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let stale = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(11));

    let taker = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
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
    let held = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
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
    let held = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
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
    let first = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
    clock.advance(secs(11));
    // A refused Extend must not revive the expired lease.
    let late = || vec![Call::Extend(extend(KEY, first.lease_token, secs(10)))];
    assert_all_refused(&mut client, KEY, late(), Code::Aborted, LEASE_LOST).await;
    assert_eq!(record(&mut client, KEY).await.state(), RecordState::Expired);

    let taker = assert_acquired(&mut client, begin_leased(KEY, secs(10))).await;
    assert_eq!((taker.attempt, taker.previous_lease_expired), (2, true), "{taker:?}");
    assert_all_refused(&mut client, KEY, late(), Code::Aborted, LEASE_LOST).await;
    extend_ok(&mut client, extend(KEY, taker.lease_token, secs(10))).await;
}

#[tokio::test]
async fn unset_lease_and_retention_take_the_contract_defaults() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let held = assert_acquired(&mut client, begin(KEY)).await;
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
