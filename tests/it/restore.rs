//! Restore: order by timestamp with ties in insertion order, both
//! directions, paging that stays correct while checkpoints are appended,
//! the phase filter, unknown turns, and the workflow version check.

use std::collections::HashMap;

use stepwell::api::pb::{CheckpointRequest, RestoreRequest};
use tonic::Code;

use stepwell_test_support::Client;
use stepwell_test_support::errors::{assert_error, assert_invalid};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, nanos, restore, restore_all, states};
use stepwell_test_support::sidecar::Sidecar;

/// Appends `(phase, ts offset, state)` rows to `turn` in the given order,
/// asserting that each is inserted.
async fn assert_all_inserted(client: &mut Client, turn: &str, rows: &[(&str, i64, &str)]) {
    for &(phase, offset, state) in rows {
        assert_inserted(client, checkpoint(turn, phase, T0 + offset, state)).await;
    }
}

/// Out-of-order timestamps, and three phases sharing one timestamp inserted
/// in the order b, a, c.
const MIXED: [(&str, i64, &str); 6] = [
    ("p", 300, "\"t300\""),
    ("p", 100, "\"t100\""),
    ("b", 200, "\"t200-b\""),
    ("a", 200, "\"t200-a\""),
    ("c", 200, "\"t200-c\""),
    ("p", 150, "\"t150\""),
];
const MIXED_ORDER: [&str; 6] = ["\"t100\"", "\"t150\"", "\"t200-b\"", "\"t200-a\"", "\"t200-c\"", "\"t300\""];

#[tokio::test]
async fn checkpoints_come_back_by_timestamp_then_insertion_order() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    let oldest_first = restore_all(&mut client, restore("turn-1")).await;
    let newest_first = restore_all(&mut client, RestoreRequest { newest_first: true, ..restore("turn-1") }).await;

    assert_eq!(states(&oldest_first), MIXED_ORDER);
    let reversed: Vec<&str> = MIXED_ORDER.into_iter().rev().collect();
    assert_eq!(states(&newest_first), reversed);
}

#[tokio::test]
async fn paging_in_either_direction_gives_the_same_sequence() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    for page_size in [1, 2, 4, 6, 7] {
        let paged = restore_all(&mut client, RestoreRequest { page_size, ..restore("turn-1") }).await;
        assert_eq!(states(&paged), MIXED_ORDER, "oldest first, page_size {page_size}");
        let request = RestoreRequest { page_size, newest_first: true, ..restore("turn-1") };
        let paged = restore_all(&mut client, request).await;
        let reversed: Vec<&str> = MIXED_ORDER.into_iter().rev().collect();
        assert_eq!(states(&paged), reversed, "newest first, page_size {page_size}");
    }
}

#[tokio::test]
async fn paging_stays_correct_while_checkpoints_are_appended() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    for i in 0..10 {
        assert_inserted(&mut client, checkpoint("turn-1", "step", T0 + i * 10, &i.to_string())).await;
    }

    let mut request = RestoreRequest { page_size: 3, ..restore("turn-1") };
    let mut seen = Vec::new();
    let mut appended = 10;
    loop {
        let page = client.restore(request.clone()).await.expect("Restore succeeds").into_inner();
        seen.extend(page.checkpoints);
        if page.next_page_token.is_empty() {
            break;
        }
        // Between pages: a later checkpoint, and one sharing the timestamp of
        // the last one seen (a tie that must sort after it).
        let last_seen = nanos(seen.last().unwrap().timestamp) - T0;
        assert_inserted(&mut client, checkpoint("turn-1", "tie", T0 + last_seen, &appended.to_string())).await;
        assert_inserted(&mut client, checkpoint("turn-1", "late", T0 + 1_000 + appended, &(appended + 1).to_string()))
            .await;
        appended += 2;
        request.page_token = page.next_page_token;
    }

    let everything = restore_all(&mut client, restore("turn-1")).await;
    assert_eq!(seen, everything, "every checkpoint exactly once, in order");
    assert_eq!(everything.len() as i64, appended);
}

#[tokio::test]
async fn newest_first_with_page_size_one_is_the_latest_snapshot() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    let latest = RestoreRequest { newest_first: true, page_size: 1, ..restore("turn-1") };
    let page = client.restore(latest).await.expect("Restore succeeds").into_inner();

    assert_eq!(states(&page.checkpoints), ["\"t300\""]);
    assert!(!page.next_page_token.is_empty(), "older checkpoints follow");
}

