//! A turn as a timeline: its checkpoints by client time with long gaps
//! marked, each one's commit time against its timestamp (clock skew), sizes
//! and versions, a state in the JSON viewer (and whole as a download), its
//! records with a LangGraph thread drawn as its checkpoint tree, its keys
//! and its waits.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct TurnQuery {
    pub(super) ns: String,
    pub(super) id: String,
    pub(super) before: String,
    pub(super) at: String,
}

struct MarkRow {
    pub(super) mark: Mark,
    pub(super) client: String,
    pub(super) committed: String,
    pub(super) skew: String,
    pub(super) skewed: bool,
    pub(super) size: String,
    /// The gap before this checkpoint, when longer than the stalled threshold.
    pub(super) gap: Option<String>,
    pub(super) link: String,
    pub(super) selected: bool,
    pub(super) phase_class: usize,
}

struct Dot {
    pub(super) x: f64,
    pub(super) class: usize,
    pub(super) title: String,
}

struct Gap {
    pub(super) x: f64,
    pub(super) width: f64,
}

struct Timeline {
    pub(super) dots: Vec<Dot>,
    pub(super) gaps: Vec<Gap>,
    pub(super) phases: Vec<(String, usize)>,
    pub(super) start: String,
    pub(super) end: String,
}

struct StateView {
    pub(super) seq: i64,
    pub(super) phase: String,
    pub(super) bytes: String,
    pub(super) viewer: Option<String>,
    pub(super) text: String,
    pub(super) cut_short: bool,
    pub(super) download: String,
}

struct RecordRow {
    pub(super) record: RecordMark,
    pub(super) size: String,
    pub(super) recorded_at: String,
    pub(super) metadata: String,
}

#[derive(Template)]
#[template(path = "console/turn.html")]
struct TurnPage {
    pub(super) frame: Frame,
    pub(super) turn_id: String,
    pub(super) summary: Option<TurnSummary>,
    pub(super) first: String,
    pub(super) last: String,
    pub(super) rows: Vec<MarkRow>,
    pub(super) timeline: Timeline,
    pub(super) older: Option<String>,
    pub(super) newer: Option<String>,
    pub(super) state: Option<StateView>,
    pub(super) records: Vec<RecordRow>,
    pub(super) tree: Option<String>,
    pub(super) keys: Vec<KeyRow>,
    pub(super) waits: Vec<WaitRow>,
    pub(super) may_act: bool,
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

/// The colour class of `phase` among `classes`.
fn class_of(classes: &[(String, usize)], phase: &str) -> usize {
    classes.iter().find(|(p, _)| p == phase).map_or(0, |(_, c)| *c)
}

fn mark_rows(marks: Vec<Mark>, stalled_after: i64, base: &str, selected: Option<i64>) -> Vec<MarkRow> {
    let classes = view::phase_classes(marks.iter().rev().map(|m| m.phase.as_str()));
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
            phase_class: class_of(&classes, &mark.phase),
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
    let mut phases = view::phase_classes(marks.iter().rev().map(|m| m.phase.as_str()));
    let dots = marks
        .iter()
        .map(|m| Dot {
            x: x(m.timestamp),
            class: class_of(&phases, &m.phase),
            title: format!("{} at {}", m.phase, view::time(m.timestamp)),
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
    pub(super) ns: String,
    pub(super) id: String,
    pub(super) seq: String,
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
