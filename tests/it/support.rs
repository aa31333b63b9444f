//! Request builders and assertions shared by the test modules: a valid
//! `checkpoint(turn, phase, ts_ns, state)` request to adjust, the
//! IdempotencyService requests (`begin(key)`, `complete(key, token, result)`
//! and the rest) in the default namespace, readers that follow page tokens
//! to the end, and checks of the rich error details (ErrorInfo reason and
//! domain, BadRequest field) every failure carries.

use std::time::Duration;

use stepwell::api::pb::{
    BeginRequest, Checkpoint, CheckpointRequest, CompleteRequest, ExtendRequest, GetRequest, ListTurnsRequest,
    ReleaseRequest, RestoreRequest, TurnStatus, TurnSummary,
};
use tonic::{Code, Status};
use tonic_types::{ErrorInfo, StatusExt};

use crate::harness::Client;

/// The ErrorInfo domain of every stepwell error.
pub const DOMAIN: &str = "stepwell.dev";

/// A base time (November 2023) in nanoseconds, so that tests can write
/// `T0 + n` for their timestamps.
pub const T0: i64 = 1_700_000_000_000_000_000;

/// A protobuf timestamp from nanoseconds since the epoch.
pub fn ts(nanos: i64) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: nanos.div_euclid(1_000_000_000), nanos: nanos.rem_euclid(1_000_000_000) as i32 }
}

/// Nanoseconds since the epoch from a returned timestamp.
pub fn nanos(timestamp: Option<prost_types::Timestamp>) -> i64 {
    let t = timestamp.expect("a timestamp is present");
    t.seconds * 1_000_000_000 + i64::from(t.nanos)
}

/// A protobuf duration, as requests carry it.
pub fn duration(d: Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: d.as_secs() as i64, nanos: d.subsec_nanos() as i32 }
}

/// A Begin of `key` in the default namespace, with the default lease and
/// retention and no fingerprint.
pub fn begin(key: &str) -> BeginRequest {
    BeginRequest { key: key.to_owned(), ..Default::default() }
}

/// A Begin of `key` whose lease lasts `lease`.
pub fn begin_leased(key: &str, lease: Duration) -> BeginRequest {
    BeginRequest { lease: Some(duration(lease)), ..begin(key) }
}

/// A Complete of `key` by the holder of `lease_token`.
pub fn complete(key: &str, lease_token: u64, result: &[u8]) -> CompleteRequest {
    CompleteRequest { key: key.to_owned(), lease_token, result: result.to_vec(), ..Default::default() }
}

/// A Release of `key` by the holder of `lease_token`: for a new attempt, or
/// permanently with `error`.
pub fn release(key: &str, lease_token: u64, permanent: bool, error: &str) -> ReleaseRequest {
    ReleaseRequest { key: key.to_owned(), lease_token, error: error.to_owned(), permanent, ..Default::default() }
}

/// An Extend of `key`'s lease to `lease` from now.
pub fn extend(key: &str, lease_token: u64, lease: Duration) -> ExtendRequest {
    ExtendRequest { key: key.to_owned(), lease_token, lease: Some(duration(lease)), ..Default::default() }
}

/// A Get of `key` in the default namespace.
pub fn get(key: &str) -> GetRequest {
    GetRequest { key: key.to_owned(), ..Default::default() }
}

