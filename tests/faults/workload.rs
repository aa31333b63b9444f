//! The load every fault run puts on the sidecar, logging each call in the
//! checker's `History`: half the writers append checkpoints (retrying a tuple
//! whose outcome was indeterminate, as a client would), half run
//! idempotent operations (Begin; on ACQUIRED perform the effect, recorded in
//! the ledger, then Complete, retrying the Complete with the same token).
//! Keys are contended: each new key is begun by two writers, and a quarter
//! of Begins revisit an older key, which must be COMPLETED with its one
//! result, or be taken over only after its lease ran out. One writer in
//! four puts records instead (three per PutRecords, inserted if absent,
//! retried as a client would). One writer in eight, taken from the
//! checkpoint writers, writes waits instead, with an awaiter beside it
//! (`waits`). Afterwards `settle` waits for the run's timers to fire and
//! reads the whole run back through the API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::record_service_client::RecordServiceClient;
use stepwell::api::pb::{
    BeginOutcome, BeginRequest, CheckpointRequest, GetRequest, ListRecordsRequest, PutMode, PutRecordsRequest, Record,
    RecordState, RestoreRequest,
};
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use stepwell_test_support::requests::{T0, complete, duration, nanos, restore_all, ts};
use stepwell_test_support::rng::Rng;

use crate::checker::{Acquisition, History, Outcome, ReadBack, Record as KeyRecord, Stored, StoredRecord, Tuple, hash};
use crate::profile::report;
use crate::waits;

/// The namespace of every fault run's writes.
pub const NAMESPACE: &str = "faults";

/// The lease every Begin asks for: short, so that crashed holders' keys are
/// taken over within a run.
pub const LEASE: Duration = Duration::from_secs(1);

/// Every call gives up after this and counts as indeterminate.
const CALL_DEADLINE: Duration = Duration::from_secs(5);

/// Pause after an error, so that writers do not spin while the sidecar is down.
pub const BACKOFF: Duration = Duration::from_millis(5);

/// Checkpoints per turn.
const TURN_LENGTH: u64 = 500;

/// Running writers; `stop` ends them.
pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

pub fn deadline<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(CALL_DEADLINE);
    request
}

impl Workload {
    /// Starts `writers` writers, each on its own channel from `channel`.
    pub fn start(writers: usize, seed: u64, history: &Arc<History>, channel: impl Fn() -> Channel) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let next_key = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::with_capacity(writers + writers / 8);
        for w in 0..writers {
            let (stop, history, own) = (stop.clone(), history.clone(), channel());
            let rng = Rng::new(seed.wrapping_add(w as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            if w % 4 == 3 {
                tasks.push(tokio::spawn(record_puts(w, own, history, stop, rng)));
            } else if w % 8 == 6 {
                // The awaiter gets a channel of its own, as a separate client would.
                tasks.extend(waits::start(w, (own, channel()), &history, &stop, rng));
            } else if w % 2 == 0 {
                tasks.push(tokio::spawn(checkpoints(w, own, history, stop, rng)));
            } else {
                tasks.push(tokio::spawn(operations(own, history, stop, rng, next_key.clone())));
            }
        }
        Workload { stop, tasks }
    }

    /// Stops every writer after its current call.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("a writer does not panic");
        }
    }
}

