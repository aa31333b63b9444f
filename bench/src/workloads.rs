//! The workloads against a sidecar, through the generated clients of the
//! `stepwell` crate, each with the checks a smoke run relies on:
//!
//! - W1 `Append`: Checkpoint, every call a new (turn, phase, timestamp), each
//!   caller on its own turns of 100 checkpoints; optionally a share of calls
//!   re-send an earlier request of the same caller, which must answer
//!   `inserted = false` (and every new one `inserted = true`).
//! - W2 `Restore`: one page of 100 checkpoints of a random populated turn,
//!   which must hold exactly 100 and be the last page.
//! - `FillTurn`: appends to one turn from many callers, to make a large turn
//!   that the delete point then deletes while W1 appends go on beside it.
//! - W3 `BeginComplete`: Begin a new key (must be ACQUIRED), then Complete it;
//!   one call is the pair. `RepeatBegin`: Begin a key completed earlier,
//!   which must answer COMPLETED with the recorded result.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::FutureExt;
use futures::future::BoxFuture;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::{BeginOutcome, BeginRequest, CheckpointRequest, CompleteRequest, RestoreRequest};
use tonic::transport::Channel;

use crate::load::{CallResult, Failure, Workload};
use crate::payload::{Payloads, pick};
use crate::shape::{self, Requests};

/// The namespace every workload writes in.
pub const NAMESPACE: &str = "bench";
/// Checkpoints per turn, for appends and for the turns W2 restores.
pub const TURN_LENGTH: u64 = 100;
/// A base timestamp (November 2023) in nanoseconds.
const T0: i64 = 1_700_000_000_000_000_000;

/// The dedup key of request `index` of `caller` in run `run`: the caller's
/// own turns, `TURN_LENGTH` checkpoints each, with increasing timestamps.
/// The direct-SQL baseline inserts the same keys.
pub fn checkpoint_key(run: &str, caller: usize, index: u64) -> (String, String, i64) {
    (
        format!("{run}-c{caller}-t{}", index / TURN_LENGTH),
        format!("step-{}", index % TURN_LENGTH),
        T0 + (index as i64) * 1_000,
    )
}

fn rpc_error(status: tonic::Status) -> Failure {
    Failure::Error(format!("{:?}: {}", status.code(), status.message()))
}

/// The channel of `caller`: callers are spread over the connections.
fn channel(channels: &[Channel], caller: usize) -> Channel {
    channels[caller % channels.len()].clone()
}

/// W1: Checkpoint appends.
pub struct Append {
    pub channels: Vec<Channel>,
    /// Distinguishes this run's turns from any other's in the same store.
    pub run: String,
    pub payloads: Arc<Payloads>,
    /// Every call whose pick out of 100 is below this re-sends an earlier request.
    pub duplicate_percent: u64,
}

impl Append {
    /// Whether call `k` of `caller` is a retry of an earlier request.
    fn is_retry(&self, caller: usize, k: u64) -> bool {
        k > 0 && pick(caller, k, 100) < self.duplicate_percent
    }

    /// The earlier call whose request call `k` re-sends: one of the last 100
    /// or so (stepping back past retries; call 0 is never one).
    fn original(&self, caller: usize, k: u64) -> u64 {
        let mut earlier = k - 1 - pick(caller, k ^ (1 << 63), k.min(100));
        while self.is_retry(caller, earlier) {
            earlier -= 1;
        }
        earlier
    }

    fn request(&self, caller: usize, index: u64) -> CheckpointRequest {
        let (turn_id, phase, ts) = checkpoint_key(&self.run, caller, index);
        CheckpointRequest {
            namespace: NAMESPACE.into(),
            turn_id,
            phase,
            state: match shape::get().requests {
                Requests::Prebuilt => self.payloads.get(caller, index).to_vec(),
                Requests::Serde => serde_state(self.payloads.get(caller, index)),
            },
            timestamp: Some(stepwell::api::timestamp(ts)),
            ..Default::default()
        }
    }
}

