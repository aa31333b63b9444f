//! Crash-only: a sidecar whose writer task dies stops serving instead of
//! answering every write UNAVAILABLE forever. Health turns NOT_SERVING, the
//! write that was in the dead writer's batch is answered UNAVAILABLE, and
//! `serve` returns `ServeError::TaskFailed`, which the binary turns into
//! exit code 70 for its orchestrator to restart it.
//!
//! The writer is made to panic through the `fault-injection` feature, which
//! `cargo test` turns on for stepwell and its binary (never for a serving
//! build): an append to `PANIC_TURN_ID` panics the writer task that takes it.

use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;

use stepwell::ServeError;
use stepwell::store::writer::PANIC_TURN_ID;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::health::{next_status, watch_health};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

/// Follows a Watch that saw SERVING until the server stops serving: it
/// must report NOT_SERVING before it ends.
async fn assert_watch_sees_not_serving(watch: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>) {
    assert_eq!(next_status(watch).await, Some(ServingStatus::NotServing), "health turns NOT_SERVING");
}

#[tokio::test]
async fn a_writer_that_panics_turns_health_not_serving_and_serve_returns_an_error() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("before", "started", T0, "{}")).await;
    let mut watch = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::Serving));

    let status = client.checkpoint(checkpoint(PANIC_TURN_ID, "started", T0, "{}")).await.expect_err("the writer died");
    assert_error(&status, Code::Unavailable, "STORE_UNAVAILABLE");
    assert_watch_sees_not_serving(&mut watch).await;

    match server.stop().await {
        Err(error @ ServeError::TaskFailed { task: "writer", .. }) => {
            assert!(error.is_internal(), "{error}");
            assert!(error.to_string().contains("panicked"), "{error}");
        }
        other => panic!("serve returns the writer's failure, not {other:?}"),
    }
}

#[tokio::test]
async fn the_binary_exits_70_when_a_writer_panics() {
    let store = TestStore::new().await;
    let log = store.dir().join("stepwell.log");
    let server = SidecarProcess::builder(STEPWELL, &store).stderr_to(&log).spawn().await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("before", "started", T0, "{}")).await;
    let mut watch = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::Serving));

    let status = client.checkpoint(checkpoint(PANIC_TURN_ID, "started", T0, "{}")).await.expect_err("the writer died");
    assert_error(&status, Code::Unavailable, "STORE_UNAVAILABLE");
    assert_watch_sees_not_serving(&mut watch).await;

    let exit = server.wait().await;
    assert_eq!(exit.code(), Some(70), "EX_SOFTWARE, for the orchestrator to restart it: {exit:?}");
    let logged = std::fs::read_to_string(&log).expect("read the sidecar's log");
    assert!(
        logged.contains("ERROR") && logged.contains("the writer task panicked"),
        "the log says why it stopped:\n{logged}"
    );
    // Restarted on the same store, as its orchestrator would, it serves again.
    let restarted = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = restarted.client();
    assert_eq!(restore_all(&mut client, restore("before")).await.len(), 1, "what was acknowledged is there");
    assert_inserted(&mut client, checkpoint("after", "started", T0, "{}")).await;
}
