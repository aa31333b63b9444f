//! The checker's rules for waits (WaitService). Every CreateWait, Signal and
//! Await of a run is logged by wait, and the waits the store holds are read
//! back twice, once after the run and its timers have settled and once
//! after one more restart, and held to what the answers promised:
//!
//! - No settlement lost: a wait whose creation, or a Signal of which, was
//!   acknowledged is stored; a Signal acknowledged with settled=true is the
//!   stored winner, payload and all; an Await that came back settled saw the
//!   stored wait.
//! - None doubled: at most one Signal per wait is acknowledged with
//!   settled=true; a repeat acknowledged with settled=false sent the stored
//!   payload; an ALREADY_EXISTS WAIT_SETTLED refusal carries the stored
//!   winner; and a settled wait reads the same after the restart.
//! - Timers fire: every timer wait ends RESOLVED, by "stepwell:timer" with
//!   an empty payload unless a Signal won first, and then that Signal was
//!   acknowledged or is indeterminate, never refused.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use stepwell::api::pb::{Wait, WaitStatus};

use crate::checker::{Outcome, Verdict};

/// Who `settled_by` names when a wait's own timer resolved it.
pub const TIMER: &str = "stepwell:timer";

/// A wait of the run's namespace: (turn_id, name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WaitId {
    pub turn: String,
    pub name: String,
}

impl std::fmt::Display for WaitId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "wait {}/{}", self.turn, self.name)
    }
}

/// What one Signal attempt heard.
#[derive(Debug, Clone)]
pub enum SignalAnswer {
    /// OK: whether this call settled the wait, and the wait it answered.
    Answered { settled: bool, wait: Wait },
    /// ALREADY_EXISTS, WAIT_SETTLED: the winner the refusal carried.
    Refused { wait: Wait, payload_omitted: bool },
    /// Any other answer (an indeterminate one, or a definite error).
    Failed(Outcome),
}

/// Everything one wait went through.
#[derive(Debug, Default)]
struct WaitHistory {
    /// Created with a timer (resolve_at).
    timer: bool,
    /// Each CreateWait attempt's outcome.
    creates: Vec<Outcome>,
    /// Each Signal attempt: the payload it sent, and what it heard.
    signals: Vec<(Vec<u8>, SignalAnswer)>,
    /// Each Await that answered: the wait (None for NOT_FOUND).
    awaited: Vec<Option<Wait>>,
}

impl WaitHistory {
    /// Whether any answer promised that the wait is stored.
    fn promised(&self) -> bool {
        self.creates.iter().any(Outcome::is_ok)
            || self.signals.iter().any(|(_, a)| !matches!(a, SignalAnswer::Failed(_)))
            || self.awaited.iter().any(Option::is_some)
    }

    /// Whether a Signal of `payload` may have settled the wait: one of its
    /// attempts was acknowledged, or ended indeterminate.
    fn may_have_signalled(&self, payload: &[u8]) -> bool {
        self.signals.iter().filter(|(sent, _)| sent == payload).any(|(_, answer)| match answer {
            SignalAnswer::Answered { .. } => true,
            SignalAnswer::Failed(outcome) => matches!(outcome, Outcome::Indeterminate(_)),
            SignalAnswer::Refused { .. } => false,
        })
    }
}

/// The log of a run's waits.
#[derive(Default)]
pub struct WaitLog {
    waits: Mutex<BTreeMap<WaitId, WaitHistory>>,
    /// Awaits that ended indeterminate: cut in flight, or sent while the sidecar was down.
    awaits_indeterminate: AtomicUsize,
}

impl WaitLog {
    pub fn created(&self, id: &WaitId, timer: bool, outcome: Outcome) {
        let mut waits = self.waits.lock().unwrap();
        let history = waits.entry(id.clone()).or_default();
        history.timer |= timer;
        history.creates.push(outcome);
    }

    pub fn signalled(&self, id: &WaitId, payload: &[u8], answer: SignalAnswer) {
        let mut waits = self.waits.lock().unwrap();
        waits.entry(id.clone()).or_default().signals.push((payload.to_vec(), answer));
    }

    pub fn await_indeterminate(&self) {
        self.awaits_indeterminate.fetch_add(1, Ordering::Relaxed);
    }

    pub fn awaited(&self, id: &WaitId, wait: Option<Wait>) {
        self.waits.lock().unwrap().entry(id.clone()).or_default().awaited.push(wait);
    }

