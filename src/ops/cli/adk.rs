//! `stepwell adk ls|show|rm`: the Google ADK sessions the clients' session
//! services keep in RecordService (docs/guides/adk.md). A session is the
//! turn `adk:<app>/<user>/<session id>` (each name percent-encoded): a head
//! record of kind `adk-session` (its payload the app, user, id and the
//! create and last update times, in seconds), one `adk-event` record per
//! event at its 20-digit sequence number, and one `adk-state` record per
//! session-state key. `ls` lists the heads of the namespace, or of one app
//! or user, newest update first; `show` prints a session's newest events,
//! oldest first, and its state as the agent sees it (the session's keys,
//! and the `app:` and `user:` keys of the turns `adk-app:<app>` and
//! `adk-user:<app>/<user>`); `rm` deletes whole sessions, as the
//! services' `delete_session` does (the `app:` and `user:` state they share
//! with other sessions stays).

use serde_json::{Map, Value};

use super::sessions::{TURNS_PER_DELETE, pages, seq_cell};
use super::{Failure, Session, json_or_null, one_line, print_ndjson, print_record, print_table, rfc3339};
use crate::api::pb::{DeleteRecordsRequest, ListRecordsRequest, Record};
use crate::config::commands::{AdkLs, AdkRm, AdkShow};
use crate::domain::percent::encode;

/// The kinds the session services write.
pub const HEAD_KIND: &str = "adk-session";
pub const EVENT_KIND: &str = "adk-event";
pub const STATE_KIND: &str = "adk-state";

/// How many characters of an event's text the table shows.
const TEXT_CHARS: usize = 60;

/// The turn of session `id` of `user` in `app`.
pub fn session_turn(app: &str, user: &str, id: &str) -> String {
    format!("adk:{}/{}/{}", encode(app), encode(user), encode(id))
}

