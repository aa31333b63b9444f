//! PutRecords as ListRecords reads it back: every field of a record byte
//! for byte (metadata as parsed JSON, since Postgres normalizes jsonb), the
//! commit time; upserts (and PUT_MODE_UNSPECIFIED) replace what is at an
//! address, INSERT_IF_ABSENT keeps it, across calls, within one call, within
//! concurrent calls and within one group-commit batch built at the store
//! (the last upsert of an address wins, else its first insert-if-absent).

use serde_json::json;
use stepwell::api::pb::{PutMode, Record};
use stepwell::config::sections::Config;
use stepwell::domain::records::{NewRecord, PutMode as StorePutMode, RecordPut};
use stepwell::store::{self, Write};
use tokio::task::JoinSet;

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::nanos;
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, list_turn, metadata_of, payloads, put_ok, record, records, with_metadata, with_mode, with_payload};

#[tokio::test]
async fn a_put_record_lists_back_field_for_field() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    // Every byte value, NUL and invalid UTF-8 included.
    let payload: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let full = Record {
        turn_id: "turn-1".to_owned(),
        scope: "sub|graph:1".to_owned(),
        kind: KIND.to_owned(),
        id: "0001".to_owned(),
        parent_id: "0000".to_owned(),
        payload: payload.clone(),
        content_type: "application/msgpack".to_owned(),
        metadata: br#"{ "source": "loop", "step": 2, "writes": {"a": [1, 2.5, null, true]}, "s": "\u00e9\n" }"#
            .to_vec(),
        refs: vec!["blob-b".to_owned(), "blob-a".to_owned(), "blob-b".to_owned()],
        mode: PutMode::Upsert as i32,
        // Ignored in requests.
        recorded_at: Some(prost_types::Timestamp { seconds: 1, nanos: 0 }),
    };
    let bare = Record { payload: Vec::new(), ..record("turn-1", KIND, "0002") };
    let answer = put_ok(&mut client, vec![full.clone(), bare.clone()]).await;

    let listed = records(&mut client, list_turn("turn-1", KIND)).await;
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (got_bare, got_full) = (&listed[0], &listed[1]);
    assert_eq!(
        (got_full.turn_id.as_str(), got_full.scope.as_str(), got_full.kind.as_str(), got_full.id.as_str()),
        ("turn-1", "sub|graph:1", KIND, "0001")
    );
    assert!(got_full.payload == payload, "the payload, byte for byte");
    assert_eq!(got_full.parent_id, "0000");
    assert_eq!(got_full.content_type, "application/msgpack");
    assert_eq!(got_full.refs, ["blob-b", "blob-a"], "refs in the order written, a repeat named once");
    assert_eq!(
        metadata_of(got_full),
        Some(json!({"source": "loop", "step": 2, "writes": {"a": [1, 2.5, null, true]}, "s": "é\n"}))
    );
    assert_eq!(got_full.mode, PutMode::Unspecified as i32, "the mode is not stored");
    assert_eq!(got_full.recorded_at, answer.recorded_at, "recorded_at is the commit's, not the request's");
    assert!(nanos(got_full.recorded_at) > 1_000_000_000_000_000_000, "the sidecar's clock: {got_full:?}");

    assert!(got_bare.payload.is_empty() && got_bare.metadata.is_empty() && got_bare.refs.is_empty(), "{got_bare:?}");
    assert_eq!((got_bare.scope.as_str(), got_bare.parent_id.as_str(), got_bare.content_type.as_str()), ("", "", ""));
    assert_eq!(got_bare.recorded_at, answer.recorded_at);
}

#[tokio::test]
async fn an_upsert_replaces_every_field_and_an_unspecified_mode_is_an_upsert() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let first = Record {
        parent_id: "p".to_owned(),
        content_type: "text/plain".to_owned(),
        refs: vec!["r1".to_owned()],
        ..with_metadata(with_payload(record("t", KIND, "a"), b"first"), r#"{"v": 1}"#)
    };
    put_ok(&mut client, vec![first]).await;

    let second = with_mode(with_payload(record("t", KIND, "a"), b"second"), PutMode::Upsert);
    let answer = put_ok(&mut client, vec![second]).await;
    let listed = records(&mut client, list_turn("t", KIND)).await;
    assert_eq!(listed.len(), 1, "one address, one record: {listed:?}");
    let got = &listed[0];
    assert_eq!(got.payload, b"second");
    assert_eq!((got.parent_id.as_str(), got.content_type.as_str()), ("", ""), "replaced, not merged: {got:?}");
    assert!(got.refs.is_empty() && got.metadata.is_empty(), "replaced, not merged: {got:?}");
    assert_eq!(got.recorded_at, answer.recorded_at, "the upsert's commit time");

    let third = with_mode(with_payload(record("t", KIND, "a"), b"third"), PutMode::Unspecified);
    put_ok(&mut client, vec![third]).await;
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["third"], "PUT_MODE_UNSPECIFIED upserts");
}

