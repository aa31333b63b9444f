//! The web console (`--console off|read|admin`), served by the admin
//! listener at `/`: what runs, what it waits on and what is stuck, for the
//! person on call.
//!
//! Server-rendered HTML from templates compiled with the binary
//! (`templates/console/`), a stylesheet and a little script embedded in it,
//! and a strict Content-Security-Policy on every answer: nothing loads from
//! elsewhere, no inline script or style runs, and every value a page shows
//! is escaped, since turn ids, phases, metadata and states are whatever
//! callers sent. Pages read the store through its trait (`store::console`
//! and the reads the API uses), writes go through the writer like any
//! request's, and each action writes an audit event.
//!
//! - `session`: sign-in, the session cookie, the CSRF token, what a viewer may see.
//! - `pages`: the pages, each with its filters in the query string.
//! - `actions`: release a key, signal or cancel a wait, delete a turn.
//! - `view`: how values read, the JSON viewer, the tree and the charts.

mod actions;
mod pages;
mod payload;
pub mod session;
pub mod view;

use std::sync::Arc;
use std::time::{Duration, Instant};

use askama::Template;
use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use self::session::{Sessions, Viewer};
use crate::api::{Shared, validate};
use crate::auth::AUDIT_TARGET;
use crate::domain::error::Error;

pub use crate::config::sections::ConsoleMode as Mode;

/// The console's settings: the configuration's, and whether the admin
/// listener serves TLS (the cookie is then Secure).
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: Mode,
    pub session_ttl: Duration,
    pub sessions_max: usize,
    /// An open turn without a checkpoint for longer than this is stalled.
    pub stalled_after: Duration,
    pub tls: bool,
}

impl Settings {
    pub fn new(config: &crate::config::sections::Console, tls: bool) -> Settings {
        Settings {
            mode: config.mode,
            session_ttl: config.session_ttl,
            sessions_max: config.sessions_max,
            stalled_after: config.stalled_after,
            tls,
        }
    }
}

struct Inner {
    shared: Arc<Shared>,
    settings: Settings,
    sessions: Sessions,
}

/// The console's state, shared by its handlers.
#[derive(Clone)]
pub struct Console(Arc<Inner>);

/// The policy every answer carries: only this origin's script, style and
/// forms; no frames, no plugins, no inline code.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

const STYLE: &str = include_str!("../../templates/console/console.css");
const SCRIPT: &str = include_str!("../../templates/console/console.js");

/// The console's routes, or none when it is off.
pub fn routes(shared: Arc<Shared>, settings: Settings) -> Option<Router> {
    if settings.mode == Mode::Off {
        return None;
    }
    let sessions = Sessions::new(settings.session_ttl, settings.sessions_max);
    let console = Console(Arc::new(Inner { shared, settings, sessions }));
    let router = Router::new()
        .route("/", get(pages::overview))
        .route("/turns", get(pages::turns))
        .route("/turn", get(pages::turn))
        .route("/turn/state", get(pages::state))
        .route("/keys", get(pages::keys))
        .route("/waits", get(pages::waits))
        .route("/memory", get(pages::memory))
        .route("/signin", get(pages::sign_in_page).post(pages::sign_in))
        .route("/signout", post(pages::sign_out))
        .route("/actions/release-key", post(actions::release_key))
        .route("/actions/delete-turn", post(actions::delete_turn))
        .route("/actions/signal-wait", post(actions::signal_wait))
        .route("/actions/cancel-wait", post(actions::cancel_wait))
        .route("/assets/console.css", get(|| async { asset("text/css; charset=utf-8", STYLE) }))
        .route("/assets/console.js", get(|| async { asset("text/javascript; charset=utf-8", SCRIPT) }))
        .with_state(console.clone())
        .layer(axum::middleware::from_fn_with_state(console, same_origin))
        .layer(axum::middleware::map_response(secure_headers));
    Some(router)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "max-age=300")], body).into_response()
}

/// The headers every console answer carries.
async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