/// The turn of the `app:` keys of `app`, and of the `user:` keys of `user`.
fn shared_turns(app: &str, user: &str) -> [(&'static str, String); 2] {
    [("app:", format!("adk-app:{}", encode(app))), ("user:", format!("adk-user:{}/{}", encode(app), encode(user)))]
}

/// Seconds since the epoch (a head's and an event's times, which ADK keeps
/// as a float) as RFC 3339 to the microsecond, or `-`: a float of seconds
/// today is good to a few hundred nanoseconds, so nanoseconds would print
/// its rounding noise.
fn seconds_cell(seconds: Option<f64>) -> String {
    seconds.map_or_else(|| "-".to_owned(), |s| rfc3339(((s * 1e6).round() as i64).saturating_mul(1000)))
}

/// `stepwell adk ls`.
pub(super) async fn ls(session: &Session, args: &AdkLs) -> Result<(), Failure> {
    let mut filter = Map::new();
    if let Some(app) = &args.app {
        filter.insert("app".to_owned(), app.clone().into());
    }
    if let Some(user) = &args.user {
        filter.insert("user".to_owned(), user.clone().into());
    }
    let request = ListRecordsRequest {
        namespace: session.namespace(),
        kind: HEAD_KIND.to_owned(),
        metadata_contains: if filter.is_empty() { Vec::new() } else { Value::Object(filter).to_string().into_bytes() },
        ..Default::default()
    };
    let mut heads: Vec<Value> = Vec::new();
    pages(session, request, |records| {
        heads.extend(records.iter().map(|r| json_or_null(&r.payload)));
        true
    })
    .await?;
    let updated = |head: &Value| head.get("last_update_time").and_then(Value::as_f64).unwrap_or(0.0);
    heads.sort_by(|a, b| updated(b).total_cmp(&updated(a)));
    heads.truncate(args.limit as usize);
    let field = |head: &Value, name: &str| head.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
    if session.json() {
        print_ndjson(heads.into_iter().filter_map(|head| match head {
            Value::Object(row) => Some(row),
            _ => None,
        }));
    } else {
        let rows: Vec<Vec<String>> = heads
            .iter()
            .map(|h| {
                let (app, user, id) = (field(h, "app"), field(h, "user"), field(h, "id"));
                vec![one_line(&app), one_line(&user), one_line(&id), seconds_cell(Some(updated(h)))]
            })
            .collect();
        print_table(&["APP", "USER", "SESSION", "LAST UPDATE"], &rows);
    }
    Ok(())
}

/// `stepwell adk show`: the session's newest `--limit` events, oldest
/// first, then its session state; exit 2 when there is no such session.
pub(super) async fn show(session: &Session, args: &AdkShow) -> Result<(), Failure> {
    let turn = session_turn(&args.app, &args.user, &args.session);
    let listing = |kind: &str, page_size: u32, children: &str| ListRecordsRequest {
        namespace: session.namespace(),
        turn_id: turn.clone(),
        has_scope: true,
        kind: kind.to_owned(),
        page_size: page_size.min(1000) as i32,
        children_kind: children.to_owned(),
        ..Default::default()
    };
    let mut client = session.records();
    let head = session.call(client.list_records(session.request(listing(HEAD_KIND, 1, STATE_KIND)))).await?;
    let Some(head) = head.entries.into_iter().next() else {
        let what = format!("no session {:?} of user {:?} in app {:?}", args.session, args.user, args.app);
        return Err(Failure::new(super::EXIT_NOT_FOUND, what));
    };
    let limit = args.limit as usize;
    let mut events: Vec<Record> = Vec::new();
    pages(session, listing(EVENT_KIND, args.limit, ""), |records| {
        events.extend(records);
        events.len() < limit
    })
    .await?;
    events.truncate(limit);
    events.reverse();
    let mut state: Map<String, Value> = head
        .children
        .iter()
        .filter_map(|r| r.id.strip_prefix('k').map(|key| (key.to_owned(), json_or_null(&r.payload))))
        .collect();
    for (prefix, turn) in shared_turns(&args.app, &args.user) {
        let request = ListRecordsRequest {
            namespace: session.namespace(),
            turn_id: turn,
            has_scope: true,
            kind: STATE_KIND.to_owned(),
            ..Default::default()
        };
        pages(session, request, |records| {
            let keys = records.iter().filter_map(|r| r.id.strip_prefix('k').map(|key| (key, &r.payload)));
            state.extend(keys.map(|(key, payload)| (format!("{prefix}{key}"), json_or_null(payload))));
            true
        })
        .await?;
    }
    if session.json() {
        print_ndjson(
            events.iter().map(event_row).chain([Map::from_iter([("state".to_owned(), Value::Object(state))])]),
        );
    } else {
        print_events(&events);
        print_lines_of_state(&state);
    }
    Ok(())
}

/// An event as an NDJSON row: its sequence number and its JSON.
fn event_row(record: &Record) -> Map<String, Value> {
    let mut row = Map::new();
    row.insert("seq".to_owned(), record.id.parse::<u64>().map_or_else(|_| record.id.clone().into(), Value::from));
    row.insert("event".to_owned(), json_or_null(&record.payload));
    row
}

fn print_events(events: &[Record]) {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|r| {
            let event = json_or_null(&r.payload);
            let author = event.get("author").and_then(Value::as_str).map_or_else(|| "-".to_owned(), one_line);
            let time = event.get("timestamp").and_then(Value::as_f64);
            vec![seq_cell(&r.id), author, event_text(&event), seconds_cell(time)]
        })
        .collect();
    print_table(&["SEQ", "AUTHOR", "TEXT", "TIME"], &rows);
}

fn print_lines_of_state(state: &Map<String, Value>) {
    let fields: Vec<(&str, String)> = state.iter().map(|(k, v)| (k.as_str(), one_line(&v.to_string()))).collect();
    if !fields.is_empty() {
        print_record(&[("state", String::new())]);
        print_record(&fields);
    }
}

