//! The rules of idempotency keys, in one place and free of SQL: given the
//! stored record (if any), the request and the store's clock, each function
//! plans the answer and the record to write. Every backend loads the record
//! under its write lock, follows the plan, and commits; so every backend
//! behaves the same, and the rules can be read (and tested) on their own.
//!
//! A record is held through a lease with a fencing token. Tokens come from a
//! store-wide sequence, so they strictly increase per key and are never
//! reused, even after a record is purged and its key begun again.

use crate::domain::model::UnixNanos;

/// The stored state of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// A holder has (or had, if `lease_expires_at` has passed) the lease.
    Leased,
    Completed,
    Failed,
    /// The holder gave the key back for a new attempt.
    Released,
}

impl Held {
    /// The integer stored in the database.
    pub fn code(self) -> i64 {
        match self {
            Held::Leased => 1,
            Held::Completed => 2,
            Held::Failed => 3,
            Held::Released => 4,
        }
    }

    /// The state stored as `code`, if it is one.
    pub fn from_code(code: i64) -> Option<Held> {
        [Held::Leased, Held::Completed, Held::Failed, Held::Released].into_iter().find(|h| h.code() == code)
    }
}

/// The state of a record as a reader sees it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    InProgress,
    Completed,
    Failed,
    /// The lease ran out without Complete or Release.
    Expired,
    Released,
}

/// One idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub namespace: String,
    pub key: String,
    pub held: Held,
    /// Empty when no Begin gave one.
    pub fingerprint: Vec<u8>,
    pub attempt: u32,
    pub lease_token: u64,
    pub lease_expires_at: UnixNanos,
    pub result: Vec<u8>,
    pub error: String,
    /// How long the record is kept once it is no longer leased, in nanoseconds.
    pub retention: i64,
    pub created_at: UnixNanos,
    pub updated_at: UnixNanos,
    /// When a sweeper may delete the record; from then on it counts as absent.
    pub purge_after: UnixNanos,
}

impl KeyRecord {
    /// The state a reader sees at `now`.
    pub fn state(&self, now: UnixNanos) -> KeyState {
        match self.held {
            Held::Leased if now < self.lease_expires_at => KeyState::InProgress,
            Held::Leased => KeyState::Expired,
            Held::Completed => KeyState::Completed,
            Held::Failed => KeyState::Failed,
            Held::Released => KeyState::Released,
        }
    }

    /// Whether the record's retention has run out, so its key is free.
    pub fn is_purgeable(&self, now: UnixNanos) -> bool {
        self.purge_after <= now
    }

    /// The record with its lease ended in `held`, kept for its retention from `now`.
    fn settled(&self, held: Held, now: UnixNanos) -> KeyRecord {
        KeyRecord { held, updated_at: now, purge_after: now.saturating_add(self.retention), ..self.clone() }
    }
}

/// Begin's request, checked.
#[derive(Debug, Clone)]
pub struct BeginArgs {
    pub namespace: String,
    pub key: String,
    pub fingerprint: Vec<u8>,
    /// Nanoseconds, > 0.
    pub lease: i64,
    /// Nanoseconds, > 0.
    pub retention: i64,
}

/// Complete, Release and Extend name a record and the token held.
#[derive(Debug, Clone)]
pub struct Fence {
    pub namespace: String,
    pub key: String,
    pub lease_token: u64,
}

/// What Begin tells the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginOutcome {
    Acquired { lease_token: u64, attempt: u32, lease_expires_at: UnixNanos, previous_lease_expired: bool },
    Completed { attempt: u32, result: Vec<u8> },
    InProgress { attempt: u32, lease_expires_at: UnixNanos },
    Failed { attempt: u32, error: String },
}

/// Why a request on a record was refused; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The key was begun with a different fingerprint.
    KeyReused,
    /// The token is not the record's current one: another holder took over.
    LeaseLost,
    /// There is no record, or it is not leased.
    NotAcquired,
    /// Complete was repeated with the same token but a different result.
    ResultMismatch,
}

/// What Begin must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginPlan {
    /// Answer without writing.
    Answer(Result<BeginOutcome, Refusal>),
    /// Take the lease: allocate a token, then write `acquired(...)`.
    Acquire { attempt: u32, previous_lease_expired: bool },
}