/// The state as an application sends it: built as a `serde_json::Value`
/// from its fields and serialised on every call. The fields are those of
/// `document` (its long text field copied out as a `String`, as an
/// application's own state would own it), so the bytes are the same size.
fn serde_state(document: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(document).expect("the payloads are UTF-8");
    let notes = text.split_once(r#""notes":""#).map_or("", |(_, rest)| rest.trim_end_matches(r#""}"#));
    let step: u64 = text
        .split_once(r#""step":"#)
        .and_then(|(_, rest)| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    let state = serde_json::json!({"step": step, "tool": "search", "status": "ok", "notes": notes.to_owned()});
    serde_json::to_vec(&state).expect("a JSON value serialises")
}

impl Workload for Append {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let retry = self.is_retry(caller, k);
        let request = self.request(caller, if retry { self.original(caller, k) } else { k });
        let mut client = CheckpointServiceClient::new(channel(&self.channels, caller));
        async move {
            let turn = request.turn_id.clone();
            let answer = client.checkpoint(request).await.map_err(rpc_error)?.into_inner();
            match (retry, answer.inserted) {
                (true, true) => Err(Failure::Check(format!("a duplicate retry on {turn} answered inserted=true"))),
                (false, false) => Err(Failure::Check(format!("a new checkpoint on {turn} answered inserted=false"))),
                _ => Ok(()),
            }
        }
        .boxed()
    }
}

/// Appends to one turn, `turn_id`: call `k` of caller `c` of `callers` is
/// checkpoint `k * callers + c`, each new.
pub struct FillTurn {
    pub channels: Vec<Channel>,
    pub turn_id: String,
    pub callers: usize,
    pub payloads: Arc<Payloads>,
}

impl Workload for FillTurn {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let index = k * self.callers as u64 + caller as u64;
        let request = CheckpointRequest {
            namespace: NAMESPACE.into(),
            turn_id: self.turn_id.clone(),
            phase: "fill".into(),
            state: self.payloads.get(caller, k).to_vec(),
            timestamp: Some(stepwell::api::timestamp(T0 + index as i64)),
            ..Default::default()
        };
        let mut client = CheckpointServiceClient::new(channel(&self.channels, caller));
        async move {
            let answer = client.checkpoint(request).await.map_err(rpc_error)?.into_inner();
            if !answer.inserted {
                return Err(Failure::Check(format!("filling checkpoint {index} answered inserted=false")));
            }
            Ok(())
        }
        .boxed()
    }
}

/// The turn call `k` of `caller` restores, of those an `Append` of run
/// `run` wrote with `callers` callers and `turns_per_caller` turns each:
/// W2 and its direct baseline read the same sequence of turns.
pub fn restored_turn(run: &str, callers: usize, turns_per_caller: u64, caller: usize, k: u64) -> String {
    let owner = pick(caller, k, callers as u64) as usize;
    let turn = pick(caller, !k, turns_per_caller);
    checkpoint_key(run, owner, turn * TURN_LENGTH).0
}

/// W2: restore whole turns written by an `Append` of run `run` with
/// `callers` callers and `turns_per_caller` turns each.
pub struct Restore {
    pub channels: Vec<Channel>,
    pub run: String,
    pub callers: usize,
    pub turns_per_caller: u64,
}

impl Workload for Restore {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let turn_id = restored_turn(&self.run, self.callers, self.turns_per_caller, caller, k);
        let request = RestoreRequest {
            namespace: NAMESPACE.into(),
            turn_id,
            page_size: TURN_LENGTH as i32,
            ..Default::default()
        };
        let mut client = CheckpointServiceClient::new(channel(&self.channels, caller));
        async move {
            let turn = request.turn_id.clone();
            let page = client.restore(request).await.map_err(rpc_error)?.into_inner();
            if page.checkpoints.len() as u64 != TURN_LENGTH || !page.next_page_token.is_empty() {
                return Err(Failure::Check(format!(
                    "restoring {turn} gave {} checkpoints (next page token {:?}), not one page of {TURN_LENGTH}",
                    page.checkpoints.len(),
                    page.next_page_token
                )));
            }
            Ok(())
        }
        .boxed()
    }
}

fn idempotency_key(run: &str, caller: usize, k: u64) -> String {
    format!("{run}-c{caller}-k{k}")
}

