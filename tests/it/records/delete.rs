//! DeleteRecords: whole turns (every kind and scope, in the request's
//! namespace only); a kind's records matching any of metadata_any, across
//! turns, with their children_kind children and the refs_kind records that
//! no remaining record of the kind uses (those still used stay, other kinds
//! are untouched); keep_latest, which spares the newest record of each turn
//! and scope and its children; the exact count of what went; and requests
//! that select too much or make no sense, refused naming their field.

use stepwell::api::pb::{DeleteRecordsRequest, ListRecordsRequest, PutRecordsRequest, Record};

use stepwell_test_support::RecordClient;
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, assert_refused_naming, in_scope, list, put_ok, record, records, with_metadata};

/// Every record of the default namespace of the kinds tests use, as
/// "turn/scope/kind/id", sorted.
async fn everything(client: &mut RecordClient, namespace: &str) -> Vec<String> {
    let mut all = Vec::new();
    for kind in [KIND, "write", "blob", "note"] {
        let request = ListRecordsRequest { namespace: namespace.to_owned(), ..list(kind) };
        for r in records(client, request).await {
            all.push(format!("{}/{}/{}/{}", r.turn_id, r.scope, r.kind, r.id));
        }
    }
    all.sort();
    all
}

fn delete(turn_ids: &[&str], kind: &str) -> DeleteRecordsRequest {
    DeleteRecordsRequest {
        turn_ids: turn_ids.iter().map(|t| (*t).to_owned()).collect(),
        kind: kind.to_owned(),
        ..Default::default()
    }
}

async fn deleted(client: &mut RecordClient, request: DeleteRecordsRequest) -> i64 {
    client.delete_records(request).await.expect("DeleteRecords succeeds").into_inner().deleted
}

fn without(all: &[String], gone: &[&str]) -> Vec<String> {
    all.iter().filter(|a| !gone.contains(&a.as_str())).cloned().collect()
}

#[tokio::test]
async fn whole_turns_go_with_every_kind_and_scope() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let mut written = Vec::new();
    for turn in ["t1", "t2", "t3"] {
        for kind in [KIND, "write", "blob"] {
            written.push(record(turn, kind, "a"));
            written.push(in_scope(record(turn, kind, "b"), "inner"));
        }
    }
    put_ok(&mut client, written.clone()).await;
    let other = PutRecordsRequest { namespace: "other".to_owned(), records: written, fence: None };
    client.put_records(other).await.expect("the other namespace's records");
    let before = everything(&mut client, "default").await;
    assert_eq!(before.len(), 18);

    assert_eq!(deleted(&mut client, delete(&["t1", "t3", "missing"], "")).await, 12);
    let left: Vec<String> = before.iter().filter(|a| a.starts_with("t2/")).cloned().collect();
    assert_eq!(everything(&mut client, "default").await, left);
    assert_eq!(everything(&mut client, "other").await.len(), 18, "another namespace's turns stay");
    assert_eq!(deleted(&mut client, delete(&["t1", "t3"], "")).await, 0, "nothing left to delete");

    // With a kind, only that kind's records of the turns.
    assert_eq!(deleted(&mut client, delete(&["t2"], "blob")).await, 2);
    assert_eq!(everything(&mut client, "default").await, without(&left, &["t2//blob/a", "t2/inner/blob/b"]));
}

