//! The soak's requests, one function a kind: each sends its RPCs through
//! the generated clients and checks the answer against what was written
//! (every byte of a restored turn, a completed key's result, every record
//! of a record turn, a settled wait's status and payload). An RPC error or
//! a wrong answer is a failure, with its reason.

use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::record_service_client::RecordServiceClient;
use stepwell::api::pb::wait_service_client::WaitServiceClient;
use stepwell::api::pb::{
    AwaitRequest, BeginOutcome, BeginRequest, CheckpointRequest, CompleteRequest, CreateWaitRequest, DeleteTurnRequest,
    ListRecordsRequest, PutMode, PutRecordsRequest, Record, RestoreRequest, SignalRequest, WaitStatus,
};
use tonic::transport::Channel;

use super::stats::Outcome;

/// Checkpoints per turn; the last is terminal.
pub const TURN_LENGTH: u64 = 8;

/// The namespace the soak writes in.
pub const NAMESPACE: &str = "soak";
/// Records one PutRecords writes to its own record turn.
const RECORDS: u64 = 4;
/// How long an Await may wait for its wait to settle: far beyond a
/// signalled wait's or a 1 s timer's settling, even on a busy machine.
const AWAIT_SECONDS: i64 = 60;

fn turn_id(turn: u64) -> String {
    format!("t{turn}")
}

/// The state of checkpoint `step` of `turn`: a JSON document of about 600
/// bytes that names both, so a read of the wrong one shows.
pub fn state(turn: u64, step: u64) -> Vec<u8> {
    let filler: String = (0..560).map(|i| (b'a' + ((turn + step * 7 + i) % 26) as u8) as char).collect();
    format!(r#"{{"turn":{turn},"step":{step},"notes":"{filler}"}}"#).into_bytes()
}

fn failed(what: &str, status: tonic::Status) -> Outcome {
    Outcome::Failed(format!("{what}: {:?} {}", status.code(), status.message()))
}

pub async fn checkpoint(channel: Channel, turn: u64, step: u64, ts: i64) -> Outcome {
    let request = CheckpointRequest {
        namespace: NAMESPACE.into(),
        turn_id: turn_id(turn),
        phase: format!("step-{step}"),
        state: state(turn, step),
        timestamp: Some(stepwell::api::timestamp(ts)),
        terminal: step == TURN_LENGTH - 1,
        ..Default::default()
    };
    match CheckpointServiceClient::new(channel).checkpoint(request).await {
        Ok(answer) if answer.get_ref().inserted => Outcome::Ok,
        Ok(_) => Outcome::Failed(format!("a new checkpoint of t{turn} answered inserted=false")),
        Err(status) => failed("Checkpoint", status),
    }
}

/// Restores a whole turn and checks every checkpoint, in order.
pub async fn restore(channel: Channel, turn: u64) -> Outcome {
    let request = RestoreRequest { namespace: NAMESPACE.into(), turn_id: turn_id(turn), ..Default::default() };
    let page = match CheckpointServiceClient::new(channel).restore(request).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => return failed("Restore", status),
    };
    if page.checkpoints.len() as u64 != TURN_LENGTH || !page.next_page_token.is_empty() {
        return Outcome::Failed(format!("Restore of t{turn} gave {} checkpoints", page.checkpoints.len()));
    }
    for (step, c) in (0..).zip(&page.checkpoints) {
        if c.phase != format!("step-{step}") || c.state != state(turn, step) || c.terminal != (step == TURN_LENGTH - 1)
        {
            return Outcome::Failed(format!("Restore of t{turn}: checkpoint {step} is not the one written"));
        }
    }
    Outcome::Ok
}

pub async fn delete_turn(channel: Channel, turn: u64) -> Outcome {
    let request = DeleteTurnRequest { namespace: NAMESPACE.into(), turn_id: turn_id(turn), include_records: false };
    match CheckpointServiceClient::new(channel).delete_turn(request).await {
        Ok(answer) if answer.get_ref().deleted == TURN_LENGTH => Outcome::Ok,
        Ok(answer) => Outcome::Failed(format!("DeleteTurn of t{turn} deleted {}", answer.get_ref().deleted)),
        Err(status) => failed("DeleteTurn", status),
    }
}

fn key(n: u64) -> String {
    format!("k{n}")
}

fn receipt(n: u64) -> Vec<u8> {
    format!(r#"{{"receipt":"k{n}","amount":1299,"currency":"EUR"}}"#).into_bytes()
}

/// Begins a new key (which must be acquired) and completes it.
pub async fn begin_complete(channel: Channel, n: u64) -> Outcome {
    let mut client = IdempotencyServiceClient::new(channel);
    let begin = BeginRequest { namespace: NAMESPACE.into(), key: key(n), ..Default::default() };
    let begun = match client.begin(begin).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => return failed("Begin", status),
    };
    if begun.outcome != BeginOutcome::Acquired as i32 {
        return Outcome::Failed(format!("Begin of new key k{n} answered outcome {}", begun.outcome));
    }
    let complete = CompleteRequest {
        namespace: NAMESPACE.into(),
        key: key(n),
        lease_token: begun.lease_token,
        result: receipt(n),
    };
    match client.complete(complete).await {
        Ok(_) => Outcome::Ok,
        Err(status) => failed("Complete", status),
    }
}

