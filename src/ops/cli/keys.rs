//! `stepwell keys get|release`: an idempotency key as Get reads it, and
//! Release of a key held under a lease token, for a new attempt or
//! (`--permanent`) for good.

use serde_json::{Map, Value};

use super::{Failure, Session, json_or_null, one_line, print_ndjson, print_record, put_time, text_cell, time_cell};
use crate::api::pb::{GetRequest, RecordState, ReleaseRequest};
use crate::config::commands::{KeyArgs, KeyRelease};

/// A record state as the JSON and the table write it: `in_progress`,
/// `completed`, `failed`, `expired`, `released`.
fn state_name(state: i32) -> String {
    match RecordState::try_from(state) {
        Ok(state) => state.as_str_name().trim_start_matches("RECORD_STATE_").to_ascii_lowercase(),
        Err(_) => format!("unknown ({state})"),
    }
}

/// `stepwell keys get`: exit 2 for an unknown key (NOT_FOUND).
pub(super) async fn get(session: &Session, args: &KeyArgs) -> Result<(), Failure> {
    let request = GetRequest { namespace: session.namespace(), key: args.key.clone() };
    let record = session.call(session.idempotency().get(session.request(request))).await?;
    let fingerprint: String = record.fingerprint.iter().map(|b| format!("{b:02x}")).collect();
    if session.json() {
        let mut row = Map::new();
        row.insert("key".to_owned(), args.key.clone().into());
        row.insert("state".to_owned(), state_name(record.state).into());
        row.insert("attempt".to_owned(), record.attempt.into());
        row.insert("lease_token".to_owned(), record.lease_token.into());
        put_time(&mut row, "lease_expires_at", record.lease_expires_at.as_ref());
        row.insert("result_bytes".to_owned(), record.result.len().into());
        row.insert("result".to_owned(), json_or_null(&record.result));
        row.insert("error".to_owned(), record.error.clone().into());
        row.insert("fingerprint".to_owned(), fingerprint.into());
        put_time(&mut row, "created_at", record.created_at.as_ref());
        put_time(&mut row, "updated_at", record.updated_at.as_ref());
        put_time(&mut row, "retained_until", record.retained_until.as_ref());
        print_ndjson([row]);
    } else {
        print_record(&[
            ("key", one_line(&args.key)),
            ("state", state_name(record.state)),
            ("attempt", record.attempt.to_string()),
            ("lease token", if record.lease_token == 0 { "-".to_owned() } else { record.lease_token.to_string() }),
            ("lease expires", time_cell(record.lease_expires_at.as_ref())),
            ("result", format!("{} bytes", record.result.len())),
            ("error", text_cell(&record.error)),
            ("fingerprint", text_cell(&fingerprint)),
            ("created", time_cell(record.created_at.as_ref())),
            ("updated", time_cell(record.updated_at.as_ref())),
            ("retained until", time_cell(record.retained_until.as_ref())),
        ]);
    }
    Ok(())
}

/// `stepwell keys release`: exit 4 when the token does not hold the key.
pub(super) async fn release(session: &Session, args: &KeyRelease) -> Result<(), Failure> {
    let request = ReleaseRequest {
        namespace: session.namespace(),
        key: args.key.clone(),
        lease_token: args.token,
        error: if args.permanent { args.error.clone() } else { String::new() },
        permanent: args.permanent,
    };
    let released = session.call(session.idempotency().release(session.request(request))).await?;
    if session.json() {
        let mut row = Map::new();
        row.insert("key".to_owned(), args.key.clone().into());
        row.insert("state".to_owned(), Value::from(state_name(released.state)));
        print_ndjson([row]);
    } else {
        print_record(&[("key", one_line(&args.key)), ("state", state_name(released.state))]);
    }
    Ok(())
}
