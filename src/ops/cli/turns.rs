//! `stepwell turns ls|show|rm`: ListTurns paged up to `--limit` (open,
//! terminal, any, or stalled: open and not updated for `--older-than`),
//! one turn's checkpoints as a timeline with each state summarised, and
//! DeleteTurn of everything a turn holds (its records kept with
//! `--checkpoints-only`).

use std::time::Duration;

use serde_json::{Map, Value};

use super::{
    EXIT_NOT_FOUND, Failure, Session, json_or_null, one_line, print_ndjson, print_record, print_table, put_time,
    text_cell, time_cell,
};
use crate::api::pb::{Checkpoint, DeleteTurnRequest, ListTurnsRequest, RestoreRequest, TurnStatus, TurnSummary};
use crate::config::commands::{TurnArgs, TurnRm, TurnsFilter, TurnsLs};
use crate::domain::clock;

/// How long a turn must not have been updated to count as stalled, unless
/// `--older-than` says otherwise.
const STALLED_AFTER: Duration = Duration::from_secs(3600);

/// How many characters of a state that is not a JSON object the timeline shows.
const SUMMARY_CHARS: usize = 60;

/// `stepwell turns ls`.
pub(super) async fn ls(session: &Session, args: &TurnsLs) -> Result<(), Failure> {
    let status = match args.status {
        TurnsFilter::Open | TurnsFilter::Stalled => TurnStatus::Open,
        TurnsFilter::Terminal => TurnStatus::Terminal,
        TurnsFilter::Any => TurnStatus::Any,
    };
    let older_than = match args.status {
        TurnsFilter::Stalled => Some(args.older_than.unwrap_or(STALLED_AFTER)),
        _ => args.older_than,
    };
    let updated_before = older_than.map(|age| {
        let age = i64::try_from(age.as_nanos()).unwrap_or(i64::MAX);
        let before = clock::system_now().saturating_sub(age);
        prost_types::Timestamp {
            seconds: before.div_euclid(1_000_000_000),
            nanos: before.rem_euclid(1_000_000_000) as i32,
        }
    });
    let limit = args.limit as usize;
    let mut request = ListTurnsRequest {
        namespace: session.namespace(),
        status: status.into(),
        updated_before,
        // The sidecar's default page, always within its --page-size-max.
        page_size: 0,
        ..Default::default()
    };
    let mut turns: Vec<TurnSummary> = Vec::new();
    loop {
        let page = session.call(session.checkpoints().list_turns(session.request(request.clone()))).await?;
        turns.extend(page.turns);
        if page.next_page_token.is_empty() || turns.len() >= limit {
            break;
        }
        request.page_token = page.next_page_token;
    }
    turns.truncate(limit);
    if session.json() {
        print_ndjson(turns.iter().map(turn_row));
    } else {
        let rows: Vec<Vec<String>> = turns
            .iter()
            .map(|t| {
                vec![
                    one_line(&t.turn_id),
                    status_name(t.terminal).to_owned(),
                    t.checkpoint_count.to_string(),
                    time_cell(t.first_timestamp.as_ref()),
                    time_cell(t.last_timestamp.as_ref()),
                    text_cell(&t.last_phase),
                    text_cell(&t.session_id),
                ]
            })
            .collect();
        print_table(&["TURN", "STATUS", "CHECKPOINTS", "FIRST", "LAST", "PHASE", "SESSION"], &rows);
        eprintln!("{}", listing_note(args.status));
    }
    Ok(())
}

/// What a `turns ls` table holds, said on stderr below it.
fn listing_note(status: TurnsFilter) -> String {
    let which = match status {
        TurnsFilter::Any => "turns of every status",
        TurnsFilter::Open => "open turns",
        TurnsFilter::Terminal => "terminal turns",
        TurnsFilter::Stalled => "stalled turns",
    };
    format!(
        "{which} with checkpoints (--status open|terminal|stalled|any); runs kept in records are listed by \
         `stepwell records ls TURN`, `stepwell sessions ls` and `stepwell adk ls`, and every run in the console"
    )
}

fn status_name(terminal: bool) -> &'static str {
    if terminal { "terminal" } else { "open" }
}

/// A turn summary as an NDJSON row.
fn turn_row(turn: &TurnSummary) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("turn_id".to_owned(), turn.turn_id.clone().into());
    row.insert("status".to_owned(), status_name(turn.terminal).into());
    row.insert("checkpoints".to_owned(), turn.checkpoint_count.into());
    put_time(&mut row, "first_timestamp", turn.first_timestamp.as_ref());
    put_time(&mut row, "last_timestamp", turn.last_timestamp.as_ref());
    row.insert("last_phase".to_owned(), turn.last_phase.clone().into());
    row.insert("session_id".to_owned(), turn.session_id.clone().into());
    row.insert("workflow_version".to_owned(), turn.workflow_version.clone().into());
    row
}

