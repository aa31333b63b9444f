//! Each limit of waits refuses what is over it: a Signal's payload, a
//! CreateWait's metadata, the waits of one turn, an Await's timeout, and
//! the Awaits one sidecar holds, which hold none of the places of
//! --max-concurrent-requests.

use std::time::Duration;

use stepwell::api::pb::{AwaitRequest, WaitStatus};
use stepwell_test_support::errors::{assert_error, assert_invalid};
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{await_for, create, get, signal, until_metric, with_admin};

#[tokio::test]
async fn a_payload_over_wait_payload_bytes_max_is_refused() {
    let server = Sidecar::builder().configure(|config| config.limits.wait_payload_bytes_max = 4).start().await;
    let mut client = server.waits();
    client.signal(signal("t1", "w", b"four")).await.expect("at the limit");
    let refused = client.signal(signal("t1", "v", b"five!")).await.expect_err("over the limit");
    assert_invalid(&refused, "payload", "FIELD_TOO_LONG");
}

#[tokio::test]
async fn metadata_over_wait_metadata_bytes_max_or_not_an_object_is_refused() {
    let server = Sidecar::builder().configure(|config| config.limits.wait_metadata_bytes_max = 16).start().await;
    let mut client = server.waits();
    let mut small = create("t1", "w");
    small.metadata = br#"{"a":1}"#.to_vec();
    client.create_wait(small).await.expect("within the limit");
    let mut large = create("t1", "v");
    large.metadata = br#"{"a":"0123456789"}"#.to_vec();
    assert_invalid(&client.create_wait(large).await.expect_err("over the limit"), "metadata", "FIELD_TOO_LONG");
    let mut array = create("t1", "u");
    array.metadata = b"[1]".to_vec();
    assert_invalid(&client.create_wait(array).await.expect_err("not an object"), "metadata", "STATE_NOT_JSON");
}

#[tokio::test]
async fn a_turn_holds_at_most_waits_per_turn_max_waits() {
    let server = Sidecar::builder().configure(|config| config.limits.waits_per_turn_max = 2).start().await;
    let mut client = server.waits();
    client.create_wait(create("t1", "a")).await.expect("first");
    client.signal(signal("t1", "b", b"")).await.expect("second, created by its Signal");
    let refused = client.create_wait(create("t1", "c")).await.expect_err("third");
    assert_error(&refused, Code::ResourceExhausted, "WAITS_PER_TURN");
    let refused = client.signal(signal("t1", "d", b"")).await.expect_err("a Signal creating a third");
    assert_error(&refused, Code::ResourceExhausted, "WAITS_PER_TURN");
    let again = client.create_wait(create("t1", "a")).await.expect("a repeat creates nothing");
    assert!(!again.into_inner().created);
    client.create_wait(create("t2", "a")).await.expect("another turn has room");
}

#[tokio::test]
async fn an_await_timeout_over_await_timeout_max_is_refused_and_the_default_is_capped_by_it() {
    let server = Sidecar::builder()
        .configure(|config| config.limits.await_timeout_max = Duration::from_millis(100))
        .start()
        .await;
    let mut client = server.waits();
    client.create_wait(create("t1", "w")).await.expect("CreateWait");
    let refused = client.r#await(await_for("t1", "w", Duration::from_secs(1))).await.expect_err("too long");
    assert_invalid(&refused, "timeout", "FIELD_OUT_OF_RANGE");
    let untimed = AwaitRequest { turn_id: "t1".into(), name: "w".into(), ..Default::default() };
    let wait = client.r#await(untimed).await.expect("the capped default").into_inner().wait.expect("a wait");
    assert_eq!(wait.status(), WaitStatus::Pending);
}

#[tokio::test]
async fn awaits_over_awaits_max_are_refused_and_pending_awaits_leave_room_for_other_requests() {
    let (server, admin) = with_admin(|config| {
        config.limits.awaits_max = 1;
        config.limits.max_concurrent_requests = 1;
    })
    .await;
    let mut client = server.waits();
    client.create_wait(create("t1", "w")).await.expect("CreateWait");
    let mut waiting = server.waits();
    let pending = tokio::spawn(async move { waiting.r#await(await_for("t1", "w", Duration::from_secs(120))).await });
    until_metric(&admin, "stepwell_awaits_pending", &[], 1.0).await;
    let refused = client.r#await(await_for("t1", "w", Duration::from_secs(1))).await.expect_err("no room");
    assert_error(&refused, Code::ResourceExhausted, "AWAITS");
    // The one place of --max-concurrent-requests is free for a read.
    get(&mut client, "t1", "w").await.expect("GetWait beside a pending Await");
    client.signal(signal("t1", "w", b"done")).await.expect("Signal beside a pending Await");
    pending.await.expect("the Await task").expect("the pending Await answers");
}
