//! A randomized model test of IdempotencyService. Simulated workers issue
//! random Begin / Complete / Release / Extend / Get calls, crash (forgetting
//! the leases they hold) and move the store's clock, for thousands of steps
//! against a real server. Every answer is compared with a small in-test model
//! of the contract, written apart from the server's rules, and invariants are
//! checked from the answers alone: never two live holders of a key, tokens
//! strictly increasing, a completed result never changing.
//!
//! Calls run one at a time so the model can predict each answer exactly,
//! except the value of a new fencing token: the contract promises only that
//! tokens strictly increase, so the model adopts the server's and the
//! invariants check that it is greater than every token before it.
//! Clock moves are whole quanta of 50 s and leases whole multiples of it, so
//! the real time that passes during the test (far less than a quantum) can
//! never move a lease across a boundary. The seed is printed on failure;
//! `STEPWELL_MODEL_SEED=N` replays one, `STEPWELL_MODEL_STEPS=N` runs longer.

use std::collections::HashMap;
use std::time::Duration;

use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::{
    BeginOutcome, BeginRequest, BeginResponse, CompleteRequest, ExtendRequest, GetRequest, RecordState, ReleaseRequest,
};
use stepwell::domain::clock::Clock;
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

use stepwell_test_support::rng::Rng;
use stepwell_test_support::sidecar::Sidecar;

const QUANTUM_S: i64 = 50;
const KEYS: usize = 3;
const WORKERS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Leased,
    Completed,
    Failed,
    Released,
}

/// The model's record of one key. Times are model seconds (the clock offset).
#[derive(Debug, Clone)]
struct ModelRecord {
    held: Held,
    token: u64,
    attempt: u32,
    expires: i64,
    /// The absolute expiry the server reported, to compare IN_PROGRESS and Get.
    expires_reported: Option<prost_types::Timestamp>,
    result: Vec<u8>,
    error: String,
    fingerprint: Vec<u8>,
    retention: i64,
    purge_after: i64,
}

/// What the model expects a call to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    Acquired { token: u64, attempt: u32, previous_lease_expired: bool },
    Completed { result: Vec<u8> },
    InProgress,
    Failed { error: String },
    Ok,
    Refused(Code, &'static str),
    Record(RecordState),
}

struct Model {
    now: i64,
    last_token: u64,
    records: HashMap<String, ModelRecord>,
}

impl Model {
    /// The key's record, unless its retention has run out (then the key is new).
    fn record(&self, key: &str) -> Option<&ModelRecord> {
        self.records.get(key).filter(|r| self.now < r.purge_after)
    }

    fn live(&self, r: &ModelRecord) -> bool {
        r.held == Held::Leased && self.now < r.expires
    }

    fn begin(&mut self, key: &str, fingerprint: &[u8], lease: i64, retention: i64) -> Expect {
        let previous = self.record(key).cloned();
        let (attempt, previous_lease_expired, kept_fingerprint) = match &previous {
            None => (1, false, Vec::new()),
            Some(r) if !fingerprint.is_empty() && !r.fingerprint.is_empty() && r.fingerprint != fingerprint => {
                return Expect::Refused(Code::FailedPrecondition, "KEY_REUSED");
            }
            Some(r) => match r.held {
                Held::Completed => return Expect::Completed { result: r.result.clone() },
                Held::Failed => return Expect::Failed { error: r.error.clone() },
                Held::Leased if self.live(r) => return Expect::InProgress,
                Held::Leased => (r.attempt + 1, true, r.fingerprint.clone()),
                Held::Released => (r.attempt + 1, false, r.fingerprint.clone()),
            },
        };
        self.last_token += 1; // counts acquisitions; the value is the server's
        let expires = self.now + lease;
        self.records.insert(
            key.to_owned(),
            ModelRecord {
                held: Held::Leased,
                token: self.last_token,
                attempt,
                expires,
                expires_reported: None,
                result: Vec::new(),
                error: String::new(),
                fingerprint: if fingerprint.is_empty() { kept_fingerprint } else { fingerprint.to_vec() },
                retention,
                purge_after: expires + retention,
            },
        );
        Expect::Acquired { token: 0, attempt, previous_lease_expired }
    }