/// What an event says, on one line, cut after 60 characters: its parts'
/// text, a function call as `name(args)`, a function response as
/// `-> name: response`.
fn event_text(event: &Value) -> String {
    let parts = event.pointer("/content/parts").and_then(Value::as_array).cloned().unwrap_or_default();
    let said: Vec<String> = parts
        .iter()
        .filter_map(|part| {
            if let Some(text) = part.get("text").and_then(Value::as_str) {
                return Some(text.to_owned());
            }
            let name = |call: &Value| call.get("name").and_then(Value::as_str).unwrap_or("?").to_owned();
            if let Some(call) = part.get("functionCall") {
                return Some(format!("{}({})", name(call), call.get("args").unwrap_or(&Value::Null)));
            }
            part.get("functionResponse")
                .map(|r| format!("-> {}: {}", name(r), r.get("response").unwrap_or(&Value::Null)))
        })
        .collect();
    let text = one_line(&said.join(" "));
    match text.char_indices().nth(TEXT_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None if text.is_empty() => "-".to_owned(),
        None => text,
    }
}

/// `stepwell adk rm`: deletes the sessions (0 records when none existed,
/// so a repeat succeeds).
pub(super) async fn rm(session: &Session, args: &AdkRm) -> Result<(), Failure> {
    let turns: Vec<String> = args.sessions.iter().map(|id| session_turn(&args.app, &args.user, id)).collect();
    let mut deleted: i64 = 0;
    for chunk in turns.chunks(TURNS_PER_DELETE) {
        let request =
            DeleteRecordsRequest { namespace: session.namespace(), turn_ids: chunk.to_vec(), ..Default::default() };
        let answer = session.call(session.records().delete_records(session.request(request))).await?;
        deleted = deleted.saturating_add(answer.deleted);
    }
    if session.json() {
        let mut row = Map::new();
        row.insert("app".to_owned(), args.app.clone().into());
        row.insert("user".to_owned(), args.user.clone().into());
        row.insert("session_ids".to_owned(), args.sessions.clone().into());
        row.insert("deleted".to_owned(), deleted.into());
        print_ndjson([row]);
    } else {
        let ids: Vec<String> = args.sessions.iter().map(|s| one_line(s)).collect();
        print_record(&[("sessions", ids.join(", ")), ("deleted", format!("{deleted} records"))]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn turns_are_named_as_the_services_name_them() {
        assert_eq!(session_turn("my app", "u/1", "s-1_~."), "adk:my%20app/u%2F1/s-1_~.");
        assert_eq!(encode("é!"), "%C3%A9%21");
    }

    #[test]
    fn times_print_to_the_microsecond_without_float_noise() {
        assert_eq!(seconds_cell(Some(1_795_000_000.423)), "2026-11-18T11:06:40.423Z");
        assert_eq!(seconds_cell(Some(1_795_000_000.000_123)), "2026-11-18T11:06:40.000123Z");
        assert_eq!(seconds_cell(None), "-");
        assert_eq!(shared_turns("my app", "u/1")[1].1, "adk-user:my%20app/u%2F1");
    }

    #[test]
    fn an_event_is_summed_up_by_its_parts() {
        let text = json!({"content": {"parts": [{"text": "hello\nthere"}]}});
        assert_eq!(event_text(&text), "hello there");
        let call = json!({"content": {"parts": [{"functionCall": {"name": "book", "args": {"n": 2}}}]}});
        assert_eq!(event_text(&call), r#"book({"n":2})"#);
        let answer = json!({"content": {"parts": [{"functionResponse": {"name": "book", "response": {"ok": true}}}]}});
        assert_eq!(event_text(&answer), r#"-> book: {"ok":true}"#);
        assert_eq!(event_text(&json!({"author": "x"})), "-");
        assert_eq!(
            event_text(&json!({"content": {"parts": [{"text": "x".repeat(100)}]}})).chars().count(),
            TEXT_CHARS + 1
        );
    }
}