/// The result recorded for `key`: a small receipt.
pub fn receipt(key: &str) -> Vec<u8> {
    format!(r#"{{"receipt":"{key}","amount":1299,"currency":"EUR"}}"#).into_bytes()
}

/// W3: Begin then Complete of a new key per call.
pub struct BeginComplete {
    pub channels: Vec<Channel>,
    pub run: String,
    /// Per caller: how many of its keys (0, 1, ...) are completed.
    completed: Arc<Vec<AtomicU64>>,
}

impl BeginComplete {
    pub fn new(channels: Vec<Channel>, run: String, callers: usize) -> BeginComplete {
        BeginComplete { channels, run, completed: Arc::new((0..callers).map(|_| AtomicU64::new(0)).collect()) }
    }

    /// The keys completed so far, as a workload that Begins them again.
    pub fn repeats(&self) -> RepeatBegin {
        RepeatBegin {
            channels: self.channels.clone(),
            run: self.run.clone(),
            completed: self.completed.iter().map(|n| n.load(Ordering::SeqCst)).collect(),
        }
    }
}

impl Workload for BeginComplete {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        let key = idempotency_key(&self.run, caller, k);
        let mut client = IdempotencyServiceClient::new(channel(&self.channels, caller));
        let completed = self.completed.clone();
        async move {
            let begin = BeginRequest { namespace: NAMESPACE.into(), key: key.clone(), ..Default::default() };
            let begun = client.begin(begin).await.map_err(rpc_error)?.into_inner();
            if begun.outcome != BeginOutcome::Acquired as i32 {
                return Err(Failure::Check(format!("Begin of new key {key} answered outcome {}", begun.outcome)));
            }
            let complete = CompleteRequest {
                namespace: NAMESPACE.into(),
                key: key.clone(),
                lease_token: begun.lease_token,
                result: receipt(&key),
            };
            client.complete(complete).await.map_err(rpc_error)?;
            // Each caller completes its keys in order, so 0..=k are done.
            completed[caller].fetch_max(k + 1, Ordering::SeqCst);
            Ok(())
        }
        .boxed()
    }
}

/// W3: Begin on keys that a `BeginComplete` completed.
pub struct RepeatBegin {
    channels: Vec<Channel>,
    run: String,
    completed: Vec<u64>,
}

impl RepeatBegin {
    pub fn keys(&self) -> u64 {
        self.completed.iter().sum()
    }
}

impl Workload for RepeatBegin {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
        // A caller that completed nothing has no keys to repeat; pick among those that did.
        let owners: Vec<usize> = (0..self.completed.len()).filter(|&c| self.completed[c] > 0).collect();
        if owners.is_empty() {
            return futures::future::ready(Err(Failure::Error("no completed keys to Begin again".into()))).boxed();
        }
        let owner = owners[pick(caller, k, owners.len() as u64) as usize];
        let key = idempotency_key(&self.run, owner, pick(caller, !k, self.completed[owner]));
        let mut client = IdempotencyServiceClient::new(channel(&self.channels, caller));
        async move {
            let begin = BeginRequest { namespace: NAMESPACE.into(), key: key.clone(), ..Default::default() };
            let answer = client.begin(begin).await.map_err(rpc_error)?.into_inner();
            if answer.outcome != BeginOutcome::Completed as i32 || answer.result != receipt(&key) {
                return Err(Failure::Check(format!(
                    "Begin of completed key {key} answered outcome {} (result {} bytes)",
                    answer.outcome,
                    answer.result.len()
                )));
            }
            Ok(())
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(duplicate_percent: u64) -> Append {
        let channel = Channel::from_static("http://127.0.0.1:9").connect_lazy();
        Append { channels: vec![channel], run: "r".into(), payloads: Arc::new(Payloads::new(64)), duplicate_percent }
    }

    #[tokio::test]
    async fn retries_resend_an_earlier_new_request() {
        let w = append(10);
        let retries: Vec<u64> = (0..10_000).filter(|&k| w.is_retry(3, k)).collect();
        assert!((800..1200).contains(&retries.len()), "about 10%: {}", retries.len());
        for k in retries {
            let original = w.original(3, k);
            assert!(original < k && !w.is_retry(3, original));
            assert_eq!(w.request(3, original), w.request(3, original), "rebuilt byte for byte");
        }
        assert!(!(0..1000).any(|k| append(0).is_retry(0, k)));
    }

    #[test]
    fn keys_are_new_for_every_call() {
        let keys: std::collections::HashSet<_> =
            (0..4).flat_map(|c| (0..500).map(move |k| checkpoint_key("r", c, k))).collect();
        assert_eq!(keys.len(), 2000);
    }

    #[test]
    fn serde_states_hold_the_same_fields_at_the_same_size() {
        let payloads = Payloads::new(1024);
        let document = payloads.get(2, 5);
        let state = serde_state(document);
        assert_eq!(state.len(), document.len());
        let (a, b): (serde_json::Value, serde_json::Value) =
            (serde_json::from_slice(&state).unwrap(), serde_json::from_slice(document).unwrap());
        assert_eq!(a, b);
    }
}