    /// Holds the log to the waits read back after the run (`first`) and,
    /// if given, after one more restart (`again`).
    pub fn verify(&self, first: &[Wait], again: Option<&[Wait]>, verdict: &mut Verdict) {
        let waits = self.waits.lock().unwrap();
        let mut stored: BTreeMap<WaitId, &Wait> = first.iter().map(|w| (id_of(w), w)).collect();
        let awaits_indeterminate = self.awaits_indeterminate.load(Ordering::Relaxed);
        let mut figures = WaitFigures { waits: waits.len(), awaits_indeterminate, ..Default::default() };
        for (id, history) in waits.iter() {
            figures.count(history, stored.get(id).copied());
            verify_wait(id, history, stored.remove(id), verdict);
        }
        for id in stored.keys() {
            verdict.violations.push(format!("{id}: stored but the run never wrote it"));
        }
        if let Some(again) = again {
            verify_unchanged(first, again, verdict);
        }
        verdict.waits = serde_json::to_value(figures).expect("wait figures as JSON");
    }
}

/// The figures of a run's waits, for its report.
#[derive(Debug, Default, serde::Serialize)]
struct WaitFigures {
    waits: usize,
    timer_waits: usize,
    fired_by_timer: usize,
    timer_waits_won_by_a_signal: usize,
    signals_settled: usize,
    signals_refused_wait_settled: usize,
    signals_indeterminate: usize,
    awaits_settled: usize,
    awaits_indeterminate: usize,
    pending_at_end: usize,
}

impl WaitFigures {
    fn count(&mut self, history: &WaitHistory, stored: Option<&Wait>) {
        self.timer_waits += usize::from(history.timer);
        if let Some(wait) = stored {
            let by_timer = wait.settled_by == TIMER;
            self.fired_by_timer += usize::from(by_timer);
            let resolved = wait.status() == WaitStatus::Resolved;
            self.timer_waits_won_by_a_signal += usize::from(history.timer && resolved && !by_timer);
            self.pending_at_end += usize::from(wait.status() == WaitStatus::Pending);
        }
        for (_, answer) in &history.signals {
            match answer {
                SignalAnswer::Answered { settled, .. } => self.signals_settled += usize::from(*settled),
                SignalAnswer::Refused { .. } => self.signals_refused_wait_settled += 1,
                SignalAnswer::Failed(outcome) => {
                    self.signals_indeterminate += usize::from(matches!(outcome, Outcome::Indeterminate(_)))
                }
            }
        }
        self.awaits_settled += history.awaited.iter().flatten().count();
    }
}

/// A payload as text (every payload of the run is), quoted.
fn text(bytes: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(bytes))
}

/// A wait in one line, every field the checker compares: its status, what
/// settled it, when, with what, and its times and metadata.
fn show(wait: &Wait) -> String {
    let at = |t: &Option<prost_types::Timestamp>| {
        t.as_ref().map_or("-".to_owned(), |t| format!("{}.{:09}", t.seconds, t.nanos))
    };
    format!(
        "[{:?} payload {} ({:?}) by {:?} at {}; created {}, resolve_at {}, expire_at {}, metadata {}, handle {:?}]",
        wait.status(),
        text(&wait.payload),
        wait.content_type,
        wait.settled_by,
        at(&wait.settled_at),
        at(&wait.created_at),
        at(&wait.resolve_at),
        at(&wait.expire_at),
        text(&wait.metadata),
        wait.handle
    )
}

fn id_of(wait: &Wait) -> WaitId {
    WaitId { turn: wait.turn_id.clone(), name: wait.name.clone() }
}

/// One wait's log against the wait stored (None: not found).
fn verify_wait(id: &WaitId, history: &WaitHistory, stored: Option<&Wait>, verdict: &mut Verdict) {
    let Some(stored) = stored else {
        if history.promised() {
            verdict.lost += 1;
            verdict.violations.push(format!("{id}: created or settled with an acknowledgement, but not stored (lost)"));
        }
        return;
    };
    match stored.status() {
        WaitStatus::Pending => {
            if history.timer {
                verdict
                    .violations
                    .push(format!("{id}: a timer wait still PENDING after the settle phase: {}", show(stored)));
            }
            if history.signals.iter().any(|(_, a)| !matches!(a, SignalAnswer::Failed(_))) {
                verdict.lost += 1;
                verdict.violations.push(format!("{id}: a Signal was acknowledged, but the wait is PENDING (lost)"));
            }
        }
        WaitStatus::Resolved => verify_resolution(id, history, stored, verdict),
        other => {
            verdict.violations.push(format!("{id}: {other:?}, which nothing in the run asked for: {}", show(stored)))
        }
    }
    verify_signals(id, history, stored, verdict);
    for awaited in &history.awaited {
        match awaited {
            None => {
                verdict.lost += 1;
                verdict
                    .violations
                    .push(format!("{id}: an Await answered NOT_FOUND after its creation was acknowledged"));
            }
            Some(seen) if seen != stored => verdict.violations.push(format!(
                "{id}: an Await came back settled with {}, but the store holds {}",
                show(seen),
                show(stored)
            )),
            Some(_) => {}
        }
    }
}

