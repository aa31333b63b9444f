//! Who is looking at the console: sessions, their cookie and their CSRF
//! token, and what a session may see and do.
//!
//! With `--auth-file` a person signs in with a bearer token of the file;
//! the session keeps the token's SHA-256 (never the token) and finds its
//! principal again on every request, so a reload that drops the principal
//! ends the session at once. Without an auth file there is no sign-in:
//! every visitor gets a session (for its CSRF token) with every namespace.
//!
//! Sessions live in memory, at most `--console-sessions-max` (the oldest
//! expiry makes room), each for `--console-session-ttl-seconds`. The cookie
//! is HttpOnly and SameSite=Strict, and Secure over TLS. Every state-changing
//! request carries the session's CSRF token in its form.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::http::header::COOKIE;
use subtle::ConstantTimeEq;

use crate::auth::{self, Authenticator, EVERY_NAMESPACE, Principal};
use crate::domain::rpc::Role;

/// The session cookie's name.
pub const COOKIE_NAME: &str = "stepwell_console";

#[derive(Debug, Clone)]
struct Session {
    /// The SHA-256 of the token signed in with; `None` without an auth file.
    token_hash: Option<[u8; 32]>,
    csrf: String,
    expires: Instant,
}

/// The console's sessions, bounded.
#[derive(Debug)]
pub struct Sessions {
    ttl: Duration,
    max: usize,
    map: Mutex<HashMap<String, Session>>,
}

/// Who a request comes from, as its session says.
#[derive(Debug, Clone)]
pub struct Viewer {
    pub session_id: String,
    pub csrf: String,
    /// `None` without an auth file: every namespace, every role.
    pub principal: Option<Arc<Principal>>,
}

impl Viewer {
    /// The best role the viewer has in `namespace`.
    pub fn role_in(&self, namespace: &str) -> Option<Role> {
        match &self.principal {
            None => Some(Role::Admin),
            Some(principal) => principal.role_in(namespace),
        }
    }

    /// Whether the viewer may see every namespace, or only those it names.
    pub fn sees_every_namespace(&self) -> bool {
        self.principal.as_ref().is_none_or(|p| p.grants().iter().any(|g| g.namespace == EVERY_NAMESPACE))
    }

    /// The namespaces the viewer's grants name.
    pub fn granted_namespaces(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .principal
            .iter()
            .flat_map(|p| p.grants())
            .filter(|g| g.namespace != EVERY_NAMESPACE)
            .map(|g| g.namespace.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Who the audit log names.
    pub fn name(&self) -> &str {
        self.principal.as_ref().map_or("anonymous", |p| p.id.as_str())
    }

    /// Whether `csrf` is this session's token, compared in constant time.
    pub fn csrf_matches(&self, csrf: &str) -> bool {
        !csrf.is_empty() && bool::from(self.csrf.as_bytes().ct_eq(csrf.as_bytes()))
    }
}

fn random() -> String {
    // The operating system's generator does not fail on a supported system;
    // if it ever did, a fixed value would be a shared secret, so stop instead.
    auth::new_token().expect("the operating system's random generator answers")
}

impl Sessions {
    pub fn new(ttl: Duration, max: usize) -> Sessions {
        Sessions { ttl, max, map: Mutex::new(HashMap::new()) }
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Starts a session, making room by ending the one that expires first.
    pub fn start(&self, token_hash: Option<[u8; 32]>, now: Instant) -> (String, String) {
        let (id, csrf) = (random(), random());
        let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.retain(|_, s| s.expires > now);
        if map.len() >= self.max
            && let Some(oldest) = map.iter().min_by_key(|(_, s)| s.expires).map(|(id, _)| id.clone())
        {
            map.remove(&oldest);
        }
        map.insert(id.clone(), Session { token_hash, csrf: csrf.clone(), expires: now + self.ttl });
        (id, csrf)
    }

    /// Ends a session.
    pub fn end(&self, id: &str) {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(id);
    }

    /// How many sessions are open.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// The viewer of the request's session, if it has one that is live
    /// and (with an auth file) whose principal the file still names.
    pub fn viewer(&self, headers: &HeaderMap, authenticator: Option<&Authenticator>, now: Instant) -> Option<Viewer> {
        let id = session_cookie(headers)?;
        let session = {
            let mut map = self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match map.get(&id) {
                Some(s) if s.expires > now => s.clone(),
                Some(_) => {
                    map.remove(&id);
                    return None;
                }
                None => return None,
            }
        };
        let principal = match (authenticator, session.token_hash) {
            (None, None) => None,
            (Some(authenticator), Some(hash)) => Some(authenticator.by_token_hash(&hash)?),
            _ => return None,
        };
        Some(Viewer { session_id: id, csrf: session.csrf, principal })
    }
}

/// The session id a request's cookies carry.
fn session_cookie(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE_NAME)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value that gives a browser its session.
pub fn set_cookie(id: &str, ttl: Duration, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE_NAME}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}", ttl.as_secs())
}

/// The `Set-Cookie` value that ends it.
pub fn clear_cookie(secure: bool) -> String {
    set_cookie("", Duration::ZERO, secure)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_cookie(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(COOKIE, value.parse().unwrap());
        headers
    }

    #[test]
    fn a_session_is_found_by_its_cookie_until_it_expires_or_ends() {
        let sessions = Sessions::new(Duration::from_secs(60), 10);
        let now = Instant::now();
        let (id, csrf) = sessions.start(None, now);
        let headers = with_cookie(&format!("other=1; {COOKIE_NAME}={id}"));
        let viewer = sessions.viewer(&headers, None, now).expect("live");
        assert!(viewer.csrf_matches(&csrf));
        assert!(!viewer.csrf_matches("") && !viewer.csrf_matches("wrong"));
        assert_eq!(viewer.role_in("any"), Some(Role::Admin));
        assert!(sessions.viewer(&headers, None, now + Duration::from_secs(61)).is_none(), "expired");
        let (id, _) = sessions.start(None, now);
        sessions.end(&id);
        assert!(sessions.viewer(&with_cookie(&format!("{COOKIE_NAME}={id}")), None, now).is_none(), "ended");
        assert!(sessions.viewer(&with_cookie(&format!("{COOKIE_NAME}=made-up")), None, now).is_none());
    }

    #[test]
    fn sessions_are_bounded_and_the_oldest_makes_room() {
        let sessions = Sessions::new(Duration::from_secs(60), 2);
        let now = Instant::now();
        let (first, _) = sessions.start(None, now);
        sessions.start(None, now + Duration::from_secs(1));
        sessions.start(None, now + Duration::from_secs(2));
        assert_eq!(sessions.len(), 2);
        let headers = with_cookie(&format!("{COOKIE_NAME}={first}"));
        assert!(sessions.viewer(&headers, None, now + Duration::from_secs(3)).is_none(), "the oldest went");
    }

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_over_tls() {
        let cookie = set_cookie("abc", Duration::from_secs(3600), true);
        assert_eq!(cookie, "stepwell_console=abc; HttpOnly; SameSite=Strict; Path=/; Max-Age=3600; Secure");
        assert!(!set_cookie("abc", Duration::from_secs(1), false).contains("Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
    }
}