    /// The record `token` may act on, or the refusal every fenced call shares.
    fn fenced(&mut self, key: &str, token: u64) -> Result<&mut ModelRecord, Expect> {
        let now = self.now;
        let record = self.records.get_mut(key).filter(|r| now < r.purge_after);
        match record {
            None => Err(Expect::Refused(Code::FailedPrecondition, "NOT_ACQUIRED")),
            Some(r) if r.token != token => Err(Expect::Refused(Code::Aborted, "LEASE_LOST")),
            Some(r) => Ok(r),
        }
    }

    fn complete(&mut self, key: &str, token: u64, result: &[u8]) -> Expect {
        let now = self.now;
        match self.fenced(key, token) {
            Err(refusal) => refusal,
            Ok(r) => match r.held {
                Held::Leased => {
                    r.held = Held::Completed;
                    r.result = result.to_vec();
                    r.purge_after = now + r.retention;
                    Expect::Ok
                }
                Held::Completed if r.result == result => Expect::Ok,
                Held::Completed => Expect::Refused(Code::AlreadyExists, "RESULT_MISMATCH"),
                Held::Failed | Held::Released => Expect::Refused(Code::FailedPrecondition, "NOT_ACQUIRED"),
            },
        }
    }

    fn release(&mut self, key: &str, token: u64, error: &str, permanent: bool) -> Expect {
        let now = self.now;
        match self.fenced(key, token) {
            Err(refusal) => refusal,
            Ok(r) if r.held == Held::Leased => {
                r.held = if permanent { Held::Failed } else { Held::Released };
                if permanent {
                    r.error = error.to_owned();
                }
                r.purge_after = now + r.retention;
                Expect::Ok
            }
            Ok(_) => Expect::Refused(Code::FailedPrecondition, "NOT_ACQUIRED"),
        }
    }

    fn extend(&mut self, key: &str, token: u64, lease: i64) -> Expect {
        let now = self.now;
        match self.fenced(key, token) {
            Err(refusal) => refusal,
            Ok(r) if r.held == Held::Leased && now < r.expires => {
                r.expires = now + lease;
                r.purge_after = r.expires + r.retention;
                Expect::Ok
            }
            Ok(r) if r.held == Held::Leased => Expect::Refused(Code::Aborted, "LEASE_LOST"),
            Ok(_) => Expect::Refused(Code::FailedPrecondition, "NOT_ACQUIRED"),
        }
    }

    fn get(&self, key: &str) -> Expect {
        match self.record(key) {
            None => Expect::Refused(Code::NotFound, "KEY_NOT_FOUND"),
            Some(r) => Expect::Record(match r.held {
                Held::Leased if self.live(r) => RecordState::InProgress,
                Held::Leased => RecordState::Expired,
                Held::Completed => RecordState::Completed,
                Held::Failed => RecordState::Failed,
                Held::Released => RecordState::Released,
            }),
        }
    }
}

fn seconds(s: i64) -> prost_types::Duration {
    prost_types::Duration { seconds: s, nanos: 0 }
}

fn refusal(status: &tonic::Status) -> Expect {
    let reason = status.get_error_details().error_info().map(|info| info.reason.clone()).unwrap_or_default();
    let reason = ["KEY_REUSED", "NOT_ACQUIRED", "LEASE_LOST", "RESULT_MISMATCH", "KEY_NOT_FOUND"]
        .into_iter()
        .find(|known| *known == reason)
        .unwrap_or_else(|| panic!("unexpected error {status:?}"));
    Expect::Refused(status.code(), reason)
}

fn begin_answer(response: &BeginResponse) -> Expect {
    match response.outcome() {
        BeginOutcome::Acquired => Expect::Acquired {
            token: response.lease_token,
            attempt: response.attempt,
            previous_lease_expired: response.previous_lease_expired,
        },
        BeginOutcome::Completed => Expect::Completed { result: response.result.clone() },
        BeginOutcome::InProgress => Expect::InProgress,
        BeginOutcome::Failed => Expect::Failed { error: response.error.clone() },
        BeginOutcome::Unspecified => panic!("Begin answered no outcome: {response:?}"),
    }
}

/// What the workers saw, checked after every step.
#[derive(Default)]
struct Invariants {
    /// Per key: the last token acquired.
    last_token: HashMap<String, u64>,
    /// Per key and record generation (the attempt-1 token): the completed result.
    completed: HashMap<(String, u64), Vec<u8>>,
    /// Per key: the token that began the current generation.
    generation: HashMap<String, u64>,
    /// Per key: the leases the server granted and not yet ended, by token,
    /// with their expiry in model seconds (from ACQUIRED and Extend answers).
    leases: HashMap<String, HashMap<u64, i64>>,
}

