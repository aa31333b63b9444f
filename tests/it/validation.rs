//! Invalid input, as a table: every case is one bad field of an otherwise
//! valid request, must fail with the expected code, BadRequest field and
//! ErrorInfo reason, and must store nothing. Values exactly at each limit
//! must be accepted. Bytes that are not a protobuf message at all must be
//! INVALID_ARGUMENT too, not INTERNAL.

use prost::bytes::{Buf, BufMut};
use stepwell::api::pb::{CheckpointRequest, DeleteTurnRequest, ListTurnsRequest, RestoreRequest, TurnStatus};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};

use stepwell_test_support::Client;
use stepwell_test_support::errors::{Rejection, assert_error};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, list_turns, restore, restore_all};
use stepwell_test_support::sidecar::Sidecar;

/// The state limit the validation server runs with: small, so that the
/// limit is cheap to reach.
const STATE_MAX: usize = 1024;

async fn start() -> Sidecar {
    Sidecar::builder().configure(|config| config.limits.state_bytes_max = STATE_MAX).start().await
}

/// One request to any CheckpointService RPC.
#[derive(Debug, Clone)]
enum Call {
    Checkpoint(CheckpointRequest),
    Restore(RestoreRequest),
    ListTurns(ListTurnsRequest),
    DeleteTurn(DeleteTurnRequest),
}

impl Call {
    async fn send(self, client: &mut Client) -> Result<(), Status> {
        match self {
            Call::Checkpoint(r) => client.checkpoint(r).await.map(drop),
            Call::Restore(r) => client.restore(r).await.map(drop),
            Call::ListTurns(r) => client.list_turns(r).await.map(drop),
            Call::DeleteTurn(r) => client.delete_turn(r).await.map(drop),
        }
    }
}

/// A valid checkpoint with one change.
fn checkpoint_with(change: impl FnOnce(&mut CheckpointRequest)) -> Call {
    let mut request = checkpoint("turn-1", "started", T0, "{}");
    change(&mut request);
    Call::Checkpoint(request)
}

/// A valid restore with one change.
fn restore_with(change: impl FnOnce(&mut RestoreRequest)) -> Call {
    let mut request = restore("turn-1");
    change(&mut request);
    Call::Restore(request)
}

/// A valid turn listing with one change.
fn list_with(change: impl FnOnce(&mut ListTurnsRequest)) -> Call {
    let mut request = list_turns(TurnStatus::Any);
    change(&mut request);
    Call::ListTurns(request)
}

/// A valid delete with one change.
fn delete_with(change: impl FnOnce(&mut DeleteTurnRequest)) -> Call {
    let mut request = DeleteTurnRequest { turn_id: "turn-1".into(), ..Default::default() };
    change(&mut request);
    Call::DeleteTurn(request)
}

/// A JSON document of exactly `len` bytes: one string.
fn json_of_len(len: usize) -> Vec<u8> {
    format!("\"{}\"", "x".repeat(len - 2)).into_bytes()
}

/// Arrays nested `depth` deep.
fn nested_json(depth: usize) -> Vec<u8> {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
}

/// A timestamp from raw protobuf fields, which may be out of range.
fn raw_ts(seconds: i64, nanos: i32) -> Option<prost_types::Timestamp> {
    Some(prost_types::Timestamp { seconds, nanos })
}

struct Case {
    name: &'static str,
    call: Call,
    code: Code,
    field: &'static str,
    reason: &'static str,
}

fn case(name: &'static str, call: Call, field: &'static str, reason: &'static str) -> Case {
    Case { name, call, code: Code::InvalidArgument, field, reason }
}

const REQUIRED: &str = "FIELD_REQUIRED";
const TOO_LONG: &str = "FIELD_TOO_LONG";
const MALFORMED: &str = "FIELD_MALFORMED";
const OUT_OF_RANGE: &str = "FIELD_OUT_OF_RANGE";
const NOT_JSON: &str = "STATE_NOT_JSON";
const BAD_TOKEN: &str = "INVALID_PAGE_TOKEN";

