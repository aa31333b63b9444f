//! CopyTurn: every record of the source turn, of every kind and scope, is
//! copied to the target with all its fields; what the target held at the
//! same address is replaced, what it held elsewhere stays; the source is
//! unchanged; an unknown source copies nothing; and a copy onto itself is
//! refused naming target_turn_id.

use serde_json::json;
use stepwell::api::pb::{CopyTurnRequest, Record};

use stepwell_test_support::RecordClient;
use stepwell_test_support::sidecar::Sidecar;

use super::{
    KIND, assert_refused_naming, in_scope, list_turn, metadata_of, put_ok, record, records, with_metadata, with_payload,
};

const KINDS: [&str; 3] = [KIND, "write", "blob"];

/// Every record of `turn`, of the kinds tests use, without `recorded_at`
/// and with the turn blanked, so that a copy compares equal to its source.
async fn contents(client: &mut RecordClient, turn: &str) -> Vec<(String, String, String, Record)> {
    let mut all = Vec::new();
    for kind in KINDS {
        for mut r in records(client, list_turn(turn, kind)).await {
            assert_eq!(r.turn_id, turn);
            r.turn_id.clear();
            r.recorded_at = None;
            let metadata = metadata_of(&r).map(|m| m.to_string()).unwrap_or_default();
            r.metadata.clear();
            all.push((r.kind.clone(), r.scope.clone(), metadata, r));
        }
    }
    all
}

fn copy(source: &str, target: &str) -> CopyTurnRequest {
    CopyTurnRequest { source_turn_id: source.to_owned(), target_turn_id: target.to_owned(), ..Default::default() }
}

async fn copied(client: &mut RecordClient, request: CopyTurnRequest) -> i64 {
    client.copy_turn(request).await.expect("CopyTurn succeeds").into_inner().copied
}

#[tokio::test]
async fn a_copy_holds_every_record_of_the_source_and_replaces_the_targets_at_the_same_address() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let mut source = Vec::new();
    for kind in KINDS {
        for scope in ["", "inner"] {
            for id in ["a", "b"] {
                source.push(Record {
                    parent_id: "p".to_owned(),
                    content_type: "application/octet-stream".to_owned(),
                    refs: vec!["x".to_owned(), id.to_owned()],
                    ..with_metadata(
                        with_payload(in_scope(record("src", kind, id), scope), &[0, 0xff, id.as_bytes()[0]]),
                        &json!({"kind": kind, "scope": scope, "n": [1, 2.5]}).to_string(),
                    )
                });
            }
        }
    }
    put_ok(&mut client, source.clone()).await;
    // The target already holds records at some of the addresses, and elsewhere.
    put_ok(
        &mut client,
        vec![
            with_payload(record("dst", KIND, "a"), b"old a"),
            with_metadata(in_scope(record("dst", "blob", "b"), "inner"), r#"{"old": true}"#),
            with_payload(record("dst", KIND, "only-in-target"), b"kept"),
            with_payload(in_scope(record("dst", "write", "a"), "elsewhere"), b"kept too"),
        ],
    )
    .await;
    let before = contents(&mut client, "src").await;
    assert_eq!(before.len(), 12);

    assert_eq!(copied(&mut client, copy("src", "dst")).await, 12);
    assert_eq!(contents(&mut client, "src").await, before, "the source is unchanged");
    let target = contents(&mut client, "dst").await;
    let extra: Vec<_> = target.iter().filter(|t| !before.contains(t)).map(|(_, _, _, r)| r.payload.clone()).collect();
    assert_eq!(extra, [b"kept".to_vec(), b"kept too".to_vec()], "the target's other records stay");
    let from_source: Vec<_> = target.iter().filter(|t| before.contains(t)).cloned().collect();
    assert_eq!(from_source, before, "every record of the source, the target's at its addresses replaced");
    for r in records(&mut client, list_turn("dst", KIND)).await {
        assert!(r.recorded_at.is_some(), "{r:?}");
    }

    // Copying again changes nothing but the dates.
    assert_eq!(copied(&mut client, copy("src", "dst")).await, 12);
    assert_eq!(contents(&mut client, "dst").await, target);
}

#[tokio::test]
async fn an_unknown_source_copies_nothing_and_a_copy_onto_itself_is_refused() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![record("t", KIND, "a")]).await;
    assert_eq!(copied(&mut client, copy("missing", "t")).await, 0);
    assert_eq!(records(&mut client, list_turn("t", KIND)).await.len(), 1, "the target is untouched");
    // Another namespace's turn of the same name is not the source.
    let other = CopyTurnRequest { namespace: "other".to_owned(), ..copy("t", "u") };
    assert_eq!(copied(&mut client, other).await, 0);

    assert_refused_naming(client.copy_turn(copy("t", "t")).await, "target_turn_id", "FIELD_MALFORMED");
    assert_refused_naming(client.copy_turn(copy("", "t")).await, "source_turn_id", "FIELD_REQUIRED");
    assert_refused_naming(client.copy_turn(copy("t", "")).await, "target_turn_id", "FIELD_REQUIRED");
    assert_refused_naming(client.copy_turn(copy("t", &"u".repeat(257))).await, "target_turn_id", "FIELD_TOO_LONG");
    assert_refused_naming(client.copy_turn(copy("t\n", "u")).await, "source_turn_id", "FIELD_MALFORMED");
    assert_eq!(records(&mut client, list_turn("t", KIND)).await.len(), 1);
    assert!(records(&mut client, list_turn("u", KIND)).await.is_empty(), "nothing was copied");
}
