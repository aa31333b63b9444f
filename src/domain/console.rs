//! What the web console reads that the API does not: counts per namespace,
//! turns by last activity, a turn's checkpoints without their states, a
//! turn's records, and keys by state. Plain queries and rows; the store
//! answers them from indexes, so that a page stays fast on a large store.

use crate::domain::keys::KeyRecord;
use crate::domain::model::{TurnStatus, UnixNanos};

/// The counts the overview shows for one namespace at `now`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overview {
    pub open_turns: u64,
    /// Open turns whose last checkpoint is older than the stalled threshold.
    pub stalled_turns: u64,
    pub terminal_turns: u64,
    pub keys_in_progress: u64,
    /// Leases that ran out and were not taken again.
    pub keys_expired: u64,
    pub keys_failed: u64,
    pub waits_pending: u64,
    /// Pending waits with a timer (`resolve_at`).
    pub timers_pending: u64,
}

/// One page of turns, newest activity first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityQuery {
    pub namespace: String,
    pub status: TurnStatus,
    /// Only open turns whose last checkpoint is older than this.
    pub stalled_before: Option<UnixNanos>,
    pub session_id: Option<String>,
    /// Last activity at or after this.
    pub from: Option<UnixNanos>,
    /// Last activity before this.
    pub to: Option<UnixNanos>,
    pub prefix: Option<String>,
    /// The (last activity, turn id) the page continues below.
    pub after: Option<(UnixNanos, String)>,
    pub limit: u32,
}

/// A checkpoint as the timeline draws it: everything but its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub seq: i64,
    pub phase: String,
    pub timestamp: UnixNanos,
    pub recorded_at: UnixNanos,
    pub state_bytes: u64,
    pub terminal: bool,
    pub workflow_version: String,
    pub session_id: String,
}

/// One page of a turn's checkpoints, newest first, below `before` (a
/// (timestamp, seq) cursor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkQuery {
    pub namespace: String,
    pub turn_id: String,
    pub before: Option<(UnixNanos, i64)>,
    pub limit: u32,
}

/// A record as the turn page lists it: its address, size and metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMark {
    pub kind: String,
    pub scope: String,
    pub id: String,
    pub parent_id: String,
    pub content_type: String,
    pub bytes: u64,
    pub metadata: Option<String>,
    pub recorded_at: UnixNanos,
}

/// Which keys a key page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFilter {
    InProgress,
    Expired,
    Failed,
    Completed,
    Released,
    All,
}

/// One page of keys in key order, after `after`, with names starting with `prefix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyQuery {
    pub namespace: String,
    pub filter: KeyFilter,
    pub prefix: Option<String>,
    pub after: Option<String>,
    pub limit: u32,
}

/// A page of keys, with the store's time that their states are read at.
#[derive(Debug, Clone)]
pub struct KeyPage {
    pub keys: Vec<KeyRecord>,
    pub now: UnixNanos,
    pub more: bool,
}

/// Which waits a waits page lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFilter {
    Pending,
    /// Pending waits with a timer (`resolve_at`).
    Timers,
    Settled,
    All,
}

/// One page of waits in (turn id, name) order, after `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitPageQuery {
    pub namespace: String,
    pub filter: WaitFilter,
    pub turn_id: Option<String>,
    pub after: Option<(String, String)>,
    pub limit: u32,
}

/// The smallest string above every string that starts with `prefix`, for a
/// range scan `prefix <= id < upper`; `None` when there is none (a prefix of
/// only U+10FFFF, which a range then leaves open above).
pub fn prefix_upper(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        if let Some(next) = (u32::from(last) + 1..=0x10FFFF).find_map(char::from_u32) {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_upper_bound_of_a_prefix_is_above_its_extensions_and_below_the_rest() {
        let upper = prefix_upper("run-1").unwrap();
        assert_eq!(upper, "run-2");
        for inside in ["run-1", "run-1/a", "run-1\u{10FFFF}"] {
            assert!(inside < upper.as_str(), "{inside}");
        }
        assert!("run-2" >= upper.as_str());
        assert_eq!(prefix_upper("a\u{10FFFF}").unwrap(), "b");
        assert_eq!(prefix_upper("\u{D7FF}").unwrap(), "\u{E000}");
        assert_eq!(prefix_upper("\u{10FFFF}"), None);
    }
}
