//! A namespace's memory (MemoryService): the paths under the path shown,
//! one label deeper, to walk down; and the items under it that match a
//! filter, in the order they were first put, a page at a time, each with
//! its times and its value in the JSON viewer. Read through the store as
//! SearchItems and ListPaths read, so expired items never show.

use super::*;
use crate::domain::memory::filter::Filter;
use crate::domain::memory::search::Hit;
use crate::domain::memory::{End, ItemsQuery, Path, PathMatch, PathsQuery};

/// Paths the page lists below the one shown.
const PATHS_SHOWN: u32 = 200;
/// Nodes of a value's JSON viewer.
const VALUE_NODES_MAX: usize = 400;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct MemoryQuery {
    pub(super) ns: String,
    /// Labels joined by `/`; empty for every path.
    pub(super) path: String,
    pub(super) filter: String,
    pub(super) offset: u32,
    pub(super) notice: String,
}

pub(super) struct PathLink {
    pub(super) path: String,
    pub(super) href: String,
}

pub(super) struct ItemView {
    pub(super) path: String,
    pub(super) key: String,
    pub(super) created: String,
    pub(super) updated: String,
    pub(super) updated_at: String,
    pub(super) expires: String,
    pub(super) bytes: usize,
    pub(super) viewer: Option<String>,
    pub(super) text: String,
}

#[derive(Template)]
#[template(path = "console/memory.html")]
struct MemoryPage {
    pub(super) frame: Frame,
    pub(super) q: MemoryQuery,
    pub(super) up: Option<String>,
    pub(super) paths: Vec<PathLink>,
    pub(super) items: Vec<ItemView>,
    pub(super) next: Option<String>,
}

fn labels(path: &str) -> Vec<String> {
    path.split('/').filter(|label| !label.is_empty()).map(str::to_owned).collect()
}

fn item_view(hit: Hit) -> ItemView {
    let item = hit.item;
    let (viewer, truncated) = match view::json_viewer(item.value.as_bytes(), VALUE_NODES_MAX) {
        Some((html, truncated)) => (Some(html), truncated),
        None => (None, false),
    };
    ItemView {
        path: item.path.labels().join("/"),
        key: item.key,
        created: view::time(item.created_at),
        updated: view::time(item.updated_at),
        updated_at: view::iso(item.updated_at),
        expires: item.expires_at.map(view::time).unwrap_or_else(|| "never".to_owned()),
        bytes: item.value.len(),
        viewer,
        text: if truncated { "(cut: download it with stepwell memory show)".to_owned() } else { String::new() },
    }
}

/// The paths one label below `path` that hold items.
async fn child_paths(console: &Console, ns: &str, path: &[String]) -> Result<Vec<PathLink>, Refusal> {
    let matches = match path.is_empty() {
        true => Vec::new(),
        false => vec![PathMatch { end: End::Prefix, labels: path.to_vec() }],
    };
    let query = PathsQuery {
        namespace: ns.to_owned(),
        matches,
        max_depth: Some(path.len() + 1),
        limit: PATHS_SHOWN,
        offset: 0,
    };
    let stored = console.store()?.item_paths(ns, &query.fixed_prefix()).await?;
    let links = query
        .page(stored)
        .into_iter()
        .filter(|labels| labels.len() > path.len())
        .map(|labels| {
            let joined = labels.join("/");
            PathLink { href: format!("/memory?{}", super::query(&[("ns", ns), ("path", &joined)])), path: joined }
        })
        .collect();
    Ok(links)
}

pub async fn memory(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Query(q): Query<MemoryQuery>,
) -> Result<Response, Refusal> {
    let entered = console.enter(&headers, &uri)?;
    let ns = console.namespace(&entered.viewer, &q.ns)?;
    let path = labels(&q.path);
    let filter = match q.filter.trim() {
        "" => None,
        text => Some(Filter::parse(text).map_err(|why| Refusal::BadRequest(format!("filter {why}")))?),
    };
    let search = ItemsQuery {
        namespace: ns.clone(),
        prefix: Path::of(&path),
        filter,
        query: None,
        limit: PAGE_ROWS + 1,
        offset: q.offset,
    };
    let mut hits = console.store()?.search_items(&search).await?.hits;
    let more = hits.len() > PAGE_ROWS as usize;
    hits.truncate(PAGE_ROWS as usize);
    let next = more.then(|| {
        let offset = (q.offset + PAGE_ROWS).to_string();
        format!(
            "/memory?{}",
            super::query(&[("ns", &ns), ("path", &q.path), ("filter", &q.filter), ("offset", &offset)])
        )
    });
    let up = (!path.is_empty()).then(|| {
        let parent = path[..path.len() - 1].join("/");
        format!("/memory?{}", super::query(&[("ns", &ns), ("path", &parent)]))
    });
    let paths = child_paths(&console, &ns, &path).await?;
    let items = hits.into_iter().map(item_view).collect();
    let title = if path.is_empty() { "Memory".to_owned() } else { format!("Memory: {}", path.join("/")) };
    let frame = console.frame(&entered, title, "memory", &ns, &q.notice).await?;
    Ok(answer(&entered, MemoryPage { frame, q, up, paths, items, next }))
}
