//! `stepwell records ls|rm`: ListRecords of one kind, of one turn or of
//! every turn of the namespace, narrowed by scope and metadata containment
//! and paged up to `--limit`; and DeleteRecords of whole turns, every kind,
//! as many requests as the turns need (at most 1000 turns each).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Value};

use super::{Failure, Session, one_line, print_ndjson, print_record, print_table, put_time, text_cell, time_cell};
use crate::api::pb::{DeleteRecordsRequest, ListRecordsRequest, Record};
use crate::config::commands::{RecordsLs, RecordsRm};

/// Most turns one DeleteRecords names (the sidecar's limit).
const TURNS_PER_DELETE: usize = 1000;

/// How many characters of a record's metadata the table shows.
const METADATA_CHARS: usize = 40;

/// `stepwell records ls`.
pub(super) async fn ls(session: &Session, args: &RecordsLs) -> Result<(), Failure> {
    let limit = args.limit as usize;
    let mut request = ListRecordsRequest {
        namespace: session.namespace(),
        turn_id: args.turn.clone().unwrap_or_default(),
        scope: args.scope.clone().unwrap_or_default(),
        has_scope: args.scope.is_some(),
        kind: args.kind.clone(),
        metadata_contains: args.metadata.clone().unwrap_or_default().into_bytes(),
        // The sidecar's default page, always within its --page-size-max.
        page_size: 0,
        ..Default::default()
    };
    // A page holds at most the sidecar's --message-bytes-max, which may be
    // above gRPC's default 4 MiB when records of several MB are allowed.
    let mut client = session.records();
    let mut records: Vec<Record> = Vec::new();
    loop {
        let page = session.call(client.list_records(session.request(request.clone()))).await?;
        records.extend(page.entries.into_iter().filter_map(|entry| entry.record));
        if page.next_page_token.is_empty() || records.len() >= limit {
            break;
        }
        request.page_token = page.next_page_token;
    }
    records.truncate(limit);
    if session.json() {
        print_ndjson(records.iter().map(|r| record_row(r, args.payload)));
    } else {
        let rows: Vec<Vec<String>> = records
            .iter()
            .map(|r| {
                vec![
                    one_line(&r.turn_id),
                    text_cell(&r.scope),
                    one_line(&r.kind),
                    one_line(&r.id),
                    text_cell(&r.parent_id),
                    text_cell(&r.content_type),
                    r.payload.len().to_string(),
                    metadata_cell(&r.metadata),
                    time_cell(r.recorded_at.as_ref()),
                ]
            })
            .collect();
        print_table(&["TURN", "SCOPE", "KIND", "ID", "PARENT", "TYPE", "BYTES", "METADATA", "RECORDED"], &rows);
    }
    Ok(())
}

/// A record as an NDJSON row: its payload's size and, with `payload`, the
/// payload in base64; its metadata as a JSON object (null for none).
fn record_row(record: &Record, payload: bool) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("turn_id".to_owned(), record.turn_id.clone().into());
    row.insert("scope".to_owned(), record.scope.clone().into());
    row.insert("kind".to_owned(), record.kind.clone().into());
    row.insert("id".to_owned(), record.id.clone().into());
    row.insert("parent_id".to_owned(), record.parent_id.clone().into());
    row.insert("content_type".to_owned(), record.content_type.clone().into());
    row.insert("payload_bytes".to_owned(), record.payload.len().into());
    if payload {
        row.insert("payload".to_owned(), STANDARD.encode(&record.payload).into());
    }
    let metadata = if record.metadata.is_empty() { Value::Null } else { super::json_or_null(&record.metadata) };
    row.insert("metadata".to_owned(), metadata);
    row.insert("refs".to_owned(), record.refs.clone().into());
    put_time(&mut row, "recorded_at", record.recorded_at.as_ref());
    row
}

/// Metadata on one line, cut after 40 characters; `-` for none.
fn metadata_cell(metadata: &[u8]) -> String {
    if metadata.is_empty() {
        return "-".to_owned();
    }
    // The sidecar returns an equal object, not the bytes written: print it
    // compactly, whatever spacing it came with.
    let text = match serde_json::from_slice::<Value>(metadata) {
        Ok(value) => value.to_string(),
        Err(_) => one_line(&String::from_utf8_lossy(metadata)),
    };
    match text.char_indices().nth(METADATA_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => one_line(&text),
    }
}

/// `stepwell records rm`: how many records of the turns were deleted (0
/// when they had none, so a repeat succeeds).
pub(super) async fn rm(session: &Session, args: &RecordsRm) -> Result<(), Failure> {
    let deleted = delete_records(session, &args.turns).await?;
    if session.json() {
        let mut row = Map::new();
        row.insert("turn_ids".to_owned(), args.turns.clone().into());
        row.insert("deleted".to_owned(), deleted.into());
        print_ndjson([row]);
    } else {
        let turns: Vec<String> = args.turns.iter().map(|t| one_line(t)).collect();
        print_record(&[("turns", turns.join(", ")), ("deleted", format!("{deleted} records"))]);
    }
    Ok(())
}

/// Deletes every record of `turns`, at most 1000 turns a request, and
/// returns how many went.
pub(super) async fn delete_records(session: &Session, turns: &[String]) -> Result<i64, Failure> {
    let mut deleted: i64 = 0;
    for chunk in turns.chunks(TURNS_PER_DELETE) {
        let request =
            DeleteRecordsRequest { namespace: session.namespace(), turn_ids: chunk.to_vec(), ..Default::default() };
        let answer = session.call(session.records().delete_records(session.request(request))).await?;
        deleted = deleted.saturating_add(answer.deleted);
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_shown_compactly_and_cut() {
        assert_eq!(metadata_cell(b""), "-");
        assert_eq!(metadata_cell(br#"{ "source":  ["loop", 1] }"#), r#"{"source":["loop",1]}"#);
        let long = format!(r#"{{"k": "{}"}}"#, "x".repeat(100));
        assert_eq!(metadata_cell(long.as_bytes()), format!(r#"{{"k":"{}…"#, "x".repeat(34)));
        assert_eq!(metadata_cell(b"not\njson"), "not json");
    }
}
