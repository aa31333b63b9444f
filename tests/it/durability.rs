//! The durability rule: a checkpoint acknowledged with OK survives the
//! sidecar being killed. The real binary takes a burst of concurrent writes,
//! is SIGKILLed the moment the last one is acknowledged, and is restarted on
//! the same SQLite file, which must hold every acknowledged checkpoint byte
//! for byte.

use std::os::unix::process::ExitStatusExt;

use stepwell::api::pb::{Checkpoint, CheckpointRequest};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

const WRITERS: usize = 8;
const CHECKPOINTS_PER_WRITER: usize = 25;

/// The i-th checkpoint of a writer: a state unique to it, with non-ASCII
/// text so any re-encoding on the way to disk would show.
fn burst_checkpoint(writer: usize, i: usize) -> CheckpointRequest {
    let state = format!("{{\"writer\": {writer}, \"i\": {i}, \"note\": \"ünïcødé ✓ {}\"}}", "x".repeat(i * 7));
    CheckpointRequest {
        session_id: format!("session-{}", writer % 2),
        terminal: i + 1 == CHECKPOINTS_PER_WRITER,
        workflow_version: "1.0.0".into(),
        ..checkpoint(&format!("turn-{writer}"), &format!("step-{i}"), T0 + i as i64, &state)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_checkpoints_survive_sigkill() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;

    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let mut client = server.client();
            tokio::spawn(async move {
                let mut acknowledged: Vec<Checkpoint> = Vec::new();
                for i in 0..CHECKPOINTS_PER_WRITER {
                    acknowledged.push(assert_inserted(&mut client, burst_checkpoint(writer, i)).await);
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.push(writer.await.expect("a writer does not panic"));
    }
    let status = server.kill().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the sidecar died by SIGKILL: {status:?}");

    let restarted = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = restarted.client();
    for (writer, expected) in acknowledged.into_iter().enumerate() {
        let restored = restore_all(&mut client, restore(&format!("turn-{writer}"))).await;
        assert_eq!(restored.len(), CHECKPOINTS_PER_WRITER, "turn-{writer}: every acknowledged checkpoint");
        assert_eq!(restored, expected, "turn-{writer}: byte for byte, commit times included");
    }
}
