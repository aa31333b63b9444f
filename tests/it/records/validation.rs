//! Invalid RecordService input, as tables: each case is one bad field of an
//! otherwise valid request, refused INVALID_ARGUMENT with the ErrorInfo
//! reason and the BadRequest field that names it (`records[1].id`,
//! `records[0].refs[2]`, `fence.lease_token`, ...), and a refused put
//! stores nothing, not even its valid records. Values exactly at each limit
//! (--records-per-request-max, --record-bytes-max and
//! --record-metadata-bytes-max set small here, and the contract's fixed
//! ones) are accepted.

use stepwell::api::pb::{ListRecordsRequest, PutRecordsRequest, Record};

use stepwell_test_support::RecordClient;
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, assert_refused_naming, list_turn, put, put_ok, record, records, with_metadata, with_payload};

const PER_REQUEST: u32 = 4;
const RECORD_BYTES: usize = 2048;
const METADATA_BYTES: usize = 256;

async fn start() -> Sidecar {
    Sidecar::builder()
        .configure(|config| {
            config.limits.records_per_request_max = PER_REQUEST;
            config.limits.record_bytes_max = RECORD_BYTES;
            config.limits.record_metadata_bytes_max = METADATA_BYTES;
        })
        .start()
        .await
}

/// Every record of turn "t" of the kinds the cases write.
async fn turn_t(client: &mut RecordClient) -> Vec<Record> {
    let mut all = records(client, list_turn("t", KIND)).await;
    all.extend(records(client, list_turn("t", "blob")).await);
    all
}

/// A valid record 0 and record 1 changed by `change`.
fn second(change: impl FnOnce(&mut Record)) -> PutRecordsRequest {
    let mut bad = record("t", KIND, "bad");
    change(&mut bad);
    put(vec![record("t", "blob", "valid"), bad])
}

/// A lone record changed by `change`.
fn first(change: impl FnOnce(&mut Record)) -> PutRecordsRequest {
    let mut bad = record("t", KIND, "bad");
    change(&mut bad);
    put(vec![bad])
}

