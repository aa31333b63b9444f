//! Request builders and readers shared by the test modules: a valid
//! `checkpoint(turn, phase, ts_ns, state)` request to adjust, the
//! IdempotencyService requests (`begin(key)`, `complete(key, token, result)`
//! and the rest) in the default namespace, timestamps and durations as the
//! API carries them, readers that follow page tokens to the end, and
//! `assert_inserted`, the append that must store a new checkpoint.

use std::time::Duration;

use stepwell::api::pb::{
    BeginRequest, Checkpoint, CheckpointRequest, CompleteRequest, ExtendRequest, GetRequest, ListTurnsRequest,
    ReleaseRequest, RestoreRequest, TurnStatus, TurnSummary,
};

use crate::Client;

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

/// Appends a checkpoint, asserts that it was new (inserted), and returns it
/// as stored.
pub async fn assert_inserted(client: &mut Client, request: CheckpointRequest) -> Checkpoint {
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
