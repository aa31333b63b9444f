//! The console's pages. Each reads its filters from the query string, so a
//! URL is a saved view; each list is one bounded page from an index, with a
//! cursor to the next. The namespace is checked against the viewer's grants
//! before anything of it is read.

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::view::{self, TreeNode};
use super::{Console, Entered, Refusal, html, session};
use crate::domain::clock;
use crate::domain::console::{
    ActivityQuery, KeyFilter, KeyQuery, Mark, MarkQuery, Overview, RecordMark, WaitFilter, WaitPageQuery,
};
use crate::domain::keys::{KeyRecord, KeyState};
use crate::domain::model::{TurnStatus, TurnSummary, UnixNanos};
use crate::domain::waits::{Wait, WaitStatus};
use crate::store::console as reads;

/// Rows on a page of turns, keys or waits.
const PAGE_ROWS: u32 = 50;
/// Checkpoints on a page of a turn's timeline.
const MARKS_PER_PAGE: u32 = 200;
/// Nodes the JSON viewer shows before it says "download the rest".
const JSON_NODES_MAX: usize = 2000;
/// Records the turn page lists.
const RECORDS_MAX: u32 = 500;

/// A query-string value, percent-encoded.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A query string from its pairs, leaving out the empty ones.
fn query(pairs: &[(&str, &str)]) -> String {
    let kept: Vec<String> =
        pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| format!("{k}={}", encode(v))).collect();
    kept.join("&")
}

/// What every page's frame shows: the navigation, the namespace picker,
/// the sign-out form, the notice.
pub struct Frame {
    pub title: String,
    pub section: &'static str,
    pub ns: String,
    pub namespaces: Vec<String>,
    pub csrf: String,
    pub signed_in: bool,
    pub who: String,
    pub notice: Option<&'static str>,
}

/// What an action's `notice` code says on the page it returns to.
fn notice(code: &str) -> Option<&'static str> {
    Some(match code {
        "released" => "The key was released: it may be begun again.",
        "failed" => "The key was failed permanently.",
        "signalled" => "The wait was signalled.",
        "cancelled" => "The wait was cancelled.",
        "deleted" => "The turn was deleted.",
        "unchanged" => "Nothing changed: it was already settled.",
        _ => return None,
    })
}

impl Console {
    async fn frame(
        &self,
        entered: &Entered,
        title: String,
        section: &'static str,
        ns: &str,
        code: &str,
    ) -> Result<Frame, Refusal> {
        Ok(Frame {
            title,
            section,
            ns: ns.to_owned(),
            namespaces: self.namespaces(&entered.viewer).await?,
            csrf: entered.viewer.csrf.clone(),
            signed_in: entered.viewer.principal.is_some(),
            who: entered.viewer.name().to_owned(),
            notice: notice(code),
        })
    }
}

