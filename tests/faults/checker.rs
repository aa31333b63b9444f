//! The checker: every client operation of a fault run is logged with its
//! key, its payload's hash and its outcome, and afterwards the store is read
//! back and held to what the outcomes promised.
//!
//! - OK: the write is stored exactly once, byte for byte.
//! - A definite error: the write is absent (unless another attempt of the
//!   same tuple succeeded).
//! - Indeterminate (UNAVAILABLE, DEADLINE_EXCEEDED, a reset connection): absent
//!   or present once, never twice, never altered.
//!
//! For idempotency keys it checks that a key acquired is never lost (its
//! record is there afterwards), that no key ever had two live holders
//! (each acquisition's grant time, in the store's clock, is at or after the
//! previous holder's lease expiry), that a recorded result never changes,
//! that an acknowledged Complete is never lost, and, from the in-test effect
//! ledger, that no effect was performed by a holder that began after the key
//! was known COMPLETED. A run that mostly errors cannot pass: at least 80% of
//! operations wholly outside fault windows must succeed.
//!
//! For record puts (RecordService, several records inserted if absent in
//! one call) the same rules hold for each record, and a put is all or
//! nothing: its records are read back all present or all absent.
//!
//! For waits (WaitService) the rules are `wait_checker`'s: no settlement
//! lost, none doubled, every timer fired. A WAIT_SETTLED refusal is the
//! answer a contended Signal expects, so it counts as a call that succeeded.

use std::collections::{BTreeMap, HashMap};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Instant;

use stepwell::api::pb::Wait;
use tonic::{Code, Status};

use crate::wait_checker::{SignalAnswer, WaitId, WaitLog};

/// What a client learned from one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// The server answered an error that says nothing was stored.
    Definite(Code),
    /// The write may or may not have happened.
    Indeterminate(Code),
    /// An error no operation of the workload should ever get (e.g. INTERNAL).
    Unexpected(String),
}

impl Outcome {
    pub fn of(status: &Status) -> Outcome {
        let transport = || {
            let message = status.message().to_ascii_lowercase();
            ["transport", "h2 protocol", "connection", "broken pipe", "reset", "refused", "body"]
                .iter()
                .any(|word| message.contains(word))
        };
        match status.code() {
            Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => Outcome::Indeterminate(status.code()),
            // A connection cut mid-call surfaces as UNKNOWN or INTERNAL from the transport.
            Code::Unknown | Code::Internal if transport() => Outcome::Indeterminate(status.code()),
            Code::Unknown | Code::Internal | Code::DataLoss | Code::Unimplemented => {
                Outcome::Unexpected(format!("{:?}: {}", status.code(), status.message()))
            }
            code => Outcome::Definite(code),
        }
    }

    pub fn is_ok(&self) -> bool {
        *self == Outcome::Ok
    }
}

/// A checkpoint's identity: (turn_id, phase, timestamp) in the run's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    pub turn: String,
    pub phase: String,
    pub ts: i64,
}

pub fn hash(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    bytes.hash(&mut hasher);
    hasher.finish()
}

/// One call, for the success rate outside fault windows.
#[derive(Debug, Clone)]
struct Call {
    start: Instant,
    end: Instant,
    outcome: Outcome,
}

/// One acquisition of a key, as the ACQUIRED answer reported it.
#[derive(Debug, Clone)]
pub struct Acquisition {
    pub token: u64,
    /// The grant time and lease expiry, in the store's clock (nanoseconds).
    pub granted_ns: i64,
    pub expires_ns: i64,
    /// When the Begin that got it was sent.
    pub begin_sent: Instant,
}

/// Everything one key went through.
#[derive(Debug, Default)]
struct KeyHistory {
    acquisitions: Vec<Acquisition>,
    /// Effects performed, by token (the in-test ledger).
    effects: Vec<u64>,
    /// Complete calls acknowledged OK: (token, result, when the OK arrived).
    completions: Vec<(u64, Vec<u8>, Instant)>,
    /// Results seen in COMPLETED answers, and when.
    observed: Vec<(Vec<u8>, Instant)>,
}

