//! Limits fixed by the contract (shared/API.md); clients rely on them.

/// `turn_id`: 1..=256 bytes.
pub const TURN_ID_BYTES_MAX: usize = 256;
/// `session_id`: 0..=256 bytes.
pub const SESSION_ID_BYTES_MAX: usize = 256;
/// `phase`: 1..=128 bytes.
pub const PHASE_BYTES_MAX: usize = 128;
/// `workflow_version`: 0..=128 bytes.
pub const WORKFLOW_VERSION_BYTES_MAX: usize = 128;
/// Idempotency `key`: 1..=512 bytes.
pub const KEY_BYTES_MAX: usize = 512;
/// Idempotency `fingerprint`: 0..=256 bytes.
pub const FINGERPRINT_BYTES_MAX: usize = 256;
/// The `error` of a Release: 0..=16 KiB.
pub const ERROR_BYTES_MAX: usize = 16 * 1024;
/// `namespace`: 1..=63 bytes of `[a-z0-9][a-z0-9._-]*`.
pub const NAMESPACE_BYTES_MAX: usize = 63;
/// JSON state may nest arrays and objects this deep, and no deeper.
pub const STATE_DEPTH_MAX: usize = 64;
/// A record's `scope`, `id` and `parent_id`, and each of its refs: at most 1024 bytes.
pub const RECORD_ID_BYTES_MAX: usize = 1024;
/// A record's `kind`: 1..=64 bytes of `[a-z0-9._-]`.
pub const RECORD_KIND_BYTES_MAX: usize = 64;
/// A record's `content_type`: 0..=128 bytes of printable ASCII.
pub const CONTENT_TYPE_BYTES_MAX: usize = 128;
/// Most refs one record lists.
pub const RECORD_REFS_MAX: usize = 4096;
/// Most turns one DeleteRecords names, and most filters in its `metadata_any`.
pub const DELETE_SELECTORS_MAX: usize = 1000;
/// Room a request needs beyond its state bytes (ids, timestamps, framing).
pub const MESSAGE_OVERHEAD_BYTES: usize = 64 * 1024;
/// The largest `--message-bytes-max`: no sidecar sends a larger message,
/// so the operator commands accept any message up to it.
pub const MESSAGE_BYTES_LIMIT: usize = 256 << 20;

/// Longest wait name, in bytes.
pub const WAIT_NAME_BYTES_MAX: usize = 256;

/// Longest content type of a Signal's payload, in bytes.
pub const WAIT_CONTENT_TYPE_BYTES_MAX: usize = 256;

/// How long an Await waits when its request sets no timeout, unless
/// `--await-timeout-max-ms` is shorter.
pub const AWAIT_TIMEOUT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(60);
