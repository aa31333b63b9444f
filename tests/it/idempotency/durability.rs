//! Recorded results survive a SIGKILL of the real binary: concurrent writers
//! complete keys, the sidecar is killed, and after a restart on the same
//! store every acknowledged result is there byte for byte and no token is
//! handed out twice.

use std::os::unix::process::ExitStatusExt;

use stepwell::api::pb::BeginOutcome;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{begin, complete};
use stepwell_test_support::sidecar::SidecarProcess;

use super::{assert_acquired, begin_ok, complete_ok};
use crate::STEPWELL;

const WRITERS: usize = 4;
const KEYS_PER_WRITER: usize = 25;

/// The result of a writer's i-th key: unique, of varied length, not UTF-8,
/// and empty for the very first, so that any re-encoding or truncation on
/// the way to disk would show.
fn durable_result(writer: usize, i: usize) -> Vec<u8> {
    if (writer, i) == (0, 0) {
        return Vec::new();
    }
    let mut result = format!("w{writer}/i{i}:").into_bytes();
    result.extend(std::iter::repeat_n(0xff - i as u8, i * 13));
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_keys_survive_sigkill() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let mut client = server.idempotency();
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0..KEYS_PER_WRITER {
                    let (key, result) = (format!("turn-{writer}/step-{i}"), durable_result(writer, i));
                    let held = assert_acquired(&mut client, begin(&key)).await;
                    complete_ok(&mut client, complete(&key, held.lease_token, &result)).await;
                    acknowledged.push((key, result, held.lease_token));
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged = Vec::new();
    for writer in writers {
        acknowledged.extend(writer.await.expect("a writer does not panic"));
    }
    let status = server.kill().await;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "the sidecar died by SIGKILL: {status:?}");

    let restarted = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = restarted.idempotency();
    assert_eq!(acknowledged.len(), WRITERS * KEYS_PER_WRITER);
    for (key, result, _) in &acknowledged {
        let answer = begin_ok(&mut client, begin(key)).await;
        assert_eq!(answer.outcome(), BeginOutcome::Completed, "{key}: {answer:?}");
        assert_eq!(&answer.result, result, "{key}: the result, byte for byte");
    }
    // The token sequence survived too: no token is handed out twice.
    let newest = acknowledged.iter().map(|(_, _, token)| *token).max().expect("tokens were issued");
    let fresh = assert_acquired(&mut client, begin("after-restart")).await;
    assert!(fresh.lease_token > newest, "{fresh:?} after token {newest}");
}
