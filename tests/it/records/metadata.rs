//! metadata_contains as the contract defines it, jsonb's `@>`, on either
//! backend: nested objects, arrays (any order, a subset, repeats), numbers
//! by value (2 and 2.0 are equal, but 2^53 + 1 is not 2^53), null, absent
//! keys, records without metadata; a filter that is not a JSON object is
//! INVALID_ARGUMENT naming metadata_contains. And metadata that one store
//! could not hold (jsonb's numeric keeps at most 16383 digits after the
//! point) is refused up front: what the API accepts never fails a put, nor
//! the group-commit batch it shares with other callers' writes.

use stepwell::api::pb::ListRecordsRequest;
use stepwell::api::validate;
use stepwell::config::sections::Config;
use stepwell::domain::keys::BeginArgs;
use stepwell::domain::records::{NewRecord, PutMode, RecordPut};
use stepwell::store::{self, Write};

use stepwell_test_support::RecordClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::Rejection;
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, assert_refused_naming, ids, list, list_turn, put, put_ok, record, records, with_metadata};

async fn matching(client: &mut RecordClient, filter: &str) -> Vec<String> {
    let request = ListRecordsRequest { metadata_contains: filter.as_bytes().to_vec(), ..list_turn("t", KIND) };
    ids(client, request).await
}

