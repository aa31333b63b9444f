//! The console's admin actions: release a key (retryable or permanent),
//! signal or cancel a wait, delete a turn. Each is a form POST that must
//! carry the session's CSRF token and needs `--console admin` and the admin
//! role in the namespace; the first POST answers a confirmation page, the
//! confirmed one acts through the writer, as an API request would, and
//! writes an audit event either way it ends.

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::pages::encode;
use super::{Console, Entered, Refusal, audit, html, view};
use crate::domain::error::Error;
use crate::domain::keys::{Fence, Held};
use crate::domain::limits;
use crate::domain::waits::{Settle, WaitDone, WaitKey, WaitStatus, WaitWrite};

/// Every action's form; each action reads the fields it needs.
#[derive(Deserialize, Default, Clone)]
#[serde(default)]
pub struct ActionForm {
    csrf: String,
    ns: String,
    confirmed: String,
    key: String,
    permanent: String,
    error: String,
    id: String,
    turn: String,
    name: String,
    payload: String,
}

/// The confirmation page: what is about to happen, and the same form again.
#[derive(Template)]
#[template(path = "console/confirm.html")]
struct ConfirmPage {
    action: &'static str,
    question: String,
    warning: &'static str,
    form: ActionForm,
}

/// An action admitted: its viewer and namespace, and whether it is confirmed.
struct Admitted {
    entered: Entered,
    ns: String,
}

/// Checks the CSRF token, the console's mode and the viewer's role.
fn admit(
    console: &Console,
    headers: &HeaderMap,
    uri: &Uri,
    form: &ActionForm,
    (action, subject): (&str, &str),
) -> Result<Admitted, Refusal> {
    let entered = console.enter(headers, uri)?;
    if !entered.viewer.csrf_matches(&form.csrf) {
        audit(&entered.viewer, action, &form.ns, subject, "CSRF_TOKEN_WRONG");
        return Err(Refusal::Forbidden(
            "The form's CSRF token is missing or wrong: reload the page and try again.".into(),
        ));
    }
    let ns = console.namespace(&entered.viewer, &form.ns)?;
    if !console.may_act(&entered.viewer, &ns) {
        audit(&entered.viewer, action, &ns, subject, "PERMISSION_DENIED");
        let why = if console.settings().mode == super::Mode::Admin {
            "This action needs the admin role in this namespace."
        } else {
            "The console is read-only (--console read)."
        };
        return Err(Refusal::Forbidden(why.to_owned()));
    }
    Ok(Admitted { entered, ns })
}

fn confirm(action: &'static str, question: String, warning: &'static str, form: ActionForm) -> Response {
    html(ConfirmPage { action, question, warning, form }.render())
}

fn back(page: &str, ns: &str, notice: &str) -> Response {
    Redirect::to(&format!("/{page}?ns={}&notice={}", encode(ns), encode(notice))).into_response()
}

/// Audits an action's end, and turns its failure into the console's answer.
fn ended<T>(admitted: &Admitted, action: &str, subject: &str, result: Result<T, Error>) -> Result<T, Refusal> {
    let outcome = match &result {
        Ok(_) => "ok",
        Err(error) => crate::api::status::reason_of(error),
    };
    audit(&admitted.entered.viewer, action, &admitted.ns, subject, outcome);
    result.map_err(Refusal::from)
}

pub async fn release_key(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<ActionForm>,
) -> Result<Response, Refusal> {
    let admitted = admit(&console, &headers, &uri, &form, ("release-key", &form.key))?;
    let permanent = !form.permanent.is_empty();
    if form.confirmed != "1" {
        let question = if permanent {
            format!("Fail the key {:?} permanently? Every later Begin of it is answered FAILED.", form.key)
        } else {
            format!("Release the key {:?}? The next Begin takes it again and runs the operation.", form.key)
        };
        return Ok(confirm(
            "/actions/release-key",
            question,
            "The holder loses its lease: its Complete will be refused.",
            form,
        ));
    }
    let result = release(&console, &admitted.ns, &form.key, &form.error, permanent).await;
    ended(&admitted, if permanent { "fail-key" } else { "release-key" }, &form.key, result)?;
    Ok(back("keys", &admitted.ns, if permanent { "failed" } else { "released" }))
}

async fn release(console: &Console, ns: &str, key: &str, error: &str, permanent: bool) -> Result<(), Error> {
    if error.len() > limits::ERROR_BYTES_MAX {
        return Err(Error::invalid("error", crate::domain::error::InvalidReason::TooLong, "is too long"));
    }
    let store = console.shared().store()?;
    let (record, _) = store.get(ns, key).await?.ok_or(Error::KeyNotFound)?;
    if record.held != Held::Leased {
        return Err(Error::NotAcquired);
    }
    let fence = Fence { namespace: ns.to_owned(), key: key.to_owned(), lease_token: record.lease_token };
    let error = if error.is_empty() { "released from the console".to_owned() } else { error.to_owned() };
    console.shared().writer()?.release(fence, error, permanent).await??;
    Ok(())
}

