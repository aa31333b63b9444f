//! `stepwell sessions ls|show|rm`: the agent sessions the clients' session
//! adapters keep in RecordService (one record of kind `agent-item` per
//! item, its id the item's 20-digit sequence number, its payload the
//! item's JSON; see docs/guides/agents.md). `ls` reads every item of the
//! namespace, page by page, and prints each session with its item count and
//! when it was last written; `show` prints a session's newest items, oldest
//! first; `rm` clears sessions, deleting only their items, so checkpoints
//! and other records of the same turn stay.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::time_cell;
use super::{Failure, Session, json_or_null, nanos_of, one_line, print_ndjson, print_record, print_table, put_time};
use crate::api::pb::{DeleteRecordsRequest, ListRecordsRequest, Record};
use crate::config::commands::{SessionsLs, SessionsRm, SessionsShow};

/// The kind of a session's items, as every client's session writes them.
pub const ITEM_KIND: &str = "agent-item";

/// Most turns one DeleteRecords names (the sidecar's limit).
pub(super) const TURNS_PER_DELETE: usize = 1000;

/// How many characters of an item the table shows.
const TEXT_CHARS: usize = 60;

/// One session as `ls` sums it up.
struct Summary {
    id: String,
    items: u64,
    last: Option<prost_types::Timestamp>,
}

/// Pages through ListRecords of `request`, handing each page's records to
/// `each` until it answers false or the listing ends.
pub(super) async fn pages(
    session: &Session,
    mut request: ListRecordsRequest,
    mut each: impl FnMut(Vec<Record>) -> bool,
) -> Result<(), Failure> {
    let mut client = session.records();
    loop {
        let page = session.call(client.list_records(session.request(request.clone()))).await?;
        let more = each(page.entries.into_iter().filter_map(|entry| entry.record).collect());
        if !more || page.next_page_token.is_empty() {
            return Ok(());
        }
        request.page_token = page.next_page_token;
    }
}

/// `stepwell sessions ls`.
pub(super) async fn ls(session: &Session, args: &SessionsLs) -> Result<(), Failure> {
    let request =
        ListRecordsRequest { namespace: session.namespace(), kind: ITEM_KIND.to_owned(), ..Default::default() };
    let mut by_id: HashMap<String, Summary> = HashMap::new();
    pages(session, request, |records| {
        for record in records {
            let summary = by_id.entry(record.turn_id.clone()).or_insert_with(|| Summary {
                id: record.turn_id.clone(),
                items: 0,
                last: None,
            });
            summary.items += 1;
            let newer = |t: &prost_types::Timestamp| summary.last.as_ref().is_none_or(|l| nanos_of(t) > nanos_of(l));
            if record.recorded_at.as_ref().is_some_and(newer) {
                summary.last = record.recorded_at;
            }
        }
        true
    })
    .await?;
    let mut sessions: Vec<Summary> = by_id.into_values().collect();
    sessions.sort_by_key(|s| (std::cmp::Reverse(s.last.as_ref().map_or(0, nanos_of)), s.id.clone()));
    sessions.truncate(args.limit as usize);
    if session.json() {
        print_ndjson(sessions.iter().map(|s| {
            let mut row = Map::new();
            row.insert("session_id".to_owned(), s.id.clone().into());
            row.insert("items".to_owned(), s.items.into());
            put_time(&mut row, "last_written_at", s.last.as_ref());
            row
        }));
    } else {
        let rows: Vec<Vec<String>> =
            sessions.iter().map(|s| vec![one_line(&s.id), s.items.to_string(), time_cell(s.last.as_ref())]).collect();
        print_table(&["SESSION", "ITEMS", "LAST WRITTEN"], &rows);
    }
    Ok(())
}

