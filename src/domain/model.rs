//! The domain vocabulary shared by `api` and `store`: checkpoints, turns,
//! queries and page cursors, free of protobuf and SQL. Values here have
//! already been validated by `api::validate`.

/// Nanoseconds since the Unix epoch. Every time stepwell stores is one, so
/// timestamps compare at full nanosecond precision.
pub type UnixNanos = i64;

/// A checkpoint to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCheckpoint {
    pub namespace: String,
    pub turn_id: String,
    pub session_id: String,
    pub phase: String,
    pub state: Vec<u8>,
    pub timestamp: UnixNanos,
    pub terminal: bool,
    pub workflow_version: String,
}

/// A stored checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCheckpoint {
    pub checkpoint: NewCheckpoint,
    /// When the sidecar committed it.
    pub recorded_at: UnixNanos,
    /// Insertion order; breaks ties between equal timestamps.
    pub seq: i64,
}

impl StoredCheckpoint {
    /// Where a page that ends with this checkpoint resumes.
    pub fn cursor(&self) -> Cursor {
        Cursor { timestamp: self.checkpoint.timestamp, seq: self.seq }
    }
}

/// The answer to an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// This call stored the checkpoint.
    Inserted(StoredCheckpoint),
    /// An identical checkpoint was already stored.
    Duplicate(StoredCheckpoint),
    /// A checkpoint with the same key but different content is stored; it is
    /// left untouched.
    Conflict,
}

impl NewCheckpoint {
    /// Whether a stored checkpoint with the same key holds the same content.
    pub fn same_content(&self, stored: &NewCheckpoint) -> bool {
        self.state == stored.state
            && self.terminal == stored.terminal
            && self.session_id == stored.session_id
            && self.workflow_version == stored.workflow_version
    }
}

/// A position in a turn's log: after (or, newest first, before) this
/// checkpoint. Positions are by (timestamp, seq), so they stay valid while
/// checkpoints are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub timestamp: UnixNanos,
    pub seq: i64,
}

/// One page of a turn's checkpoints to read.
#[derive(Debug, Clone)]
pub struct RestoreQuery {
    pub namespace: String,
    pub turn_id: String,
    pub newest_first: bool,
    pub phase: Option<String>,
    pub after: Option<Cursor>,
    pub limit: u32,
    /// Most bytes of checkpoints the page holds (`RESTORE_OVERHEAD_BYTES`
    /// plus the variable-length fields of each); always at least one.
    pub bytes_max: usize,
}

impl RestoreQuery {
    /// Where the page starts: after the cursor, or before every checkpoint
    /// in the page's order.
    pub fn start(&self) -> Cursor {
        match (self.after, self.newest_first) {
            (Some(cursor), _) => cursor,
            (None, false) => Cursor { timestamp: i64::MIN, seq: i64::MIN },
            (None, true) => Cursor { timestamp: i64::MAX, seq: i64::MAX },
        }
    }

    /// What each checkpoint of the page costs beyond its variable-length
    /// fields: `RESTORE_OVERHEAD_BYTES` and the namespace and turn id it repeats.
    pub fn row_overhead(&self) -> usize {
        RESTORE_OVERHEAD_BYTES + self.namespace.len() + self.turn_id.len()
    }
}

/// What a restored checkpoint costs in a page beyond its state, phase,
/// session id and workflow version: its namespace and turn id (each
/// checkpoint repeats them) and at most this for tags, lengths and
/// timestamps.
pub const RESTORE_OVERHEAD_BYTES: usize = 128;

/// Which turns to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnStatus {
    Open,
    Terminal,
    Any,
}

/// One page of turn summaries to read, ordered by turn id.
#[derive(Debug, Clone)]
pub struct ListTurnsQuery {
    pub namespace: String,
    pub status: TurnStatus,
    pub session_id: Option<String>,
    pub updated_before: Option<UnixNanos>,
    pub after_turn_id: Option<String>,
    pub limit: u32,
}

/// A turn described by its checkpoints; "latest" is last in restore order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSummary {
    pub turn_id: String,
    pub session_id: String,
    pub first_timestamp: UnixNanos,
    pub last_timestamp: UnixNanos,
    pub last_phase: String,
    pub checkpoint_count: u64,
    pub terminal: bool,
    pub workflow_version: String,
}

/// Whether a turn recorded with `recorded` may be resumed by a workflow at
/// `expected`. When both are semantic versions only the MAJOR must match;
/// otherwise the two must be equal.
pub fn workflow_versions_compatible(expected: &str, recorded: &str) -> bool {
    match (semver_major(expected), semver_major(recorded)) {
        (Some(a), Some(b)) => a == b,
        _ => expected == recorded,
    }
}

/// The MAJOR of a semantic version `MAJOR.MINOR.PATCH[-pre][+build]`, with an
/// optional leading `v`; `None` for anything else.
fn semver_major(version: &str) -> Option<u64> {
    let version = version.strip_prefix('v').unwrap_or(version);
    let core = version.split(['-', '+']).next()?;
    let mut parts = core.split('.');
    let mut numbers = [0u64; 3];
    for number in &mut numbers {
        let part = parts.next()?;
        let leading_zero = part.len() > 1 && part.starts_with('0');
        if part.is_empty() || leading_zero || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        *number = part.parse().ok()?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(numbers[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semver_major_rule() {
        assert!(workflow_versions_compatible("1.3.0", "1.9.2"));
        assert!(workflow_versions_compatible("v2.0.0", "2.1.0-rc.1"));
        assert!(!workflow_versions_compatible("2.0.0", "1.3.0"));
        // Not semantic versions: any difference is a mismatch.
        assert!(workflow_versions_compatible("blue", "blue"));
        assert!(!workflow_versions_compatible("1.3", "1.4"));
        assert!(!workflow_versions_compatible("1.3.0", "1.3"));
        assert!(!workflow_versions_compatible("01.0.0", "1.0.0"));
    }
}
