//! The overview: per namespace, the counts of open, stalled and terminal
//! turns, of keys in progress, expired and failed, and of pending waits and
//! timers; the last hour's writes and failures; the store's health and the
//! write queue.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct OverviewQuery {
    pub(super) ns: String,
    pub(super) notice: String,
}

struct NamespaceCounts {
    pub(super) ns: String,
    pub(super) counts: Overview,
}

#[derive(Template)]
#[template(path = "console/overview.html")]
struct OverviewPage {
    pub(super) frame: Frame,
    pub(super) namespaces: Vec<NamespaceCounts>,
    pub(super) writes_chart: String,
    pub(super) errors_chart: String,
    pub(super) store_up: bool,
    pub(super) queue_depth: usize,
    pub(super) stalled_after: String,
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
