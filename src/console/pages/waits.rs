//! The waits of a namespace: pending with a deadline countdown, timers,
//! and settled ones with who settled them.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct WaitsQuery {
    pub(super) ns: String,
    pub(super) status: String,
    pub(super) turn: String,
    pub(super) after_turn: String,
    pub(super) after_name: String,
    pub(super) notice: String,
}

pub(super) struct WaitView {
    pub(super) wait: Wait,
    pub(super) status: &'static str,
    pub(super) pending: bool,
    pub(super) due: String,
    pub(super) due_at: String,
    pub(super) due_ms: i64,
    pub(super) created: String,
    pub(super) settled: String,
    pub(super) payload: String,
    pub(super) metadata: String,
    /// The page of the wait's turn.
    pub(super) turn: String,
}

pub(super) fn wait_row(wait: Wait, now: UnixNanos) -> WaitView {
    let due = wait.due_at();
    WaitView {
        status: match wait.status {
            WaitStatus::Pending => "pending",
            WaitStatus::Resolved => "resolved",
            WaitStatus::Cancelled => "cancelled",
            WaitStatus::Expired => "expired",
        },
        pending: wait.status == WaitStatus::Pending,
        due: match due {
            Some(at) if at >= now => format!("due in {}", view::duration(at - now)),
            Some(at) => format!("due {} ago", view::duration(now - at)),
            None => String::new(),
        },
        due_at: due.map(view::iso).unwrap_or_default(),
        due_ms: due.map_or(0, |at| at / 1_000_000),
        created: view::time(wait.created_at),
        settled: wait.settled_at.map(view::time).unwrap_or_default(),
        payload: view::bytes_text(&wait.payload, 200),
        metadata: wait.metadata.as_deref().map(|m| view::cut(m, 200)).unwrap_or_default(),
        turn: format!("/turn?{}", query(&[("ns", &wait.key.namespace), ("id", &wait.key.turn_id)])),
        wait,
    }
}

#[derive(Template)]
#[template(path = "console/waits.html")]
struct WaitsPage {
    pub(super) frame: Frame,
    pub(super) q: WaitsQuery,
    pub(super) rows: Vec<WaitView>,
    pub(super) next: Option<String>,
    pub(super) may_act: bool,
}

fn wait_filter(status: &str) -> Result<WaitFilter, Refusal> {
    Ok(match status {
        "" | "all" => WaitFilter::All,
        "pending" => WaitFilter::Pending,
        "timers" => WaitFilter::Timers,
        "settled" => WaitFilter::Settled,
        other => {
            return Err(Refusal::BadRequest(format!("status {other:?} is not one of pending, timers, settled, all")));
        }
    })
}

pub async fn waits(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<WaitsQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let after =
        (!q.after_turn.is_empty() || !q.after_name.is_empty()).then(|| (q.after_turn.clone(), q.after_name.clone()));
    let turn_id = Some(q.turn.clone()).filter(|t| !t.is_empty());
    let wait_query =
        WaitPageQuery { namespace: ns.clone(), filter: wait_filter(&q.status)?, turn_id, after, limit: PAGE_ROWS };
    let (waits, more) = reads::waits(console.store()?, &wait_query).await?;
    let next = match waits.last() {
        Some(last) if more => Some(format!(
            "/waits?{}",
            query(&[
                ("ns", &ns),
                ("status", &q.status),
                ("turn", &q.turn),
                ("after_turn", &last.key.turn_id),
                ("after_name", &last.key.name)
            ])
        )),
        _ => None,
    };
    let now = now();
    let rows = waits.into_iter().map(|w| wait_row(w, now)).collect();
    let may_act = console.may_act(&entered.viewer, &ns);
    let frame = console.frame(&entered, "Waits".to_owned(), "waits", &ns, &q.notice).await?;
    Ok(answer(&entered, WaitsPage { frame, q, rows, next, may_act }))
}