/// A new checkpoint of writer `w`: its `n`th, with a payload of its own.
fn new_checkpoint(w: usize, n: u64, rng: &mut Rng) -> CheckpointRequest {
    let pad: String = (0..4).map(|_| format!("{:016x}", rng.next_u64())).collect();
    CheckpointRequest {
        namespace: NAMESPACE.to_owned(),
        turn_id: format!("w{w}-{}", n / TURN_LENGTH),
        phase: format!("step-{}", n % 7),
        timestamp: Some(ts(T0 + n as i64)),
        state: format!(r#"{{"writer":{w},"n":{n},"pad":"{pad}"}}"#).into_bytes(),
        session_id: format!("session-{w}"),
        ..Default::default()
    }
}

async fn checkpoints(w: usize, channel: Channel, history: Arc<History>, stop: Arc<AtomicBool>, mut rng: Rng) {
    let mut client = CheckpointServiceClient::new(channel);
    let mut n = 0;
    let mut pending: Option<CheckpointRequest> = None;
    while !stop.load(Ordering::SeqCst) {
        let request = pending.take().unwrap_or_else(|| {
            n += 1;
            new_checkpoint(w, n, &mut rng)
        });
        let tuple = Tuple { turn: request.turn_id.clone(), phase: request.phase.clone(), ts: nanos(request.timestamp) };
        let start = Instant::now();
        let outcome = match client.checkpoint(deadline(request.clone())).await {
            Ok(_) => Outcome::Ok,
            Err(status) => Outcome::of(&status),
        };
        history.checkpoint(&tuple, &request.state, start, outcome.clone());
        if !outcome.is_ok() {
            // A client retries the same tuple until it hears a definite answer.
            if matches!(outcome, Outcome::Indeterminate(_) | Outcome::Definite(tonic::Code::ResourceExhausted)) {
                pending = Some(request);
            }
            tokio::time::sleep(BACKOFF).await;
        }
    }
}

/// Records per put, and puts per turn of records.
const RECORDS_PER_PUT: u64 = 3;
const PUTS_PER_TURN: u64 = 100;

/// Writer `w`'s `n`th put: three records of its own, with payloads of their own.
fn new_put(w: usize, n: u64, rng: &mut Rng) -> PutRecordsRequest {
    let records = (0..RECORDS_PER_PUT)
        .map(|i| Record {
            turn_id: format!("r{w}-{}", n / PUTS_PER_TURN),
            kind: "rec".to_owned(),
            id: format!("{n:08}-{i}"),
            payload: (0..8).flat_map(|_| rng.next_u64().to_le_bytes()).collect(),
            content_type: "application/octet-stream".to_owned(),
            mode: PutMode::InsertIfAbsent.into(),
            ..Default::default()
        })
        .collect();
    PutRecordsRequest { namespace: NAMESPACE.to_owned(), records, fence: None }
}

async fn record_puts(w: usize, channel: Channel, history: Arc<History>, stop: Arc<AtomicBool>, mut rng: Rng) {
    let mut client = RecordServiceClient::new(channel);
    let mut n = 0;
    let mut pending: Option<PutRecordsRequest> = None;
    while !stop.load(Ordering::SeqCst) {
        let request = pending.take().unwrap_or_else(|| {
            n += 1;
            new_put(w, n, &mut rng)
        });
        let turn = request.records[0].turn_id.clone();
        let records = request.records.iter().map(|r| (r.id.clone(), hash(&r.payload))).collect();
        let start = Instant::now();
        let outcome = match client.put_records(deadline(request.clone())).await {
            Ok(_) => Outcome::Ok,
            Err(status) => Outcome::of(&status),
        };
        history.records_put(&turn, n, records, start, outcome.clone());
        if !outcome.is_ok() {
            if matches!(outcome, Outcome::Indeterminate(_) | Outcome::Definite(tonic::Code::ResourceExhausted)) {
                pending = Some(request);
            }
            tokio::time::sleep(BACKOFF).await;
        }
    }
}

async fn operations(
    channel: Channel,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    mut rng: Rng,
    next_key: Arc<AtomicU64>,
) {
    let mut client = IdempotencyServiceClient::new(channel);
    while !stop.load(Ordering::SeqCst) {
        let fresh = next_key.fetch_add(1, Ordering::SeqCst) / 2;
        let key = if rng.range(0, 3) == 0 && fresh > 0 {
            format!("k{}", rng.range(0, fresh - 1))
        } else {
            format!("k{fresh}")
        };
        let begin = BeginRequest {
            namespace: NAMESPACE.to_owned(),
            key: key.clone(),
            lease: Some(duration(LEASE)),
            ..Default::default()
        };
        let start = Instant::now();
        let answer = match client.begin(deadline(begin)).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => {
                history.key_call(start, Outcome::of(&status));
                tokio::time::sleep(BACKOFF).await;
                continue;
            }
        };
        match BeginOutcome::try_from(answer.outcome) {
            Ok(BeginOutcome::Acquired) => {
                let expires_ns = nanos(answer.lease_expires_at);
                let acquisition = Acquisition {
                    token: answer.lease_token,
                    granted_ns: expires_ns - LEASE.as_nanos() as i64,
                    expires_ns,
                    begin_sent: start,
                };
                history.acquired(&key, start, acquisition);
                // The effect, performed under the lease and recorded in the ledger.
                history.effect(&key, answer.lease_token);
                finish(&mut client, &history, &stop, &key, answer.lease_token).await;
            }
            Ok(BeginOutcome::Completed) => history.observed(&key, &answer.result, start),
            Ok(BeginOutcome::InProgress) => history.key_call(start, Outcome::Ok),
            other => history.key_call(start, Outcome::Unexpected(format!("Begin answered {other:?}"))),
        }
    }
}

