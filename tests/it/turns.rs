//! ListTurns and DeleteTurn: the status, session and staleness filters,
//! paging by turn_id, the summary fields (which describe the latest
//! checkpoint in Restore order, not the latest to arrive), and deletion.

use stepwell::api::pb::{CheckpointRequest, DeleteTurnRequest, ListTurnsRequest, TurnStatus, TurnSummary};

use stepwell_test_support::Client;
use stepwell_test_support::requests::{
    T0, assert_inserted, checkpoint, list_all, list_turns, restore, restore_all, ts, turn_ids,
};
use stepwell_test_support::sidecar::Sidecar;

/// A checkpoint of `turn` at `T0 + offset`, terminal or not.
fn step(turn: &str, phase: &str, offset: i64, terminal: bool) -> CheckpointRequest {
    CheckpointRequest { terminal, ..checkpoint(turn, phase, T0 + offset, "{}") }
}

/// Turns covering every way a turn can end up open or terminal, each
/// checkpoint asserted to be inserted.
async fn assert_lifecycles_inserted(client: &mut Client) {
    let steps = [
        step("a-open", "started", 100, false),
        step("b-done", "started", 100, false),
        step("b-done", "settled", 200, true),
        // Reopened by the application after it was settled.
        step("c-reopened", "started", 100, false),
        step("c-reopened", "settled", 200, true),
        step("c-reopened", "resumed", 300, false),
        // A non-terminal checkpoint arriving late with an older timestamp
        // does not reopen the turn: it is not the latest.
        step("d-late-older", "started", 100, false),
        step("d-late-older", "settled", 300, true),
        step("d-late-older", "late", 200, false),
        // At equal timestamps the later insertion is the latest.
        step("e-tie", "started", 100, false),
        step("e-tie", "settled", 100, true),
    ];
    for request in steps {
        assert_inserted(client, request).await;
    }
}

#[tokio::test]
async fn the_status_filter_selects_open_or_terminal_turns() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_lifecycles_inserted(&mut client).await;

    let cases = [
        (TurnStatus::Open, vec!["a-open", "c-reopened"]),
        (TurnStatus::Terminal, vec!["b-done", "d-late-older", "e-tie"]),
        (TurnStatus::Any, vec!["a-open", "b-done", "c-reopened", "d-late-older", "e-tie"]),
        (TurnStatus::Unspecified, vec!["a-open", "b-done", "c-reopened", "d-late-older", "e-tie"]),
    ];
    for (status, expected) in cases {
        let turns = list_all(&mut client, list_turns(status)).await;
        assert_eq!(turn_ids(&turns), expected, "{status:?}");
        let terminal = status == TurnStatus::Terminal;
        if matches!(status, TurnStatus::Open | TurnStatus::Terminal) {
            assert!(turns.iter().all(|t| t.terminal == terminal), "{status:?} summaries agree with the filter");
        }
    }
}

#[tokio::test]
async fn the_session_filter_selects_the_turns_of_one_session() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    for (turn, session) in [("t1", "s1"), ("t2", "s2"), ("t3", "s1"), ("t4", "")] {
        let request = CheckpointRequest { session_id: session.into(), ..checkpoint(turn, "started", T0, "{}") };
        assert_inserted(&mut client, request).await;
    }
    // A later checkpoint that names no session keeps the turn in its session.
    assert_inserted(&mut client, checkpoint("t3", "settled", T0 + 1, "{}")).await;

    let of_s1 = ListTurnsRequest { session_id: "s1".into(), ..list_turns(TurnStatus::Any) };
    let turns = list_all(&mut client, of_s1).await;

    assert_eq!(turn_ids(&turns), ["t1", "t3"]);
    assert!(turns.iter().all(|t| t.session_id == "s1"));
}

#[tokio::test]
async fn updated_before_selects_turns_whose_latest_checkpoint_is_older() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    for request in [
        step("t-old", "started", 100, false),
        step("t-mid", "started", 50, false),
        step("t-mid", "waiting", 200, false),
        step("t-new", "started", 300, false),
        step("t-done", "settled", 100, true),
    ] {
        assert_inserted(&mut client, request).await;
    }

    let before = |offset: i64, status: TurnStatus| ListTurnsRequest {
        updated_before: Some(ts(T0 + offset)),
        ..list_turns(status)
    };
    // The bound is exclusive: a turn updated exactly at it is not stale.
    let cases = [
        (before(200, TurnStatus::Any), vec!["t-done", "t-old"]),
        (before(201, TurnStatus::Any), vec!["t-done", "t-mid", "t-old"]),
        (before(201, TurnStatus::Open), vec!["t-mid", "t-old"]),
        (before(100, TurnStatus::Any), vec![]),
    ];
    for (request, expected) in cases {
        let label = format!("{request:?}");
        assert_eq!(turn_ids(&list_all(&mut client, request).await), expected, "{label}");
    }
}

