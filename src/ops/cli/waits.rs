//! `stepwell waits ls|show|signal|cancel`: ListWaits of a namespace or one
//! turn, paged up to `--limit`; GetWait of one wait; and Signal and
//! CancelWait, so an operator can approve, refuse or unblock a paused run
//! from a shell. A wait is named by TURN NAME or by `--handle`.

use serde_json::{Map, Value};

use super::{Failure, Session, json_or_null, one_line, print_ndjson, print_record, print_table, put_time, time_cell};
use crate::api::pb::{CancelWaitRequest, GetWaitRequest, ListWaitsRequest, SignalRequest, Wait, WaitStatus};
use crate::config::commands::{WaitArgs, WaitSignal, WaitStatusArg, WaitsLs};

/// A wait's status as the JSON and the table write it: `pending`,
/// `resolved`, `cancelled`, `expired`.
fn status_name(status: i32) -> String {
    match WaitStatus::try_from(status) {
        Ok(status) => status.as_str_name().trim_start_matches("WAIT_STATUS_").to_ascii_lowercase(),
        Err(_) => format!("unknown ({status})"),
    }
}

fn status_filter(status: Option<WaitStatusArg>) -> WaitStatus {
    match status {
        None | Some(WaitStatusArg::Any) => WaitStatus::Unspecified,
        Some(WaitStatusArg::Pending) => WaitStatus::Pending,
        Some(WaitStatusArg::Resolved) => WaitStatus::Resolved,
        Some(WaitStatusArg::Cancelled) => WaitStatus::Cancelled,
        Some(WaitStatusArg::Expired) => WaitStatus::Expired,
    }
}

/// `stepwell waits ls`.
pub(super) async fn ls(session: &Session, args: &WaitsLs) -> Result<(), Failure> {
    let limit = args.limit as usize;
    let mut request = ListWaitsRequest {
        namespace: session.namespace(),
        turn_id: args.turn.clone().unwrap_or_default(),
        status: status_filter(args.status) as i32,
        ..Default::default()
    };
    let mut waits: Vec<Wait> = Vec::new();
    loop {
        let page = session.call(session.waits().list_waits(session.request(request.clone()))).await?;
        waits.extend(page.waits);
        if page.next_page_token.is_empty() || waits.len() >= limit {
            break;
        }
        request.page_token = page.next_page_token;
    }
    waits.truncate(limit);
    if session.json() {
        print_ndjson(waits.iter().map(wait_row));
    } else {
        let rows: Vec<Vec<String>> = waits
            .iter()
            .map(|w| {
                vec![
                    one_line(&w.turn_id),
                    one_line(&w.name),
                    status_name(w.status),
                    time_cell(w.resolve_at.as_ref()),
                    time_cell(w.expire_at.as_ref()),
                    time_cell(w.settled_at.as_ref()),
                    w.payload.len().to_string(),
                ]
            })
            .collect();
        print_table(&["TURN", "NAME", "STATUS", "TIMER", "EXPIRES", "SETTLED", "BYTES"], &rows);
    }
    Ok(())
}

/// A wait as an NDJSON row: the payload as JSON when it is JSON, else as
/// text; null when empty.
fn wait_row(wait: &Wait) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("turn_id".to_owned(), wait.turn_id.clone().into());
    row.insert("name".to_owned(), wait.name.clone().into());
    row.insert("handle".to_owned(), wait.handle.clone().into());
    row.insert("status".to_owned(), status_name(wait.status).into());
    row.insert("metadata".to_owned(), json_or_null(&wait.metadata));
    put_time(&mut row, "created_at", wait.created_at.as_ref());
    put_time(&mut row, "resolve_at", wait.resolve_at.as_ref());
    put_time(&mut row, "expire_at", wait.expire_at.as_ref());
    put_time(&mut row, "settled_at", wait.settled_at.as_ref());
    row.insert("settled_by".to_owned(), wait.settled_by.clone().into());
    row.insert("content_type".to_owned(), wait.content_type.clone().into());
    row.insert("payload_bytes".to_owned(), wait.payload.len().into());
    row.insert("payload".to_owned(), payload_value(&wait.payload));
    row
}