/// What resolved a wait: its timer (then it has one, and the payload is
/// empty), or a Signal that may have settled it.
fn verify_resolution(id: &WaitId, history: &WaitHistory, stored: &Wait, verdict: &mut Verdict) {
    if stored.settled_by == TIMER {
        if !history.timer {
            verdict.violations.push(format!("{id}: resolved by the timer, but it was created without one"));
        }
        if !stored.payload.is_empty() {
            verdict.violations.push(format!("{id}: resolved by the timer with a payload: {}", show(stored)));
        }
    } else if !history.signals.iter().any(|(sent, _)| *sent == stored.payload) {
        verdict.violations.push(format!("{id}: resolved with a payload no Signal sent: {}", show(stored)));
    } else if !history.may_have_signalled(&stored.payload) {
        verdict.violations.push(format!(
            "{id}: resolved by a Signal none of whose attempts was acknowledged or indeterminate: {}",
            show(stored)
        ));
    }
}

/// Every Signal answer of a wait against the wait stored.
fn verify_signals(id: &WaitId, history: &WaitHistory, stored: &Wait, verdict: &mut Verdict) {
    let mut winners: Vec<&[u8]> = Vec::new();
    for (sent, answer) in &history.signals {
        match answer {
            SignalAnswer::Answered { settled: true, wait } => {
                winners.push(sent);
                if wait != stored || *sent != stored.payload {
                    verdict.lost += 1;
                    verdict.violations.push(format!(
                        "{id}: a Signal of {} was acknowledged settled=true with {}, but the store holds {}",
                        text(sent),
                        show(wait),
                        show(stored)
                    ));
                }
            }
            SignalAnswer::Answered { settled: false, wait } => {
                if wait != stored || *sent != stored.payload {
                    verdict.violations.push(format!(
                        "{id}: a Signal of {} was acknowledged as a repeat of the winner with {}, but the store holds {}",
                        text(sent),
                        show(wait),
                        show(stored)
                    ));
                }
            }
            SignalAnswer::Refused { wait, payload_omitted } => {
                verify_refusal(id, sent, wait, *payload_omitted, stored, verdict);
            }
            SignalAnswer::Failed(_) => {}
        }
    }
    if winners.len() > 1 {
        let mut distinct = winners.clone();
        distinct.sort_unstable();
        distinct.dedup();
        verdict.duplicated += 1;
        verdict.violations.push(format!(
            "{id}: {} Signals acknowledged settled=true, with {} distinct payloads (settled more than once)",
            winners.len(),
            distinct.len()
        ));
    }
}

/// An ALREADY_EXISTS WAIT_SETTLED refusal carries the stored winner, which
/// is not the refused Signal's own payload (a repeat of the winner is OK).
fn verify_refusal(id: &WaitId, sent: &[u8], carried: &Wait, omitted: bool, stored: &Wait, verdict: &mut Verdict) {
    let mut expected = stored.clone();
    if omitted {
        expected.payload.clear();
    }
    if *carried != expected {
        verdict.violations.push(format!(
            "{id}: a Signal refused WAIT_SETTLED carried {} as the winner, but the store holds {}",
            show(carried),
            show(stored)
        ));
    }
    if sent == stored.payload.as_slice() {
        verdict
            .violations
            .push(format!("{id}: a Signal of the winning payload {} was refused WAIT_SETTLED", text(sent)));
    }
}

/// A settled wait never changes: each reads the same after one more
/// restart, and none disappears.
fn verify_unchanged(first: &[Wait], again: &[Wait], verdict: &mut Verdict) {
    let again: BTreeMap<WaitId, &Wait> = again.iter().map(|w| (id_of(w), w)).collect();
    for wait in first {
        let id = id_of(wait);
        match again.get(&id) {
            None => {
                verdict.lost += 1;
                verdict.violations.push(format!("{id}: stored after the run, gone after a restart: {}", show(wait)));
            }
            Some(later) if wait.status() != WaitStatus::Pending && *later != wait => {
                verdict.duplicated += 1;
                verdict.violations.push(format!(
                    "{id}: changed after it was settled: {} after the run, {} after a restart",
                    show(wait),
                    show(later)
                ));
            }
            Some(_) => {}
        }
    }
}