/// Plans a Begin on `record` (already known not to be purgeable) at `now`.
pub fn plan_begin(record: Option<&KeyRecord>, args: &BeginArgs, now: UnixNanos) -> BeginPlan {
    let Some(record) = record else {
        return BeginPlan::Acquire { attempt: 1, previous_lease_expired: false };
    };
    let both_given = !args.fingerprint.is_empty() && !record.fingerprint.is_empty();
    if both_given && args.fingerprint != record.fingerprint {
        return BeginPlan::Answer(Err(Refusal::KeyReused));
    }
    let attempt = record.attempt;
    let next = attempt.saturating_add(1);
    BeginPlan::Answer(Ok(match record.state(now) {
        KeyState::InProgress => BeginOutcome::InProgress { attempt, lease_expires_at: record.lease_expires_at },
        KeyState::Completed => BeginOutcome::Completed { attempt, result: record.result.clone() },
        KeyState::Failed => BeginOutcome::Failed { attempt, error: record.error.clone() },
        KeyState::Expired => return BeginPlan::Acquire { attempt: next, previous_lease_expired: true },
        KeyState::Released => return BeginPlan::Acquire { attempt: next, previous_lease_expired: false },
    }))
}

/// The record a Begin that acquired writes, replacing `previous` if there was one.
pub fn acquired(
    previous: Option<&KeyRecord>,
    args: &BeginArgs,
    now: UnixNanos,
    lease_token: u64,
    attempt: u32,
) -> KeyRecord {
    let lease_expires_at = now.saturating_add(args.lease);
    let fingerprint = match previous {
        Some(p) if args.fingerprint.is_empty() => p.fingerprint.clone(),
        _ => args.fingerprint.clone(),
    };
    KeyRecord {
        namespace: args.namespace.clone(),
        key: args.key.clone(),
        held: Held::Leased,
        fingerprint,
        attempt,
        lease_token,
        lease_expires_at,
        result: Vec::new(),
        error: String::new(),
        retention: args.retention,
        created_at: previous.map_or(now, |p| p.created_at),
        updated_at: now,
        purge_after: lease_expires_at.saturating_add(args.retention),
    }
}

/// What Complete, Release or Extend must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan<T> {
    /// Answer without writing.
    Answer(Result<T, Refusal>),
    /// Write this record, then answer `T`.
    Write(KeyRecord, T),
}

/// The record, if `fence` holds its current token; otherwise the refusal.
fn fenced<'r>(record: Option<&'r KeyRecord>, fence: &Fence) -> Result<&'r KeyRecord, Refusal> {
    let record = record.ok_or(Refusal::NotAcquired)?;
    if record.lease_token != fence.lease_token {
        return Err(Refusal::LeaseLost);
    }
    Ok(record)
}

/// Whether a fenced write may go ahead: `fence` holds the key's current
/// token and the lease was not given back. A holder whose lease ran out
/// may still write while no one else has acquired the key, as it may complete.
pub fn check_fence(record: Option<&KeyRecord>, fence: &Fence) -> Result<(), Refusal> {
    match fenced(record, fence)?.held {
        Held::Leased => Ok(()),
        Held::Completed | Held::Failed | Held::Released => Err(Refusal::NotAcquired),
    }
}

/// Plans a Complete. A holder whose lease ran out may still complete while
/// no one else has acquired the key: its token is still the current one.
pub fn plan_complete(record: Option<&KeyRecord>, fence: &Fence, result: &[u8], now: UnixNanos) -> Plan<UnixNanos> {
    let record = match fenced(record, fence) {
        Ok(record) => record,
        Err(refusal) => return Plan::Answer(Err(refusal)),
    };
    match record.held {
        Held::Leased => {
            let done = KeyRecord { result: result.to_vec(), ..record.settled(Held::Completed, now) };
            Plan::Write(done, now)
        }
        Held::Completed if record.result == result => Plan::Answer(Ok(record.updated_at)),
        Held::Completed => Plan::Answer(Err(Refusal::ResultMismatch)),
        Held::Failed | Held::Released => Plan::Answer(Err(Refusal::NotAcquired)),
    }
}

/// Plans a Release: `permanent` records FAILED with `error`; otherwise the
/// key is free for a new attempt at once.
pub fn plan_release(
    record: Option<&KeyRecord>,
    fence: &Fence,
    error: &str,
    permanent: bool,
    now: UnixNanos,
) -> Plan<KeyState> {
    let record = match fenced(record, fence) {
        Ok(record) => record,
        Err(refusal) => return Plan::Answer(Err(refusal)),
    };
    match record.held {
        Held::Leased if permanent => {
            Plan::Write(KeyRecord { error: error.to_owned(), ..record.settled(Held::Failed, now) }, KeyState::Failed)
        }
        Held::Leased => Plan::Write(record.settled(Held::Released, now), KeyState::Released),
        Held::Completed | Held::Failed | Held::Released => Plan::Answer(Err(Refusal::NotAcquired)),
    }
}