#[tokio::test]
async fn a_kind_matching_any_filter_goes_across_turns_with_its_children_and_unused_refs() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let checkpoint = |turn: &str, scope: &str, id: &str, metadata: &str, refs: &[&str]| Record {
        refs: refs.iter().map(|r| (*r).to_owned()).collect(),
        ..with_metadata(in_scope(record(turn, KIND, id), scope), metadata)
    };
    let child = |turn: &str, scope: &str, kind: &str, id: &str, parent: &str| Record {
        parent_id: parent.to_owned(),
        ..in_scope(record(turn, kind, id), scope)
    };
    let blob = |turn: &str, scope: &str, id: &str| in_scope(record(turn, "blob", id), scope);
    let written = vec![
        checkpoint("A", "", "c1", r#"{"run": "r1", "step": 1}"#, &["b1", "b2"]),
        checkpoint("A", "", "c2", r#"{"run": "r2", "step": 2}"#, &["b2", "b3"]),
        checkpoint("A", "", "c3", r#"{"run": "r2", "step": 3}"#, &["b4"]),
        Record { refs: vec!["b3".to_owned()], ..record("A", KIND, "c0") },
        child("A", "", "write", "w1", "c1"),
        child("A", "", "write", "w2", "c1"),
        child("A", "", "write", "w3", "c2"),
        child("A", "", "write", "w4", "c3"),
        child("A", "", "note", "n1", "c1"),
        with_metadata(record("A", "note", "n2"), r#"{"run": "r1"}"#),
        blob("A", "", "b1"),
        blob("A", "", "b2"),
        blob("A", "", "b3"),
        blob("A", "", "b4"),
        checkpoint("B", "s", "c1", r#"{"run": "r1", "extra": [1]}"#, &["b1"]),
        child("B", "s", "write", "w1", "c1"),
        blob("B", "s", "b1"),
        // Same ids in another scope of B, not matching: untouched, refs and all.
        checkpoint("B", "", "c1", r#"{"run": "r9"}"#, &["b1"]),
        child("B", "", "write", "w1", "c1"),
        blob("B", "", "b1"),
        checkpoint("C", "", "x", r#"{"run": "r3"}"#, &[]),
        blob("C", "", "orphan"),
    ];
    put_ok(&mut client, written.clone()).await;
    let other = PutRecordsRequest { namespace: "other".to_owned(), records: written, fence: None };
    client.put_records(other).await.expect("the other namespace's records");
    let before = everything(&mut client, "default").await;

    let request = DeleteRecordsRequest {
        kind: KIND.to_owned(),
        metadata_any: vec![br#"{"run": "r1"}"#.to_vec(), br#"{"step": 3}"#.to_vec()],
        children_kind: "write".to_owned(),
        refs_kind: "blob".to_owned(),
        ..Default::default()
    };
    let gone = [
        "A//checkpoint/c1",
        "A//checkpoint/c3",
        "A//write/w1",
        "A//write/w2",
        "A//write/w4",
        "A//blob/b1",
        "A//blob/b4",
        "B/s/checkpoint/c1",
        "B/s/write/w1",
        "B/s/blob/b1",
    ];
    assert_eq!(deleted(&mut client, request.clone()).await, gone.len() as i64, "the count, exactly");
    assert_eq!(everything(&mut client, "default").await, without(&before, &gone));
    assert_eq!(everything(&mut client, "other").await, before, "another namespace is untouched");
    assert_eq!(deleted(&mut client, request).await, 0, "a repeat finds nothing");

    // Narrowed to turns, a filter deletes only there.
    let narrowed = DeleteRecordsRequest {
        namespace: "other".to_owned(),
        metadata_any: vec![br#"{"run": "r1"}"#.to_vec()],
        ..delete(&["B"], KIND)
    };
    assert_eq!(deleted(&mut client, narrowed).await, 1, "B/s/c1 alone: no children_kind or refs_kind given");
    let other_left = everything(&mut client, "other").await;
    assert_eq!(other_left, without(&before, &["B/s/checkpoint/c1"]));
}

#[tokio::test]
async fn keep_latest_spares_the_newest_of_each_turn_and_scope_with_its_children() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let checkpoint = |turn: &str, scope: &str, id: &str, blob: &str| Record {
        refs: vec![blob.to_owned()],
        ..in_scope(record(turn, KIND, id), scope)
    };
    let write = |turn: &str, scope: &str, id: &str, parent: &str| Record {
        parent_id: parent.to_owned(),
        ..in_scope(record(turn, "write", id), scope)
    };
    let blob = |turn: &str, scope: &str, id: &str| in_scope(record(turn, "blob", id), scope);
    put_ok(
        &mut client,
        vec![
            checkpoint("t1", "", "01", "v1"),
            checkpoint("t1", "", "02", "v2"),
            checkpoint("t1", "", "03", "v2"),
            write("t1", "", "w01", "01"),
            write("t1", "", "w02", "02"),
            write("t1", "", "w03", "03"),
            blob("t1", "", "v1"),
            blob("t1", "", "v2"),
            checkpoint("t1", "s", "01", "v1"),
            checkpoint("t1", "s", "05", "v5"),
            blob("t1", "s", "v1"),
            blob("t1", "s", "v5"),
            checkpoint("t2", "", "09", "v9"),
            write("t2", "", "w09", "09"),
            blob("t2", "", "v9"),
            checkpoint("t3", "", "01", "v1"),
            checkpoint("t3", "", "02", "v1"),
        ],
    )
    .await;
    let before = everything(&mut client, "default").await;
    let request = DeleteRecordsRequest {
        keep_latest: true,
        children_kind: "write".to_owned(),
        refs_kind: "blob".to_owned(),
        ..delete(&["t1", "t2"], KIND)
    };
    let gone = [
        "t1//checkpoint/01",
        "t1//checkpoint/02",
        "t1//write/w01",
        "t1//write/w02",
        "t1//blob/v1",
        "t1/s/checkpoint/01",
        "t1/s/blob/v1",
    ];
    assert_eq!(deleted(&mut client, request.clone()).await, gone.len() as i64);
    assert_eq!(everything(&mut client, "default").await, without(&before, &gone), "t3 was not named");
    assert_eq!(deleted(&mut client, request).await, 0, "the newest are kept again");
}

#[tokio::test]
async fn deletions_that_select_too_much_or_make_no_sense_are_refused_and_change_nothing() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![with_metadata(record("t", KIND, "a"), r#"{"k": 1}"#), record("t", "blob", "b")]).await;
    let before = everything(&mut client, "default").await;
    let many: Vec<String> = (0..1001).map(|n| format!("turn-{n}")).collect();
    let filter = || vec![br#"{"k": 1}"#.to_vec()];
    let cases: Vec<(DeleteRecordsRequest, &str, &str)> = vec![
        (DeleteRecordsRequest { metadata_any: filter(), ..delete(&["t"], "") }, "metadata_any", "FIELD_MALFORMED"),
        (DeleteRecordsRequest { keep_latest: true, ..delete(&["t"], "") }, "keep_latest", "FIELD_MALFORMED"),
        (delete(&[], ""), "turn_ids", "FIELD_REQUIRED"),
        (delete(&[], KIND), "turn_ids", "FIELD_REQUIRED"),
        (DeleteRecordsRequest { keep_latest: true, ..delete(&[], KIND) }, "turn_ids", "FIELD_REQUIRED"),
        (DeleteRecordsRequest { turn_ids: many.clone(), ..delete(&[], "") }, "turn_ids", "FIELD_TOO_LONG"),
        (DeleteRecordsRequest { turn_ids: many, ..delete(&[], KIND) }, "turn_ids", "FIELD_TOO_LONG"),
        (delete(&["t", ""], ""), "turn_ids[1]", "FIELD_REQUIRED"),
        (delete(&["t"], "Checkpoint"), "kind", "FIELD_MALFORMED"),
        (
            DeleteRecordsRequest { metadata_any: vec![br#"{"k": 1}"#.to_vec(), b"[1]".to_vec()], ..delete(&[], KIND) },
            "metadata_any[1]",
            "STATE_NOT_JSON",
        ),
        (
            DeleteRecordsRequest { metadata_any: vec![Vec::new()], ..delete(&["t"], KIND) },
            "metadata_any[0]",
            "FIELD_REQUIRED",
        ),
        (
            DeleteRecordsRequest { metadata_any: (0..1001).map(|_| b"{}".to_vec()).collect(), ..delete(&[], KIND) },
            "metadata_any",
            "FIELD_TOO_LONG",
        ),
        (
            DeleteRecordsRequest { children_kind: "W".to_owned(), ..delete(&["t"], KIND) },
            "children_kind",
            "FIELD_MALFORMED",
        ),
        (DeleteRecordsRequest { refs_kind: "b b".to_owned(), ..delete(&["t"], KIND) }, "refs_kind", "FIELD_MALFORMED"),
    ];
    for (request, field, reason) in cases {
        let answer = client.delete_records(request).await;
        assert_refused_naming(answer, field, reason);
        assert_eq!(everything(&mut client, "default").await, before, "a refused deletion of {field} deleted nothing");
    }
    // At the limit: 1000 turns are accepted.
    let thousand: Vec<String> = (0..999).map(|n| format!("turn-{n}")).chain(["t".to_owned()]).collect();
    assert_eq!(deleted(&mut client, DeleteRecordsRequest { turn_ids: thousand, ..delete(&[], "blob") }).await, 1);
}

/// A turn named after `name` (turn ids take no control characters).
fn turn_of(n: usize, name: &str) -> String {
    format!("turn {n} {}", name.replace(char::is_control, ""))
}

#[tokio::test]
async fn odd_ids_scopes_and_turns_are_selected_exactly() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let odd = ["a\"b", "c\\d", "\u{1f}", "é|x", "\u{10000}", " ", "1.0", "1", "null", "[\"x\"]"];
    let mut written = Vec::new();
    for (n, name) in odd.iter().enumerate() {
        let (turn, scope) = (turn_of(n, name), (*name).to_owned());
        let matching = if n % 2 == 0 { r#"{"go": true}"# } else { r#"{"go": false}"# };
        written.push(Record {
            refs: vec![(*name).to_owned(), "shared".to_owned()],
            ..with_metadata(in_scope(record(&turn, KIND, name), &scope), matching)
        });
        written.push(Record { parent_id: (*name).to_owned(), ..in_scope(record(&turn, "write", name), &scope) });
        written.push(in_scope(record(&turn, "blob", name), &scope));
        written.push(in_scope(record(&turn, "blob", "shared"), &scope));
    }
    put_ok(&mut client, written).await;
    let before = everything(&mut client, "default").await;
    let request = DeleteRecordsRequest {
        kind: KIND.to_owned(),
        metadata_any: vec![br#"{"go": true}"#.to_vec()],
        children_kind: "write".to_owned(),
        refs_kind: "blob".to_owned(),
        ..Default::default()
    };
    // Each matching scope loses its checkpoint, its write and both blobs.
    assert_eq!(deleted(&mut client, request).await, 4 * odd.len() as i64 / 2);
    let mut expected = Vec::new();
    for (n, name) in odd.iter().enumerate() {
        if n % 2 == 1 {
            for (kind, id) in [(KIND, *name), ("write", *name), ("blob", *name), ("blob", "shared")] {
                expected.push(format!("{}/{name}/{kind}/{id}", turn_of(n, name)));
            }
        }
    }
    expected.sort();
    assert_eq!(everything(&mut client, "default").await, expected, "from {before:#?}");

    // Whole turns by odd names, too.
    let turns: Vec<String> = odd.iter().enumerate().skip(1).step_by(2).map(|(n, name)| turn_of(n, name)).collect();
    let whole = DeleteRecordsRequest { turn_ids: turns, ..Default::default() };
    assert_eq!(deleted(&mut client, whole).await, expected.len() as i64);
    assert!(everything(&mut client, "default").await.is_empty());
}
