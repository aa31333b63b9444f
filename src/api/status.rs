//! The one table from `Error` to `tonic::Status`. Handlers return `Error` and
//! never choose a status code themselves. Every status carries a
//! `google.rpc.ErrorInfo` with domain `stepwell.dev` and a reason; invalid
//! input also carries a `google.rpc.BadRequest` naming the field. Store
//! errors are logged with their source here and reach the client only as a
//! reason: no SQL text or file path leaves the process.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use prost::Message;

use super::{pb, waits};
use crate::domain::error::Error;
use crate::domain::records::Address;
use crate::domain::waits::Wait;

/// The ErrorInfo domain of every stepwell error.
pub const DOMAIN: &str = "stepwell.dev";

/// ErrorInfo reasons that are not field violations.
pub mod reason {
    pub const MALFORMED_REQUEST: &str = "MALFORMED_REQUEST";
    pub const CHECKPOINT_CONFLICT: &str = "CHECKPOINT_CONFLICT";
    pub const WORKFLOW_VERSION_MISMATCH: &str = "WORKFLOW_VERSION_MISMATCH";
    pub const KEY_REUSED: &str = "KEY_REUSED";
    pub const LEASE_LOST: &str = "LEASE_LOST";
    pub const NOT_ACQUIRED: &str = "NOT_ACQUIRED";
    pub const RESULT_MISMATCH: &str = "RESULT_MISMATCH";
    pub const KEY_NOT_FOUND: &str = "KEY_NOT_FOUND";
    pub const STORE_UNAVAILABLE: &str = "STORE_UNAVAILABLE";
    pub const NOT_READY: &str = "NOT_READY";
    pub const OVERLOADED: &str = "OVERLOADED";
    pub const MESSAGE_TOO_LARGE: &str = "MESSAGE_TOO_LARGE";
    pub const STORE_FULL: &str = "STORE_FULL";
    pub const REQUEST_TIMEOUT: &str = "REQUEST_TIMEOUT";
    pub const BODY_READ_TIMEOUT: &str = "BODY_READ_TIMEOUT";
    pub const BODY_BROKEN_OFF: &str = "BODY_BROKEN_OFF";
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    pub const PERMISSION_DENIED: &str = "PERMISSION_DENIED";
    pub const RECORD_EXISTS: &str = "RECORD_EXISTS";
    pub const RECORD_NOT_FOUND: &str = "RECORD_NOT_FOUND";
    pub const WAIT_NOT_FOUND: &str = "WAIT_NOT_FOUND";
    pub const WAIT_SETTLED: &str = "WAIT_SETTLED";
    pub const WAITS_PER_TURN: &str = "WAITS_PER_TURN";
    pub const AWAITS: &str = "AWAITS";
}

/// Most bytes of a settled wait's payload that a WAIT_SETTLED error
/// carries: past it the payload is left out, so the trailers stay small
/// enough for every gRPC client.
pub const SETTLED_PAYLOAD_BYTES_MAX: usize = 4096;

/// The ErrorInfo reason of `error`, as clients see it (and the audit log
/// records it).
pub fn reason_of(error: &Error) -> &'static str {
    match error {
        Error::InvalidArgument { reason, .. } => reason.as_str(),
        Error::MalformedRequest(_) => reason::MALFORMED_REQUEST,
        Error::CheckpointConflict => reason::CHECKPOINT_CONFLICT,
        Error::WorkflowVersionMismatch { .. } => reason::WORKFLOW_VERSION_MISMATCH,
        Error::KeyReused => reason::KEY_REUSED,
        Error::LeaseLost => reason::LEASE_LOST,
        Error::NotAcquired => reason::NOT_ACQUIRED,
        Error::ResultMismatch => reason::RESULT_MISMATCH,
        Error::KeyNotFound => reason::KEY_NOT_FOUND,
        Error::Unavailable(_) => reason::STORE_UNAVAILABLE,
        Error::Overloaded(_) => reason::OVERLOADED,
        Error::MessageTooLarge { .. } => reason::MESSAGE_TOO_LARGE,
        Error::StoreFull(_) => reason::STORE_FULL,
        Error::RequestTimeout { .. } => reason::REQUEST_TIMEOUT,
        Error::BodyReadTimeout { .. } => reason::BODY_READ_TIMEOUT,
        Error::BodyBrokenOff => reason::BODY_BROKEN_OFF,
        Error::NotReady(_) => reason::NOT_READY,
        Error::Unauthenticated { .. } => reason::UNAUTHENTICATED,
        Error::PermissionDenied { .. } => reason::PERMISSION_DENIED,
        Error::RecordExists(_) => reason::RECORD_EXISTS,
        Error::RecordNotFound(_) => reason::RECORD_NOT_FOUND,
        Error::WaitNotFound => reason::WAIT_NOT_FOUND,
        Error::WaitSettled(_) => reason::WAIT_SETTLED,
        Error::WaitsPerTurn { .. } => reason::WAITS_PER_TURN,
        Error::AwaitsFull { .. } => reason::AWAITS,
    }
}