/// Plans an Extend: a live lease moves to `now + lease`; an expired one is lost.
pub fn plan_extend(record: Option<&KeyRecord>, fence: &Fence, lease: i64, now: UnixNanos) -> Plan<UnixNanos> {
    let record = match fenced(record, fence) {
        Ok(record) => record,
        Err(refusal) => return Plan::Answer(Err(refusal)),
    };
    match record.state(now) {
        KeyState::InProgress => {
            let lease_expires_at = now.saturating_add(lease);
            let extended = KeyRecord {
                lease_expires_at,
                updated_at: now,
                purge_after: lease_expires_at.saturating_add(record.retention),
                ..record.clone()
            };
            Plan::Write(extended, lease_expires_at)
        }
        KeyState::Expired => Plan::Answer(Err(Refusal::LeaseLost)),
        KeyState::Completed | KeyState::Failed | KeyState::Released => Plan::Answer(Err(Refusal::NotAcquired)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1_000_000_000;

    fn args(fingerprint: &[u8]) -> BeginArgs {
        BeginArgs {
            namespace: "default".into(),
            key: "k".into(),
            fingerprint: fingerprint.to_vec(),
            lease: 30 * SECOND,
            retention: 60 * SECOND,
        }
    }

    fn fence(token: u64) -> Fence {
        Fence { namespace: "default".into(), key: "k".into(), lease_token: token }
    }

    #[test]
    fn a_new_key_is_acquired_and_a_live_lease_is_in_progress() {
        assert_eq!(plan_begin(None, &args(b""), 0), BeginPlan::Acquire { attempt: 1, previous_lease_expired: false });
        let held = acquired(None, &args(b"f"), 0, 7, 1);
        assert_eq!(
            plan_begin(Some(&held), &args(b"f"), SECOND),
            BeginPlan::Answer(Ok(BeginOutcome::InProgress { attempt: 1, lease_expires_at: 30 * SECOND }))
        );
        assert_eq!(
            plan_begin(Some(&held), &args(b"f"), 30 * SECOND),
            BeginPlan::Acquire { attempt: 2, previous_lease_expired: true }
        );
    }

    #[test]
    fn fingerprints_must_match_when_both_are_given() {
        let held = acquired(None, &args(b"f"), 0, 7, 1);
        assert_eq!(plan_begin(Some(&held), &args(b"g"), 0), BeginPlan::Answer(Err(Refusal::KeyReused)));
        assert!(matches!(plan_begin(Some(&held), &args(b""), 0), BeginPlan::Answer(Ok(_))));
        // A later Begin without a fingerprint keeps the recorded one.
        assert_eq!(acquired(Some(&held), &args(b""), 0, 8, 2).fingerprint, b"f");
    }

    #[test]
    fn complete_is_fenced_and_idempotent() {
        let held = acquired(None, &args(b""), 0, 7, 1);
        assert_eq!(plan_complete(Some(&held), &fence(6), b"r", 0), Plan::Answer(Err(Refusal::LeaseLost)));
        assert_eq!(plan_complete(None, &fence(7), b"r", 0), Plan::Answer(Err(Refusal::NotAcquired)));
        let Plan::Write(done, at) = plan_complete(Some(&held), &fence(7), b"r", 40 * SECOND) else { panic!() };
        assert_eq!((done.held, done.result.as_slice(), done.purge_after), (Held::Completed, &b"r"[..], 100 * SECOND));
        assert_eq!(plan_complete(Some(&done), &fence(7), b"r", 50 * SECOND), Plan::Answer(Ok(at)));
        assert_eq!(plan_complete(Some(&done), &fence(7), b"x", 0), Plan::Answer(Err(Refusal::ResultMismatch)));
    }

    #[test]
    fn extend_refuses_an_expired_lease_and_release_frees_or_fails() {
        let held = acquired(None, &args(b""), 0, 7, 1);
        assert_eq!(plan_extend(Some(&held), &fence(7), SECOND, 30 * SECOND), Plan::Answer(Err(Refusal::LeaseLost)));
        let Plan::Write(extended, until) = plan_extend(Some(&held), &fence(7), 50 * SECOND, 10 * SECOND) else {
            panic!()
        };
        assert_eq!((until, extended.purge_after), (60 * SECOND, 120 * SECOND));
        let Plan::Write(failed, KeyState::Failed) = plan_release(Some(&held), &fence(7), "boom", true, 0) else {
            panic!()
        };
        assert_eq!(failed.error, "boom");
        let Plan::Write(free, KeyState::Released) = plan_release(Some(&held), &fence(7), "", false, 0) else {
            panic!()
        };
        assert_eq!(
            plan_begin(Some(&free), &args(b""), 0),
            BeginPlan::Acquire { attempt: 2, previous_lease_expired: false }
        );
        assert_eq!(plan_release(Some(&free), &fence(7), "", false, 0), Plan::Answer(Err(Refusal::NotAcquired)));
    }
}