/// Completes `key` with the holder's result, retrying while the outcome is
/// indeterminate, as a client would.
async fn finish(
    client: &mut IdempotencyServiceClient<Channel>,
    history: &History,
    stop: &AtomicBool,
    key: &str,
    token: u64,
) {
    let result = format!("{key}:{token}").into_bytes();
    let mut request = complete(key, token, &result);
    request.namespace = NAMESPACE.to_owned();
    loop {
        let start = Instant::now();
        match client.complete(deadline(request.clone())).await {
            Ok(_) => return history.completed(key, token, &result, start),
            Err(status) => {
                let outcome = Outcome::of(&status);
                let retry = matches!(outcome, Outcome::Indeterminate(_));
                history.key_call(start, outcome);
                if !retry || stop.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// Ends a run: waits for its timers to fire and reads it back.
pub async fn settle(channel: Channel, history: &History) -> ReadBack {
    let timers_settled = waits::until_timers_fired(channel.clone()).await;
    let (checkpoints, records, stored_records) = read_back(channel.clone(), history).await;
    let waits = waits::read_waits(channel).await;
    ReadBack { checkpoints, records, stored_records, waits, waits_again: None, timers_settled }
}

/// Holds the log to what the run stored, reports the checker's figures with
/// the test's own `figures`, and asserts that the checker found no violation.
pub fn assert_clean(test: &str, seed: u64, history: &History, read: &ReadBack, figures: serde_json::Value) {
    let verdict = history.verify(read);
    let mut all = serde_json::json!({
        "seed": seed,
        "calls": verdict.calls,
        "ok": verdict.ok,
        "indeterminate": verdict.indeterminate,
        "definite_errors": verdict.definite,
        "errors_by_code": history.error_codes(),
        "checkpoint_tuples": verdict.tuples,
        "idempotency_keys": verdict.keys,
        "record_puts": verdict.record_puts,
        "waits": verdict.waits,
        "timers_settled_ms": read.timers_settled.as_millis(),
        "lost": verdict.lost,
        "duplicated": verdict.duplicated,
        "violations": verdict.violations.len(),
        "success_outside_fault_windows_pct": (1000.0 * verdict.success_outside_windows()).round() / 10.0,
    });
    if let (Some(all), serde_json::Value::Object(own)) = (all.as_object_mut(), figures) {
        all.extend(own);
    }
    report(test, all);
    verdict.assert_clean(&format!("{test} (seed {seed})"));
}

/// Ends a run with no restart after it: `settle`, then `assert_clean`.
pub async fn settle_and_assert_clean(
    test: &str,
    seed: u64,
    channel: Channel,
    history: &History,
    figures: serde_json::Value,
) {
    let read = settle(channel, history).await;
    assert_clean(test, seed, history, &read, figures);
}

/// Reads back every checkpoint of the run's turns, every key's record and
/// every record of the run's turns of records.
async fn read_back(channel: Channel, history: &History) -> (Vec<Stored>, Vec<KeyRecord>, Vec<StoredRecord>) {
    let (turns, keys, record_turns) = history.touched();
    let checkpoints = CheckpointServiceClient::new(channel.clone());
    let stored: Vec<Vec<Stored>> = futures::stream::iter(turns)
        .map(|turn| {
            let mut client = checkpoints.clone();
            async move {
                let request = RestoreRequest {
                    namespace: NAMESPACE.to_owned(),
                    turn_id: turn,
                    page_size: 10_000,
                    ..Default::default()
                };
                let rows = restore_all(&mut client, request).await;
                rows.into_iter()
                    .map(|c| Stored {
                        tuple: Tuple { turn: c.turn_id, phase: c.phase, ts: nanos(c.timestamp) },
                        hash: hash(&c.state),
                    })
                    .collect()
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    let operations = IdempotencyServiceClient::new(channel.clone());
    let records = futures::stream::iter(keys)
        .map(|key| {
            let mut client = operations.clone();
            async move {
                let request = GetRequest { namespace: NAMESPACE.to_owned(), key: key.clone() };
                // No record at all is the checker's to judge: a key the run
                // acquired cannot be gone unless a write was lost.
                let record = match client.get(request).await {
                    Err(status) if status.code() == tonic::Code::NotFound => {
                        return KeyRecord { key, found: false, result: None };
                    }
                    answer => answer.expect("Get of a key the run began").into_inner(),
                };
                let completed = RecordState::try_from(record.state) == Ok(RecordState::Completed);
                KeyRecord { key, found: true, result: completed.then_some(record.result) }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let listing = RecordServiceClient::new(channel);
    let stored_records: Vec<Vec<StoredRecord>> = futures::stream::iter(record_turns)
        .map(|turn| {
            let mut client = listing.clone();
            async move {
                let mut found = Vec::new();
                let mut page_token = String::new();
                loop {
                    let request = ListRecordsRequest {
                        namespace: NAMESPACE.to_owned(),
                        turn_id: turn.clone(),
                        kind: "rec".to_owned(),
                        page_size: 10_000,
                        page_token,
                        ..Default::default()
                    };
                    let page = client.list_records(request).await.expect("ListRecords of a run's turn").into_inner();
                    found.extend(page.entries.into_iter().filter_map(|e| e.record).map(|r| StoredRecord {
                        turn: r.turn_id,
                        id: r.id,
                        hash: hash(&r.payload),
                    }));
                    if page.next_page_token.is_empty() {
                        return found;
                    }
                    page_token = page.next_page_token;
                }
            }
        })
        .buffer_unordered(8)
        .collect()
        .await;
    (stored.into_iter().flatten().collect(), records, stored_records.into_iter().flatten().collect())
}