/// A page's answer, with the new session's cookie if it got one.
fn answer(entered: &Entered, page: impl Template) -> Response {
    let mut response = html(page.render());
    if let Some(cookie) = &entered.set_cookie
        && let Ok(value) = cookie.parse()
    {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}

fn now() -> UnixNanos {
    clock::system_now()
}

// ---------------------------------------------------------------- overview

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct OverviewQuery {
    ns: String,
    notice: String,
}

struct NamespaceCounts {
    ns: String,
    counts: Overview,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    frame: Frame,
    namespaces: Vec<NamespaceCounts>,
    writes_chart: String,
    errors_chart: String,
    store_up: bool,
    queue_depth: usize,
    stalled_after: String,
}

pub async fn overview(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<OverviewQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let shown = if q.ns.is_empty() {
        console.namespaces(&entered.viewer).await?
    } else {
        vec![console.namespace(&entered.viewer, &q.ns)?]
    };
    let stalled_before = now() - console.settings().stalled_after.as_nanos() as i64;
    let mut namespaces = Vec::with_capacity(shown.len());
    for ns in shown {
        let counts = reads::overview(console.store()?, &ns, stalled_before).await?;
        namespaces.push(NamespaceCounts { ns, counts });
    }
    let hour = console.shared().metrics().activity.last_hour(now().div_euclid(60_000_000_000));
    let state = console.shared().metrics_state().await;
    let frame = console.frame(&entered, "Overview".to_owned(), "overview", &q.ns, &q.notice).await?;
    let page = OverviewPage {
        frame,
        namespaces,
        writes_chart: view::bar_chart(
            "Writes per minute, last hour",
            &hour.iter().map(|m| m.0).collect::<Vec<_>>(),
            "writes",
        ),
        errors_chart: view::bar_chart(
            "Failed requests per minute, last hour",
            &hour.iter().map(|m| m.1).collect::<Vec<_>>(),
            "errors",
        ),
        store_up: console.shared().ready(),
        queue_depth: state.queue_depth,
        stalled_after: view::duration(console.settings().stalled_after.as_nanos() as i64),
    };
    Ok(answer(&entered, page))
}

// ------------------------------------------------------------------- turns

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TurnsQuery {
    ns: String,
    status: String,
    stalled: String,
    session: String,
    from: String,
    to: String,
    prefix: String,
    after: String,
    notice: String,
}

struct TurnRow {
    link: String,
    turn: TurnSummary,
    last_activity: String,
    state: &'static str,
}

#[derive(Template)]
#[template(path = "console/turns.html")]
struct TurnsPage {
    frame: Frame,
    q: TurnsQuery,
    rows: Vec<TurnRow>,
    next: Option<String>,
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

// -------------------------------------------------------------------- turn

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TurnQuery {
    ns: String,
    id: String,
    before: String,
    at: String,
}

struct MarkRow {
    mark: Mark,
    client: String,
    committed: String,
    skew: String,
    skewed: bool,
    size: String,
    /// The gap before this checkpoint, when longer than the stalled threshold.
    gap: Option<String>,
    link: String,
    selected: bool,
    phase_class: usize,
}

struct Dot {
    x: f64,
    class: usize,
    title: String,
}

struct Gap {
    x: f64,
    width: f64,
}

struct Timeline {
    dots: Vec<Dot>,
    gaps: Vec<Gap>,
    phases: Vec<(String, usize)>,
    start: String,
    end: String,
}

struct StateView {
    seq: i64,
    phase: String,
    bytes: String,
    viewer: Option<String>,
    text: String,
    cut_short: bool,
    download: String,
}

struct RecordRow {
    record: RecordMark,
    size: String,
    recorded_at: String,
    metadata: String,
}

#[derive(Template)]
#[template(path = "console/turn.html")]
struct TurnPage {
    frame: Frame,
    turn_id: String,
    summary: Option<TurnSummary>,
    first: String,
    last: String,
    rows: Vec<MarkRow>,
    timeline: Timeline,
    older: Option<String>,
    newer: Option<String>,
    state: Option<StateView>,
    records: Vec<RecordRow>,
    tree: Option<String>,
    keys: Vec<KeyRow>,
    waits: Vec<WaitRow>,
    may_act: bool,
}

pub async fn turn(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<TurnQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    if q.id.is_empty() {
        return Err(Refusal::BadRequest("id is required: the turn to show".to_owned()));
    }
    let store = console.store()?;
    let summary = store.turn(&ns, &q.id).await?;
    let before = match q.before.split_once(':') {
        Some((ts, seq)) => Some((ts.parse().map_err(|_| bad_cursor())?, seq.parse().map_err(|_| bad_cursor())?)),
        None if q.before.is_empty() => None,
        None => return Err(bad_cursor()),
    };
    let mark_query = MarkQuery { namespace: ns.clone(), turn_id: q.id.clone(), before, limit: MARKS_PER_PAGE };
    let (marks, more) = reads::marks(store, &mark_query).await?;
    let records = reads::records(store, &ns, &q.id, RECORDS_MAX).await?;
    let keys = key_rows(
        reads::keys(
            store,
            &KeyQuery {
                namespace: ns.clone(),
                filter: KeyFilter::All,
                prefix: Some(q.id.clone()),
                after: None,
                limit: PAGE_ROWS,
            },
        )
        .await?,
    );
    let waits = reads::waits(
        store,
        &WaitPageQuery {
            namespace: ns.clone(),
            filter: WaitFilter::All,
            turn_id: Some(q.id.clone()),
            after: None,
            limit: PAGE_ROWS,
        },
    )
    .await?
    .0;
    if summary.is_none() && marks.is_empty() && records.is_empty() && waits.is_empty() && keys.is_empty() {
        return Err(Refusal::NotFound("The namespace holds no turn of that id.".to_owned()));
    }
    let selected = q.at.parse::<i64>().ok().or(marks.first().map(|m| m.seq));
    let state = match marks.iter().find(|m| Some(m.seq) == selected) {
        Some(mark) => state_view(&console, &ns, &q.id, mark).await?,
        None => None,
    };
    let page = turn_page(&console, &entered, &q, &ns, (summary, marks, more), state, records, keys, waits).await?;
    Ok(answer(&entered, page))
}

fn bad_cursor() -> Refusal {
    Refusal::BadRequest("before is not a page cursor".to_owned())
}

#[allow(clippy::too_many_arguments)]
async fn turn_page(
    console: &Console,
    entered: &Entered,
    q: &TurnQuery,
    ns: &str,
    (summary, marks, more): (Option<TurnSummary>, Vec<Mark>, bool),
    state: Option<StateView>,
    records: Vec<RecordMark>,
    keys: Vec<KeyRow>,
    waits: Vec<Wait>,
) -> Result<TurnPage, Refusal> {
    let stalled_after = console.settings().stalled_after.as_nanos() as i64;
    let base = query(&[("ns", ns), ("id", &q.id)]);
    let older = marks.last().filter(|_| more).map(|m| format!("/turn?{base}&before={}:{}", m.timestamp, m.seq));
    let newer = (!q.before.is_empty()).then(|| format!("/turn?{base}"));
    let timeline = timeline(&marks, stalled_after);
    let rows = mark_rows(
        marks,
        stalled_after,
        &format!(
            "/turn?{base}{}",
            if q.before.is_empty() { String::new() } else { format!("&before={}", encode(&q.before)) }
        ),
        state.as_ref().map(|s| s.seq),
    );
    let tree = checkpoint_tree(&records);
    let records = records
        .into_iter()
        .map(|record| RecordRow {
            size: view::size(record.bytes),
            recorded_at: view::time(record.recorded_at),
            metadata: record.metadata.as_deref().map(|m| view::cut(m, 200)).unwrap_or_default(),
            record,
        })
        .collect();
    let (first, last) = summary
        .as_ref()
        .map_or((String::new(), String::new()), |s| (view::time(s.first_timestamp), view::time(s.last_timestamp)));
    Ok(TurnPage {
        frame: console.frame(entered, format!("Turn {}", view::cut(&q.id, 60)), "turns", ns, "").await?,
        turn_id: q.id.clone(),
        summary,
        first,
        last,
        rows,
        timeline,
        older,
        newer,
        state,
        records,
        tree,
        keys,
        waits: waits.into_iter().map(|w| wait_row(w, now())).collect(),
        may_act: console.may_act(&entered.viewer, ns),
    })
}

/// Skew past this is marked on the timeline: the client's clock and the
/// sidecar's disagree by more than a round trip could explain.
const SKEW_MARKED_NANOS: i64 = 1_000_000_000;

fn mark_rows(marks: Vec<Mark>, stalled_after: i64, base: &str, selected: Option<i64>) -> Vec<MarkRow> {
    let mut rows: Vec<MarkRow> = Vec::with_capacity(marks.len());
    // Newest first: the gap before a checkpoint is to the next row's (older) one.
    let older: Vec<Option<UnixNanos>> = marks.iter().skip(1).map(|m| Some(m.timestamp)).chain([None]).collect();
    for (mark, older) in marks.into_iter().zip(older) {
        let gap = older.map(|o| mark.timestamp - o).filter(|&g| g > stalled_after).map(view::duration);
        let skew_nanos = mark.recorded_at - mark.timestamp;
        rows.push(MarkRow {
            client: view::time(mark.timestamp),
            committed: view::time(mark.recorded_at),
            skew: view::skew(mark.timestamp, mark.recorded_at),
            skewed: skew_nanos.abs() > SKEW_MARKED_NANOS,
            size: view::size(mark.state_bytes),
            gap,
            link: format!("{base}&at={}#state", mark.seq),
            selected: Some(mark.seq) == selected,
            phase_class: view::phase_class(&mark.phase),
            mark,
        });
    }
    rows
}

fn timeline(marks: &[Mark], stalled_after: i64) -> Timeline {
    let (Some(newest), Some(oldest)) = (marks.first(), marks.last()) else {
        return Timeline { dots: vec![], gaps: vec![], phases: vec![], start: String::new(), end: String::new() };
    };
    let span = (newest.timestamp - oldest.timestamp).max(1) as f64;
    let x = |at: UnixNanos| 10.0 + (at - oldest.timestamp) as f64 / span * 780.0;
    let mut phases: Vec<(String, usize)> = Vec::new();
    let dots = marks
        .iter()
        .map(|m| {
            if !phases.iter().any(|(p, _)| *p == m.phase) {
                phases.push((m.phase.clone(), view::phase_class(&m.phase)));
            }
            Dot {
                x: x(m.timestamp),
                class: view::phase_class(&m.phase),
                title: format!("{} at {}", m.phase, view::time(m.timestamp)),
            }
        })
        .collect();
    let gaps = marks
        .windows(2)
        .filter(|pair| pair[0].timestamp - pair[1].timestamp > stalled_after)
        .map(|pair| Gap { x: x(pair[1].timestamp), width: x(pair[0].timestamp) - x(pair[1].timestamp) })
        .collect();
    phases.truncate(12);
    Timeline { dots, gaps, phases, start: view::time(oldest.timestamp), end: view::time(newest.timestamp) }
}

async fn state_view(console: &Console, ns: &str, turn_id: &str, mark: &Mark) -> Result<Option<StateView>, Refusal> {
    let Some(state) = reads::state(console.store()?, ns, turn_id, mark.seq).await? else { return Ok(None) };
    let viewer = view::json_viewer(&state, JSON_NODES_MAX);
    let cut_short = viewer.as_ref().is_some_and(|(_, cut)| *cut);
    Ok(Some(StateView {
        seq: mark.seq,
        phase: mark.phase.clone(),
        bytes: view::size(state.len() as u64),
        text: if viewer.is_none() { view::bytes_text(&state, 4096) } else { String::new() },
        viewer: viewer.map(|(html, _)| html),
        cut_short,
        download: format!("/turn/state?{}", query(&[("ns", ns), ("id", turn_id), ("seq", &mark.seq.to_string())])),
    }))
}

/// The LangGraph thread among a turn's records, as its checkpoint tree.
fn checkpoint_tree(records: &[RecordMark]) -> Option<String> {
    let nodes: Vec<TreeNode<'_>> = records
        .iter()
        .filter(|r| r.kind == "checkpoint")
        .map(|r| TreeNode { id: &r.id, parent: &r.parent_id, scope: &r.scope })
        .collect();
    (!nodes.is_empty()).then(|| view::checkpoint_tree(&nodes))
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct StateQuery {
    ns: String,
    id: String,
    seq: String,
}

/// A checkpoint's whole state, as a download.
pub async fn state(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<StateQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let seq: i64 = q.seq.parse().map_err(|_| Refusal::BadRequest("seq is not a checkpoint's number".into()))?;
    let state = reads::state(console.store()?, &ns, &q.id, seq)
        .await?
        .ok_or_else(|| Refusal::NotFound("The turn holds no such checkpoint.".to_owned()))?;
    let json = serde_json::from_slice::<serde::de::IgnoredAny>(&state).is_ok();
    let content_type = if json { "application/json" } else { "application/octet-stream" };
    let name = format!("attachment; filename=\"state-{seq}.{}\"", if json { "json" } else { "bin" });
    Ok(([(header::CONTENT_TYPE, content_type.to_owned()), (header::CONTENT_DISPOSITION, name)], state).into_response())
}

// -------------------------------------------------------------------- keys

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct KeysQuery {
    ns: String,
    state: String,
    prefix: String,
    after: String,
    notice: String,
}

pub struct KeyRow {
    record: KeyRecord,
    state: &'static str,
    leased: bool,
    expires: String,
    expires_at: String,
    expires_ms: i64,
    outcome: String,
}

fn key_rows(page: crate::domain::console::KeyPage) -> Vec<KeyRow> {
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
            KeyRow {
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
                record,
            }
        })
        .collect()
}

#[derive(Template)]
#[template(path = "console/keys.html")]
struct KeysPage {
    frame: Frame,
    q: KeysQuery,
    rows: Vec<KeyRow>,
    next: Option<String>,
    may_act: bool,
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
    let rows = key_rows(page);
    let may_act = console.may_act(&entered.viewer, &ns);
    let frame = console.frame(&entered, "Keys".to_owned(), "keys", &ns, &q.notice).await?;
    Ok(answer(&entered, KeysPage { frame, q, rows, next, may_act }))
}

// ------------------------------------------------------------------- waits

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct WaitsQuery {
    ns: String,
    status: String,
    turn: String,
    after_turn: String,
    after_name: String,
    notice: String,
}

pub struct WaitRow {
    wait: Wait,
    status: &'static str,
    pending: bool,
    due: String,
    due_at: String,
    due_ms: i64,
    created: String,
    settled: String,
    payload: String,
    metadata: String,
}

fn wait_row(wait: Wait, now: UnixNanos) -> WaitRow {
    let due = wait.due_at();
    WaitRow {
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
        wait,
    }
}

#[derive(Template)]
#[template(path = "console/waits.html")]
struct WaitsPage {
    frame: Frame,
    q: WaitsQuery,
    rows: Vec<WaitRow>,
    next: Option<String>,
    may_act: bool,
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

// ----------------------------------------------------------------- sign-in

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct SignInForm {
    token: String,
    next: String,
}

#[derive(Template)]
#[template(path = "console/signin.html")]
struct SignInPage {
    next: String,
    failed: bool,
}

/// Only a path of this console is somewhere to go back to after signing in.
fn safe_next(next: &str) -> String {
    let local = next.starts_with('/') && !next.starts_with("//") && !next.contains('\\');
    if local { next.to_owned() } else { "/".to_owned() }
}

pub async fn sign_in_page(State(console): State<Console>, Query(q): Query<SignInForm>) -> Response {
    if console.shared().authenticator().is_none() {
        return Redirect::to("/").into_response();
    }
    html(SignInPage { next: safe_next(&q.next), failed: false }.render())
}

pub async fn sign_in(State(console): State<Console>, Form(form): Form<SignInForm>) -> Response {
    let next = safe_next(&form.next);
    let Some(authenticator) = console.shared().authenticator() else { return Redirect::to(&next).into_response() };
    match authenticator.sign_in(&form.token) {
        Some((principal, hash)) => {
            let (id, _) = console.0.sessions.start(Some(hash), std::time::Instant::now());
            tracing::info!(target: crate::auth::AUDIT_TARGET, principal = %principal.id, via = "console", action = "sign-in", outcome = "ok", "audit");
            let cookie = session::set_cookie(&id, console.0.sessions.ttl(), console.settings().tls);
            ([(header::SET_COOKIE, cookie)], Redirect::to(&next)).into_response()
        }
        None => {
            tracing::warn!(target: crate::auth::AUDIT_TARGET, via = "console", action = "sign-in", outcome = "UNKNOWN_TOKEN", "audit");
            (StatusCode::UNAUTHORIZED, html(SignInPage { next, failed: true }.render())).into_response()
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct CsrfForm {
    csrf: String,
}

pub async fn sign_out(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<CsrfForm>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    if !entered.viewer.csrf_matches(&form.csrf) {
        return Err(Refusal::Forbidden(
            "The form's CSRF token is missing or wrong: reload the page and try again.".into(),
        ));
    }
    console.0.sessions.end(&entered.viewer.session_id);
    let cookie = session::clear_cookie(console.settings().tls);
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/signin")).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_local_path_is_a_place_to_return_to() {
        assert_eq!(safe_next("/turn?ns=a&id=b"), "/turn?ns=a&id=b");
        for elsewhere in ["https://example.org/", "//example.org", "/\\example.org", "javascript:alert(1)", ""] {
            assert_eq!(safe_next(elsewhere), "/", "{elsewhere}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded_and_empty_ones_left_out() {
        assert_eq!(query(&[("ns", "a"), ("id", "<x> &y=\"1\""), ("after", "")]), "ns=a&id=%3Cx%3E%20%26y%3D%221%22");
    }
}