/// A form posted from another site is refused before its handler runs.
/// This stops a sign-in forged from elsewhere (which no CSRF token can
/// guard, as there is no session yet), and backs the token up. A browser
/// says where a request comes from in `Sec-Fetch-Site`, which must be
/// `same-origin`; one that does not send it names the page's origin in
/// `Origin`, which must be this listener's (under `no-referrer` a browser
/// may send `Origin: null`, which then proves nothing and is refused). A
/// client that is no browser sends neither, and meets the CSRF token alone.
/// A refusal is audited, naming the session's principal if the request
/// carried a session's cookie (a browser sends none cross-site), else
/// `unknown`.
async fn same_origin(
    axum::extract::State(console): axum::extract::State<Console>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if request.method() == axum::http::Method::POST && !from_this_site(request.headers()) {
        let authenticator = console.shared().authenticator().map(Arc::as_ref);
        let viewer = console.0.sessions.viewer(request.headers(), authenticator, Instant::now());
        let principal = viewer.as_ref().map_or("unknown", Viewer::name);
        let path = request.uri().path();
        let action = path.strip_prefix("/actions/").unwrap_or(path.trim_start_matches('/'));
        tracing::warn!(target: AUDIT_TARGET, principal, via = "console", action, namespace = "", subject = "",
            outcome = "CROSS_ORIGIN", "audit");
        return Refusal::Forbidden("The form was sent from another site.".to_owned()).into_response();
    }
    next.run(request).await
}

fn from_this_site(headers: &HeaderMap) -> bool {
    let text = |name| headers.get(name).map(|v: &HeaderValue| v.to_str().unwrap_or_default());
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site")) {
        return site == "same-origin";
    }
    match text(header::ORIGIN) {
        None => true,
        Some(origin) => {
            let host = text(header::HOST).unwrap_or_default();
            let authority = origin.split_once("://").map_or("", |(_, rest)| rest);
            !host.is_empty() && authority == host
        }
    }
}

/// Why a console request gets no page.
#[derive(Debug)]
pub enum Refusal {
    /// No session: sign in first, then come back to this path.
    SignIn(String),
    Forbidden(String),
    NotFound(String),
    BadRequest(String),
    /// The thing changed since the page showed it.
    Conflict(String),
    Unavailable,
}

/// A message page: a refusal, or an action's outcome.
#[derive(Template)]
#[template(path = "console/message.html")]
struct MessagePage<'a> {
    title: &'a str,
    message: &'a str,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let (status, title, message) = match &self {
            Refusal::SignIn(next) => {
                let target = format!("/signin?next={}", pages::encode(next));
                return Redirect::to(&target).into_response();
            }
            Refusal::Forbidden(m) => (StatusCode::FORBIDDEN, "Not allowed", m.as_str()),
            Refusal::NotFound(m) => (StatusCode::NOT_FOUND, "Not found", m.as_str()),
            Refusal::BadRequest(m) => (StatusCode::BAD_REQUEST, "Bad request", m.as_str()),
            Refusal::Conflict(m) => (StatusCode::CONFLICT, "Changed meanwhile", m.as_str()),
            Refusal::Unavailable => {
                (StatusCode::SERVICE_UNAVAILABLE, "Store unavailable", "The store did not answer. Try again shortly.")
            }
        };
        (status, html(MessagePage { title, message }.render())).into_response()
    }
}

/// The console's one mapping of a failure to an answer: the caller's
/// mistakes name the field, the store's trouble is 503, and the rest is
/// logged and shown as unavailable too (the console never shows internals).
impl From<Error> for Refusal {
    fn from(error: Error) -> Refusal {
        match error {
            Error::InvalidArgument { field, description, .. } => Refusal::BadRequest(format!("{field} {description}")),
            Error::NotAcquired | Error::LeaseLost => {
                Refusal::Conflict("The key is no longer leased under that token: it changed meanwhile.".to_owned())
            }
            Error::WaitSettled(_) => Refusal::Conflict("The wait was settled meanwhile.".to_owned()),
            Error::KeyNotFound => Refusal::NotFound("There is no such key.".to_owned()),
            Error::WaitNotFound => Refusal::NotFound("There is no such wait.".to_owned()),
            other => {
                tracing::warn!(error = %other, "a console request failed");
                crate::api::status::log_store_trouble(&other);
                Refusal::Unavailable
            }
        }
    }
}

impl From<crate::store::Error> for Refusal {
    fn from(error: crate::store::Error) -> Refusal {
        Refusal::from(Error::from(error))
    }
}