fn bad_inputs() -> Vec<Case> {
    let s = |text: &str| text.to_owned();
    vec![
        // Checkpoint: required fields.
        case("turn_id missing", checkpoint_with(|r| r.turn_id.clear()), "turn_id", REQUIRED),
        case("phase missing", checkpoint_with(|r| r.phase.clear()), "phase", REQUIRED),
        case("timestamp missing", checkpoint_with(|r| r.timestamp = None), "timestamp", REQUIRED),
        // Checkpoint: each limit exceeded by one.
        case("turn_id 257 bytes", checkpoint_with(|r| r.turn_id = "t".repeat(257)), "turn_id", TOO_LONG),
        case(
            "turn_id 257 bytes of 2-byte chars",
            checkpoint_with(|r| r.turn_id = format!("t{}", "é".repeat(128))),
            "turn_id",
            TOO_LONG,
        ),
        case("session_id 257 bytes", checkpoint_with(|r| r.session_id = "s".repeat(257)), "session_id", TOO_LONG),
        case("phase 129 bytes", checkpoint_with(|r| r.phase = "p".repeat(129)), "phase", TOO_LONG),
        case(
            "workflow_version 129 bytes",
            checkpoint_with(|r| r.workflow_version = "v".repeat(129)),
            "workflow_version",
            TOO_LONG,
        ),
        case(
            "state over the limit by one",
            checkpoint_with(|r| r.state = json_of_len(STATE_MAX + 1)),
            "state",
            TOO_LONG,
        ),
        // Checkpoint: state that is not one UTF-8 JSON document.
        case("state not JSON", checkpoint_with(|r| r.state = b"not json".to_vec()), "state", NOT_JSON),
        case("state empty", checkpoint_with(|r| r.state.clear()), "state", NOT_JSON),
        case("state with trailing data", checkpoint_with(|r| r.state = b"{} {}".to_vec()), "state", NOT_JSON),
        case("state truncated", checkpoint_with(|r| r.state = br#"{"a":[1,2"#.to_vec()), "state", NOT_JSON),
        case("state not UTF-8", checkpoint_with(|r| r.state = b"\xff\xfe".to_vec()), "state", NOT_JSON),
        case(
            "state not UTF-8 inside a string",
            checkpoint_with(|r| r.state = b"{\"a\":\"\xff\"}".to_vec()),
            "state",
            NOT_JSON,
        ),
        case("state in UTF-16", checkpoint_with(|r| r.state = b"\xff\xfe{\x00}\x00".to_vec()), "state", NOT_JSON),
        case("state nested 65 deep", checkpoint_with(|r| r.state = nested_json(65)), "state", NOT_JSON),
        // Checkpoint: malformed text.
        case("namespace uppercase", checkpoint_with(|r| r.namespace = s("Tenant")), "namespace", MALFORMED),
        case("namespace leading dash", checkpoint_with(|r| r.namespace = s("-tenant")), "namespace", MALFORMED),
        case("namespace leading dot", checkpoint_with(|r| r.namespace = s(".tenant")), "namespace", MALFORMED),
        case("namespace 64 bytes", checkpoint_with(|r| r.namespace = "n".repeat(64)), "namespace", TOO_LONG),
        case(
            "namespace SQL",
            checkpoint_with(|r| r.namespace = s("a';drop table checkpoints;--")),
            "namespace",
            MALFORMED,
        ),
        case("namespace with a slash", checkpoint_with(|r| r.namespace = s("a/b")), "namespace", MALFORMED),
        case("namespace non-ASCII", checkpoint_with(|r| r.namespace = s("tenant-é")), "namespace", MALFORMED),
        case("turn_id with NUL", checkpoint_with(|r| r.turn_id = s("turn\0one")), "turn_id", MALFORMED),
        case("turn_id with a newline", checkpoint_with(|r| r.turn_id = s("turn\none")), "turn_id", MALFORMED),
        case("turn_id with DEL", checkpoint_with(|r| r.turn_id = s("turn\u{7f}")), "turn_id", MALFORMED),
        case("session_id with NUL", checkpoint_with(|r| r.session_id = s("s\0")), "session_id", MALFORMED),
        case(
            "session_id with an escape",
            checkpoint_with(|r| r.session_id = s("\u{1b}[31ms")),
            "session_id",
            MALFORMED,
        ),
        case(
            "workflow_version with a tab",
            checkpoint_with(|r| r.workflow_version = s("1.0\t")),
            "workflow_version",
            MALFORMED,
        ),
        case("phase with a space", checkpoint_with(|r| r.phase = s("tool received")), "phase", MALFORMED),
        case("phase non-ASCII", checkpoint_with(|r| r.phase = s("phasé")), "phase", MALFORMED),
        // Checkpoint: timestamps that are not a valid instant in range.
        case(
            "timestamp nanos 1e9",
            checkpoint_with(|r| r.timestamp = raw_ts(1, 1_000_000_000)),
            "timestamp",
            OUT_OF_RANGE,
        ),
        case("timestamp nanos negative", checkpoint_with(|r| r.timestamp = raw_ts(1, -1)), "timestamp", OUT_OF_RANGE),
        case(
            "timestamp after 2262",
            checkpoint_with(|r| r.timestamp = raw_ts(9_300_000_000, 0)),
            "timestamp",
            OUT_OF_RANGE,
        ),
        case(
            "timestamp one ns after the last",
            checkpoint_with(|r| r.timestamp = raw_ts(9_223_372_036, 854_775_808)),
            "timestamp",
            OUT_OF_RANGE,
        ),
        case(
            "timestamp before 1677",
            checkpoint_with(|r| r.timestamp = raw_ts(-9_300_000_000, 0)),
            "timestamp",
            OUT_OF_RANGE,
        ),
        // Restore.
        case("restore turn_id missing", restore_with(|r| r.turn_id.clear()), "turn_id", REQUIRED),
        case("restore turn_id 257 bytes", restore_with(|r| r.turn_id = "t".repeat(257)), "turn_id", TOO_LONG),
        case("restore namespace bad", restore_with(|r| r.namespace = s("A")), "namespace", MALFORMED),
        case("restore page_size -1", restore_with(|r| r.page_size = -1), "page_size", OUT_OF_RANGE),
        case("restore page_size above max", restore_with(|r| r.page_size = 10_001), "page_size", OUT_OF_RANGE),
        case("restore page_token garbage", restore_with(|r| r.page_token = s("not a token!")), "page_token", BAD_TOKEN),
        case(
            "restore page_token decodes but is not ours",
            restore_with(|r| r.page_token = s("AAAA")),
            "page_token",
            BAD_TOKEN,
        ),
        case("restore phase with a space", restore_with(|r| r.phase = s("a b")), "phase", MALFORMED),
        case(
            "restore expect_workflow_version 129 bytes",
            restore_with(|r| r.expect_workflow_version = "v".repeat(129)),
            "expect_workflow_version",
            TOO_LONG,
        ),
        // ListTurns.
        case("list namespace bad", list_with(|r| r.namespace = s("a';drop")), "namespace", MALFORMED),
        case("list page_size -1", list_with(|r| r.page_size = -1), "page_size", OUT_OF_RANGE),
        case("list page_size above max", list_with(|r| r.page_size = 10_001), "page_size", OUT_OF_RANGE),
        case("list status unknown", list_with(|r| r.status = 42), "status", OUT_OF_RANGE),
        case("list page_token garbage", list_with(|r| r.page_token = s("%%%")), "page_token", BAD_TOKEN),
        case(
            "list page_token decodes but is not ours",
            list_with(|r| r.page_token = s("AAAA")),
            "page_token",
            BAD_TOKEN,
        ),
        case("list session_id 257 bytes", list_with(|r| r.session_id = "s".repeat(257)), "session_id", TOO_LONG),
        case(
            "list updated_before nanos negative",
            list_with(|r| r.updated_before = raw_ts(0, -1)),
            "updated_before",
            OUT_OF_RANGE,
        ),
        // DeleteTurn.
        case("delete turn_id missing", delete_with(|r| r.turn_id.clear()), "turn_id", REQUIRED),
        case("delete namespace bad", delete_with(|r| r.namespace = s("-x")), "namespace", MALFORMED),
    ]
}

/// The turns the default namespace holds, deleted so that the next case
/// starts from an empty store again.
async fn take_stored(client: &mut Client) -> Vec<String> {
    let turns = client.list_turns(list_turns(TurnStatus::Any)).await.expect("ListTurns succeeds").into_inner().turns;
    let mut ids = Vec::new();
    for turn in turns {
        let request = DeleteTurnRequest { turn_id: turn.turn_id.clone(), ..Default::default() };
        client.delete_turn(request).await.expect("DeleteTurn succeeds");
        ids.push(turn.turn_id);
    }
    ids
}

/// Asserts that the default namespace holds nothing.
async fn assert_nothing_stored(client: &mut Client, after: &str) {
    let stored = take_stored(client).await;
    assert!(stored.is_empty(), "{after}: nothing is stored, found turns {stored:?}");
}

#[tokio::test]
async fn every_bad_input_is_rejected_with_its_field_and_reason_and_stores_nothing() {
    let server = start().await;
    let mut client = server.client();

    // Every case runs and every mismatch is reported, so that one failure
    // does not hide the next.
    let mut failures = Vec::new();
    for Case { name, call, code, field, reason } in bad_inputs() {
        match call.send(&mut client).await {
            Ok(()) => failures.push(format!("{name}: accepted")),
            Err(status) => {
                let (got, expected) = (Rejection::of(&status), Rejection::new(code, field, reason));
                if got != expected {
                    failures.push(format!("{name}: got {got:?}, expected {expected:?} ({})", status.message()));
                }
            }
        }
        let stored = take_stored(&mut client).await;
        if !stored.is_empty() {
            failures.push(format!("{name}: stored turns {stored:?}"));
        }
    }
    assert!(failures.is_empty(), "{} bad inputs mishandled:\n{}", failures.len(), failures.join("\n"));
}

/// A valid checkpoint of its own turn, named after the case, with one change.
fn accepted(name: &'static str, change: fn(&mut CheckpointRequest)) -> (&'static str, CheckpointRequest) {
    let mut request = checkpoint(name, "started", T0, "{}");
    change(&mut request);
    (name, request)
}

#[tokio::test]
async fn values_exactly_at_each_limit_are_accepted() {
    let server = start().await;
    let mut client = server.client();
    let checkpoints = [
        accepted("turn_id 256 bytes", |r| r.turn_id = "t".repeat(256)),
        accepted("session_id 256 bytes", |r| r.session_id = "s".repeat(256)),
        accepted("phase 128 bytes of every allowed kind", |r| r.phase = format!("Az09._:/-{}", "p".repeat(119))),
        accepted("workflow_version 128 bytes", |r| r.workflow_version = "v".repeat(128)),
        accepted("state at the limit", |r| r.state = json_of_len(STATE_MAX)),
        accepted("state nested 64 deep", |r| r.state = nested_json(64)),
        accepted("brackets in strings do not nest", |r| r.state = format!("[\"{}\"]", "[".repeat(100)).into_bytes()),
        accepted("namespace 63 bytes", |r| r.namespace = format!("0{}zz", "a._-".repeat(15))),
        accepted("timestamp nanos 999999999", |r| r.timestamp = raw_ts(1, 999_999_999)),
    ];
    for (name, request) in checkpoints {
        let stored = assert_inserted(&mut client, request.clone()).await;
        let restore_it = RestoreRequest { namespace: request.namespace.clone(), ..restore(&request.turn_id) };
        assert_eq!(stored.state, request.state, "{name}: state byte for byte");
        assert_eq!(restore_all(&mut client, restore_it).await, [stored], "{name}: stored as answered");
    }

    let reads = [restore_with(|r| r.page_size = 10_000), list_with(|r| r.page_size = 10_000)];
    for call in reads {
        let label = format!("{call:?}");
        call.send(&mut client).await.unwrap_or_else(|status| panic!("{label}: {status:?}"));
    }
}

/// A codec that sends the given bytes as the message, so a test can put
/// anything on the wire, and ignores any response body.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = ();
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = ();
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<()>, Status> {
        src.advance(src.remaining());
        Ok(Some(()))
    }
}

#[tokio::test]
async fn bytes_that_are_not_a_message_are_invalid_argument() {
    let server = start().await;
    let mut client = server.client();
    let mut grpc = tonic::client::Grpc::new(server.channel());
    let cases: [(&str, &'static str, &[u8]); 5] = [
        // turn_id (field 2) with a length varint cut short.
        ("truncated length", "Checkpoint", &[0x12, 0xff]),
        // turn_id claims 5 bytes and carries 1.
        ("truncated field", "Checkpoint", &[0x12, 0x05, b'a']),
        // turn_id is a string, and 0xff is not UTF-8.
        ("string not UTF-8", "Checkpoint", &[0x12, 0x01, 0xff]),
        // turn_id sent as a varint: the wrong wire type.
        ("wrong wire type", "Restore", &[0x10, 0x01]),
        // Field number 0 does not exist in protobuf.
        ("field number zero", "ListTurns", &[0x00, 0x01]),
    ];

    for (name, method, bytes) in cases {
        grpc.ready().await.expect("the channel is ready");
        let path = PathAndQuery::from_maybe_shared(format!("/stepwell.v1.CheckpointService/{method}")).expect("a path");
        let status = grpc.unary(tonic::Request::new(bytes.to_vec()), path, RawCodec).await.expect_err(name);
        assert_error(&status, Code::InvalidArgument, "MALFORMED_REQUEST");
        assert_nothing_stored(&mut client, name).await;
    }
    // The connection stays usable after the rejections.
    assert_inserted(&mut client, checkpoint("turn-1", "started", T0, "{}")).await;
}