#[tokio::test]
async fn insert_if_absent_keeps_what_is_stored_across_calls_and_within_one_call() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let insert = |id: &str, payload: &str| {
        with_mode(with_payload(record("t", KIND, id), payload.as_bytes()), PutMode::InsertIfAbsent)
    };
    let upsert =
        |id: &str, payload: &str| with_mode(with_payload(record("t", KIND, id), payload.as_bytes()), PutMode::Upsert);

    let first = put_ok(&mut client, vec![insert("a", "a1")]).await;
    put_ok(&mut client, vec![insert("a", "a2")]).await;
    let stored = records(&mut client, list_turn("t", KIND)).await;
    assert_eq!((stored[0].payload.as_slice(), stored[0].recorded_at), (&b"a1"[..], first.recorded_at), "kept, undated");

    // Within one call: the first insert-if-absent of an address, unless an
    // upsert of it follows; the last of its upserts.
    put_ok(
        &mut client,
        vec![
            insert("b", "b1"),
            insert("b", "b2"),
            upsert("c", "c1"),
            insert("c", "c2"),
            insert("d", "d1"),
            upsert("d", "d2"),
            upsert("e", "e1"),
            upsert("e", "e2"),
            insert("e", "e3"),
            insert("a", "a3"),
        ],
    )
    .await;
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["e2", "d2", "c1", "b1", "a1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn of_concurrent_puts_to_one_address_one_insert_if_absent_wins_whole() {
    let server = Sidecar::builder().configure(super::waits_for_locks).start().await;
    // The writer waits on the lock, so the calls queue and commit together.
    let lock = super::hold_records_lock(server.store()).await;
    let mut calls = JoinSet::new();
    for n in 0..16 {
        let mut client = server.records();
        let payload = format!("writer-{n}");
        let records = vec![
            with_mode(with_payload(record("t", KIND, "same"), payload.as_bytes()), PutMode::InsertIfAbsent),
            with_mode(with_payload(record("t", "blob", "same"), payload.as_bytes()), PutMode::InsertIfAbsent),
        ];
        calls.spawn(async move { client.put_records(super::put(records)).await });
    }
    lock.release().await;
    for answer in calls.join_all().await {
        answer.expect("every insert-if-absent is answered OK, stored or not");
    }
    let mut client = server.records();
    let checkpoint = payloads(&mut client, list_turn("t", KIND)).await;
    let blob = payloads(&mut client, list_turn("t", "blob")).await;
    assert_eq!(checkpoint.len(), 1, "{checkpoint:?}");
    assert!(checkpoint[0].starts_with("writer-"), "{checkpoint:?}");
    assert_eq!(blob, checkpoint, "one put won both of its records: puts are atomic");
}

fn new_record(id: &str, payload: &str, mode: StorePutMode) -> NewRecord {
    super::store_record("t", id, payload, mode)
}

fn put_of(records: Vec<NewRecord>) -> Write {
    Write::PutRecords(RecordPut { namespace: "default".to_owned(), records, fence: None })
}

#[tokio::test]
async fn in_one_batch_the_last_upsert_of_an_address_wins_else_its_first_insert() {
    use StorePutMode::{InsertIfAbsent as Insert, Upsert};
    let test_store = TestStore::new().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    let stored = store.write(vec![put_of(vec![new_record("f", "f0", Upsert)])]).await.expect("the first batch");
    assert_eq!(stored.put.len(), 1, "{stored:?}");

    // Puts of several callers in one batch, as the writer would take them.
    let answers = store
        .write(vec![
            put_of(vec![new_record("a", "a1", Insert)]),
            put_of(vec![new_record("a", "a2", Insert), new_record("b", "b1", Upsert)]),
            put_of(vec![new_record("b", "b2", Upsert)]),
            put_of(vec![new_record("b", "b3", Insert), new_record("c", "c1", Insert)]),
            put_of(vec![new_record("c", "c2", Upsert), new_record("f", "f1", Insert)]),
            put_of(vec![new_record("c", "c3", Insert), new_record("g", "g1", Insert)]),
            put_of(vec![new_record("f", "f2", Insert), new_record("g", "g2", Upsert)]),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(answers.put.len(), 7, "one answer per put: {answers:?}");
    assert!(answers.put.iter().all(Result::is_ok), "{answers:?}");
    drop(store);

    let server = Sidecar::builder().store(&test_store).start().await;
    let mut client = server.records();
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["g2", "f0", "c2", "b2", "a1"]);
}
