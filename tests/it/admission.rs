//! What a request meets before its handler, and the answers that are not a
//! field's fault: a message over `--message-bytes-max` and a request over
//! `--max-concurrent-requests` are RESOURCE_EXHAUSTED and store nothing; a
//! write whose deadline expires is indeterminate (absent, or stored once,
//! and its retry settles it). The field-by-field bad-input tables are in
//! `validation` and `idempotency`.

use std::time::Duration;

use stepwell::api::pb::CheckpointRequest;
use tonic::Code;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{T0, assert_inserted, begin, checkpoint, stored_states};
use stepwell_test_support::sidecar::Sidecar;

/// The state limit these servers run with, and the smallest message limit it allows.
const STATE_MAX: usize = 1024;
const MESSAGE_MAX: usize = STATE_MAX + 64 * 1024;

async fn start(max_concurrent_requests: usize) -> Sidecar {
    Sidecar::builder()
        .configure(|config| {
            config.limits.state_bytes_max = STATE_MAX;
            config.limits.message_bytes_max = MESSAGE_MAX;
            config.limits.max_concurrent_requests = max_concurrent_requests;
        })
        .start()
        .await
}

/// A checkpoint that fails validation in its handler, touching no store:
/// INVALID_ARGUMENT when admitted, RESOURCE_EXHAUSTED when shed.
fn probe() -> CheckpointRequest {
    CheckpointRequest { turn_id: String::new(), ..checkpoint("probe", "started", T0, "{}") }
}

#[tokio::test]
async fn a_message_over_the_size_limit_is_resource_exhausted_and_stores_nothing() {
    let server = start(1024).await;
    let mut client = server.client();
    let state = format!("\"{}\"", "x".repeat(MESSAGE_MAX)).into_bytes();
    let request = CheckpointRequest { state, ..checkpoint("big", "started", T0, "{}") };

    let status = client.checkpoint(request).await.expect_err("an oversized message is refused");
    let info = assert_error(&status, Code::ResourceExhausted, "MESSAGE_TOO_LARGE");
    assert_eq!(info.metadata.get("limit_bytes"), Some(&MESSAGE_MAX.to_string()), "the limit is named");
    assert!(stored_states(&mut client, "big").await.is_empty(), "nothing is stored");

    let status = server.idempotency().begin(begin(&"k".repeat(MESSAGE_MAX))).await.expect_err("oversized Begin");
    assert_error(&status, Code::ResourceExhausted, "MESSAGE_TOO_LARGE");
    // The connection stays usable, and a message just under the limit is read.
    assert_inserted(&mut client, checkpoint("big", "started", T0, "{}")).await;
    let status = client.checkpoint(CheckpointRequest { state: vec![b' '; STATE_MAX + 1], ..probe() }).await;
    assert_eq!(status.expect_err("a bad request under the limit").code(), Code::InvalidArgument);
}

#[tokio::test]
async fn requests_over_the_concurrency_limit_are_shed_and_store_nothing() {
    let server = start(2).await;
    let lock = server.store().hold_write_lock().await;
    // Two writes take both places and wait on the store's write lock.
    let held: Vec<_> = (0..2)
        .map(|i| {
            let mut client = server.client();
            tokio::spawn(async move { client.checkpoint(checkpoint(&format!("held-{i}"), "started", T0, "{}")).await })
        })
        .collect();

    // Probe until both are inside: each probe is answered at once, by the
    // handler (INVALID_ARGUMENT) until the places are taken, then by the shedder.
    let mut client = server.client();
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let shed = loop {
        let status = client.checkpoint(probe()).await.expect_err("the probe is never valid");
        if status.code() != Code::InvalidArgument {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the two held writes never filled the limit");
        tokio::task::yield_now().await;
    };
    assert_error(&shed, Code::ResourceExhausted, "OVERLOADED");
    let status = client.checkpoint(checkpoint("shed", "started", T0, "{}")).await.expect_err("a write is shed too");
    assert_error(&status, Code::ResourceExhausted, "OVERLOADED");
    let status = server.idempotency().begin(begin("shed")).await.expect_err("both services share the limit");
    assert_error(&status, Code::ResourceExhausted, "OVERLOADED");

    lock.release().await;
    for write in held {
        let response = write.await.expect("the held write's task").expect("a held write is answered OK");
        assert!(response.into_inner().inserted);
    }
    assert!(stored_states(&mut client, "shed").await.is_empty(), "the shed write stored nothing");
    assert!(
        server.idempotency().get(stepwell_test_support::requests::get("shed")).await.is_err(),
        "the shed Begin stored nothing"
    );
    // Places are given back: requests are admitted again.
    assert_inserted(&mut client, checkpoint("after", "started", T0, "{}")).await;
}

#[tokio::test]
async fn a_write_whose_deadline_expires_is_indeterminate_and_its_retry_settles_it() {
    let server = start(1024).await;
    let mut client = server.client();
    let lock = server.store().hold_write_lock().await;
    let request = checkpoint("late", "started", T0, r#"{"step":1}"#);
    let mut late = tonic::Request::new(request.clone());
    late.set_timeout(Duration::from_millis(50));

    // The store cannot commit while the lock is held, so the deadline passes first.
    let status = client.checkpoint(late).await.expect_err("the deadline expires before the commit");
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "an expired deadline is reported as such: {status:?}"
    );
    lock.release().await;

    // Indeterminate: the write may have been committed after the caller gave
    // up, or not at all; it is never stored twice, and a retry of the same
    // tuple gets OK either way.
    let retry = client.checkpoint(request.clone()).await.expect("the retry succeeds").into_inner();
    let states = stored_states(&mut client, "late").await;
    assert_eq!(
        states,
        std::slice::from_ref(&request.state),
        "stored exactly once, byte for byte (inserted={})",
        retry.inserted
    );
    let again = client.checkpoint(request).await.expect("a second retry succeeds").into_inner();
    assert!(!again.inserted, "a settled write is a duplicate from then on");
}
