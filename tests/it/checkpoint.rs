//! Checkpoint: deduplication on (namespace, turn_id, phase, timestamp) at
//! full nanosecond precision, conflicts that leave the stored row untouched,
//! and state and timestamps that come back exactly as sent.

use stepwell::api::pb::{CheckpointRequest, TurnStatus};
use tonic::Code;

use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{
    T0, assert_inserted, checkpoint, list_all, list_turns, nanos, restore, restore_all, ts,
};
use stepwell_test_support::sidecar::Sidecar;

#[tokio::test]
async fn the_same_checkpoint_twice_is_stored_once() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let request = CheckpointRequest {
        session_id: "session-1".into(),
        workflow_version: "1.3.0".into(),
        ..checkpoint("turn-1", "started", T0, r#"{"step":1}"#)
    };

    let first = assert_inserted(&mut client, request.clone()).await;
    let second = client.checkpoint(request).await.expect("a repeat succeeds").into_inner();

    assert!(!second.inserted, "the repeat is not inserted again");
    // The repeat answers with the stored record, commit time included.
    assert_eq!(second.checkpoint.as_ref(), Some(&first));
    assert_eq!(restore_all(&mut client, restore("turn-1")).await, [first]);
    let turns = list_all(&mut client, list_turns(TurnStatus::Any)).await;
    assert_eq!(turns[0].checkpoint_count, 1, "the summary counts one checkpoint");
}

#[tokio::test]
async fn the_same_phase_at_another_time_is_a_new_checkpoint() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();

    assert_inserted(&mut client, checkpoint("turn-1", "tool-received", T0, r#"{"n":1}"#)).await;
    assert_inserted(&mut client, checkpoint("turn-1", "tool-received", T0 + 1_000, r#"{"n":1}"#)).await;

    assert_eq!(restore_all(&mut client, restore("turn-1")).await.len(), 2);
}

#[tokio::test]
async fn timestamps_one_nanosecond_apart_are_distinct() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    // Across a second boundary too, where a seconds/nanos mix-up would show.
    let times = [T0 - 1, T0, T0 + 1, T0 + 999_999_999, T0 + 1_000_000_000];

    for (i, &time) in times.iter().enumerate() {
        assert_inserted(&mut client, checkpoint("turn-1", "tick", time, &format!("{i}"))).await;
    }

    let restored = restore_all(&mut client, restore("turn-1")).await;
    let restored_times: Vec<i64> = restored.into_iter().map(|c| nanos(c.timestamp)).collect();
    assert_eq!(restored_times, times);
}

#[tokio::test]
async fn a_different_content_under_the_same_key_conflicts_and_changes_nothing() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let original = CheckpointRequest {
        session_id: "session-1".into(),
        workflow_version: "1.0.0".into(),
        ..checkpoint("turn-1", "settled", T0, r#"{"answer":42}"#)
    };
    let stored = assert_inserted(&mut client, original.clone()).await;

    // Each variant differs from the original in exactly one content field.
    let variants: [(&str, CheckpointRequest); 5] = [
        ("state", CheckpointRequest { state: br#"{"answer":43}"#.to_vec(), ..original.clone() }),
        ("state whitespace", CheckpointRequest { state: br#"{"answer": 42}"#.to_vec(), ..original.clone() }),
        ("terminal", CheckpointRequest { terminal: true, ..original.clone() }),
        ("session_id", CheckpointRequest { session_id: "session-2".into(), ..original.clone() }),
        ("workflow_version", CheckpointRequest { workflow_version: "1.0.1".into(), ..original.clone() }),
    ];
    for (name, variant) in variants {
        let status = client.checkpoint(variant).await.expect_err(name);
        assert_error(&status, Code::AlreadyExists, "CHECKPOINT_CONFLICT");
    }

    assert_eq!(restore_all(&mut client, restore("turn-1")).await, [stored], "the stored row is untouched");
    let turn = &list_all(&mut client, list_turns(TurnStatus::Any)).await[0];
    assert_eq!((turn.checkpoint_count, turn.terminal), (1, false), "the summary is untouched");
    assert_eq!((turn.session_id.as_str(), turn.workflow_version.as_str()), ("session-1", "1.0.0"));
}

#[tokio::test]
async fn state_and_fields_come_back_exactly_as_sent() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    // Odd whitespace, escapes, non-ASCII text and number forms a JSON
    // round trip would normalise.
    let state = "{ \"a\" :\t[1,  2.50, 1e3, -0],\n  \"é\": \"\\u00e9 ü 😀 \\ud83d\\ude00\",\r\n \"nested\": {\"z\":null, \"a\": true} }  ";
    let request = CheckpointRequest {
        session_id: "séssion/1".into(),
        terminal: true,
        workflow_version: "v2.0.0-rc.1+build.7".into(),
        ..checkpoint("turn/ü-1", "llm-complete:2", T0 + 123_456_789, state)
    };

    let stored = assert_inserted(&mut client, request.clone()).await;

    assert_eq!(stored.namespace, "default", "an empty namespace is stored as default");
    assert_eq!(stored.state, request.state);
    assert_eq!(
        (&stored.turn_id, &stored.session_id, &stored.phase, &stored.workflow_version, stored.terminal),
        (&request.turn_id, &request.session_id, &request.phase, &request.workflow_version, request.terminal),
    );
    assert_eq!(stored.timestamp, request.timestamp);
    assert!(stored.recorded_at.is_some(), "the commit time is recorded");
    assert_eq!(restore_all(&mut client, restore("turn/ü-1")).await, [stored]);
}

#[tokio::test]
async fn timestamps_at_the_edges_of_the_range_round_trip() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    // Before the epoch, the epoch itself, and the last representable
    // nanosecond (2262-04-11).
    let times = [-1_500_000_000_000_000_000, -1, 0, i64::MAX];

    for &time in &times {
        let stored = assert_inserted(&mut client, checkpoint("turn-1", "edge", time, "null")).await;
        assert_eq!(stored.timestamp, Some(ts(time)));
    }

    let restored = restore_all(&mut client, restore("turn-1")).await;
    assert_eq!(restored.into_iter().map(|c| c.timestamp).collect::<Vec<_>>(), times.map(|t| Some(ts(t))));
}