/// `stepwell sessions show`: the newest `--limit` items, oldest first; exit
/// 2 when the session holds none.
pub(super) async fn show(session: &Session, args: &SessionsShow) -> Result<(), Failure> {
    let limit = args.limit as usize;
    let request = ListRecordsRequest {
        namespace: session.namespace(),
        turn_id: args.session.clone(),
        has_scope: true,
        kind: ITEM_KIND.to_owned(),
        page_size: args.limit.min(1000) as i32,
        ..Default::default()
    };
    let mut items: Vec<Record> = Vec::new();
    pages(session, request, |records| {
        items.extend(records);
        items.len() < limit
    })
    .await?;
    if items.is_empty() {
        return Err(Failure::new(super::EXIT_NOT_FOUND, format!("session {:?} holds no items", args.session)));
    }
    items.truncate(limit);
    items.reverse();
    if session.json() {
        print_ndjson(items.iter().map(item_row));
    } else {
        let rows: Vec<Vec<String>> = items
            .iter()
            .map(|r| {
                let item = json_or_null(&r.payload);
                vec![seq_cell(&r.id), kind_cell(&item), text_cell(&item), time_cell(r.recorded_at.as_ref())]
            })
            .collect();
        print_table(&["SEQ", "ITEM", "TEXT", "RECORDED"], &rows);
    }
    Ok(())
}

/// An item as an NDJSON row: its sequence number, its JSON and when it was written.
fn item_row(record: &Record) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("session_id".to_owned(), record.turn_id.clone().into());
    row.insert("seq".to_owned(), record.id.parse::<u64>().map_or_else(|_| record.id.clone().into(), Value::from));
    row.insert("item".to_owned(), json_or_null(&record.payload));
    put_time(&mut row, "recorded_at", record.recorded_at.as_ref());
    row
}

/// The sequence number without its leading zeros.
pub(super) fn seq_cell(id: &str) -> String {
    let trimmed = id.trim_start_matches('0');
    if trimmed.is_empty() { "0".to_owned() } else { one_line(trimmed) }
}

/// What an item is: its role for a message (`user`, `assistant`), else its type.
fn kind_cell(item: &Value) -> String {
    let field = |name: &str| item.get(name).and_then(Value::as_str).map(one_line);
    field("role").or_else(|| field("type")).unwrap_or_else(|| "-".to_owned())
}

/// The item's text, or its JSON, on one line, cut after 60 characters.
fn text_cell(item: &Value) -> String {
    let text = match item.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(" ")
        }
        _ => item.to_string(),
    };
    let text = one_line(&text);
    match text.char_indices().nth(TEXT_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// `stepwell sessions rm`: deletes the sessions' items (0 when they had
/// none, so a repeat succeeds).
pub(super) async fn rm(session: &Session, args: &SessionsRm) -> Result<(), Failure> {
    let mut deleted: i64 = 0;
    for chunk in args.sessions.chunks(TURNS_PER_DELETE) {
        let request = DeleteRecordsRequest {
            namespace: session.namespace(),
            turn_ids: chunk.to_vec(),
            kind: ITEM_KIND.to_owned(),
            ..Default::default()
        };
        let answer = session.call(session.records().delete_records(session.request(request))).await?;
        deleted = deleted.saturating_add(answer.deleted);
    }
    if session.json() {
        let mut row = Map::new();
        row.insert("session_ids".to_owned(), args.sessions.clone().into());
        row.insert("deleted".to_owned(), deleted.into());
        print_ndjson([row]);
    } else {
        let ids: Vec<String> = args.sessions.iter().map(|s| one_line(s)).collect();
        print_record(&[("sessions", ids.join(", ")), ("deleted", format!("{deleted} items"))]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_item_is_summed_up_by_its_role_or_type_and_its_text() {
        let message = json!({"role": "user", "content": "hello\nthere"});
        assert_eq!((kind_cell(&message), text_cell(&message)), ("user".to_owned(), "hello there".to_owned()));
        let parts = json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]});
        assert_eq!((kind_cell(&parts), text_cell(&parts)), ("assistant".to_owned(), "hi".to_owned()));
        let call = json!({"type": "function_call", "name": "f"});
        assert_eq!(kind_cell(&call), "function_call");
        assert_eq!(text_cell(&call), r#"{"name":"f","type":"function_call"}"#);
        let long = json!({"role": "user", "content": "x".repeat(100)});
        assert_eq!(text_cell(&long).chars().count(), TEXT_CHARS + 1);
        assert_eq!((seq_cell("00000000000000000042"), seq_cell("0")), ("42".to_owned(), "0".to_owned()));
    }
}
