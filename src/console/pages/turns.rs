//! The turns of a namespace, newest activity first, filtered by status,
//! stalled, session, time range and id prefix, a page at a time.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TurnsQuery {
    pub(super) ns: String,
    pub(super) status: String,
    pub(super) stalled: String,
    pub(super) session: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) prefix: String,
    pub(super) after: String,
    pub(super) notice: String,
}

struct TurnRow {
    pub(super) link: String,
    pub(super) turn: TurnSummary,
    pub(super) last_activity: String,
    pub(super) state: &'static str,
}

#[derive(Template)]
#[template(path = "console/turns.html")]
struct TurnsPage {
    pub(super) frame: Frame,
    pub(super) q: TurnsQuery,
    pub(super) rows: Vec<TurnRow>,
    pub(super) next: Option<String>,
}

fn turn_status(status: &str) -> Result<TurnStatus, Refusal> {
    match status {
        "" | "all" => Ok(TurnStatus::Any),
        "open" => Ok(TurnStatus::Open),
        "terminal" => Ok(TurnStatus::Terminal),
        other => Err(Refusal::BadRequest(format!("status {other:?} is not one of open, terminal, all"))),
    }
}

fn time_filter(field: &str, text: &str) -> Result<Option<UnixNanos>, Refusal> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    view::parse_time(text)
        .map(Some)
        .ok_or_else(|| Refusal::BadRequest(format!("{field} is not a UTC time such as 2026-11-28T09:30")))
}

fn activity_query(q: &TurnsQuery, ns: &str, stalled_after: i64) -> Result<ActivityQuery, Refusal> {
    let after = match q.after.split_once(':') {
        Some((at, id)) => {
            Some((at.parse().map_err(|_| Refusal::BadRequest("after is not a page cursor".into()))?, id.to_owned()))
        }
        None if q.after.is_empty() => None,
        None => return Err(Refusal::BadRequest("after is not a page cursor".into())),
    };
    let text = |t: &str| Some(t.to_owned()).filter(|t| !t.is_empty());
    Ok(ActivityQuery {
        namespace: ns.to_owned(),
        status: turn_status(&q.status)?,
        stalled_before: (!q.stalled.is_empty()).then(|| now() - stalled_after),
        session_id: text(&q.session),
        from: time_filter("from", &q.from)?,
        to: time_filter("to", &q.to)?,
        prefix: text(&q.prefix),
        after,
        limit: PAGE_ROWS,
    })
}

pub async fn turns(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<TurnsQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let stalled_after = console.settings().stalled_after.as_nanos() as i64;
    let (turns, more) = reads::turns(console.store()?, &activity_query(&q, &ns, stalled_after)?).await?;
    let stalled_before = now() - stalled_after;
    let next = match turns.last() {
        Some(last) if more => {
            let cursor = format!("{}:{}", last.last_timestamp, last.turn_id);
            Some(format!(
                "/turns?{}",
                query(&[
                    ("ns", &ns),
                    ("status", &q.status),
                    ("stalled", &q.stalled),
                    ("session", &q.session),
                    ("from", &q.from),
                    ("to", &q.to),
                    ("prefix", &q.prefix),
                    ("after", &cursor)
                ])
            ))
        }
        _ => None,
    };
    let rows = turns
        .into_iter()
        .map(|turn| TurnRow {
            link: format!("/turn?{}", query(&[("ns", &ns), ("id", &turn.turn_id)])),
            last_activity: view::time(turn.last_timestamp),
            state: match (turn.terminal, turn.last_timestamp < stalled_before) {
                (true, _) => "terminal",
                (false, true) => "stalled",
                (false, false) => "open",
            },
            turn,
        })
        .collect();
    let frame = console.frame(&entered, "Turns".to_owned(), "turns", &ns, &q.notice).await?;
    Ok(answer(&entered, TurnsPage { frame, q, rows, next }))
}
