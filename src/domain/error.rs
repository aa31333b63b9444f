//! The domain error: every way a request can fail, named by what went wrong
//! rather than by a gRPC code. `api::status` is the one place that turns it
//! into a `tonic::Status`; `store::Error` feeds in through `From`.

use crate::domain::keys::Refusal;
use crate::domain::records::{Address, PutRefusal};
use crate::domain::rpc::{Role, Unknown};
use crate::domain::waits::{Wait, WaitRefusal};
use crate::store;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A request field is missing, malformed or over a limit. Nothing was stored.
    #[error("invalid {field}: {description}")]
    InvalidArgument { field: String, reason: InvalidReason, description: String },

    /// The request bytes were not a valid message.
    #[error("malformed request: {0}")]
    MalformedRequest(String),

    /// The same (turn_id, phase, timestamp) is stored with different content.
    #[error("a checkpoint with this turn_id, phase and timestamp is stored with different content")]
    CheckpointConflict,

    /// The turn was recorded by an incompatible workflow version.
    #[error("the turn was recorded by workflow version {recorded:?}, not compatible with {expected:?}")]
    WorkflowVersionMismatch { expected: String, recorded: String },

    /// The key was begun for a different operation (another fingerprint).
    #[error("the key was begun with a different fingerprint: it names another operation")]
    KeyReused,

    /// The lease token is not the key's current one: the lease ran out (or was
    /// never this caller's) and another holder may have taken over.
    #[error("the lease token is not the current holder's: the lease was lost")]
    LeaseLost,

    /// The key has no record, or its record is not leased.
    #[error("the key is not held by any lease")]
    NotAcquired,

    /// Complete was repeated with the same token and a different result.
    #[error("the key is already completed with a different result")]
    ResultMismatch,

    /// Get found no record for the key.
    #[error("no idempotency record for this key")]
    KeyNotFound,

    /// The store cannot serve now (unreachable, not yet migrated, commit
    /// failed); nothing was acknowledged, and the request may be retried.
    #[error("the store is unavailable")]
    Unavailable(#[source] store::Error),

    /// Too many requests are in flight or waiting to be written; nothing was
    /// stored. Retry with backoff.
    #[error("{0}")]
    Overloaded(&'static str),

    /// The request message is over `--message-bytes-max`; it was not read.
    #[error("the request message is over the {limit}-byte limit")]
    MessageTooLarge { limit: usize },

    /// The request ran past `--request-timeout-ms`. Like an expired deadline,
    /// a write may have been stored or not; its retry settles it.
    #[error("the request ran past the server's {}-ms request timeout; a write may or may not be stored, retry it", .after.as_millis())]
    RequestTimeout { after: std::time::Duration },

    /// The request's body did not arrive within `--body-read-timeout-ms`; nothing was stored.
    #[error("the request's body did not arrive within {} ms; nothing was stored", .after.as_millis())]
    BodyReadTimeout { after: std::time::Duration },

    /// The request's body broke off (the caller reset the stream); nothing was stored.
    #[error("the request's body broke off before its end; nothing was stored")]
    BodyBrokenOff,

    /// The store has no room left (disk full, or the SQLite size cap); nothing
    /// was stored. Reads still work; writes resume once space is freed.
    #[error("the store is full")]
    StoreFull(#[source] store::Error),

    /// A PutRecords creating a record found its address taken; nothing of
    /// it was written.
    #[error("a record is stored at turn {:?}, scope {:?}, kind {:?}, id {:?} already; nothing was written", .0.turn_id, .0.scope, .0.kind, .0.id)]
    RecordExists(Box<Address>),

    /// A PutRecords updating a record found its address empty; nothing of
    /// it was written.
    #[error("no record is stored at turn {:?}, scope {:?}, kind {:?}, id {:?} to update; nothing was written", .0.turn_id, .0.scope, .0.kind, .0.id)]
    RecordNotFound(Box<Address>),

    /// GetWait or Await named a wait that does not exist.
    #[error("no wait of this turn has this name")]
    WaitNotFound,

    /// A Signal or CancelWait found the wait settled otherwise before: the
    /// wait as it was settled.
    #[error("the wait is settled already: {}", .0.settlement())]
    WaitSettled(Box<Wait>),

    /// The turn holds `--waits-per-turn-max` waits already; nothing was stored.
    #[error("the turn holds {max} waits, the most it may (--waits-per-turn-max)")]
    WaitsPerTurn { max: u32 },

    /// The sidecar holds `--awaits-max` Awaits already; retry with backoff
    /// or through another sidecar.
    #[error("{max} Awaits are pending on this sidecar, the most it holds (--awaits-max); retry with backoff")]
    AwaitsFull { max: usize },

    /// The server is shutting down or not yet ready.
    #[error("{0}")]
    NotReady(&'static str),

    /// Authentication is on and the call proved no known principal: no
    /// credentials, a malformed `authorization` header, more than one, or
    /// an unknown token. `namespace` is the one asked for, when its message
    /// was read (admission refuses before the body) and it was well formed.
    #[error("the call is not authenticated: {}", why.as_str())]
    Unauthenticated { why: Unknown, namespace: Option<String>, role: Role },

    /// The caller is known, but no grant gives it `role` in `namespace`.
    #[error("the caller has no {role} grant for namespace {namespace:?}")]
    PermissionDenied { namespace: String, role: Role },
}

/// Why a field was rejected: the `reason` of the ErrorInfo clients see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InvalidReason {
    /// A required field is missing or empty.
    Required,
    /// A field is longer or larger than its limit.
    TooLong,
    /// A field does not have the required format.
    Malformed,
    /// A number or time is outside its range.
    OutOfRange,
    /// `state` is not a UTF-8 JSON document within the depth limit.
    NotJson,
    /// A page token was not issued for this query.
    BadPageToken,
}

impl InvalidReason {
    /// The ErrorInfo reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            InvalidReason::Required => "FIELD_REQUIRED",
            InvalidReason::TooLong => "FIELD_TOO_LONG",
            InvalidReason::Malformed => "FIELD_MALFORMED",
            InvalidReason::OutOfRange => "FIELD_OUT_OF_RANGE",
            InvalidReason::NotJson => "STATE_NOT_JSON",
            InvalidReason::BadPageToken => "INVALID_PAGE_TOKEN",
        }
    }
}