/// A valid checkpoint in the default namespace; tests change fields from here.
pub fn checkpoint(turn: &str, phase: &str, ts_ns: i64, state: &str) -> CheckpointRequest {
    CheckpointRequest {
        turn_id: turn.to_owned(),
        phase: phase.to_owned(),
        timestamp: Some(ts(ts_ns)),
        state: state.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// A Restore of a whole turn, oldest first, in the default namespace.
pub fn restore(turn: &str) -> RestoreRequest {
    RestoreRequest { turn_id: turn.to_owned(), ..Default::default() }
}

/// A ListTurns of every turn in the default namespace.
pub fn list_turns(status: TurnStatus) -> ListTurnsRequest {
    ListTurnsRequest { status: status.into(), ..Default::default() }
}

/// Appends a checkpoint that must be new, and returns it as stored.
pub async fn append(client: &mut Client, request: CheckpointRequest) -> Checkpoint {
    let response = client.checkpoint(request).await.expect("Checkpoint succeeds").into_inner();
    assert!(response.inserted, "a new checkpoint is inserted");
    response.checkpoint.expect("the stored checkpoint is returned")
}

/// Every checkpoint `request` selects, following page tokens to the end.
pub async fn restore_all(client: &mut Client, mut request: RestoreRequest) -> Vec<Checkpoint> {
    let mut all = Vec::new();
    loop {
        let page = client.restore(request.clone()).await.expect("Restore succeeds").into_inner();
        all.extend(page.checkpoints);
        if page.next_page_token.is_empty() {
            return all;
        }
        request.page_token = page.next_page_token;
    }
}

/// The states of `turn` in the default namespace, oldest first.
pub async fn stored_states(client: &mut Client, turn: &str) -> Vec<Vec<u8>> {
    restore_all(client, restore(turn)).await.into_iter().map(|c| c.state).collect()
}

/// Every turn `request` selects, following page tokens to the end.
pub async fn list_all(client: &mut Client, mut request: ListTurnsRequest) -> Vec<TurnSummary> {
    let mut all = Vec::new();
    loop {
        let page = client.list_turns(request.clone()).await.expect("ListTurns succeeds").into_inner();
        all.extend(page.turns);
        if page.next_page_token.is_empty() {
            return all;
        }
        request.page_token = page.next_page_token;
    }
}

/// The turn ids of a listing, in order.
pub fn turn_ids(turns: &[TurnSummary]) -> Vec<&str> {
    turns.iter().map(|t| t.turn_id.as_str()).collect()
}

/// The states of checkpoints, in order, as text.
pub fn states(checkpoints: &[Checkpoint]) -> Vec<&str> {
    checkpoints.iter().map(|c| std::str::from_utf8(&c.state).expect("UTF-8 state")).collect()
}

/// Asserts the status code and the ErrorInfo reason and domain, and returns
/// the ErrorInfo for further checks.
pub fn assert_error(status: &Status, code: Code, reason: &str) -> ErrorInfo {
    assert_eq!(status.code(), code, "status code of {status:?}");
    let info = status.get_details_error_info().unwrap_or_else(|| panic!("ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "ErrorInfo reason of {status:?}");
    assert_eq!(info.domain, DOMAIN, "ErrorInfo domain of {status:?}");
    info
}

/// What a rejection says, for comparison in one piece: the code, the
/// ErrorInfo domain and reason, and the fields of any BadRequest violations.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejection {
    pub code: Code,
    pub domain: String,
    pub reason: String,
    pub fields: Vec<String>,
}

impl Rejection {
    pub fn of(status: &Status) -> Rejection {
        let details = status.get_error_details();
        let info = details.error_info();
        Rejection {
            code: status.code(),
            domain: info.map(|i| i.domain.clone()).unwrap_or_default(),
            reason: info.map(|i| i.reason.clone()).unwrap_or_default(),
            fields: details
                .bad_request()
                .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
                .unwrap_or_default(),
        }
    }

    /// INVALID_ARGUMENT naming `field`, with ErrorInfo `reason`.
    pub fn invalid(field: &str, reason: &str) -> Rejection {
        Rejection::new(Code::InvalidArgument, field, reason)
    }

    pub fn new(code: Code, field: &str, reason: &str) -> Rejection {
        Rejection { code, domain: DOMAIN.to_owned(), reason: reason.to_owned(), fields: vec![field.to_owned()] }
    }
}

/// Asserts INVALID_ARGUMENT naming `field` in a BadRequest violation, with
/// ErrorInfo `reason`.
pub fn assert_invalid(status: &Status, field: &str, reason: &str) {
    assert_eq!(Rejection::of(status), Rejection::invalid(field, reason), "{status:?}");
}