pub async fn delete_turn(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<ActionForm>,
) -> Result<Response, Refusal> {
    let admitted = admit(&console, &headers, &uri, &form, ("delete-turn", &form.id))?;
    if form.confirmed != "1" {
        let held = crate::store::console::holdings(console.store()?, &admitted.ns, &form.id).await?;
        let question = format!(
            "Delete the turn {:?} and everything it holds: {}, {} and {}?",
            form.id,
            view::count(held.checkpoints, "checkpoint"),
            view::count(held.records, "record"),
            view::count(held.waits, "wait")
        );
        return Ok(confirm("/actions/delete-turn", question, "This cannot be undone.", form));
    }
    let result = console.shared().delete_turn(admitted.ns.clone(), form.id.clone(), true).await;
    let deleted = ended(&admitted, "delete-turn", &form.id, result)?;
    let notice = format!("deleted:{}:{}:{}", deleted.checkpoints, deleted.records, deleted.waits);
    Ok(back("turns", &admitted.ns, &notice))
}

pub async fn signal_wait(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<ActionForm>,
) -> Result<Response, Refusal> {
    settle_wait(console, headers, uri, form, WaitStatus::Resolved).await
}

pub async fn cancel_wait(
    State(console): State<Console>,
    headers: HeaderMap,
    uri: Uri,
    Form(form): Form<ActionForm>,
) -> Result<Response, Refusal> {
    settle_wait(console, headers, uri, form, WaitStatus::Cancelled).await
}

async fn settle_wait(
    console: Console,
    headers: HeaderMap,
    uri: Uri,
    form: ActionForm,
    status: WaitStatus,
) -> Result<Response, Refusal> {
    let (action, path) = match status {
        WaitStatus::Resolved => ("signal-wait", "/actions/signal-wait"),
        _ => ("cancel-wait", "/actions/cancel-wait"),
    };
    let subject = format!("{}/{}", form.turn, form.name);
    let admitted = admit(&console, &headers, &uri, &form, (action, &subject))?;
    if form.confirmed != "1" {
        let verb = if status == WaitStatus::Resolved { "Signal" } else { "Cancel" };
        let question = if status == WaitStatus::Resolved {
            let payload = if form.payload.is_empty() {
                "an empty payload".to_owned()
            } else {
                format!("the payload {:?}", form.payload)
            };
            format!("{verb} the wait {:?} of the turn {:?} with {payload}?", form.name, form.turn)
        } else {
            format!("{verb} the wait {:?} of the turn {:?}?", form.name, form.turn)
        };
        return Ok(confirm(path, question, "Whoever awaits it wakes with this outcome.", form));
    }
    let result = settle(&console, &admitted, &form, status).await;
    let settled = ended(&admitted, action, &subject, result)?;
    let notice = match (settled, status) {
        (false, _) => "unchanged",
        (true, WaitStatus::Resolved) => "signalled",
        (true, _) => "cancelled",
    };
    Ok(back("waits", &admitted.ns, notice))
}

/// Settles the wait the form names; whether this settled it.
async fn settle(console: &Console, admitted: &Admitted, form: &ActionForm, status: WaitStatus) -> Result<bool, Error> {
    let limits = console.shared().limits();
    let resolved = status == WaitStatus::Resolved;
    let payload = if resolved { form.payload.clone().into_bytes() } else { Vec::new() };
    if payload.len() > limits.wait_payload_bytes_max {
        return Err(Error::invalid("payload", crate::domain::error::InvalidReason::TooLong, "is too long"));
    }
    let json = serde_json::from_slice::<serde::de::IgnoredAny>(&payload).is_ok();
    let content_type = match (resolved, json) {
        (false, _) => String::new(),
        (true, true) => "application/json".to_owned(),
        (true, false) => "text/plain; charset=utf-8".to_owned(),
    };
    let key = WaitKey { namespace: admitted.ns.clone(), turn_id: form.turn.clone(), name: form.name.clone() };
    // A Signal of a wait nobody created creates it settled; from the
    // console, a wait that is not there is a mistake to report instead.
    console.shared().store()?.get_wait(&key).await?.ok_or(Error::WaitNotFound)?;
    let settle = Settle {
        key,
        status,
        payload,
        content_type,
        settled_by: format!("console:{}", admitted.entered.viewer.name()),
        fence: None,
        per_turn_max: limits.waits_per_turn_max,
        span: None,
    };
    match console.shared().writer()?.wait(WaitWrite::Settle(settle)).await?? {
        WaitDone::Settled { settled, .. } => {
            if settled {
                console.shared().metrics().wait_settled(crate::observe::metrics::WaitSettledBy::Request, 0);
            }
            Ok(settled)
        }
        _ => unreachable!("a settlement is answered Settled"),
    }
}
