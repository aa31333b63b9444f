//! What the web console reads that the API does not: counts per namespace,
//! runs by last activity (every turn that holds checkpoints, records or
//! waits, and what kind of run it is), a turn's checkpoints without their
//! states, a turn's records, and keys by state. Plain queries and rows; the
//! store answers them from indexes, so that a page stays fast on a large
//! store.

use crate::domain::keys::KeyRecord;
use crate::domain::model::{TurnStatus, TurnSummary, UnixNanos};

/// The counts the overview shows for one namespace at `now`. A turn counts
/// whatever it holds: a checkpoint log, records (a LangGraph thread, an
/// agent session) or only waits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overview {
    /// Runs with work pending (`Run::open`).
    pub open_turns: u64,
    /// Open runs whose last activity is older than the stalled threshold.
    pub stalled_turns: u64,
    /// Runs with nothing pending: a terminal checkpoint log, a thread or
    /// session at rest.
    pub terminal_turns: u64,
    /// Runs that live in records: LangGraph threads and agent sessions.
    pub record_runs: u64,
    pub keys_in_progress: u64,
    /// Leases that ran out and were not taken again.
    pub keys_expired: u64,
    pub keys_failed: u64,
    pub waits_pending: u64,
    /// Pending waits with a timer (`resolve_at`).
    pub timers_pending: u64,
}

/// What kind of run a turn is, from what it holds; a turn with a
/// checkpoint log is one whatever else it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// Checkpoints of CheckpointService.
    Log,
    /// Records of kind `checkpoint`: a LangGraph saver's thread.
    LangGraph,
    /// Records of kind `agent-item`: an OpenAI Agents SDK session.
    Agents,
    /// Records of kind `adk-session` or `adk-event`: a Google ADK session.
    Adk,
    /// Records of other kinds.
    Records,
    /// Only waits.
    Waits,
}

impl RunKind {
    /// The name a URL's `kind` filter uses.
    pub fn code(self) -> &'static str {
        match self {
            RunKind::Log => "log",
            RunKind::LangGraph => "langgraph",
            RunKind::Agents => "agents",
            RunKind::Adk => "adk",
            RunKind::Records => "records",
            RunKind::Waits => "waits",
        }
    }

    pub fn from_code(code: &str) -> Option<RunKind> {
        RunKind::ALL.into_iter().find(|k| k.code() == code)
    }

    /// As a person reads it.
    pub fn label(self) -> &'static str {
        match self {
            RunKind::Log => "checkpoint log",
            RunKind::LangGraph => "LangGraph thread",
            RunKind::Agents => "Agents SDK session",
            RunKind::Adk => "ADK session",
            RunKind::Records => "records",
            RunKind::Waits => "waits only",
        }
    }

    pub const ALL: [RunKind; 6] =
        [RunKind::Log, RunKind::LangGraph, RunKind::Agents, RunKind::Adk, RunKind::Records, RunKind::Waits];
}

/// The pending writes of a LangGraph thread's newest root checkpoint, as
/// bits: any write, an error, an interrupt, a resume.
pub mod pending {
    pub const WRITES: i64 = 1;
    pub const ERROR: i64 = 2;
    pub const INTERRUPT: i64 = 4;
    pub const RESUME: i64 = 8;
}

/// A turn as the console lists it: what it holds, and whether work is
/// pending in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub turn_id: String,
    pub kind: RunKind,
    /// Its checkpoint log's summary, when it has checkpoints.
    pub log: Option<TurnSummary>,
    pub records: u64,
    pub waits: u64,
    pub waits_pending: u64,
    /// A LangGraph thread's `pending` bits (0 for other runs).
    pub pending: i64,
    /// The earliest and latest of its checkpoints' timestamps, its records'
    /// and its waits' times.
    pub first_activity: UnixNanos,
    pub last_activity: UnixNanos,
    /// Work is pending: a checkpoint log not terminal, a pending wait, or
    /// a LangGraph thread whose newest checkpoint has pending writes.
    pub open: bool,
}

impl Run {
    /// An interrupt waits for its resume.
    pub fn interrupted(&self) -> bool {
        self.pending & pending::INTERRUPT != 0 && self.pending & pending::RESUME == 0
    }

    /// The run's state as the console's badge names it.
    pub fn state(&self, stalled_before: UnixNanos) -> &'static str {
        match (self.open, self.last_activity < stalled_before) {
            (true, true) => "stalled",
            (true, false) if self.pending & pending::ERROR != 0 => "failed",
            (true, false) if self.interrupted() => "interrupted",
            (true, false) => "open",
            (false, _) if self.log.as_ref().is_some_and(|l| l.terminal) => "terminal",
            (false, _) => "at rest",
        }
    }
}

/// One page of runs, newest activity first (or oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActivityQuery {
    pub namespace: String,
    /// Open: work pending; Terminal: nothing pending.
    pub status: TurnStatus,
    /// Only open runs whose last activity is older than this.
    pub stalled_before: Option<UnixNanos>,
    pub kind: Option<RunKind>,
    /// Only this turn.
    pub turn_id: Option<String>,
    /// Oldest activity first: the longest-stalled runs first.
    pub oldest_first: bool,
    pub session_id: Option<String>,
    /// Last activity at or after this.
    pub from: Option<UnixNanos>,
    /// Last activity before this.
    pub to: Option<UnixNanos>,
    pub prefix: Option<String>,
    /// The (last activity, turn id) the page continues after, in its order.
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

/// What a turn holds, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holdings {
    pub checkpoints: u64,
    pub records: u64,
    pub waits: u64,
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