fn status(code: Code, message: String, reason: &str, metadata: HashMap<String, String>) -> Status {
    Status::with_error_details(code, message, ErrorDetails::with_error_info(reason, DOMAIN, metadata))
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        log_store_trouble(&error);
        let message = error.to_string();
        let reason = reason_of(&error);
        match error {
            Error::InvalidArgument { field, description, .. } => {
                let mut details = ErrorDetails::with_bad_request_violation(field.clone(), description);
                details.set_error_info(reason, DOMAIN, HashMap::from([("field".to_owned(), field)]));
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::MalformedRequest(_) => status(Code::InvalidArgument, message, reason, HashMap::new()),
            Error::CheckpointConflict => status(Code::AlreadyExists, message, reason, HashMap::new()),
            Error::WorkflowVersionMismatch { expected, recorded } => status(
                Code::FailedPrecondition,
                message,
                reason,
                HashMap::from([("expected_version".to_owned(), expected), ("recorded_version".to_owned(), recorded)]),
            ),
            Error::KeyReused => status(Code::FailedPrecondition, message, reason, HashMap::new()),
            Error::LeaseLost => status(Code::Aborted, message, reason, HashMap::new()),
            Error::NotAcquired => status(Code::FailedPrecondition, message, reason, HashMap::new()),
            Error::ResultMismatch => status(Code::AlreadyExists, message, reason, HashMap::new()),
            Error::KeyNotFound => status(Code::NotFound, message, reason, HashMap::new()),
            Error::Unavailable(_) => status(Code::Unavailable, message, reason, HashMap::new()),
            Error::Overloaded(_) => status(Code::ResourceExhausted, message, reason, HashMap::new()),
            Error::MessageTooLarge { limit } => status(
                Code::ResourceExhausted,
                message,
                reason,
                HashMap::from([("limit_bytes".to_owned(), limit.to_string())]),
            ),
            Error::StoreFull(_) => status(Code::ResourceExhausted, message, reason, HashMap::new()),
            Error::NotReady(_) => status(Code::Unavailable, message, reason, HashMap::new()),
            Error::RequestTimeout { after } | Error::BodyReadTimeout { after } => status(
                Code::DeadlineExceeded,
                message,
                reason,
                HashMap::from([("timeout_ms".to_owned(), after.as_millis().to_string())]),
            ),
            Error::BodyBrokenOff => status(Code::Cancelled, message, reason, HashMap::new()),
            // The metadata says what the call needed; it never echoes a credential.
            Error::Unauthenticated { namespace, role, .. } => {
                let mut metadata = HashMap::from([("role".to_owned(), role.as_str().to_owned())]);
                metadata.extend(namespace.map(|namespace| ("namespace".to_owned(), namespace)));
                status(Code::Unauthenticated, message, reason, metadata)
            }
            Error::PermissionDenied { namespace, role } => status(
                Code::PermissionDenied,
                message,
                reason,
                HashMap::from([("namespace".to_owned(), namespace), ("role".to_owned(), role.as_str().to_owned())]),
            ),
            Error::RecordExists(address) => record_status(Code::AlreadyExists, message, reason, *address),
            Error::RecordNotFound(address) => record_status(Code::NotFound, message, reason, *address),
            Error::WaitNotFound => status(Code::NotFound, message, reason, HashMap::new()),
            Error::WaitSettled(wait) => wait_settled(message, *wait),
            Error::WaitsPerTurn { max } => limit(message, reason, max as usize),
            Error::AwaitsFull { max } => limit(message, reason, max),
        }
    }
}

/// ALREADY_EXISTS, RECORD_EXISTS (a create found the address taken) or
/// NOT_FOUND, RECORD_NOT_FOUND (an update found it empty), its metadata
/// naming the record (namespace aside: the caller named it).
fn record_status(code: Code, message: String, reason: &str, address: Address) -> Status {
    let metadata = HashMap::from([
        ("turn_id".to_owned(), address.turn_id),
        ("scope".to_owned(), address.scope),
        ("kind".to_owned(), address.kind),
        ("id".to_owned(), address.id),
    ]);
    status(code, message, reason, metadata)
}

/// RESOURCE_EXHAUSTED for a limit of `max`, which the metadata names.
fn limit(message: String, reason: &str, max: usize) -> Status {
    status(Code::ResourceExhausted, message, reason, HashMap::from([("limit".to_owned(), max.to_string())]))
}

/// ALREADY_EXISTS, WAIT_SETTLED: the ErrorInfo, then the settled wait as a
/// `stepwell.v1.WaitSettled`, its payload left out past
/// `SETTLED_PAYLOAD_BYTES_MAX`.
fn wait_settled(message: String, wait: Wait) -> Status {
    let info = tonic_types::pb::ErrorInfo {
        reason: reason::WAIT_SETTLED.to_owned(),
        domain: DOMAIN.to_owned(),
        metadata: HashMap::from([("status".to_owned(), format!("{:?}", wait.status).to_uppercase())]),
    };
    let payload_omitted = wait.payload.len() > SETTLED_PAYLOAD_BYTES_MAX;
    let mut wait = waits::to_pb(wait);
    if payload_omitted {
        wait.payload.clear();
    }
    let settled = pb::WaitSettled { wait: Some(wait), payload_omitted };
    let details = tonic_types::Status {
        code: Code::AlreadyExists as i32,
        message: message.clone(),
        details: vec![any("google.rpc.ErrorInfo", &info), any("stepwell.v1.WaitSettled", &settled)],
    };
    Status::with_details(Code::AlreadyExists, message, details.encode_to_vec().into())
}

/// `message` packed as a google.protobuf.Any of the type `name`.
fn any(name: &str, message: &impl Message) -> prost_types::Any {
    prost_types::Any { type_url: format!("type.googleapis.com/{name}"), value: message.encode_to_vec() }
}

/// Logs a store failure for the operator: which wait ran out, or what broke,
/// and the database's own code. The client hears only the reason.
pub fn log_store_trouble(error: &Error) {
    match error {
        Error::Unavailable(source) => tracing::warn!(
            cause = %source.cause(),
            code = source.code().as_deref(),
            error = %source,
            "store unavailable; request not acknowledged"
        ),
        Error::StoreFull(source) => {
            tracing::warn!(code = source.code().as_deref(), error = %source, "store full; write not acknowledged");
        }
        _ => {}
    }
}
