//! What Get reports: every state of a record with its times, retention and
//! fingerprint, without acquiring anything, before and after the lease ran
//! out.

use stepwell::api::pb::{BeginOutcome, BeginRequest, RecordState};
use stepwell_test_support::requests::{begin, begin_leased, complete, duration, get, nanos, release};
use tonic::Code;

use super::{
    Call, KEY_NOT_FOUND, assert_acquired, assert_refused, begin_ok, complete_ok, ns, record, release_ok, secs,
    start_on_clock,
};

#[tokio::test]
async fn get_reports_every_state_without_acquiring_anything() {
    let (server, clock) = start_on_clock(|_| {}).await;
    let mut client = server.idempotency();
    let request = |key: &str| BeginRequest {
        fingerprint: b"fp".to_vec(),
        retention: Some(duration(secs(60))),
        ..begin_leased(key, secs(10))
    };

    let leased = assert_acquired(&mut client, request("in-progress")).await;
    let stored = record(&mut client, "in-progress").await;
    assert_eq!((stored.state(), stored.attempt), (RecordState::InProgress, 1), "{stored:?}");
    assert_eq!(stored.lease_expires_at, leased.lease_expires_at);
    assert_eq!(nanos(stored.lease_expires_at) - nanos(stored.created_at), ns(secs(10)), "{stored:?}");
    assert_eq!(stored.updated_at, stored.created_at);
    assert_eq!(stored.retained_until, None, "a held lease has no retention yet: {stored:?}");
    assert_eq!(stored.fingerprint, b"fp");

    let held = assert_acquired(&mut client, request("completed")).await;
    let completed_at = complete_ok(&mut client, complete("completed", held.lease_token, b"receipt")).await;
    let stored = record(&mut client, "completed").await;
    assert_eq!((stored.state(), stored.result.as_slice()), (RecordState::Completed, &b"receipt"[..]), "{stored:?}");
    assert_eq!(stored.updated_at, Some(completed_at));
    assert_eq!(nanos(stored.retained_until) - nanos(stored.updated_at), ns(secs(60)), "{stored:?}");
    assert_eq!(stored.lease_expires_at, None, "{stored:?}");

    for (key, permanent, state) in [("failed", true, RecordState::Failed), ("released", false, RecordState::Released)] {
        let held = assert_acquired(&mut client, request(key)).await;
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
    let fresh = assert_acquired(&mut client, begin("unknown")).await;
    assert_eq!(fresh.attempt, 1);
    assert_eq!(begin_ok(&mut client, begin("in-progress")).await.outcome(), BeginOutcome::InProgress);

    clock.advance(secs(11));
    let stored = record(&mut client, "in-progress").await;
    assert_eq!((stored.state(), stored.attempt), (RecordState::Expired, 1), "{stored:?}");
    assert_eq!(stored.lease_expires_at, leased.lease_expires_at);
    // Reading the expired record did not take it over either.
    let taker = assert_acquired(&mut client, request("in-progress")).await;
    assert_eq!((taker.attempt, taker.previous_lease_expired), (2, true), "{taker:?}");
}