#[tokio::test]
async fn an_unknown_turn_is_an_empty_log() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    let page = client.restore(restore("turn-2")).await.expect("Restore succeeds").into_inner();

    assert!(page.checkpoints.is_empty());
    assert!(page.next_page_token.is_empty());
}

#[tokio::test]
async fn the_phase_filter_keeps_only_that_phase_in_order() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    for page_size in [0, 1] {
        let only_p = RestoreRequest { phase: "p".into(), page_size, ..restore("turn-1") };
        let restored = restore_all(&mut client, only_p).await;
        assert_eq!(states(&restored), ["\"t100\"", "\"t150\"", "\"t300\""], "page_size {page_size}");
        assert!(restored.iter().all(|c| c.phase == "p"));
    }
    let none = restore_all(&mut client, RestoreRequest { phase: "missing".into(), ..restore("turn-1") }).await;
    assert!(none.is_empty());
}

#[tokio::test]
async fn a_page_token_only_continues_in_its_own_direction() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_all_inserted(&mut client, "turn-1", &MIXED).await;

    for newest_first in [false, true] {
        let first = RestoreRequest { page_size: 2, newest_first, ..restore("turn-1") };
        let token = client.restore(first.clone()).await.expect("Restore succeeds").into_inner().next_page_token;
        let flipped = RestoreRequest { page_token: token, newest_first: !newest_first, ..first };
        let status = client.restore(flipped).await.expect_err("a token of the other direction is rejected");
        assert_invalid(&status, "page_token", "INVALID_PAGE_TOKEN");
    }
}

/// Restores `turn` expecting workflow version `expected`.
async fn restore_expecting(client: &mut Client, turn: &str, expected: &str) -> Result<usize, tonic::Status> {
    let request = RestoreRequest { expect_workflow_version: expected.into(), ..restore(turn) };
    client.restore(request).await.map(|r| r.into_inner().checkpoints.len())
}

#[tokio::test]
async fn the_workflow_version_check_compares_semver_majors_and_other_versions_exactly() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    for (turn, version) in [("semver", "1.3.0"), ("named", "blue"), ("short", "1.3")] {
        let request = CheckpointRequest { workflow_version: version.into(), ..checkpoint(turn, "started", T0, "{}") };
        assert_inserted(&mut client, request).await;
    }

    // Compatible: the same MAJOR, or the very same non-semver text.
    for (turn, expected) in
        [("semver", "1.9.0"), ("semver", "1.3.0"), ("semver", "1.0.0-rc.1"), ("named", "blue"), ("short", "1.3")]
    {
        let restored = restore_expecting(&mut client, turn, expected).await;
        assert_eq!(restored.ok(), Some(1), "{turn} expecting {expected}");
    }
    // Incompatible: another MAJOR, or any difference when either is not semver.
    for (turn, expected, recorded) in [
        ("semver", "2.0.0", "1.3.0"),
        ("semver", "0.3.0", "1.3.0"),
        ("named", "green", "blue"),
        ("short", "1.4", "1.3"),
        ("semver", "1.3", "1.3.0"),
    ] {
        let status = restore_expecting(&mut client, turn, expected).await.expect_err(expected);
        let info = assert_error(&status, Code::FailedPrecondition, "WORKFLOW_VERSION_MISMATCH");
        let versions = HashMap::from([
            ("expected_version".to_owned(), expected.to_owned()),
            ("recorded_version".to_owned(), recorded.to_owned()),
        ]);
        assert_eq!(info.metadata, versions, "{turn} expecting {expected}");
    }
}

#[tokio::test]
async fn the_workflow_version_check_uses_the_latest_recorded_version() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let at = |offset: i64, version: &str| CheckpointRequest {
        workflow_version: version.into(),
        ..checkpoint("turn-1", "step", T0 + offset, "{}")
    };
    assert_inserted(&mut client, at(100, "1.0.0")).await;
    assert_inserted(&mut client, at(300, "2.0.0")).await;
    // Written late but older: it must not change what the turn last recorded.
    assert_inserted(&mut client, at(200, "1.5.0")).await;

    assert_eq!(restore_expecting(&mut client, "turn-1", "2.1.0").await.ok(), Some(3));
    let status = restore_expecting(&mut client, "turn-1", "1.0.0").await.expect_err("recorded 2.0.0 last");
    assert_error(&status, Code::FailedPrecondition, "WORKFLOW_VERSION_MISMATCH");
}