#[tokio::test]
async fn turns_page_in_turn_id_order() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let ids = ["turn-5", "turn-1", "turn-7", "turn-3", "turn-2", "turn-6", "turn-4"];
    for (i, id) in ids.iter().enumerate() {
        // Odd positions are terminal, so the filtered listing pages too.
        assert_inserted(&mut client, step(id, "started", 0, i % 2 == 1)).await;
    }

    for page_size in [1, 2, 3, 7, 8] {
        let request = ListTurnsRequest { page_size, ..list_turns(TurnStatus::Any) };
        let page = client.list_turns(request.clone()).await.expect("ListTurns succeeds").into_inner();
        assert!(page.turns.len() <= page_size as usize, "page_size {page_size} is respected");
        let all = list_all(&mut client, request).await;
        let expected = ["turn-1", "turn-2", "turn-3", "turn-4", "turn-5", "turn-6", "turn-7"];
        assert_eq!(turn_ids(&all), expected, "page_size {page_size}");
        let open = list_all(&mut client, ListTurnsRequest { page_size, ..list_turns(TurnStatus::Open) }).await;
        assert_eq!(turn_ids(&open), ["turn-2", "turn-4", "turn-5", "turn-7"], "open, page_size {page_size}");
    }
}

/// The one turn of the default namespace, asserting that there is only one.
async fn assert_only_turn(client: &mut Client) -> TurnSummary {
    let mut turns = list_all(client, list_turns(TurnStatus::Any)).await;
    assert_eq!(turns.len(), 1, "one turn: {turns:?}");
    turns.remove(0)
}

#[tokio::test]
async fn the_summary_describes_the_turn() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let named = |phase: &str, offset: i64, session: &str, version: &str| CheckpointRequest {
        session_id: session.into(),
        workflow_version: version.into(),
        ..step("turn-1", phase, offset, false)
    };
    assert_inserted(&mut client, named("started", 100, "s1", "1.0.0")).await;
    assert_inserted(&mut client, named("llm-complete", 200, "s2", "1.1.0")).await;
    // The latest names neither, so the summary keeps the last ones named.
    assert_inserted(&mut client, CheckpointRequest { terminal: true, ..named("settled", 300, "", "") }).await;

    let expected = TurnSummary {
        turn_id: "turn-1".into(),
        session_id: "s2".into(),
        first_timestamp: Some(ts(T0 + 100)),
        last_timestamp: Some(ts(T0 + 300)),
        last_phase: "settled".into(),
        checkpoint_count: 3,
        terminal: true,
        workflow_version: "1.1.0".into(),
    };
    assert_eq!(assert_only_turn(&mut client).await, expected);
}

#[tokio::test]
async fn the_summary_follows_timestamps_not_arrival_order() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let named = |phase: &str, offset: i64, session: &str, version: &str, terminal: bool| CheckpointRequest {
        session_id: session.into(),
        workflow_version: version.into(),
        ..step("turn-1", phase, offset, terminal)
    };
    assert_inserted(&mut client, named("started", 200, "s1", "1.0.0", false)).await;
    assert_inserted(&mut client, named("settled", 400, "s2", "2.0.0", true)).await;
    // Both arrive last but are older than "settled".
    assert_inserted(&mut client, named("tool", 300, "s3", "1.5.0", false)).await;
    assert_inserted(&mut client, named("early", 100, "s0", "0.9.0", false)).await;

    let expected = TurnSummary {
        turn_id: "turn-1".into(),
        session_id: "s2".into(),
        first_timestamp: Some(ts(T0 + 100)),
        last_timestamp: Some(ts(T0 + 400)),
        last_phase: "settled".into(),
        checkpoint_count: 4,
        terminal: true,
        workflow_version: "2.0.0".into(),
    };
    assert_eq!(assert_only_turn(&mut client).await, expected);
}

/// Deletes `turn` in the default namespace and returns the count.
async fn delete(client: &mut Client, turn: &str) -> u64 {
    let request = DeleteTurnRequest { turn_id: turn.into(), ..Default::default() };
    client.delete_turn(request).await.expect("DeleteTurn succeeds").into_inner().deleted
}

#[tokio::test]
async fn delete_turn_removes_every_checkpoint_of_one_turn() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_lifecycles_inserted(&mut client).await;
    let kept = restore_all(&mut client, restore("b-done")).await;

    assert_eq!(delete(&mut client, "c-reopened").await, 3);

    assert!(restore_all(&mut client, restore("c-reopened")).await.is_empty());
    let remaining = list_all(&mut client, list_turns(TurnStatus::Any)).await;
    assert_eq!(turn_ids(&remaining), ["a-open", "b-done", "d-late-older", "e-tie"]);
    assert_eq!(restore_all(&mut client, restore("b-done")).await, kept, "other turns are untouched");
    assert_eq!(delete(&mut client, "c-reopened").await, 0, "a second delete finds nothing");
    assert_eq!(delete(&mut client, "never-written").await, 0);
}

#[tokio::test]
async fn a_deleted_turn_starts_afresh() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_inserted(&mut client, step("turn-1", "started", 100, false)).await;
    assert_inserted(&mut client, step("turn-1", "settled", 200, true)).await;
    delete(&mut client, "turn-1").await;

    // The same key as before the delete is new again.
    assert_inserted(&mut client, step("turn-1", "started", 100, false)).await;

    let summary = assert_only_turn(&mut client).await;
    assert_eq!((summary.checkpoint_count, summary.terminal, summary.last_phase.as_str()), (1, false, "started"));
    assert_eq!(summary.last_timestamp, Some(ts(T0 + 100)));
}
