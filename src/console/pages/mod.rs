//! The console's pages. Each reads its filters from the query string, so a
//! URL is a saved view; each list is one bounded page from an index, with a
//! cursor to the next. The namespace is checked against the viewer's grants
//! before anything of it is read.

mod keys;
mod memory;
mod overview;
mod signin;
mod turn;
mod turns;
mod waits;

pub use keys::keys;
pub use memory::memory;
pub use overview::overview;
pub use signin::{sign_in, sign_in_page, sign_out};
pub use turn::{state, turn};
pub use turns::turns;
pub use waits::waits;

use keys::{KeyView, key_rows};
use waits::{WaitView, wait_row};

use askama::Template;
use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::view::{self, TreeNode};
use super::{Console, Entered, Refusal, html, payload, session};
use crate::domain::clock;
use crate::domain::console::{
    ActivityQuery, KeyFilter, KeyQuery, Mark, MarkQuery, Overview, RecordMark, Run, RunKind, WaitFilter, WaitPageQuery,
};
use crate::domain::keys::{KeyRecord, KeyState};
use crate::domain::model::{TurnStatus, TurnSummary, UnixNanos};
use crate::domain::waits::{Wait, WaitStatus};
use crate::store::console as reads;

/// Rows on a page of turns, keys, waits or memory items.
const PAGE_ROWS: u32 = 50;
/// Checkpoints on a page of a turn's timeline.
const MARKS_PER_PAGE: u32 = 200;
/// Nodes the JSON viewer shows before it says "download the rest".
const JSON_NODES_MAX: usize = 2000;
/// Records the turn page lists.
const RECORDS_MAX: u32 = 500;
/// A LangGraph thread's newest writes the turn page reads, with payloads.
const WRITES_SHOWN: u32 = 100;
/// A session's newest items the turn page shows.
const ITEMS_SHOWN: u32 = 200;
/// The bytes of a payload the turn page reads to show it.
const PAYLOAD_BYTES_SHOWN: u32 = 16 * 1024;

/// A query-string value, percent-encoded.
pub use crate::domain::percent::encode;

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
    /// The namespace the navigation's links keep: the page's, or on the
    /// overview of every namespace the first the viewer may read.
    pub nav_ns: String,
    pub namespaces: Vec<String>,
    pub csrf: String,
    pub signed_in: bool,
    pub who: String,
    pub notice: Option<String>,
}

/// What an action's `notice` code says on the page it returns to; a
/// deleted turn's code carries what went, `deleted:<checkpoints>:<records>:<waits>`.
fn notice(code: &str) -> Option<String> {
    if let Some(counts) = code.strip_prefix("deleted:") {
        let n: Vec<u64> = counts.split(':').map_while(|n| n.parse().ok()).collect();
        let [checkpoints, records, waits] = n[..] else { return None };
        return Some(format!(
            "The turn was deleted with everything it held: {}, {} and {}.",
            view::count(checkpoints, "checkpoint"),
            view::count(records, "record"),
            view::count(waits, "wait")
        ));
    }
    Some(
        match code {
            "released" => "The key was released: it may be begun again.",
            "failed" => "The key was failed permanently.",
            "signalled" => "The wait was signalled.",
            "cancelled" => "The wait was cancelled.",
            "unchanged" => "Nothing changed: it was already settled.",
            _ => return None,
        }
        .to_owned(),
    )
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
        let namespaces = self.namespaces(&entered.viewer).await?;
        let nav_ns = match namespaces.first() {
            Some(first) if ns.is_empty() && entered.viewer.role_in("").is_none() => first.clone(),
            _ => ns.to_owned(),
        };
        Ok(Frame {
            title,
            section,
            ns: ns.to_owned(),
            nav_ns,
            namespaces,
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