/// A rendered template as an HTML answer; a template that fails to render
/// (it cannot, once compiled, short of running out of memory) is a 500.
fn html(rendered: askama::Result<String>) -> Response {
    match rendered {
        Ok(body) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        Err(error) => {
            tracing::error!(%error, "a console page did not render");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page did not render\n").into_response()
        }
    }
}

/// A request's viewer, and the cookie to set when it got a new session.
pub struct Entered {
    pub viewer: Viewer,
    pub set_cookie: Option<String>,
}

impl Console {
    fn shared(&self) -> &Shared {
        &self.0.shared
    }

    fn settings(&self) -> &Settings {
        &self.0.settings
    }

    fn store(&self) -> Result<&dyn crate::store::Store, Refusal> {
        self.0.shared.store().map_err(|_| Refusal::Unavailable)
    }

    /// Who the request comes from. With an auth file and no live session
    /// it is sent to sign in; without one it gets a session on the spot.
    fn enter(&self, headers: &HeaderMap, uri: &Uri) -> Result<Entered, Refusal> {
        let authenticator = self.shared().authenticator().map(Arc::as_ref);
        let now = Instant::now();
        if let Some(viewer) = self.0.sessions.viewer(headers, authenticator, now) {
            return Ok(Entered { viewer, set_cookie: None });
        }
        if authenticator.is_some() {
            return Err(Refusal::SignIn(uri.path_and_query().map_or("/", |p| p.as_str()).to_owned()));
        }
        let (session_id, csrf) = self.0.sessions.start(None, now);
        let set_cookie = Some(session::set_cookie(&session_id, self.0.sessions.ttl(), self.settings().tls));
        Ok(Entered { viewer: Viewer { session_id, csrf, principal: None }, set_cookie })
    }

    /// The namespace a request names (empty: `default`), if the viewer may read it.
    fn namespace(&self, viewer: &Viewer, ns: &str) -> Result<String, Refusal> {
        let namespace = validate::namespace(ns.trim().to_owned()).map_err(Refusal::from)?;
        match viewer.role_in(&namespace) {
            Some(_) => Ok(namespace),
            None => Err(Refusal::Forbidden("You have no grant in that namespace.".to_owned())),
        }
    }

    /// Whether the viewer may act in `namespace`: the console allows
    /// actions and the viewer has the admin role there.
    fn may_act(&self, viewer: &Viewer, namespace: &str) -> bool {
        self.settings().mode == Mode::Admin && viewer.role_in(namespace) == Some(crate::domain::rpc::Role::Admin)
    }

    /// The namespaces the viewer may see: those of its grants, and with a
    /// grant of every namespace (or no auth file) those the store holds.
    async fn namespaces(&self, viewer: &Viewer) -> Result<Vec<String>, Refusal> {
        let mut names = viewer.granted_namespaces();
        if viewer.sees_every_namespace() {
            names.extend(crate::store::console::namespaces(self.store()?, NAMESPACES_MAX).await?);
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}

/// The most namespaces the overview and the picker list.
const NAMESPACES_MAX: u32 = 100;

/// Writes an action's audit event.
fn audit(viewer: &Viewer, action: &str, namespace: &str, subject: &str, outcome: &str) {
    let subject = subject.escape_debug().to_string();
    let principal = viewer.name();
    if outcome == "ok" {
        tracing::info!(target: AUDIT_TARGET, principal, via = "console", action, namespace, subject, outcome, "audit");
    } else {
        tracing::warn!(target: AUDIT_TARGET, principal, via = "console", action, namespace, subject, outcome, "audit");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| (header::HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    #[test]
    fn a_post_is_from_this_site_by_its_fetch_metadata_or_its_origin() {
        let host = ("host", "127.0.0.1:9464");
        assert!(from_this_site(&headers(&[host, ("sec-fetch-site", "same-origin"), ("origin", "null")])));
        assert!(!from_this_site(&headers(&[
            host,
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://127.0.0.1:9464")
        ])));
        assert!(!from_this_site(&headers(&[host, ("sec-fetch-site", "same-site")])));
        assert!(from_this_site(&headers(&[host, ("origin", "http://127.0.0.1:9464")])));
        assert!(!from_this_site(&headers(&[host, ("origin", "https://elsewhere.example")])));
        assert!(!from_this_site(&headers(&[host, ("origin", "null")])), "a null origin proves nothing");
        assert!(from_this_site(&headers(&[host])), "a client that is no browser meets the CSRF token alone");
    }
}
