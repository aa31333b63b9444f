//! Checks of the rich error details every stepwell failure carries: the
//! status code, the ErrorInfo reason and domain, and the BadRequest field.

use tonic::{Code, Status};
use tonic_types::{ErrorInfo, StatusExt};

/// The ErrorInfo domain of every stepwell error.
pub const DOMAIN: &str = "stepwell.dev";

/// Asserts the status code and the ErrorInfo reason and domain, and returns
/// the ErrorInfo for further checks.
pub fn assert_error(status: &Status, code: Code, reason: &str) -> ErrorInfo {
    assert_eq!(status.code(), code, "status code of {status:?}");
    let info = status.get_details_error_info().unwrap_or_else(|| panic!("ErrorInfo in {status:?}"));
    assert_eq!(info.reason, reason, "ErrorInfo reason of {status:?}");
    assert_eq!(info.domain, DOMAIN, "ErrorInfo domain of {status:?}");
    info
}

/// What a rejection says, for comparison in one piece: the code, the
/// ErrorInfo domain and reason, and the fields of any BadRequest violations.
#[derive(Debug, PartialEq, Eq)]
pub struct Rejection {
    pub code: Code,
    pub domain: String,
    pub reason: String,
    pub fields: Vec<String>,
}

impl Rejection {
    pub fn of(status: &Status) -> Rejection {
        let details = status.get_error_details();
        let info = details.error_info();
        Rejection {
            code: status.code(),
            domain: info.map(|i| i.domain.clone()).unwrap_or_default(),
            reason: info.map(|i| i.reason.clone()).unwrap_or_default(),
            fields: details
                .bad_request()
                .map(|b| b.field_violations.iter().map(|v| v.field.clone()).collect())
                .unwrap_or_default(),
        }
    }

    /// INVALID_ARGUMENT naming `field`, with ErrorInfo `reason`.
    pub fn invalid(field: &str, reason: &str) -> Rejection {
        Rejection::new(Code::InvalidArgument, field, reason)
    }

    pub fn new(code: Code, field: &str, reason: &str) -> Rejection {
        Rejection { code, domain: DOMAIN.to_owned(), reason: reason.to_owned(), fields: vec![field.to_owned()] }
    }
}

/// Asserts INVALID_ARGUMENT naming `field` in a BadRequest violation, with
/// ErrorInfo `reason`.
pub fn assert_invalid(status: &Status, field: &str, reason: &str) {
    assert_eq!(Rejection::of(status), Rejection::invalid(field, reason), "{status:?}");
}