/// A payload as JSON when it is a JSON document, else as text; null when empty.
fn payload_value(payload: &[u8]) -> Value {
    if payload.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(payload).unwrap_or_else(|_| String::from_utf8_lossy(payload).into_owned().into())
}

/// A payload as `waits show` prints it: compact JSON when it is JSON, else
/// its text on one line; `-` when empty.
fn payload_text(payload: &[u8]) -> String {
    match payload_value(payload) {
        Value::Null => "-".to_owned(),
        Value::String(text) => one_line(&text),
        json => json.to_string(),
    }
}

/// Prints one wait, as a record or an NDJSON row.
fn print_wait(session: &Session, wait: &Wait, extra: &[(&str, String)]) {
    if session.json() {
        let mut row = wait_row(wait);
        for (name, value) in extra {
            row.insert((*name).to_owned(), Value::from(value.as_str()));
        }
        print_ndjson([row]);
        return;
    }
    let mut fields = vec![
        ("turn", one_line(&wait.turn_id)),
        ("name", one_line(&wait.name)),
        ("handle", wait.handle.clone()),
        ("status", status_name(wait.status)),
        ("created", time_cell(wait.created_at.as_ref())),
        ("timer", time_cell(wait.resolve_at.as_ref())),
        ("expires", time_cell(wait.expire_at.as_ref())),
        ("settled", time_cell(wait.settled_at.as_ref())),
        ("settled by", if wait.settled_by.is_empty() { "-".to_owned() } else { one_line(&wait.settled_by) }),
        ("content type", if wait.content_type.is_empty() { "-".to_owned() } else { one_line(&wait.content_type) }),
        ("payload bytes", wait.payload.len().to_string()),
        ("payload", payload_text(&wait.payload)),
    ];
    fields.extend(extra.iter().map(|(name, value)| (*name, value.clone())));
    print_record(&fields);
}

/// The (turn_id, name, handle) a wait's flags name.
fn target(args: &WaitArgs) -> (String, String, String) {
    (
        args.turn.clone().unwrap_or_default(),
        args.name.clone().unwrap_or_default(),
        args.handle.clone().unwrap_or_default(),
    )
}

/// `stepwell waits show`: exit 2 for an unknown wait (NOT_FOUND).
pub(super) async fn show(session: &Session, args: &WaitArgs) -> Result<(), Failure> {
    let (turn_id, name, handle) = target(args);
    let request = GetWaitRequest { namespace: session.namespace(), turn_id, name, handle };
    let answer = session.call(session.waits().get_wait(session.request(request))).await?;
    print_wait(session, &answer.wait.unwrap_or_default(), &[]);
    Ok(())
}

/// `stepwell waits signal`: exit 4 when another payload settled the wait
/// first (ALREADY_EXISTS, WAIT_SETTLED).
pub(super) async fn signal(session: &Session, args: &WaitSignal) -> Result<(), Failure> {
    let (turn_id, name, handle) = target(&args.wait);
    let request = SignalRequest {
        namespace: session.namespace(),
        turn_id,
        name,
        handle,
        payload: args.payload.clone().into_bytes(),
        content_type: args.content_type.clone(),
        fence: None,
    };
    let answer = session.call(session.waits().signal(session.request(request))).await?;
    let settled = if answer.settled { "by this call" } else { "before: the same payload" };
    print_wait(session, &answer.wait.unwrap_or_default(), &[("resolved", settled.to_owned())]);
    Ok(())
}

/// `stepwell waits cancel`: exit 4 when the wait was settled otherwise.
pub(super) async fn cancel(session: &Session, args: &WaitArgs) -> Result<(), Failure> {
    let (turn_id, name, handle) = target(args);
    let request = CancelWaitRequest { namespace: session.namespace(), turn_id, name, handle };
    let answer = session.call(session.waits().cancel_wait(session.request(request))).await?;
    let cancelled = if answer.cancelled { "by this call" } else { "before" };
    print_wait(session, &answer.wait.unwrap_or_default(), &[("cancelled", cancelled.to_owned())]);
    Ok(())
}