struct Run {
    rng: Rng,
    model: Model,
    client: IdempotencyServiceClient<Channel>,
    clock: Clock,
    /// What each worker believes it holds: key → token.
    held: Vec<HashMap<String, u64>>,
    /// Tokens ever handed out per key, to replay stale ones.
    seen: HashMap<String, Vec<u64>>,
    invariants: Invariants,
    step: usize,
    seed: u64,
    /// How often each kind of answer came, to show the run covered them all.
    tally: HashMap<String, usize>,
}

impl Run {
    fn fail(&self, what: String) -> ! {
        panic!("model test failed at step {} (replay with STEPWELL_MODEL_SEED={}): {what}", self.step, self.seed)
    }

    /// Asserts that the server answered what the model expected, and tallies the answer.
    fn assert_agrees(&mut self, call: &str, expected: &Expect, actual: &Expect) {
        if expected != actual {
            self.fail(format!("{call}: the model expected {expected:?}, the server answered {actual:?}"));
        }
        let kind = match actual {
            Expect::Acquired { previous_lease_expired: true, .. } => "Acquired after expiry".to_owned(),
            Expect::Acquired { attempt: 1, .. } => "Acquired".to_owned(),
            Expect::Acquired { .. } => "Acquired after release".to_owned(),
            Expect::Completed { .. } => "Completed".to_owned(),
            Expect::InProgress => "InProgress".to_owned(),
            Expect::Failed { .. } => "Failed".to_owned(),
            Expect::Ok => format!("{call} ok"),
            Expect::Refused(_, reason) => format!("{call} {reason}"),
            Expect::Record(state) => format!("Get {state:?}"),
        };
        *self.tally.entry(kind).or_default() += 1;
    }

    /// A token a worker might send: its own, a stale one, or one never issued.
    fn pick_token(&mut self, worker: usize, key: &str) -> u64 {
        if let Some(&token) = self.held[worker].get(key)
            && self.rng.chance(85)
        {
            return token;
        }
        match self.seen.get(key) {
            Some(tokens) if !tokens.is_empty() && self.rng.chance(80) => tokens[self.rng.below(tokens.len())],
            _ => 1_000_000 + self.rng.below(1000) as u64,
        }
    }

    /// Records an acquisition, asserting that no other lease on the key is
    /// live and that the token is above every earlier one.
    fn assert_acquisition_invariants(
        &mut self,
        worker: usize,
        key: &str,
        token: u64,
        attempt: u32,
        expires: prost_types::Timestamp,
    ) {
        // Never two live holders: every lease granted on this key before has
        // ended (Complete, Release) or run out by the time this one is granted.
        let now = self.model.now;
        let leases = self.invariants.leases.entry(key.to_owned()).or_default();
        if let Some((other, until)) = leases.iter().find(|(_, until)| **until > now) {
            let (other, until) = (*other, *until);
            self.fail(format!("{key} granted to token {token} while token {other} was live until {until}s"));
        }
        let lease = self.model.records.get(key).expect("the model recorded the acquisition").expires;
        leases.insert(token, lease);
        if let Some(&last) = self.invariants.last_token.get(key)
            && token <= last
        {
            self.fail(format!("token {token} for {key} is not above the previous {last}"));
        }
        self.invariants.last_token.insert(key.to_owned(), token);
        if attempt == 1 {
            self.invariants.generation.insert(key.to_owned(), token);
        }
        self.seen.entry(key.to_owned()).or_default().push(token);
        self.held[worker].insert(key.to_owned(), token);
        self.model.records.get_mut(key).expect("recorded").expires_reported = Some(expires);
    }

    fn end_lease(&mut self, worker: usize, key: &str, token: u64) {
        self.held[worker].remove(key);
        if let Some(leases) = self.invariants.leases.get_mut(key) {
            leases.remove(&token);
        }
    }

    /// Records a completed result, asserting that it is the one recorded before.
    fn assert_result_unchanged(&mut self, key: &str, result: &[u8]) {
        let generation = self.invariants.generation.get(key).copied().unwrap_or_default();
        let recorded = self.invariants.completed.entry((key.to_owned(), generation)).or_insert_with(|| result.to_vec());
        if recorded != result {
            let recorded = recorded.clone();
            self.fail(format!("the result of {key} changed from {recorded:?} to {result:?}"));
        }
    }