#[tokio::test]
async fn metadata_contains_follows_jsonb_containment() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(
        &mut client,
        vec![
            with_metadata(
                record("t", KIND, "r1"),
                r#"{"run_id": "r1", "step": 2, "source": "loop", "tags": ["a", "b"], "nested": {"x": 1, "y": [1, 2], "z": {"deep": true}}, "none": null}"#,
            ),
            with_metadata(record("t", KIND, "r2"), r#"{"run_id": "r2", "step": 2.0, "tags": ["b"], "nested": {"x": 2}}"#),
            with_metadata(record("t", KIND, "r3"), r#"{"run_id": "r3", "step": 3, "tags": [], "nested": {}}"#),
            with_metadata(record("t", KIND, "r4"), r#"{}"#),
            record("t", KIND, "r5"),
            with_metadata(record("t", KIND, "r6"), r#"{"step": "2", "tags": "a"}"#),
        ],
    )
    .await;

    let cases: &[(&str, &[&str])] = &[
        (r#"{}"#, &["r6", "r4", "r3", "r2", "r1"]),
        (r#"{"run_id": "r1"}"#, &["r1"]),
        (r#"{"step": 2}"#, &["r2", "r1"]),
        (r#"{"step": 2.0}"#, &["r2", "r1"]),
        (r#"{"step": 2e0}"#, &["r2", "r1"]),
        (r#"{"step": "2"}"#, &["r6"]),
        (r#"{"step": 2, "run_id": "r2"}"#, &["r2"]),
        (r#"{"tags": ["a"]}"#, &["r1"]),
        (r#"{"tags": ["b"]}"#, &["r2", "r1"]),
        (r#"{"tags": ["b", "a", "b"]}"#, &["r1"]),
        (r#"{"tags": []}"#, &["r3", "r2", "r1"]),
        (r#"{"tags": "a"}"#, &["r6"]),
        (r#"{"nested": {"x": 1}}"#, &["r1"]),
        (r#"{"nested": {"y": [2]}}"#, &["r1"]),
        (r#"{"nested": {"z": {"deep": true}}}"#, &["r1"]),
        (r#"{"nested": {"z": {}}}"#, &["r1"]),
        (r#"{"nested": {}}"#, &["r3", "r2", "r1"]),
        (r#"{"nested": {"x": 1, "y": [3]}}"#, &[]),
        (r#"{"none": null}"#, &["r1"]),
        (r#"{"absent": null}"#, &[]),
        (r#"{"absent": "x"}"#, &[]),
        (r#"{"run_id": "R1"}"#, &[]),
        (r#"{"step": 2.5}"#, &[]),
    ];
    for (filter, expected) in cases {
        assert_eq!(matching(&mut client, filter).await, *expected, "metadata_contains {filter}");
    }
    // Across turns too, and combined with the other filters.
    put_ok(&mut client, vec![with_metadata(record("u", KIND, "r1"), r#"{"run_id": "r1"}"#)]).await;
    let across = ListRecordsRequest { metadata_contains: br#"{"run_id": "r1"}"#.to_vec(), ..list(KIND) };
    let found = records(&mut client, across.clone()).await;
    let turns: Vec<&str> = found.iter().map(|r| r.turn_id.as_str()).collect();
    assert_eq!(turns, ["u", "t"]);
    let below =
        ListRecordsRequest { before_id: "r2".to_owned(), metadata_contains: br#"{"step": 2}"#.to_vec(), ..list(KIND) };
    assert_eq!(ids(&mut client, below).await, ["r1"]);
}

#[tokio::test]
async fn numbers_compare_by_exact_value_as_jsonb_compares_them() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(
        &mut client,
        vec![
            with_metadata(record("t", KIND, "big"), r#"{"n": 9007199254740993}"#),
            with_metadata(record("t", KIND, "fine"), r#"{"n": 1.5}"#),
        ],
    )
    .await;
    assert_eq!(matching(&mut client, r#"{"n": 9007199254740993}"#).await, ["big"]);
    assert_eq!(matching(&mut client, r#"{"n": 1.50}"#).await, ["fine"]);
    let none: Vec<String> = Vec::new();
    let two_to_the_53 = matching(&mut client, r#"{"n": 9007199254740992}"#).await;
    let one = matching(&mut client, r#"{"n": 1}"#).await;
    assert_eq!((two_to_the_53, one), (none.clone(), none), "2^53 is not 2^53 + 1, and 1 is not 1.5");
    // A decimal with more digits than a double keeps is refused rather than
    // compared approximately, on both stores alike.
    let answer =
        client.put_records(put(vec![with_metadata(record("t", KIND, "finer"), r#"{"n": 1.00000000000000001}"#)])).await;
    assert_refused_naming(answer, "records[0].metadata", "STATE_NOT_JSON");
}

#[tokio::test]
async fn a_metadata_filter_that_is_not_a_json_object_is_refused() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![with_metadata(record("t", KIND, "a"), r#"{"k": 1}"#)]).await;
    for filter in [&b"[]"[..], b"1", b"\"k\"", b"null", b"{", b"{\"k\": 1} x", b"\xff\xfe", br#"{"k": "\u0000"}"#] {
        let request = ListRecordsRequest { metadata_contains: filter.to_vec(), ..list_turn("t", KIND) };
        let answer = client.list_records(request).await;
        assert_refused_naming(answer, "metadata_contains", "STATE_NOT_JSON");
    }
}

/// Whether `answer` is OK or INVALID_ARGUMENT naming `field`; what else it was, if not.
fn accepted_or_refused_naming<T>(answer: Result<T, tonic::Status>, field: &str) -> Result<Option<T>, String> {
    match answer {
        Ok(answer) => Ok(Some(answer)),
        Err(status) if Rejection::of(&status) == Rejection::invalid(field, "STATE_NOT_JSON") => Ok(None),
        Err(status) => Err(format!("{field}: {:?} {:?}", status.code(), Rejection::of(&status).reason)),
    }
}

#[tokio::test]
async fn metadata_a_store_cannot_hold_is_refused_without_failing_other_puts() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    // Valid JSON; jsonb's numeric holds at most 16383 digits after the point.
    let tiny = r#"{"x": 1e-20000}"#;
    let mut wrong = Vec::new();
    let filter = ListRecordsRequest { metadata_contains: tiny.as_bytes().to_vec(), ..list_turn("t", KIND) };
    if let Err(what) = accepted_or_refused_naming(client.list_records(filter).await, "metadata_contains") {
        wrong.push(what);
    }
    let answer = client.put_records(put(vec![with_metadata(record("t", KIND, "tiny"), tiny)])).await;
    match accepted_or_refused_naming(answer, "records[0].metadata") {
        Ok(Some(_)) => assert_eq!(super::ids_of(&records(&mut client, list_turn("t", KIND)).await), ["tiny"]),
        Ok(None) => {}
        Err(what) => wrong.push(what),
    }
    assert!(wrong.is_empty(), "neither accepted nor refused INVALID_ARGUMENT: {wrong:?}");
    // Whatever became of it, the store still takes other records.
    put_ok(&mut client, vec![record("t", KIND, "after")]).await;
}

#[tokio::test]
async fn metadata_the_api_accepts_never_fails_the_batch_it_shares_with_other_writes() {
    let test_store = TestStore::new().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    let record = |id: &str, metadata: Option<String>| NewRecord {
        turn_id: "t".to_owned(),
        scope: String::new(),
        kind: KIND.to_owned(),
        id: id.to_owned(),
        parent_id: String::new(),
        content_type: String::new(),
        payload: id.as_bytes().to_vec(),
        metadata,
        refs: "[]".to_owned(),
        mode: PutMode::Upsert,
    };
    let put = |records| Write::PutRecords(RecordPut { namespace: "default".to_owned(), records, fence: None });
    let mut failed = Vec::new();
    for (n, text) in [
        r#"{"x": 1e-20000}"#,
        r#"{"x": 0.0e-99999}"#,
        r#"{"x": -1E-16384}"#,
        r#"{"x": "\ud800"}"#,
        r#"{"x": "\udc00 "}"#,
        r#"{"\ud83d": 1}"#,
    ]
    .into_iter()
    .enumerate()
    {
        // PutRecords checks metadata with this function; what it lets
        // through reaches the store's batch as it is.
        let Ok(Some(metadata)) = validate::json_object("records[0].metadata", text.as_bytes().to_vec(), 65536) else {
            continue;
        };
        let answers = store
            .write(vec![
                put(vec![record(&format!("before-{n}"), None)]),
                put(vec![record(&format!("odd-{n}"), Some(metadata))]),
                Write::Begin(BeginArgs {
                    namespace: "default".to_owned(),
                    key: format!("key-{n}"),
                    fingerprint: Vec::new(),
                    lease: 30_000_000_000,
                    retention: 60_000_000_000,
                }),
            ])
            .await;
        match answers {
            Ok(answers) => assert_eq!(answers.put.len(), 2, "{answers:?}"),
            Err(error) => failed.push(format!("{text}: {error}")),
        }
    }
    assert!(failed.is_empty(), "metadata the API accepted failed the whole batch: {failed:#?}");
}
