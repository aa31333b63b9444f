//! WaitService's waits: where a wait lives (`WaitKey`) and its opaque
//! handle, what is stored of it (`Wait`), the writes that create and settle
//! it (`WaitWrite`) and their answers, and the queries that read waits. A
//! wait is PENDING until it is settled, exactly once; what settles it first
//! stands, and the store decides "first" with one conditional statement,
//! so every sidecar sharing the store agrees. The handle is self-describing
//! (the key, encoded), so any sidecar reads it without a lookup.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::domain::keys::{Fence, Refusal};
use crate::domain::model::UnixNanos;

/// Who settled a wait whose timer fired.
pub const TIMER_PRINCIPAL: &str = "stepwell:timer";
/// Who settled a wait that expired.
pub const EXPIRY_PRINCIPAL: &str = "stepwell:expiry";

/// What starts every handle: its format's version, so a later format can be told apart.
const HANDLE_PREFIX: &str = "wt1_";

/// Where a wait is in its life; the codes are what the store keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitStatus {
    Pending,
    Resolved,
    Cancelled,
    Expired,
}

impl WaitStatus {
    /// The code the store keeps (the contract's enum number).
    pub fn code(self) -> i64 {
        match self {
            WaitStatus::Pending => 1,
            WaitStatus::Resolved => 2,
            WaitStatus::Cancelled => 3,
            WaitStatus::Expired => 4,
        }
    }

    /// `pending`, `resolved`, `cancelled`, `expired`.
    pub fn name(self) -> &'static str {
        match self {
            WaitStatus::Pending => "pending",
            WaitStatus::Resolved => "resolved",
            WaitStatus::Cancelled => "cancelled",
            WaitStatus::Expired => "expired",
        }
    }

    pub fn from_code(code: i64) -> Option<WaitStatus> {
        match code {
            1 => Some(WaitStatus::Pending),
            2 => Some(WaitStatus::Resolved),
            3 => Some(WaitStatus::Cancelled),
            4 => Some(WaitStatus::Expired),
            _ => None,
        }
    }
}

/// Where a wait lives: (namespace, turn_id, name).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WaitKey {
    pub namespace: String,
    pub turn_id: String,
    pub name: String,
}

impl WaitKey {
    /// The wait's handle: the prefix, then the key's three parts, each led by
    /// its length (4 bytes, big-endian), in unpadded URL-safe base64. The
    /// same key always makes the same handle, on every sidecar.
    pub fn handle(&self) -> String {
        let mut bytes = Vec::with_capacity(12 + self.namespace.len() + self.turn_id.len() + self.name.len());
        for part in [&self.namespace, &self.turn_id, &self.name] {
            bytes.extend_from_slice(&(part.len() as u32).to_be_bytes());
            bytes.extend_from_slice(part.as_bytes());
        }
        format!("{HANDLE_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes))
    }

    /// The key a handle names, or `None` if it is not a handle stepwell made.
    /// The parts are not checked here: the caller checks them as fields.
    pub fn from_handle(handle: &str) -> Option<WaitKey> {
        let bytes = URL_SAFE_NO_PAD.decode(handle.strip_prefix(HANDLE_PREFIX)?).ok()?;
        let mut rest = bytes.as_slice();
        let mut parts = Vec::with_capacity(3);
        for _ in 0..3 {
            let (length, tail) = rest.split_first_chunk::<4>()?;
            let length = u32::from_be_bytes(*length) as usize;
            if tail.len() < length {
                return None;
            }
            let (part, tail) = tail.split_at(length);
            parts.push(String::from_utf8(part.to_vec()).ok()?);
            rest = tail;
        }
        if !rest.is_empty() {
            return None;
        }
        let name = parts.pop()?;
        let turn_id = parts.pop()?;
        let namespace = parts.pop()?;
        Some(WaitKey { namespace, turn_id, name })
    }
}

/// A wait as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub key: WaitKey,
    pub status: WaitStatus,
    /// The JSON object CreateWait was given, if any.
    pub metadata: Option<String>,
    pub created_at: UnixNanos,
    pub expire_at: Option<UnixNanos>,
    pub resolve_at: Option<UnixNanos>,
    pub settled_at: Option<UnixNanos>,
    pub payload: Vec<u8>,
    pub content_type: String,
    pub settled_by: String,
    /// The traced request that settled it, as "<trace id>-<span id>" in hex.
    pub settled_span: Option<String>,
}

impl Wait {
    pub fn is_settled(&self) -> bool {
        self.status != WaitStatus::Pending
    }

    /// How it was settled, as an error tells the loser: "resolved by
    /// console:alice with 14 bytes", "expired (its timer)".
    pub fn settlement(&self) -> String {
        let by = if self.settled_by.is_empty() { String::new() } else { format!(" by {}", self.settled_by) };
        match self.status {
            WaitStatus::Resolved => format!("resolved{by} with {} bytes of payload", self.payload.len()),
            WaitStatus::Expired => "expired (its deadline passed)".to_owned(),
            status => format!("{}{by}", status.name()),
        }
    }

    /// When the store settles the wait by itself if nothing else does: the
    /// earlier of its timer and its expiry.
    pub fn due_at(&self) -> Option<UnixNanos> {
        due_at(self.resolve_at, self.expire_at)
    }
}