    /// One random step: a call, asserted to agree with the model and the
    /// invariants, a worker's crash, or a move of the clock.
    async fn assert_random_step_agrees(&mut self) {
        let worker = self.rng.below(WORKERS);
        let key = format!("key-{}", self.rng.below(KEYS));
        match self.rng.below(100) {
            0..=29 => self.begin(worker, &key).await,
            30..=49 => self.complete(worker, &key).await,
            50..=61 => self.release(worker, &key).await,
            62..=71 => self.extend(worker, &key).await,
            72..=81 => self.get(&key).await,
            82..=87 => self.held[worker].clear(), // the worker crashes
            _ => {
                let quanta = 1 + self.rng.below(3) as i64;
                self.model.now += quanta * QUANTUM_S;
                self.clock.advance(Duration::from_secs((quanta * QUANTUM_S) as u64));
            }
        }
    }

    async fn begin(&mut self, worker: usize, key: &str) {
        let fingerprint: &[u8] = match self.rng.below(20) {
            0 => b"other-operation",
            1..=3 => b"",
            _ => b"charge-card",
        };
        let lease = QUANTUM_S * (2 + self.rng.below(2) as i64);
        let retention = QUANTUM_S * if self.rng.chance(70) { 4 } else { 20 };
        let expected = self.model.begin(key, fingerprint, lease, retention);
        let request = BeginRequest {
            key: key.to_owned(),
            fingerprint: fingerprint.to_vec(),
            lease: Some(seconds(lease)),
            retention: Some(seconds(retention)),
            ..BeginRequest::default()
        };
        let answer = self.client.begin(request).await.map(|r| r.into_inner());
        let actual = match &answer {
            Ok(response) => begin_answer(response),
            Err(status) => refusal(status),
        };
        // The model cannot know a new token's value: compare all but it, then adopt it.
        let comparable = match &actual {
            Expect::Acquired { attempt, previous_lease_expired, .. } => {
                Expect::Acquired { token: 0, attempt: *attempt, previous_lease_expired: *previous_lease_expired }
            }
            other => other.clone(),
        };
        self.assert_agrees("Begin", &expected, &comparable);
        if let Expect::Acquired { token, .. } = actual {
            self.model.records.get_mut(key).expect("the model recorded the acquisition").token = token;
        }
        let Ok(response) = answer else { return };
        match actual {
            Expect::Acquired { token, attempt, .. } => {
                let expires = response.lease_expires_at.expect("ACQUIRED carries lease_expires_at");
                self.assert_acquisition_invariants(worker, key, token, attempt, expires);
            }
            Expect::InProgress => {
                let reported = self.model.record(key).and_then(|r| r.expires_reported);
                if response.lease_expires_at != reported {
                    self.fail(format!("IN_PROGRESS expiry {:?}, holder's {reported:?}", response.lease_expires_at));
                }
            }
            Expect::Completed { result } => self.assert_result_unchanged(key, &result),
            _ => {}
        }
    }

    async fn complete(&mut self, worker: usize, key: &str) {
        let token = self.pick_token(worker, key);
        let result = if self.rng.chance(80) { format!("receipt-{token}") } else { format!("other-{}", self.step) };
        let completed = self.complete_with(worker, key, token, result).await;
        // A client retrying a Complete whose answer it lost: the same result
        // is OK again, another one is refused.
        if completed && self.rng.chance(50) {
            let repeat = if self.rng.chance(50) { format!("receipt-{token}") } else { "changed".to_owned() };
            self.complete_with(worker, key, token, repeat).await;
        }
    }

    /// Sends one Complete and checks it; answers whether it was OK.
    async fn complete_with(&mut self, worker: usize, key: &str, token: u64, result: String) -> bool {
        let expected = self.model.complete(key, token, result.as_bytes());
        let request = CompleteRequest {
            key: key.to_owned(),
            lease_token: token,
            result: result.clone().into_bytes(),
            ..Default::default()
        };
        let actual = match self.client.complete(request).await {
            Ok(_) => Expect::Ok,
            Err(status) => refusal(&status),
        };
        self.assert_agrees("Complete", &expected, &actual);
        if actual == Expect::Ok {
            self.assert_result_unchanged(key, result.as_bytes());
            self.end_lease(worker, key, token);
        }
        actual == Expect::Ok
    }