/// A record put's records (id, payload hash) and each attempt's outcome.
type PutAttempts = (Vec<(String, u64)>, Vec<Outcome>);

/// The log of a fault run, shared by all workers.
#[derive(Default)]
pub struct History {
    calls: Mutex<Vec<Call>>,
    /// Every attempt of each checkpoint tuple: payload hash and outcome.
    checkpoints: Mutex<HashMap<Tuple, Vec<(u64, Outcome)>>>,
    keys: Mutex<HashMap<String, KeyHistory>>,
    /// Every attempt of each record put, by (turn, put number): its records'
    /// (id, payload hash), and each attempt's outcome.
    record_puts: Mutex<HashMap<(String, u64), PutAttempts>>,
    waits: WaitLog,
    windows: Mutex<Vec<(Instant, Instant)>>,
}

/// What a run's verification found.
#[derive(Debug, Default)]
pub struct Verdict {
    pub calls: usize,
    pub ok: usize,
    pub indeterminate: usize,
    pub definite: usize,
    pub outside_windows: usize,
    pub ok_outside_windows: usize,
    pub tuples: usize,
    pub keys: usize,
    pub record_puts: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub violations: Vec<String>,
    /// The figures of the run's waits (`wait_checker`).
    pub waits: serde_json::Value,
}

impl Verdict {
    pub fn success_outside_windows(&self) -> f64 {
        if self.outside_windows == 0 { 0.0 } else { self.ok_outside_windows as f64 / self.outside_windows as f64 }
    }

    /// Fails the test with every violation found, or if too few calls succeeded.
    pub fn assert_clean(&self, run: &str) {
        assert!(
            self.violations.is_empty(),
            "{run}: {} violations:\n{}",
            self.violations.len(),
            self.report_violations()
        );
        assert!(self.outside_windows > 0, "{run}: no call completed outside the fault windows");
        assert!(
            self.success_outside_windows() >= 0.8,
            "{run}: only {:.1}% of {} calls outside fault windows succeeded",
            100.0 * self.success_outside_windows(),
            self.outside_windows
        );
    }

    fn report_violations(&self) -> String {
        let shown: Vec<_> = self.violations.iter().take(20).cloned().collect();
        shown.join("\n")
    }
}

/// A stored checkpoint, as read back.
pub struct Stored {
    pub tuple: Tuple,
    pub hash: u64,
}

/// A stored record (RecordService), as read back.
pub struct StoredRecord {
    pub turn: String,
    pub id: String,
    pub hash: u64,
}

/// Everything a run stored, as read back through the API.
pub struct ReadBack {
    pub checkpoints: Vec<Stored>,
    pub records: Vec<Record>,
    pub stored_records: Vec<StoredRecord>,
    /// Every wait of the run's namespace, once the run's timers have fired.
    pub waits: Vec<Wait>,
    /// The same, read again after one more restart, where the test made one.
    pub waits_again: Option<Vec<Wait>>,
    /// How long the run's timers took to fire after it stopped.
    pub timers_settled: std::time::Duration,
}

/// A key's record, as read back.
pub struct Record {
    pub key: String,
    /// Whether the store has a record for the key at all.
    pub found: bool,
    /// The recorded result, if COMPLETED.
    pub result: Option<Vec<u8>>,
}

impl History {
    fn call(&self, start: Instant, outcome: &Outcome) {
        self.calls.lock().unwrap().push(Call { start, end: Instant::now(), outcome: outcome.clone() });
    }

    /// A fault window: from the fault's start until the sidecar serves again.
    pub fn window(&self, start: Instant, end: Instant) {
        self.windows.lock().unwrap().push((start, end));
    }

    pub fn checkpoint(&self, tuple: &Tuple, state: &[u8], start: Instant, outcome: Outcome) {
        self.call(start, &outcome);
        self.checkpoints.lock().unwrap().entry(tuple.clone()).or_default().push((hash(state), outcome));
    }

