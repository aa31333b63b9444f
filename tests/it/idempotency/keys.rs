//! What makes two keys one record: a fingerprint a key was begun with
//! refuses another, the same key in two namespaces is two records, and keys
//! are compared byte for byte.

use stepwell::api::pb::{BeginOutcome, BeginRequest, CompleteRequest, GetRequest, RecordState};
use stepwell_test_support::requests::{begin, complete, get, release};
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{
    Call, KEY, KEY_NOT_FOUND, KEY_REUSED, LEASE_LOST, assert_acquired, assert_all_refused, assert_refused, begin_ok,
    complete_ok, read, record, release_ok,
};

#[tokio::test]
async fn a_key_begun_with_one_fingerprint_refuses_another() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let with = |key: &str, fingerprint: &[u8]| BeginRequest { fingerprint: fingerprint.to_vec(), ..begin(key) };

    let held = assert_acquired(&mut client, with(KEY, b"A")).await;
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
    let first = assert_acquired(&mut client, with("retried", b"A")).await;
    release_ok(&mut client, release("retried", first.lease_token, false, "")).await;
    assert_acquired(&mut client, begin("retried")).await;
    assert_eq!(record(&mut client, "retried").await.fingerprint, b"A");
    let reuse = vec![Call::Begin(with("retried", b"B"))];
    assert_all_refused(&mut client, "retried", reuse, Code::FailedPrecondition, KEY_REUSED).await;
}

#[tokio::test]
async fn the_same_key_in_two_namespaces_is_two_records() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    let tenants = ["tenant-a", "tenant-b"];
    let mut tokens = Vec::new();
    for namespace in tenants {
        let held = assert_acquired(&mut client, BeginRequest { namespace: namespace.into(), ..begin(KEY) }).await;
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
    let default = assert_acquired(&mut client, begin(KEY)).await;
    let stored = read(&mut client, GetRequest { namespace: "default".into(), ..get(KEY) }).await;
    assert_eq!((stored.state(), stored.lease_expires_at), (RecordState::InProgress, default.lease_expires_at));
}

#[tokio::test]
async fn keys_are_compared_byte_for_byte() {
    let server = Sidecar::builder().start().await;
    let mut client = server.idempotency();
    // Keys that a case-insensitive, trimming or normalising comparison
    // would merge, and one that would break a query built from text.
    let keys = ["step", "Step", "step ", " step", "café", "cafe\u{301}", "step/1", "x' OR '1'='1"];
    for key in keys {
        let held = assert_acquired(&mut client, begin(key)).await;
        assert_eq!(held.attempt, 1, "{key:?}: a record of its own");
        complete_ok(&mut client, complete(key, held.lease_token, key.as_bytes())).await;
    }
    for key in keys {
        assert_eq!(begin_ok(&mut client, begin(key)).await.result, key.as_bytes(), "{key:?}");
    }
}