/// A JSON object nested `depth` levels deep (arrays within it), compact.
fn nested(depth: usize) -> String {
    format!(r#"{{"a":{}1{}}}"#, "[".repeat(depth - 1), "]".repeat(depth - 1))
}

#[tokio::test]
async fn invalid_puts_are_refused_naming_the_field_and_store_nothing() {
    let server = start().await;
    let mut client = server.records();
    let long = |n: usize| "x".repeat(n);
    let cases: Vec<(PutRecordsRequest, &str, &str)> = vec![
        (put(Vec::new()), "records", "FIELD_REQUIRED"),
        (put((0..=PER_REQUEST).map(|n| record("t", KIND, &n.to_string())).collect()), "records", "FIELD_TOO_LONG"),
        (second(|r| r.id.clear()), "records[1].id", "FIELD_REQUIRED"),
        (second(|r| r.id = long(1025)), "records[1].id", "FIELD_TOO_LONG"),
        (second(|r| r.id = "a\0b".to_owned()), "records[1].id", "FIELD_MALFORMED"),
        (first(|r| r.kind.clear()), "records[0].kind", "FIELD_REQUIRED"),
        (second(|r| r.kind = "Checkpoint".to_owned()), "records[1].kind", "FIELD_MALFORMED"),
        (second(|r| r.kind = "check point".to_owned()), "records[1].kind", "FIELD_MALFORMED"),
        (second(|r| r.kind = "checkpoint/1".to_owned()), "records[1].kind", "FIELD_MALFORMED"),
        (second(|r| r.kind = "é".to_owned()), "records[1].kind", "FIELD_MALFORMED"),
        (second(|r| r.kind = long(65)), "records[1].kind", "FIELD_TOO_LONG"),
        (second(|r| r.turn_id.clear()), "records[1].turn_id", "FIELD_REQUIRED"),
        (second(|r| r.turn_id = long(257)), "records[1].turn_id", "FIELD_TOO_LONG"),
        (second(|r| r.turn_id = "t\u{1b}".to_owned()), "records[1].turn_id", "FIELD_MALFORMED"),
        (second(|r| r.scope = long(1025)), "records[1].scope", "FIELD_TOO_LONG"),
        (second(|r| r.scope = "s\0".to_owned()), "records[1].scope", "FIELD_MALFORMED"),
        (second(|r| r.parent_id = long(1025)), "records[1].parent_id", "FIELD_TOO_LONG"),
        (second(|r| r.parent_id = "\0".to_owned()), "records[1].parent_id", "FIELD_MALFORMED"),
        (second(|r| r.content_type = "text/plain\n".to_owned()), "records[1].content_type", "FIELD_MALFORMED"),
        (second(|r| r.content_type = "text/\u{7f}".to_owned()), "records[1].content_type", "FIELD_MALFORMED"),
        (second(|r| r.content_type = "text/é".to_owned()), "records[1].content_type", "FIELD_MALFORMED"),
        (second(|r| r.content_type = long(129)), "records[1].content_type", "FIELD_TOO_LONG"),
        (second(|r| r.payload = vec![0; RECORD_BYTES + 1]), "records[1].payload", "FIELD_TOO_LONG"),
        (
            second(|r| *r = with_metadata(with_payload(r.clone(), &[1; RECORD_BYTES - 10]), r#"{"k": "0123456789"}"#)),
            "records[1].payload",
            "FIELD_TOO_LONG",
        ),
        (
            second(|r| {
                r.payload = vec![1; RECORD_BYTES - 10];
                r.refs = vec!["r1".to_owned(), "r2".to_owned()];
            }),
            "records[1].payload",
            "FIELD_TOO_LONG",
        ),
        (
            second(|r| r.metadata = format!(r#"{{"k": "{}"}}"#, long(METADATA_BYTES - 8)).into_bytes()),
            "records[1].metadata",
            "FIELD_TOO_LONG",
        ),
        (second(|r| r.metadata = b"[1, 2]".to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = b"\"text\"".to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = b"null".to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = b"{\"k\": 1".to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = b"{\"k\": \"\xff\"}".to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = br#"{"k": "a\u0000b"}"#.to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = br#"{"a\u0000": 1}"#.to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = br#"{"k": ["\u0000"]}"#.to_vec()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.metadata = nested(65).into_bytes()), "records[1].metadata", "STATE_NOT_JSON"),
        (second(|r| r.refs = vec![String::new(); 4097]), "records[1].refs", "FIELD_TOO_LONG"),
        (
            second(|r| r.refs = vec!["a".to_owned(), "b".to_owned(), String::new()]),
            "records[1].refs[2]",
            "FIELD_REQUIRED",
        ),
        (second(|r| r.refs = vec!["a\0".to_owned()]), "records[1].refs[0]", "FIELD_MALFORMED"),
        (second(|r| r.refs = vec![long(1025)]), "records[1].refs[0]", "FIELD_TOO_LONG"),
        (second(|r| r.mode = 5), "records[1].mode", "FIELD_OUT_OF_RANGE"),
        (second(|r| r.mode = -1), "records[1].mode", "FIELD_OUT_OF_RANGE"),
        (
            PutRecordsRequest { namespace: "Bad".to_owned(), ..put(vec![record("t", KIND, "a")]) },
            "namespace",
            "FIELD_MALFORMED",
        ),
    ];
    for (request, field, reason) in cases {
        let answer = client.put_records(request).await;
        assert_refused_naming(answer, field, reason);
        assert!(turn_t(&mut client).await.is_empty(), "the put refused naming {field} stored nothing");
    }
}

#[tokio::test]
async fn values_at_each_limit_are_accepted() {
    let server = start().await;
    let mut client = server.records();
    let exactly = |n: usize| "x".repeat(n);
    put_ok(&mut client, (0..PER_REQUEST).map(|n| record("t", "blob", &n.to_string())).collect()).await;
    let metadata = format!(r#"{{"k":"{}"}}"#, exactly(METADATA_BYTES - 8));
    assert_eq!(metadata.len(), METADATA_BYTES);
    let at_limits = Record {
        turn_id: exactly(256),
        scope: "é".repeat(512),
        kind: "a.b_c-9".repeat(9) + "z",
        id: exactly(1024),
        parent_id: "\u{1f}".repeat(1024),
        content_type: (0x20u8..0x7f).map(char::from).collect::<String>() + &exactly(128 - 95),
        // Payload, metadata and refs ("[]") exactly at --record-bytes-max.
        payload: vec![0xff; RECORD_BYTES - METADATA_BYTES - 2],
        metadata: metadata.clone().into_bytes(),
        ..Default::default()
    };
    assert_eq!((at_limits.kind.len(), at_limits.content_type.len()), (64, 128));
    put_ok(&mut client, vec![at_limits.clone()]).await;
    let request = ListRecordsRequest { turn_id: at_limits.turn_id.clone(), ..super::list(&at_limits.kind) };
    let stored = records(&mut client, request).await;
    assert_eq!(stored.len(), 1);
    assert_eq!(
        (&stored[0].id, &stored[0].scope, &stored[0].parent_id),
        (&at_limits.id, &at_limits.scope, &at_limits.parent_id)
    );
    assert_eq!((&stored[0].content_type, stored[0].payload.len()), (&at_limits.content_type, at_limits.payload.len()));
    let nested_ok = nested(64);
    put_ok(&mut client, vec![with_metadata(record("t", KIND, "deep"), &nested_ok)]).await;
}

#[tokio::test]
async fn four_thousand_and_ninety_six_refs_are_accepted() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let refs: Vec<String> = (0..4096).map(|n| format!("blob-{n}")).collect();
    put_ok(&mut client, vec![Record { refs: refs.clone(), ..record("t", KIND, "c") }]).await;
    let stored = records(&mut client, list_turn("t", KIND)).await;
    assert_eq!(stored[0].refs, refs);
}

#[tokio::test]
async fn invalid_lists_are_refused_naming_the_field() {
    let server = start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![record("t", KIND, "a")]).await;
    let with = |change: fn(&mut ListRecordsRequest)| {
        let mut request = list_turn("t", KIND);
        change(&mut request);
        request
    };
    let cases: Vec<(ListRecordsRequest, &str, &str)> = vec![
        (with(|r| r.kind.clear()), "kind", "FIELD_REQUIRED"),
        (with(|r| r.kind = "K".to_owned()), "kind", "FIELD_MALFORMED"),
        (with(|r| r.children_kind = "Write".to_owned()), "children_kind", "FIELD_MALFORMED"),
        (with(|r| r.refs_kind = "x".repeat(65)), "refs_kind", "FIELD_TOO_LONG"),
        (with(|r| r.turn_id = "t\n".to_owned()), "turn_id", "FIELD_MALFORMED"),
        (with(|r| r.turn_id = "t".repeat(257)), "turn_id", "FIELD_TOO_LONG"),
        (with(|r| r.scope = "\0".to_owned()), "scope", "FIELD_MALFORMED"),
        (with(|r| r.id = "a\0".to_owned()), "id", "FIELD_MALFORMED"),
        (with(|r| r.before_id = "b".repeat(1025)), "before_id", "FIELD_TOO_LONG"),
        (with(|r| r.page_size = -1), "page_size", "FIELD_OUT_OF_RANGE"),
        (with(|r| r.page_size = 1_000_000), "page_size", "FIELD_OUT_OF_RANGE"),
        (with(|r| r.page_token = "not a token!".to_owned()), "page_token", "INVALID_PAGE_TOKEN"),
        (with(|r| r.page_token = "AAAA".to_owned()), "page_token", "INVALID_PAGE_TOKEN"),
        (with(|r| r.page_token = "Z3t9".to_owned()), "page_token", "INVALID_PAGE_TOKEN"),
        (
            with(|r| r.metadata_contains = format!(r#"{{"k":"{}"}}"#, "x".repeat(METADATA_BYTES)).into_bytes()),
            "metadata_contains",
            "FIELD_TOO_LONG",
        ),
    ];
    for (request, field, reason) in cases {
        let answer = client.list_records(request).await;
        assert_refused_naming(answer, field, reason);
    }
}
