//! Signing in with a bearer token of the auth file, and out.

use super::*;

#[derive(Deserialize, Default)]
#[serde(default)]
pub struct SignInForm {
    pub(super) token: String,
    pub(super) next: String,
}

#[derive(Template)]
#[template(path = "console/signin.html")]
struct SignInPage {
    pub(super) next: String,
    pub(super) failed: bool,
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
    pub(super) csrf: String,
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
    use crate::console::pages::query;

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