    /// One attempt of record put `n` in `turn`, of `records` (id, payload hash).
    pub fn records_put(&self, turn: &str, n: u64, records: Vec<(String, u64)>, start: Instant, outcome: Outcome) {
        self.call(start, &outcome);
        let mut puts = self.record_puts.lock().unwrap();
        puts.entry((turn.to_owned(), n)).or_insert_with(|| (records, Vec::new())).1.push(outcome);
    }

    /// One CreateWait attempt of wait `id`, with a timer or without.
    pub fn wait_created(&self, id: &WaitId, timer: bool, start: Instant, outcome: Outcome) {
        self.call(start, &outcome);
        self.waits.created(id, timer, outcome);
    }

    /// One Signal attempt of wait `id` with `payload`, and what it heard.
    pub fn wait_signalled(&self, id: &WaitId, payload: &[u8], start: Instant, answer: SignalAnswer) {
        let outcome = match &answer {
            SignalAnswer::Answered { .. } | SignalAnswer::Refused { .. } => Outcome::Ok,
            SignalAnswer::Failed(outcome) => outcome.clone(),
        };
        self.call(start, &outcome);
        self.waits.signalled(id, payload, answer);
    }

    /// An Await of wait `id` that came back settled, or NOT_FOUND (None).
    pub fn wait_awaited(&self, id: &WaitId, start: Instant, wait: Option<Wait>) {
        let outcome = if wait.is_some() { Outcome::Ok } else { Outcome::Definite(Code::NotFound) };
        self.call(start, &outcome);
        self.waits.awaited(id, wait);
    }

    /// An Await that came back with its wait still pending, or with an
    /// error (counted when indeterminate).
    pub fn await_unsettled(&self, start: Instant, outcome: Outcome) {
        self.call(start, &outcome);
        if matches!(outcome, Outcome::Indeterminate(_)) {
            self.waits.await_indeterminate();
        }
    }

    /// A call on a key that changes nothing the checker follows (e.g. IN_PROGRESS).
    pub fn key_call(&self, start: Instant, outcome: Outcome) {
        self.call(start, &outcome);
    }

    /// An ACQUIRED answer.
    pub fn acquired(&self, key: &str, start: Instant, acquisition: Acquisition) {
        self.call(start, &Outcome::Ok);
        self.keys.lock().unwrap().entry(key.to_owned()).or_default().acquisitions.push(acquisition);
    }

    /// The effect ledger: the holder of `token` performed the key's effect.
    pub fn effect(&self, key: &str, token: u64) {
        self.keys.lock().unwrap().entry(key.to_owned()).or_default().effects.push(token);
    }

    pub fn completed(&self, key: &str, token: u64, result: &[u8], start: Instant) {
        self.call(start, &Outcome::Ok);
        let mut keys = self.keys.lock().unwrap();
        keys.entry(key.to_owned()).or_default().completions.push((token, result.to_vec(), Instant::now()));
    }

    pub fn observed(&self, key: &str, result: &[u8], start: Instant) {
        self.call(start, &Outcome::Ok);
        let mut keys = self.keys.lock().unwrap();
        keys.entry(key.to_owned()).or_default().observed.push((result.to_vec(), Instant::now()));
    }

    /// When the first call that began after `after` ended indeterminate:
    /// when a client first heard that the store was gone.
    pub fn first_failure_after(&self, after: Instant) -> Option<Instant> {
        let calls = self.calls.lock().unwrap();
        calls.iter().filter(|c| c.start >= after && matches!(c.outcome, Outcome::Indeterminate(_))).map(|c| c.end).min()
    }

    /// How many calls ended with each error code.
    pub fn error_codes(&self) -> BTreeMap<String, usize> {
        let mut codes = BTreeMap::new();
        for call in self.calls.lock().unwrap().iter() {
            let code = match &call.outcome {
                Outcome::Ok => continue,
                Outcome::Definite(code) | Outcome::Indeterminate(code) => format!("{code:?}"),
                Outcome::Unexpected(what) => what.clone(),
            };
            *codes.entry(code).or_default() += 1;
        }
        codes
    }

