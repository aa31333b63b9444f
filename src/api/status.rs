//! The one table from `Error` to `tonic::Status`. Handlers return `Error` and
//! never choose a status code themselves. Every status carries a
//! `google.rpc.ErrorInfo` with domain `stepwell.dev` and a reason; invalid
//! input also carries a `google.rpc.BadRequest` naming the field. Store
//! errors are logged with their source here and reach the client only as a
//! reason: no SQL text or file path leaves the process.

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::error::Error;

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
}

fn status(code: Code, message: String, reason: &str, metadata: HashMap<String, String>) -> Status {
    Status::with_error_details(code, message, ErrorDetails::with_error_info(reason, DOMAIN, metadata))
}

impl From<Error> for Status {
    fn from(error: Error) -> Status {
        let message = error.to_string();
        match error {
            Error::InvalidArgument { field, reason, description } => {
                let mut details = ErrorDetails::with_bad_request_violation(field.clone(), description);
                details.set_error_info(reason.as_str(), DOMAIN, HashMap::from([("field".to_owned(), field)]));
                Status::with_error_details(Code::InvalidArgument, message, details)
            }
            Error::MalformedRequest(_) => {
                status(Code::InvalidArgument, message, reason::MALFORMED_REQUEST, HashMap::new())
            }
            Error::CheckpointConflict => {
                status(Code::AlreadyExists, message, reason::CHECKPOINT_CONFLICT, HashMap::new())
            }
            Error::WorkflowVersionMismatch { expected, recorded } => status(
                Code::FailedPrecondition,
                message,
                reason::WORKFLOW_VERSION_MISMATCH,
                HashMap::from([("expected_version".to_owned(), expected), ("recorded_version".to_owned(), recorded)]),
            ),
            Error::KeyReused => status(Code::FailedPrecondition, message, reason::KEY_REUSED, HashMap::new()),
            Error::LeaseLost => status(Code::Aborted, message, reason::LEASE_LOST, HashMap::new()),
            Error::NotAcquired => status(Code::FailedPrecondition, message, reason::NOT_ACQUIRED, HashMap::new()),
            Error::ResultMismatch => status(Code::AlreadyExists, message, reason::RESULT_MISMATCH, HashMap::new()),
            Error::KeyNotFound => status(Code::NotFound, message, reason::KEY_NOT_FOUND, HashMap::new()),
            Error::Unavailable(source) => {
                tracing::warn!(error = %source, "store unavailable; request not acknowledged");
                status(Code::Unavailable, message, reason::STORE_UNAVAILABLE, HashMap::new())
            }
            Error::Overloaded(_) => status(Code::ResourceExhausted, message, reason::OVERLOADED, HashMap::new()),
            Error::MessageTooLarge { limit } => status(
                Code::ResourceExhausted,
                message,
                reason::MESSAGE_TOO_LARGE,
                HashMap::from([("limit_bytes".to_owned(), limit.to_string())]),
            ),
            Error::StoreFull(source) => {
                tracing::warn!(error = %source, "store full; write not acknowledged");
                status(Code::ResourceExhausted, message, reason::STORE_FULL, HashMap::new())
            }
            Error::NotReady(_) => status(Code::Unavailable, message, reason::NOT_READY, HashMap::new()),
        }
    }
}
