//! Retention: a key past its retention behaves as new (with tokens never
//! reused), and the sweeper deletes such records in batches, keeping those
//! whose retention has not run out and live leases.

use std::time::Duration;

use stepwell::api::pb::{BeginOutcome, BeginRequest, RecordState};
use stepwell::config::sections::Sweep;
use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::Inspector;
use stepwell_test_support::requests::{begin, complete, duration, get, release};
use tonic::Code;

use super::{
    Call, KEY_NOT_FOUND, LEASE_LOST, assert_acquired, assert_all_refused, assert_refused, begin_ok, complete_ok,
    record, release_ok, secs, start_on_clock, stored_count,
};

#[tokio::test]
async fn a_key_past_its_retention_behaves_as_new() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let request = |key: &str, fingerprint: &[u8]| BeginRequest {
        fingerprint: fingerprint.to_vec(),
        retention: Some(duration(secs(60))),
        ..begin(key)
    };
    let completed = assert_acquired(&mut client, request("completed", b"A")).await;
    complete_ok(&mut client, complete("completed", completed.lease_token, b"done")).await;
    let failed = assert_acquired(&mut client, request("failed", b"A")).await;
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
        let again = assert_acquired(&mut client, request(key, b"B")).await;
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

#[tokio::test]
async fn the_sweeper_deletes_records_past_their_retention_in_batches() {
    let sweep = Sweep { interval: Duration::from_millis(10), batch_max: 2, turns: Default::default() };
    let (server, clock) = start_on_clock(|config| config.sweep = sweep).await;
    let mut client = server.idempotency();
    let short = |key: &str| BeginRequest { retention: Some(duration(secs(10))), ..begin(key) };
    for i in 0..5 {
        let key = format!("short-{i}");
        let held = assert_acquired(&mut client, short(&key)).await;
        complete_ok(&mut client, complete(&key, held.lease_token, b"done")).await;
    }
    // Kept: a record whose retention has not run out, and a live lease,
    // whose retention only starts when the lease ends.
    let kept = assert_acquired(&mut client, begin("kept")).await;
    complete_ok(&mut client, complete("kept", kept.lease_token, b"done")).await;
    assert_acquired(&mut client, BeginRequest { lease: Some(duration(secs(60))), ..short("leased") }).await;

    let store = server.store().inspect().await;
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
