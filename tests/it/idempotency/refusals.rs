//! Calls that find no lease to act on: the last holder of a finished key is
//! refused (NOT_ACQUIRED, or RESULT_MISMATCH for another result), and so is
//! any call on a key without a record, while a token never issued for a held
//! key has lost the lease.

use stepwell_test_support::requests::{begin, complete, get, release};
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{
    Call, KEY_NOT_FOUND, LEASE_LOST, NOT_ACQUIRED, RESULT_MISMATCH, assert_acquired, assert_all_refused,
    assert_refused, complete_ok, holder_calls, record, release_ok,
};

#[tokio::test]
async fn a_finished_key_refuses_the_calls_of_its_last_holder() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();

    let held = assert_acquired(&mut client, begin("completed")).await;
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
        let held = assert_acquired(&mut client, begin(key)).await;
        release_ok(&mut client, release(key, held.lease_token, permanent, "declined")).await;
        let calls = holder_calls(key, held.lease_token);
        assert_all_refused(&mut client, key, calls, Code::FailedPrecondition, NOT_ACQUIRED).await;
    }
}

#[tokio::test]
async fn calls_on_a_key_without_a_record_are_not_acquired() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let other = assert_acquired(&mut client, begin("other")).await;
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