/// The earlier of a timer and an expiry, either of which may be absent.
pub fn due_at(resolve_at: Option<UnixNanos>, expire_at: Option<UnixNanos>) -> Option<UnixNanos> {
    match (resolve_at, expire_at) {
        (Some(resolve), Some(expire)) => Some(resolve.min(expire)),
        (resolve, expire) => resolve.or(expire),
    }
}

/// A CreateWait, checked.
#[derive(Debug, Clone)]
pub struct NewWait {
    pub key: WaitKey,
    pub metadata: Option<String>,
    pub expire_at: Option<UnixNanos>,
    pub resolve_at: Option<UnixNanos>,
    /// Most waits the turn may hold (`--waits-per-turn-max`).
    pub per_turn_max: u32,
}

/// A settlement a caller asks for: a Signal (RESOLVED) or a CancelWait
/// (CANCELLED), checked.
#[derive(Debug, Clone)]
pub struct Settle {
    pub key: WaitKey,
    pub status: WaitStatus,
    pub payload: Vec<u8>,
    pub content_type: String,
    /// The principal settling it (empty without authentication).
    pub settled_by: String,
    /// Settle only while this lease is held (a Signal's fence).
    pub fence: Option<Fence>,
    /// Most waits the turn may hold, should the settlement create the wait.
    pub per_turn_max: u32,
    /// The settling request's span, if traced, as `Wait::settled_span`.
    pub span: Option<String>,
}

impl Settle {
    /// Whether `wait`, already settled, was settled as this asks: a repeat
    /// of the winning settlement, which is answered OK without a change.
    pub fn repeats(&self, wait: &Wait) -> bool {
        wait.status == self.status && wait.payload == self.payload && wait.content_type == self.content_type
    }
}

/// A write of WaitService.
#[derive(Debug, Clone)]
pub enum WaitWrite {
    Create(NewWait),
    Settle(Settle),
    /// Settle up to `limit` pending waits whose time came by `now`: RESOLVED
    /// by their timer, or EXPIRED, whichever was due first.
    FireDue {
        now: UnixNanos,
        limit: u32,
    },
}

impl WaitWrite {
    /// The bytes the write holds while it waits in the queue.
    pub fn bytes(&self) -> usize {
        let key = |key: &WaitKey| key.namespace.len() + key.turn_id.len() + key.name.len();
        match self {
            WaitWrite::Create(new) => key(&new.key) + new.metadata.as_ref().map_or(0, String::len),
            WaitWrite::Settle(settle) => {
                key(&settle.key)
                    + settle.payload.len()
                    + settle.content_type.len()
                    + settle.settled_by.len()
                    + settle.fence.as_ref().map_or(0, |fence| fence.key.len())
            }
            WaitWrite::FireDue { .. } => 0,
        }
    }
}

/// What a wait write did.
#[derive(Debug, Clone)]
pub enum WaitDone {
    /// The wait, and whether this write created it.
    Created { wait: Wait, created: bool },
    /// The settled wait, and whether this write settled it (false: a repeat).
    Settled { wait: Wait, settled: bool },
    /// The waits whose time came, each settled by this write.
    Fired(Vec<Wait>),
}

impl WaitDone {
    /// The waits this write settled: what wakes their waiters.
    pub fn settled(&self) -> Vec<&Wait> {
        match self {
            WaitDone::Settled { wait, settled: true } => vec![wait],
            WaitDone::Fired(waits) => waits.iter().collect(),
            _ => Vec::new(),
        }
    }
}

/// Why a wait write changed nothing.
#[derive(Debug, Clone)]
pub enum WaitRefusal {
    /// The wait was settled otherwise before: by whom, and how.
    Settled(Box<Wait>),
    /// The turn holds `max` waits already.
    PerTurn { max: u32 },
    /// The Signal's fence is not the key's current lease.
    Fence(Refusal),
}

/// A wait write's answer.
pub type WaitAnswer = Result<WaitDone, WaitRefusal>;

/// Which waits a ListWaits reads, in (turn_id, name) order.
#[derive(Debug, Clone)]
pub struct WaitQuery {
    pub namespace: String,
    pub turn_id: Option<String>,
    pub status: Option<WaitStatus>,
    pub resolve_before: Option<UnixNanos>,
    /// The (turn_id, name) the page starts after.
    pub after: Option<(String, String)>,
    pub limit: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_names_its_key_and_nothing_else() {
        let key = WaitKey { namespace: "default".into(), turn_id: "t/1".into(), name: "approve ✓".into() };
        let handle = key.handle();
        assert!(handle.starts_with("wt1_"), "{handle}");
        assert_eq!(WaitKey::from_handle(&handle), Some(key));
        for wrong in ["", "wt1_", "wt2_AAAA", "wt1_!!", &format!("{handle}AA")] {
            assert_eq!(WaitKey::from_handle(wrong), None, "{wrong}");
        }
    }

    #[test]
    fn the_earlier_of_timer_and_expiry_is_due() {
        assert_eq!(due_at(Some(5), Some(3)), Some(3));
        assert_eq!(due_at(None, Some(3)), Some(3));
        assert_eq!(due_at(Some(5), None), Some(5));
        assert_eq!(due_at(None, None), None);
    }
}