    async fn release(&mut self, worker: usize, key: &str) {
        let token = self.pick_token(worker, key);
        let permanent = self.rng.chance(25);
        let error = format!("failed at step {}", self.step);
        let expected = self.model.release(key, token, &error, permanent);
        let request =
            ReleaseRequest { key: key.to_owned(), lease_token: token, error, permanent, ..Default::default() };
        let actual = match self.client.release(request).await {
            Ok(_) => Expect::Ok,
            Err(status) => refusal(&status),
        };
        self.assert_agrees("Release", &expected, &actual);
        if actual == Expect::Ok {
            self.end_lease(worker, key, token);
            // Reading right after a release covers the RELEASED and FAILED states.
            if self.rng.chance(50) {
                self.get(key).await;
            }
        }
    }

    async fn extend(&mut self, worker: usize, key: &str) {
        let token = self.pick_token(worker, key);
        let lease = QUANTUM_S * (2 + self.rng.below(2) as i64);
        let expected = self.model.extend(key, token, lease);
        let request = ExtendRequest {
            key: key.to_owned(),
            lease_token: token,
            lease: Some(seconds(lease)),
            ..Default::default()
        };
        let answer = self.client.extend(request).await;
        let actual = match &answer {
            Ok(_) => Expect::Ok,
            Err(status) => refusal(status),
        };
        self.assert_agrees("Extend", &expected, &actual);
        if let Ok(response) = answer {
            let record = self.model.records.get_mut(key).expect("extended");
            record.expires_reported = response.into_inner().lease_expires_at;
            let until = record.expires;
            self.invariants.leases.entry(key.to_owned()).or_default().insert(token, until);
        }
    }

    async fn get(&mut self, key: &str) {
        let expected = self.model.get(key);
        let answer = self.client.get(GetRequest { key: key.to_owned(), ..Default::default() }).await;
        let actual = match &answer {
            Ok(response) => Expect::Record(response.get_ref().state()),
            Err(status) => refusal(status),
        };
        self.assert_agrees("Get", &expected, &actual);
        let (Ok(response), Some(record)) = (answer, self.model.record(key)) else { return };
        let response = response.into_inner();
        let leased = record.held == Held::Leased;
        let fields_match = response.attempt == record.attempt
            && response.result == record.result
            && response.error == record.error
            && (!leased || response.lease_expires_at == record.expires_reported);
        if !fields_match {
            self.fail(format!("Get {key} answered {response:?}, the model holds {record:?}"));
        }
    }
}

#[tokio::test]
async fn random_workers_agree_with_the_model() {
    let rng = Rng::from_env("STEPWELL_MODEL_SEED");
    let seed = rng.seed();
    let steps = stepwell_test_support::setting("STEPWELL_MODEL_STEPS").and_then(|s| s.parse().ok()).unwrap_or(3000);
    println!("model test seed {seed}, {steps} steps (replay with STEPWELL_MODEL_SEED={seed})");

    let clock = Clock::system();
    let server = Sidecar::builder()
        .configure(|config| {
            config.store.clock = clock.clone();
            config.limits.retention_max = Duration::from_secs(30 * 24 * 3600);
        })
        .start()
        .await;
    let mut run = Run {
        rng,
        model: Model { now: 0, last_token: 0, records: HashMap::new() },
        client: IdempotencyServiceClient::new(server.channel()),
        clock,
        held: vec![HashMap::new(); WORKERS],
        seen: HashMap::new(),
        invariants: Invariants::default(),
        step: 0,
        seed,
        tally: HashMap::new(),
    };
    for step in 0..steps {
        run.step = step;
        run.assert_random_step_agrees().await;
    }
    // The run must have met every kind of answer, or it proved little.
    let mut kinds: Vec<_> = run.tally.iter().collect();
    kinds.sort();
    println!("answers: {kinds:?}");
    for kind in [
        "Acquired",
        "Acquired after expiry",
        "Acquired after release",
        "Completed",
        "InProgress",
        "Failed",
        "Begin KEY_REUSED",
        "Complete ok",
        "Complete LEASE_LOST",
        "Complete NOT_ACQUIRED",
        "Complete RESULT_MISMATCH",
        "Release ok",
        "Extend ok",
        "Extend LEASE_LOST",
        "Get Expired",
        "Get Released",
        "Get KEY_NOT_FOUND",
    ] {
        assert!(run.tally.contains_key(kind), "the run never saw {kind:?} (seed {seed}); answers: {kinds:?}");
    }
}
