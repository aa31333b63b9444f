//! A Signal fenced by an idempotency lease settles the wait only while the
//! fence's token is the key's current lease; otherwise it is refused as a
//! fenced PutRecords is, and the wait stays pending.

use std::time::Duration;

use stepwell::api::pb::{Fence, SignalRequest, WaitStatus};
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::begin;
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{await_for, create, get, signal};

fn fenced(key: &str, lease_token: u64, payload: &[u8]) -> SignalRequest {
    SignalRequest { fence: Some(Fence { key: key.to_owned(), lease_token }), ..signal("t1", "w", payload) }
}

#[tokio::test]
async fn a_fenced_signal_settles_only_under_the_current_lease() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    client.create_wait(create("t1", "w")).await.expect("CreateWait");
    let token = server.idempotency().begin(begin("k")).await.expect("Begin").into_inner().lease_token;
    let refused = client.signal(fenced("k", token + 1, b"stale")).await.expect_err("not the lease");
    assert_error(&refused, Code::Aborted, "LEASE_LOST");
    let refused = client.signal(fenced("never-begun", token, b"none")).await.expect_err("no lease");
    assert_error(&refused, Code::FailedPrecondition, "NOT_ACQUIRED");
    assert_eq!(get(&mut client, "t1", "w").await.expect("GetWait").status(), WaitStatus::Pending);
    let settled = client.signal(fenced("k", token, b"held")).await.expect("the holder signals").into_inner();
    assert!(settled.settled);
    let wait = client.r#await(await_for("t1", "w", Duration::from_secs(30))).await.expect("Await");
    assert_eq!(wait.into_inner().wait.expect("a wait").payload, b"held");
}