/// `stepwell turns show`: exit 2 for a turn without checkpoints.
pub(super) async fn show(session: &Session, args: &TurnArgs) -> Result<(), Failure> {
    let mut request = RestoreRequest {
        namespace: session.namespace(),
        turn_id: args.turn.clone(),
        // The sidecar's default page, always within its --page-size-max.
        page_size: 0,
        ..Default::default()
    };
    let mut checkpoints: Vec<Checkpoint> = Vec::new();
    loop {
        let page = session.call(session.checkpoints().restore(session.request(request.clone()))).await?;
        checkpoints.extend(page.checkpoints);
        if page.next_page_token.is_empty() {
            break;
        }
        request.page_token = page.next_page_token;
    }
    if checkpoints.is_empty() {
        return Err(Failure::new(EXIT_NOT_FOUND, format!("turn {:?} has no checkpoints", args.turn)));
    }
    if session.json() {
        print_ndjson(checkpoints.iter().map(checkpoint_row));
    } else {
        let rows: Vec<Vec<String>> = checkpoints
            .iter()
            .map(|c| {
                vec![
                    time_cell(c.timestamp.as_ref()),
                    one_line(&c.phase),
                    if c.terminal { "terminal".to_owned() } else { String::new() },
                    c.state.len().to_string(),
                    summary(&c.state),
                ]
            })
            .collect();
        print_table(&["TIMESTAMP", "PHASE", "END", "BYTES", "STATE"], &rows);
    }
    Ok(())
}

/// A checkpoint as an NDJSON row: its state's size and, when it is JSON,
/// the state itself.
fn checkpoint_row(checkpoint: &Checkpoint) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("turn_id".to_owned(), checkpoint.turn_id.clone().into());
    row.insert("phase".to_owned(), checkpoint.phase.clone().into());
    put_time(&mut row, "timestamp", checkpoint.timestamp.as_ref());
    row.insert("terminal".to_owned(), checkpoint.terminal.into());
    row.insert("session_id".to_owned(), checkpoint.session_id.clone().into());
    row.insert("workflow_version".to_owned(), checkpoint.workflow_version.clone().into());
    put_time(&mut row, "recorded_at", checkpoint.recorded_at.as_ref());
    row.insert("state_bytes".to_owned(), checkpoint.state.len().into());
    row.insert("state".to_owned(), json_or_null(&checkpoint.state));
    row
}

/// A state on one line: a JSON object's top-level keys, or else its first
/// 60 characters.
fn summary(state: &[u8]) -> String {
    if let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(state) {
        return format!("{{{}}}", object.keys().map(|k| one_line(k)).collect::<Vec<_>>().join(", "));
    }
    let text = one_line(&String::from_utf8_lossy(state));
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text,
    }
}

/// `stepwell turns rm`: one DeleteTurn of everything the turn holds, its
/// checkpoints, waits and records (with `--checkpoints-only`, its records
/// stay), and how many of each went (0 for a turn that had none, so a
/// repeat succeeds).
pub(super) async fn rm(session: &Session, args: &TurnRm) -> Result<(), Failure> {
    let request = DeleteTurnRequest {
        namespace: session.namespace(),
        turn_id: args.turn.clone(),
        include_records: !args.checkpoints_only,
    };
    let deleted = session.call(session.checkpoints().delete_turn(session.request(request))).await?;
    if session.json() {
        let mut row = Map::new();
        row.insert("turn_id".to_owned(), args.turn.clone().into());
        row.insert("deleted".to_owned(), deleted.deleted.into());
        row.insert("records_deleted".to_owned(), deleted.records_deleted.into());
        row.insert("waits_deleted".to_owned(), deleted.waits_deleted.into());
        print_ndjson([row]);
    } else {
        print_record(&[
            ("turn", one_line(&args.turn)),
            ("deleted", format!("{} checkpoints", deleted.deleted)),
            ("records deleted", format!("{} records", deleted.records_deleted)),
            ("waits deleted", format!("{} waits", deleted.waits_deleted)),
        ]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_summarised_by_its_keys_or_its_start() {
        assert_eq!(summary(br#"{"b": 1, "a": {"x": 2}}"#), "{a, b}");
        assert_eq!(summary(b"[1, 2]"), "[1, 2]");
        let long = format!("\"{}\"", "x".repeat(100));
        assert_eq!(summary(long.as_bytes()), format!("\"{}…", "x".repeat(59)));
        assert_eq!(summary(b"\"a\nb\""), "\"a b\"");
    }
}