/// Begins a completed key, which must answer COMPLETED with its result.
pub async fn begin_repeat(channel: Channel, n: u64) -> Outcome {
    let begin = BeginRequest { namespace: NAMESPACE.into(), key: key(n), ..Default::default() };
    match IdempotencyServiceClient::new(channel).begin(begin).await {
        Ok(answer) => {
            let answer = answer.into_inner();
            if answer.outcome == BeginOutcome::Completed as i32 && answer.result == receipt(n) {
                Outcome::Ok
            } else {
                Outcome::Failed(format!("Begin of completed key k{n} answered outcome {}", answer.outcome))
            }
        }
        Err(status) => failed("Begin (completed key)", status),
    }
}

fn record(turn: u64, id: u64) -> Record {
    Record {
        turn_id: format!("r{turn}"),
        kind: "note".into(),
        id: format!("{id:03}"),
        payload: state(turn, id)[..200].to_vec(),
        content_type: "application/json-prefix".into(),
        mode: PutMode::Upsert as i32,
        ..Default::default()
    }
}

/// Puts the records of a new record turn in one request.
pub async fn put_records(channel: Channel, turn: u64) -> Outcome {
    let records = (0..RECORDS).map(|id| record(turn, id)).collect();
    let request = PutRecordsRequest { namespace: NAMESPACE.into(), records, fence: None };
    match RecordServiceClient::new(channel).put_records(request).await {
        Ok(_) => Outcome::Ok,
        Err(status) => failed("PutRecords", status),
    }
}

/// Lists a record turn, which must hold exactly the records put, newest id first.
pub async fn list_records(channel: Channel, turn: u64) -> Outcome {
    let request = ListRecordsRequest {
        namespace: NAMESPACE.into(),
        turn_id: format!("r{turn}"),
        kind: "note".into(),
        ..Default::default()
    };
    let page = match RecordServiceClient::new(channel).list_records(request).await {
        Ok(answer) => answer.into_inner(),
        Err(status) => return failed("ListRecords", status),
    };
    let listed: Vec<(String, Vec<u8>)> =
        page.entries.into_iter().filter_map(|e| e.record).map(|r| (r.id, r.payload)).collect();
    let written: Vec<(String, Vec<u8>)> =
        (0..RECORDS).rev().map(|id| record(turn, id)).map(|r| (r.id, r.payload)).collect();
    if listed != written {
        let ids: Vec<&str> = listed.iter().map(|(id, _)| id.as_str()).collect();
        let wrong = listed.iter().zip(&written).filter(|(a, b)| a != b).count();
        return Outcome::Failed(format!("ListRecords of r{turn} gave records {ids:?}, {wrong} of them not as put"));
    }
    Outcome::Ok
}

fn create(turn: u64, w: u64, resolve_at: Option<i64>) -> CreateWaitRequest {
    CreateWaitRequest {
        namespace: NAMESPACE.into(),
        turn_id: turn_id(turn),
        name: format!("w{w}"),
        resolve_at: resolve_at.map(stepwell::api::timestamp),
        ..Default::default()
    }
}

fn await_request(turn: u64, w: u64) -> AwaitRequest {
    AwaitRequest {
        namespace: NAMESPACE.into(),
        turn_id: turn_id(turn),
        name: format!("w{w}"),
        timeout: Some(prost_types::Duration { seconds: AWAIT_SECONDS, nanos: 0 }),
        ..Default::default()
    }
}

/// Creates a wait on `turn`, signals it, and awaits it: RESOLVED with the payload.
pub async fn signal_await(channel: Channel, turn: u64, w: u64) -> Outcome {
    let mut client = WaitServiceClient::new(channel);
    match client.create_wait(create(turn, w, None)).await {
        Ok(answer) if answer.get_ref().created => {}
        Ok(_) => return Outcome::Failed(format!("CreateWait of new wait w{w} answered created=false")),
        Err(status) => return failed("CreateWait", status),
    }
    let payload = format!(r#"{{"approved":true,"wait":{w}}}"#).into_bytes();
    let signal = SignalRequest {
        namespace: NAMESPACE.into(),
        turn_id: turn_id(turn),
        name: format!("w{w}"),
        payload: payload.clone(),
        content_type: "application/json".into(),
        ..Default::default()
    };
    match client.signal(signal).await {
        Ok(answer) if answer.get_ref().settled => {}
        Ok(_) => return Outcome::Failed(format!("Signal of pending wait w{w} answered settled=false")),
        Err(status) => return failed("Signal", status),
    }
    match client.r#await(await_request(turn, w)).await {
        Ok(answer) => match answer.into_inner().wait {
            Some(wait) if wait.status == WaitStatus::Resolved as i32 && wait.payload == payload => Outcome::Ok,
            wait => Outcome::Failed(format!("Await of signalled wait w{w} answered {:?}", wait.map(|w| w.status))),
        },
        Err(status) => failed("Await (signalled)", status),
    }
}

/// Creates a wait on `turn` with a timer one second after `now_ns`, and
/// awaits it: RESOLVED by the timer.
pub async fn timer_await(channel: Channel, turn: u64, w: u64, now_ns: i64) -> Outcome {
    let mut client = WaitServiceClient::new(channel);
    match client.create_wait(create(turn, w, Some(now_ns + 1_000_000_000))).await {
        Ok(answer) if answer.get_ref().created => {}
        Ok(_) => return Outcome::Failed(format!("CreateWait of new wait w{w} answered created=false")),
        Err(status) => return failed("CreateWait (timer)", status),
    }
    match client.r#await(await_request(turn, w)).await {
        Ok(answer) => match answer.into_inner().wait {
            Some(wait) if wait.status == WaitStatus::Resolved as i32 && wait.settled_by == "stepwell:timer" => {
                Outcome::Ok
            }
            wait => Outcome::Failed(format!("Await of timer wait w{w} answered {:?}", wait.map(|w| w.status))),
        },
        Err(status) => failed("Await (timer)", status),
    }
}
