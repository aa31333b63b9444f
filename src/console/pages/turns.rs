//! The runs of a namespace: every turn that holds checkpoints, records or
//! waits, with what kind of run it is (a checkpoint log, a LangGraph
//! thread, an agent session) and whether work is pending in it, newest
//! activity first, filtered by status, kind, stalled, session, time range
//! and id prefix, a page at a time. The longest-stalled runs come first: on
//! the stalled filter the page is oldest first, and otherwise the stalled
//! runs are shown above the table.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TurnsQuery {
    pub(super) ns: String,
    pub(super) status: String,
    pub(super) kind: String,
    pub(super) stalled: String,
    pub(super) session: String,
    pub(super) from: String,
    pub(super) to: String,
    pub(super) prefix: String,
    pub(super) after: String,
    pub(super) notice: String,
}

pub(super) struct TurnView {
    pub(super) link: String,
    pub(super) run: Run,
    pub(super) kind: &'static str,
    pub(super) holds: String,
    pub(super) last_phase: String,
    pub(super) session: String,
    pub(super) last_activity: String,
    pub(super) state: &'static str,
}

#[derive(Template)]
#[template(path = "console/turns.html")]
struct TurnsPage {
    pub(super) frame: Frame,
    pub(super) q: TurnsQuery,
    pub(super) kinds: Vec<(&'static str, &'static str)>,
    pub(super) rows: Vec<TurnView>,
    /// The longest-stalled runs, above an unfiltered first page.
    pub(super) stalled: Vec<TurnView>,
    pub(super) stalled_link: String,
    pub(super) oldest_first: bool,
    pub(super) next: Option<String>,
}

/// Stalled runs shown above the first page of all runs.
const STALLED_SHOWN: u32 = 10;

fn turn_status(status: &str) -> Result<TurnStatus, Refusal> {
    match status {
        "" | "all" => Ok(TurnStatus::Any),
        "open" => Ok(TurnStatus::Open),
        "terminal" => Ok(TurnStatus::Terminal),
        other => Err(Refusal::BadRequest(format!("status {other:?} is not one of open, terminal, all"))),
    }
}

fn run_kind(kind: &str) -> Result<Option<RunKind>, Refusal> {
    match kind {
        "" | "all" => Ok(None),
        code => RunKind::from_code(code).map(Some).ok_or_else(|| {
            let codes: Vec<&str> = RunKind::ALL.iter().map(|k| k.code()).collect();
            Refusal::BadRequest(format!("kind {code:?} is not one of all, {}", codes.join(", ")))
        }),
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

fn activity_query(q: &TurnsQuery, ns: &str, stalled_before: UnixNanos) -> Result<ActivityQuery, Refusal> {
    let after = match q.after.split_once(':') {
        Some((at, id)) => {
            Some((at.parse().map_err(|_| Refusal::BadRequest("after is not a page cursor".into()))?, id.to_owned()))
        }
        None if q.after.is_empty() => None,
        None => return Err(Refusal::BadRequest("after is not a page cursor".into())),
    };
    let text = |t: &str| Some(t.to_owned()).filter(|t| !t.is_empty());
    let stalled = !q.stalled.is_empty();
    Ok(ActivityQuery {
        namespace: ns.to_owned(),
        status: turn_status(&q.status)?,
        stalled_before: stalled.then_some(stalled_before),
        kind: run_kind(&q.kind)?,
        turn_id: None,
        oldest_first: stalled,
        session_id: text(&q.session),
        from: time_filter("from", &q.from)?,
        to: time_filter("to", &q.to)?,
        prefix: text(&q.prefix),
        after,
        limit: PAGE_ROWS,
    })
}

/// A run's row: its link, kind, what it holds and its state.
pub(super) fn turn_row(ns: &str, run: Run, stalled_before: UnixNanos) -> TurnView {
    let mut holds = Vec::new();
    if let Some(log) = &run.log {
        holds.push(view::count(log.checkpoint_count, "checkpoint"));
    }
    if run.records > 0 {
        holds.push(view::count(run.records, "record"));
    }
    if run.waits > 0 {
        holds.push(format!("{} ({} pending)", view::count(run.waits, "wait"), run.waits_pending));
    }
    if run.interrupted() {
        holds.push("interrupt pending".to_owned());
    }
    TurnView {
        link: format!("/turn?{}", query(&[("ns", ns), ("id", &run.turn_id)])),
        kind: run.kind.label(),
        holds: holds.join(", "),
        last_phase: run.log.as_ref().map(|l| l.last_phase.clone()).unwrap_or_default(),
        session: run.log.as_ref().map(|l| l.session_id.clone()).unwrap_or_default(),
        last_activity: view::time(run.last_activity),
        state: run.state(stalled_before),
        run,
    }
}

pub async fn turns(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<TurnsQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let stalled_before = now() - console.settings().stalled_after.as_nanos() as i64;
    let asked = activity_query(&q, &ns, stalled_before)?;
    let (runs, more) = reads::runs(console.store()?, &asked).await?;
    let next = runs.last().filter(|_| more).map(|last| next_link(&q, &ns, last));
    let unfiltered = asked == every_run(&ns, PAGE_ROWS);
    let stalled = if unfiltered {
        let shown = ActivityQuery { limit: STALLED_SHOWN, ..activity_query(&stalled_query(&ns), &ns, stalled_before)? };
        reads::runs(console.store()?, &shown).await?.0
    } else {
        Vec::new()
    };
    let page = TurnsPage {
        frame: console.frame(&entered, "Turns".to_owned(), "turns", &ns, &q.notice).await?,
        kinds: RunKind::ALL.iter().map(|k| (k.code(), k.label())).collect(),
        rows: runs.into_iter().map(|run| turn_row(&ns, run, stalled_before)).collect(),
        stalled: stalled.into_iter().map(|run| turn_row(&ns, run, stalled_before)).collect(),
        stalled_link: format!("/turns?{}", query(&[("ns", &ns), ("stalled", "1")])),
        oldest_first: asked.oldest_first,
        next,
        q,
    };
    Ok(answer(&entered, page))
}

/// Every run of `ns`, newest activity first, `limit` of them.
pub(super) fn every_run(ns: &str, limit: u32) -> ActivityQuery {
    ActivityQuery {
        namespace: ns.to_owned(),
        status: TurnStatus::Any,
        stalled_before: None,
        kind: None,
        turn_id: None,
        oldest_first: false,
        session_id: None,
        from: None,
        to: None,
        prefix: None,
        after: None,
        limit,
    }
}

fn stalled_query(ns: &str) -> TurnsQuery {
    TurnsQuery { ns: ns.to_owned(), stalled: "1".to_owned(), ..TurnsQuery::default() }
}

fn next_link(q: &TurnsQuery, ns: &str, last: &Run) -> String {
    let cursor = format!("{}:{}", last.last_activity, last.turn_id);
    format!(
        "/turns?{}",
        query(&[
            ("ns", ns),
            ("status", &q.status),
            ("kind", &q.kind),
            ("stalled", &q.stalled),
            ("session", &q.session),
            ("from", &q.from),
            ("to", &q.to),
            ("prefix", &q.prefix),
            ("after", &cursor)
        ])
    )
}
