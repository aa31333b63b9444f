//! Namespaces as the isolation boundary: nothing written in one is visible
//! to, conflicts with, or can be deleted from another; and the empty
//! namespace is the same as "default".

use stepwell::api::pb::{CheckpointRequest, DeleteTurnRequest, ListTurnsRequest, RestoreRequest, TurnStatus};

use stepwell_test_support::Client;
use stepwell_test_support::requests::{
    T0, assert_inserted, checkpoint, list_all, list_turns, restore, restore_all, states, turn_ids,
};
use stepwell_test_support::sidecar::Sidecar;

fn in_namespace(namespace: &str, request: CheckpointRequest) -> CheckpointRequest {
    CheckpointRequest { namespace: namespace.into(), ..request }
}

async fn restore_in(client: &mut Client, namespace: &str, turn: &str) -> Vec<String> {
    let request = RestoreRequest { namespace: namespace.into(), ..restore(turn) };
    states(&restore_all(client, request).await).into_iter().map(str::to_owned).collect()
}

async fn turns_in(client: &mut Client, namespace: &str) -> Vec<String> {
    let request = ListTurnsRequest { namespace: namespace.into(), ..list_turns(TurnStatus::Any) };
    turn_ids(&list_all(client, request).await).into_iter().map(str::to_owned).collect()
}

async fn delete_in(client: &mut Client, namespace: &str, turn: &str) -> u64 {
    let request = DeleteTurnRequest { namespace: namespace.into(), turn_id: turn.into(), include_records: false };
    client.delete_turn(request).await.expect("DeleteTurn succeeds").into_inner().deleted
}

#[tokio::test]
async fn nothing_crosses_from_one_namespace_to_another() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    assert_inserted(&mut client, in_namespace("tenant-a", checkpoint("shared", "started", T0, "\"a1\""))).await;
    assert_inserted(&mut client, in_namespace("tenant-a", checkpoint("only-a", "started", T0, "\"a2\""))).await;
    // The same key with other content in another namespace is not a conflict.
    assert_inserted(&mut client, in_namespace("tenant-b", checkpoint("shared", "started", T0, "\"b1\""))).await;

    assert_eq!(restore_in(&mut client, "tenant-a", "shared").await, ["\"a1\""]);
    assert_eq!(restore_in(&mut client, "tenant-b", "shared").await, ["\"b1\""]);
    assert!(restore_in(&mut client, "tenant-b", "only-a").await.is_empty());
    assert_eq!(turns_in(&mut client, "tenant-a").await, ["only-a", "shared"]);
    assert_eq!(turns_in(&mut client, "tenant-b").await, ["shared"]);
    assert!(turns_in(&mut client, "default").await.is_empty());

    assert_eq!(delete_in(&mut client, "tenant-b", "only-a").await, 0, "B cannot delete A's turn");
    assert_eq!(delete_in(&mut client, "tenant-b", "shared").await, 1);
    assert_eq!(restore_in(&mut client, "tenant-a", "shared").await, ["\"a1\""], "A's turn of the same id survives");
    assert_eq!(turns_in(&mut client, "tenant-a").await, ["only-a", "shared"]);
}

#[tokio::test]
async fn the_empty_namespace_is_default() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let stored = assert_inserted(&mut client, in_namespace("", checkpoint("turn-1", "started", T0, "{}"))).await;
    assert_inserted(&mut client, in_namespace("default", checkpoint("turn-2", "started", T0, "{}"))).await;

    assert_eq!(stored.namespace, "default");
    // A repeat under the other spelling is the same key.
    let repeat = in_namespace("default", checkpoint("turn-1", "started", T0, "{}"));
    assert!(!client.checkpoint(repeat).await.expect("a repeat succeeds").into_inner().inserted);
    for namespace in ["", "default"] {
        assert_eq!(turns_in(&mut client, namespace).await, ["turn-1", "turn-2"], "{namespace:?}");
        assert_eq!(restore_in(&mut client, namespace, "turn-2").await.len(), 1, "{namespace:?}");
    }
    assert_eq!(delete_in(&mut client, "", "turn-2").await, 1);
    assert_eq!(turns_in(&mut client, "default").await, ["turn-1"]);
}