    /// The turns, keys and turns of records the run touched, for reading back.
    pub fn touched(&self) -> (Vec<String>, Vec<String>, Vec<String>) {
        let mut turns: Vec<String> = self.checkpoints.lock().unwrap().keys().map(|t| t.turn.clone()).collect();
        turns.sort();
        turns.dedup();
        let mut keys: Vec<String> = self.keys.lock().unwrap().keys().cloned().collect();
        keys.sort();
        let mut record_turns: Vec<String> = self.record_puts.lock().unwrap().keys().map(|(t, _)| t.clone()).collect();
        record_turns.sort();
        record_turns.dedup();
        (turns, keys, record_turns)
    }

    /// Holds the log to what the store returned.
    pub fn verify(&self, read: &ReadBack) -> Verdict {
        let mut verdict = Verdict::default();
        self.verify_calls(&mut verdict);
        self.verify_checkpoints(&read.checkpoints, &mut verdict);
        self.verify_keys(&read.records, &mut verdict);
        self.verify_record_puts(&read.stored_records, &mut verdict);
        self.waits.verify(&read.waits, read.waits_again.as_deref(), &mut verdict);
        verdict
    }

    fn verify_record_puts(&self, stored: &[StoredRecord], verdict: &mut Verdict) {
        let puts = self.record_puts.lock().unwrap();
        let mut rows: BTreeMap<(&str, &str), Vec<u64>> = BTreeMap::new();
        for row in stored {
            rows.entry((&row.turn, &row.id)).or_default().push(row.hash);
        }
        verdict.record_puts = puts.len();
        for ((turn, n), (records, outcomes)) in puts.iter() {
            let acknowledged = outcomes.iter().any(Outcome::is_ok);
            let indeterminate = outcomes.iter().any(|o| matches!(o, Outcome::Indeterminate(_)));
            let mut present = 0;
            for (id, payload) in records {
                let found = rows.remove(&(turn.as_str(), id.as_str())).unwrap_or_default();
                if found.len() > 1 {
                    verdict.duplicated += 1;
                    verdict.violations.push(format!("record {turn}/{id}: stored {} times", found.len()));
                }
                if found.iter().any(|h| h != payload) {
                    verdict.violations.push(format!("record {turn}/{id}: stored bytes differ from the payload"));
                }
                present += usize::from(!found.is_empty());
            }
            if present != 0 && present != records.len() {
                verdict.violations.push(format!("put {turn}#{n}: {present} of its {} records stored", records.len()));
            }
            if acknowledged && present == 0 {
                verdict.lost += 1;
                verdict.violations.push(format!("put {turn}#{n}: acknowledged but not stored (lost)"));
            }
            if !acknowledged && !indeterminate && present > 0 {
                verdict.violations.push(format!("put {turn}#{n}: stored although every attempt got a definite error"));
            }
        }
        for ((turn, id), hashes) in rows {
            verdict.violations.push(format!("record {turn}/{id}: stored {} times but never written", hashes.len()));
        }
    }

    fn verify_calls(&self, verdict: &mut Verdict) {
        let calls = self.calls.lock().unwrap();
        let windows = self.windows.lock().unwrap();
        for call in calls.iter() {
            verdict.calls += 1;
            match &call.outcome {
                Outcome::Ok => verdict.ok += 1,
                Outcome::Indeterminate(_) => verdict.indeterminate += 1,
                Outcome::Definite(_) => verdict.definite += 1,
                Outcome::Unexpected(what) => verdict.violations.push(format!("unexpected answer: {what}")),
            }
            let outside = windows.iter().all(|&(start, end)| call.end < start || call.start > end);
            if outside {
                verdict.outside_windows += 1;
                verdict.ok_outside_windows += usize::from(call.outcome.is_ok());
            }
        }
    }