impl Error {
    /// An invalid field.
    pub fn invalid(field: impl Into<String>, reason: InvalidReason, description: impl Into<String>) -> Error {
        Error::InvalidArgument { field: field.into(), reason, description: description.into() }
    }
}

impl From<store::Error> for Error {
    fn from(error: store::Error) -> Self {
        match error {
            store::Error::QueueFull => Error::Overloaded("too many writes are waiting; retry with backoff"),
            store::Error::QueueBytesFull => Error::Overloaded(
                "the writes waiting hold too many bytes (--write-queue-bytes-max); retry with backoff",
            ),
            error if error.is_full() => Error::StoreFull(error),
            error => Error::Unavailable(error),
        }
    }
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::KeyReused => Error::KeyReused,
            Refusal::LeaseLost => Error::LeaseLost,
            Refusal::NotAcquired => Error::NotAcquired,
            Refusal::ResultMismatch => Error::ResultMismatch,
        }
    }
}

impl From<PutRefusal> for Error {
    fn from(refusal: PutRefusal) -> Self {
        match refusal {
            PutRefusal::Fence(refusal) => refusal.into(),
            PutRefusal::Exists(address) => Error::RecordExists(address),
            PutRefusal::Missing(address) => Error::RecordNotFound(address),
        }
    }
}

impl From<WaitRefusal> for Error {
    fn from(refusal: WaitRefusal) -> Self {
        match refusal {
            WaitRefusal::Settled(wait) => Error::WaitSettled(wait),
            WaitRefusal::PerTurn { max } => Error::WaitsPerTurn { max },
            WaitRefusal::Fence(refusal) => refusal.into(),
        }
    }
}

/// The result of a domain operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
