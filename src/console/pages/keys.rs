//! The keys of a namespace by state: holder's fencing token, a live lease
//! countdown, attempts, and the recorded result or error.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeysQuery {
    pub(super) ns: String,
    pub(super) state: String,
    pub(super) prefix: String,
    pub(super) after: String,
    pub(super) notice: String,
}

pub(super) struct KeyView {
    pub(super) record: KeyRecord,
    pub(super) state: &'static str,
    pub(super) leased: bool,
    pub(super) expires: String,
    pub(super) expires_at: String,
    pub(super) expires_ms: i64,
    pub(super) outcome: String,
    /// The page of the turn the key names, if it names one.
    pub(super) turn: Option<String>,
}

/// The turn a key names by the usual conventions: `<turn>/<step>`, or a
/// LangGraph saver's `langgraph-thread:<thread>`.
fn key_turn(key: &str) -> Option<&str> {
    if let Some(thread) = key.strip_prefix("langgraph-thread:") {
        return Some(thread);
    }
    key.split_once('/').map(|(turn, _)| turn).filter(|turn| !turn.is_empty())
}

pub(super) fn key_rows(ns: &str, page: crate::domain::console::KeyPage) -> Vec<KeyView> {
    page.keys
        .into_iter()
        .map(|record| {
            let state = record.state(page.now);
            let leased = matches!(state, KeyState::InProgress | KeyState::Expired);
            let left = record.lease_expires_at - page.now;
            let outcome = match state {
                KeyState::Completed => view::bytes_text(&record.result, 200),
                KeyState::Failed | KeyState::Released => view::cut(&record.error, 200),
                _ => String::new(),
            };
            KeyView {
                state: match state {
                    KeyState::InProgress => "in progress",
                    KeyState::Expired => "lease expired",
                    KeyState::Completed => "completed",
                    KeyState::Failed => "failed",
                    KeyState::Released => "released",
                },
                leased,
                expires: if left >= 0 {
                    format!("expires in {}", view::duration(left))
                } else {
                    format!("expired {} ago", view::duration(-left))
                },
                expires_at: view::iso(record.lease_expires_at),
                expires_ms: record.lease_expires_at / 1_000_000,
                outcome,
                turn: key_turn(&record.key).map(|turn| format!("/turn?{}", query(&[("ns", ns), ("id", turn)]))),
                record,
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "console/keys.html")]
struct KeysPage {
    pub(super) frame: Frame,
    pub(super) q: KeysQuery,
    pub(super) rows: Vec<KeyView>,
    pub(super) next: Option<String>,
    pub(super) may_act: bool,
}

fn key_filter(state: &str) -> Result<KeyFilter, Refusal> {
    Ok(match state {
        "" | "all" => KeyFilter::All,
        "in_progress" => KeyFilter::InProgress,
        "expired" => KeyFilter::Expired,
        "failed" => KeyFilter::Failed,
        "completed" => KeyFilter::Completed,
        "released" => KeyFilter::Released,
        other => {
            return Err(Refusal::BadRequest(format!(
                "state {other:?} is not one of in_progress, expired, failed, completed, released, all"
            )));
        }
    })
}

pub async fn keys(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<KeysQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let text = |t: &str| Some(t.to_owned()).filter(|t| !t.is_empty());
    let key_query = KeyQuery {
        namespace: ns.clone(),
        filter: key_filter(&q.state)?,
        prefix: text(&q.prefix),
        after: text(&q.after),
        limit: PAGE_ROWS,
    };
    let page = reads::keys(console.store()?, &key_query).await?;
    let next = match page.keys.last() {
        Some(last) if page.more => Some(format!(
            "/keys?{}",
            query(&[("ns", &ns), ("state", &q.state), ("prefix", &q.prefix), ("after", &last.key)])
        )),
        _ => None,
    };
    let rows = key_rows(&ns, page);
    let may_act = console.may_act(&entered.viewer, &ns);
    let frame = console.frame(&entered, "Keys".to_owned(), "keys", &ns, &q.notice).await?;
    Ok(answer(&entered, KeysPage { frame, q, rows, next, may_act }))
}