    fn verify_checkpoints(&self, stored: &[Stored], verdict: &mut Verdict) {
        let log = self.checkpoints.lock().unwrap();
        let mut rows: BTreeMap<&Tuple, Vec<u64>> = BTreeMap::new();
        for row in stored {
            rows.entry(&row.tuple).or_default().push(row.hash);
        }
        verdict.tuples = log.len();
        for (tuple, attempts) in log.iter() {
            let found = rows.remove(tuple).unwrap_or_default();
            let payload = attempts[0].0;
            if attempts.iter().any(|(h, _)| *h != payload) {
                verdict.violations.push(format!("{tuple:?}: the workload sent two payloads for one tuple"));
            }
            let acknowledged = attempts.iter().any(|(_, o)| o.is_ok());
            let indeterminate = attempts.iter().any(|(_, o)| matches!(o, Outcome::Indeterminate(_)));
            if found.len() > 1 {
                verdict.duplicated += 1;
                verdict.violations.push(format!("{tuple:?}: stored {} times", found.len()));
            }
            if found.iter().any(|h| *h != payload) {
                verdict.violations.push(format!("{tuple:?}: stored bytes differ from the payload"));
            }
            if acknowledged && found.is_empty() {
                verdict.lost += 1;
                verdict.violations.push(format!("{tuple:?}: acknowledged but not stored (lost)"));
            }
            if !acknowledged && !indeterminate && !found.is_empty() {
                verdict.violations.push(format!("{tuple:?}: stored although every attempt got a definite error"));
            }
        }
        for (tuple, hashes) in rows {
            verdict.violations.push(format!("{tuple:?}: stored {} times but never written", hashes.len()));
        }
    }

    fn verify_keys(&self, records: &[Record], verdict: &mut Verdict) {
        let keys = self.keys.lock().unwrap();
        let records: HashMap<&str, &Record> = records.iter().map(|r| (r.key.as_str(), r)).collect();
        verdict.keys = keys.len();
        for (key, history) in keys.iter() {
            let found = records.get(key.as_str()).is_some_and(|r| r.found);
            if !found && !history.acquisitions.is_empty() {
                verdict.lost += 1;
                verdict.violations.push(format!("{key}: acquired and acknowledged, but no record is stored (lost)"));
            }
            let mut acquisitions = history.acquisitions.clone();
            acquisitions.sort_by_key(|a| a.token);
            for pair in acquisitions.windows(2) {
                if pair[0].token == pair[1].token {
                    verdict.violations.push(format!("{key}: token {} issued twice", pair[0].token));
                } else if pair[1].granted_ns < pair[0].expires_ns {
                    verdict.violations.push(format!(
                        "{key}: token {} granted {} ns before token {}'s lease ran out (two live holders)",
                        pair[1].token,
                        pair[0].expires_ns - pair[1].granted_ns,
                        pair[0].token
                    ));
                }
            }
            // Every result anyone saw, from the first acknowledgement on, is one result.
            let mut results: Vec<(&[u8], Instant)> =
                history.completions.iter().map(|(_, r, at)| (r.as_slice(), *at)).collect();
            results.extend(history.observed.iter().map(|(r, at)| (r.as_slice(), *at)));
            results.sort_by_key(|(_, at)| *at);
            if let Some(&(first, known_at)) = results.first() {
                if results.iter().any(|(r, _)| *r != first) {
                    verdict.violations.push(format!("{key}: the recorded result changed"));
                }
                for acquisition in &acquisitions {
                    if acquisition.begin_sent > known_at {
                        verdict.violations.push(format!(
                            "{key}: token {} acquired, and its effect performed, after the key was COMPLETED",
                            acquisition.token
                        ));
                    }
                }
                match records.get(key.as_str()).and_then(|r| r.result.as_deref()) {
                    Some(recorded) if recorded == first => {}
                    Some(_) => verdict.violations.push(format!("{key}: the stored result is not the acknowledged one")),
                    None if !found => {}
                    None => {
                        verdict.lost += 1;
                        verdict.violations.push(format!("{key}: completed and acknowledged, but not COMPLETED now"));
                    }
                }
            }
            let mut effects = history.effects.clone();
            effects.sort_unstable();
            if effects.windows(2).any(|pair| pair[0] == pair[1]) {
                verdict.violations.push(format!("{key}: one lease performed the effect twice"));
            }
            if effects.iter().any(|token| !acquisitions.iter().any(|a| a.token == *token)) {
                verdict.violations.push(format!("{key}: an effect was performed without a lease"));
            }
        }
    }
}
