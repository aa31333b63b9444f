//! A turn as a timeline: what kind of run it is and whether work is
//! pending in it, its checkpoints by client time with long gaps marked,
//! each one's commit time against its timestamp (clock skew), sizes and
//! versions, a state in the JSON viewer (and whole as a download), its
//! records with a LangGraph thread drawn as its checkpoint tree (each
//! checkpoint's step and pending writes, an interrupt's value decoded) and
//! an agent session's items in order, its keys and its waits.

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

/// A session's item: who, and what.
struct ItemRow {
    pub(super) who: String,
    pub(super) text: String,
    pub(super) recorded_at: String,
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
    /// What kind of run it is, what it holds and its state.
    pub(super) run: Option<super::turns::TurnView>,
    pub(super) items: Vec<ItemRow>,
    pub(super) first: String,
    pub(super) last: String,
    pub(super) rows: Vec<MarkRow>,
    pub(super) timeline: Timeline,
    pub(super) older: Option<String>,
    pub(super) newer: Option<String>,
    pub(super) state: Option<StateView>,
    pub(super) records: Vec<RecordRow>,
    pub(super) tree: Option<String>,
    pub(super) keys: Vec<KeyView>,
    pub(super) waits: Vec<WaitView>,
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
        &ns,
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
    let mut page = turn_page(&console, &entered, &q, &ns, (summary, marks, more), state, records, keys, waits).await?;
    lived(&console, &ns, &q.id, &mut page).await?;
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
    keys: Vec<KeyView>,
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
    let tree = None;
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
        run: None,
        items: Vec::new(),
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

/// What the run's records say: its row among the runs, a LangGraph
/// thread's tree with its pending writes, a session's items in order.
async fn lived(console: &Console, ns: &str, turn_id: &str, page: &mut TurnPage) -> Result<(), Refusal> {
    let store = console.store()?;
    let stalled_before = now() - console.settings().stalled_after.as_nanos() as i64;
    let one = ActivityQuery { namespace: ns.to_owned(), turn_id: Some(turn_id.to_owned()), ..turns::every_run(ns, 1) };
    let run = reads::runs(store, &one).await?.0.into_iter().next();
    page.run = run.map(|run| turns::turn_row(ns, run, stalled_before));
    let kind = page.run.as_ref().map(|row| row.run.kind);
    if kind == Some(RunKind::LangGraph) || page.records.iter().any(|r| r.record.kind == "checkpoint") {
        let writes = reads::payloads(store, ns, turn_id, &["write"], WRITES_SHOWN, PAYLOAD_BYTES_SHOWN).await?;
        page.tree = checkpoint_tree(&page.records, &writes);
    }
    let kinds: &[&str] = match kind {
        Some(RunKind::Agents) => &["agent-item"],
        Some(RunKind::Adk) => &["adk-event"],
        _ => return Ok(()),
    };
    let items = reads::payloads(store, ns, turn_id, kinds, ITEMS_SHOWN, PAYLOAD_BYTES_SHOWN).await?;
    page.items = items
        .into_iter()
        .map(|(record, payload)| {
            let (who, text) = payload::item(&record.content_type, &payload, 400);
            ItemRow { who, text, recorded_at: view::time(record.recorded_at) }
        })
        .collect();
    Ok(())
}

/// A write's id ends in its index + 2^31, ten digits: -3 is an interrupt.
fn is_interrupt(write_id: &str) -> bool {
    write_id.ends_with(&((1i64 << 31) - 3).to_string())
}

/// The LangGraph thread among a turn's records, as its checkpoint tree:
/// each checkpoint with its step and source, and its pending writes by
/// task and channel, an interrupt's value decoded.
fn checkpoint_tree(records: &[RecordRow], writes: &[(RecordMark, Vec<u8>)]) -> Option<String> {
    let nodes: Vec<TreeNode<'_>> = records
        .iter()
        .map(|row| &row.record)
        .filter(|r| r.kind == "checkpoint")
        .map(|r| TreeNode {
            id: &r.id,
            parent: &r.parent_id,
            scope: &r.scope,
            note: checkpoint_note(r.metadata.as_deref()),
            writes: writes
                .iter()
                .filter(|(w, _)| w.parent_id == r.id && w.scope == r.scope)
                .map(|(w, payload)| write_line(w, payload))
                .collect(),
        })
        .collect();
    (!nodes.is_empty()).then(|| view::checkpoint_tree(&nodes))
}

/// "step 3, loop" from a checkpoint's metadata.
fn checkpoint_note(metadata: Option<&str>) -> String {
    let Some(meta) = metadata.and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok()) else {
        return String::new();
    };
    let step = meta.get("step").map(|s| format!("step {s}"));
    let source = meta.get("source").and_then(|s| s.as_str()).map(str::to_owned);
    [step, source].into_iter().flatten().collect::<Vec<_>>().join(", ")
}

/// One pending write: its task and channel, and for an interrupt its value.
fn write_line(write: &RecordMark, payload: &[u8]) -> (String, bool) {
    let meta = write.metadata.as_deref().and_then(|m| serde_json::from_str::<serde_json::Value>(m).ok());
    let field = |k: &str| meta.as_ref().and_then(|m| m.get(k)).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    let (channel, task) = (field("channel"), field("task_path"));
    if is_interrupt(&write.id) {
        let value = payload::line(&write.content_type, payload, 300);
        return (format!("interrupt pending (task {task}): {value}"), true);
    }
    (format!("write to {channel} (task {task}, {})", view::size(write.bytes)), false)
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
