//! The web console as a browser without JavaScript meets it, against the
//! real binary on each backend: its pages with their security headers and
//! every caller-written value escaped; sign-in, its cookie and a reader
//! kept to its namespaces; actions that need the CSRF token, the admin role
//! and `--console admin`, each audited; its limits' flags (sessions,
//! the stalled threshold); `--console off`; and the admin listener over TLS.
//! The browser suite (tests/console) drives the same pages in Chromium.

use std::path::{Path, PathBuf};

use stepwell::api::pb::{BeginOutcome, CheckpointRequest, CreateWaitRequest, GetRequest, RecordState};
use stepwell::auth::token_sha256;
use stepwell_test_support::IdempotencyClient;
use stepwell_test_support::admin::{HttpResponse, free_local_address, request, request_tls};
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, begin_leased, checkpoint};
use stepwell_test_support::sidecar::SidecarProcess;
use stepwell_test_support::tls::{Authority, ClientTls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Request;

use crate::STEPWELL;

const ADMIN_TOKEN: &str = "console-admin-token";
const READER_TOKEN: &str = "console-reader-token";
/// What a caller may write into every field the console shows.
const PAYLOAD: &str = "<script>alert(1)</script>\"'><img src=x onerror=alert(1)>";

/// An auth file with an admin of `alpha` and `beta` and a reader of `alpha`.
fn auth_file(dir: &Path) -> PathBuf {
    let principal = |id: &str, token: &str, grants: &str| {
        format!("[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{grants}]\n\n", token_sha256(token))
    };
    let text = [
        principal(
            "admin",
            ADMIN_TOKEN,
            "{ namespace = \"alpha\", role = \"admin\" }, { namespace = \"beta\", role = \"admin\" }",
        ),
        principal("reader", READER_TOKEN, "{ namespace = \"alpha\", role = \"read\" }"),
    ]
    .concat();
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).expect("write the auth file");
    path
}

fn with_token<T>(message: T, token: &str) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("ASCII"));
    request
}

fn in_namespace(mut request: CheckpointRequest, namespace: &str) -> CheckpointRequest {
    request.namespace = namespace.to_owned();
    request
}

async fn get(admin: &str, path: &str, cookie: &str) -> HttpResponse {
    request(admin, "GET", path, &[("Cookie", cookie)], "").await
}

async fn post(admin: &str, path: &str, cookie: &str, form: &str) -> HttpResponse {
    let headers = [("Cookie", cookie), ("Content-Type", "application/x-www-form-urlencoded")];
    request(admin, "POST", path, &headers, form).await
}

/// Signs in with `token`: the session cookie.
async fn sign_in(admin: &str, token: &str) -> String {
    let answer = post(admin, "/signin", "", &format!("token={token}&next=%2F")).await;
    assert_eq!(answer.status, 303, "a known token signs in: {}", answer.body);
    answer.cookie().expect("a session cookie")
}

/// The CSRF token of a page's session, which every page names.
fn csrf(page: &HttpResponse) -> String {
    let needle = "<meta name=\"csrf-token\" content=\"";
    let at = page.body.find(needle).expect("a page with a CSRF token") + needle.len();
    page.body[at..].split('"').next().expect("a quoted value").to_owned()
}

#[tokio::test]
async fn pages_answer_with_a_strict_policy_and_show_what_callers_wrote_as_text() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let mut client = server.client();
    let mut state = checkpoint(PAYLOAD, "plan", T0, &serde_json_text(PAYLOAD));
    state.session_id = PAYLOAD.to_owned();
    state.workflow_version = PAYLOAD.to_owned();
    client.checkpoint(state).await.expect("stored");
    client.checkpoint(checkpoint("run-1", "act", T0 + 1, "{\"n\":1}")).await.expect("stored");
    let mut keys = server.idempotency();
    keys.begin(begin_leased(PAYLOAD, std::time::Duration::from_secs(60))).await.expect("begun");
    let wait = CreateWaitRequest {
        turn_id: PAYLOAD.to_owned(),
        name: "approve".to_owned(),
        metadata: serde_json_text(PAYLOAD).into_bytes(),
        ..Default::default()
    };
    server.waits().create_wait(wait).await.expect("created");
    let turn = format!("/turn?ns=default&id={}", encode(PAYLOAD));
    let pages =
        ["/", "/?ns=default", "/turns?ns=default", "/keys?ns=default", "/waits?ns=default", "/memory?ns=default"];
    for path in pages.into_iter().chain([turn.as_str()]) {
        let page = get(&admin, path, "").await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let policy = page.header("content-security-policy").unwrap_or_default();
        assert!(policy.contains("default-src 'none'") && policy.contains("script-src 'self'"), "{path}: {policy}");
        assert_eq!(page.header("x-content-type-options"), Some("nosniff"), "{path}");
        assert!(
            !page.body.contains("<script>alert") && !page.body.contains("<img src=x"),
            "{path}: markup got through"
        );
        assert!(!page.body.contains(" style="), "{path}: no inline style, which the policy would block");
    }
    let turns = get(&admin, "/turns?ns=default", "").await;
    assert!(turns.body.contains("&#60;script&#62;alert(1)&#60;/script&#62;"), "the turn id is shown as text");
    assert!(turns.body.contains("run-1"), "every turn is listed");
    let timeline = get(&admin, &turn, "").await;
    assert!(timeline.body.contains("data-phase=\"plan\""), "the timeline lists the checkpoint");
    assert!(timeline.body.contains("json-key"), "the state is shown in the JSON viewer");
    let missing = get(&admin, "/turn?ns=default&id=nothing-here", "").await;
    assert_eq!(missing.status, 404);
}

fn serde_json_text(value: &str) -> String {
    format!("{{\"v\":\"{}\"}}", value.replace('"', "\\\""))
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

#[tokio::test]
async fn a_person_signs_in_with_a_token_and_sees_only_the_namespaces_granted() {
    let store = TestStore::new().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let admin = free_local_address();
    let auth = auth_file(dir.path());
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--auth-file", auth.to_str().expect("UTF-8"), "--console", "admin"])
        .spawn()
        .await;
    let mut client = server.client();
    for (ns, turn) in [("alpha", "alpha-run"), ("beta", "beta-secret-run")] {
        let request = with_token(in_namespace(checkpoint(turn, "plan", T0, "{}"), ns), ADMIN_TOKEN);
        client.checkpoint(request).await.expect("stored");
    }
    let away = get(&admin, "/turn?ns=alpha&id=alpha-run", "").await;
    assert_eq!(away.status, 303, "signed out, a page sends to sign-in");
    assert_eq!(away.header("location"), Some("/signin?next=%2Fturn%3Fns%3Dalpha%26id%3Dalpha-run"));
    let headers = [("Origin", "https://elsewhere.example"), ("Content-Type", "application/x-www-form-urlencoded")];
    let forged = request(&admin, "POST", "/signin", &headers, &format!("token={READER_TOKEN}&next=%2F")).await;
    assert_eq!(forged.status, 403, "a sign-in posted from another site is refused");
    assert!(forged.cookie().is_none());
    let wrong = post(&admin, "/signin", "", "token=not-a-token&next=%2F").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.cookie().is_none(), "a wrong token gets no session");
    let signed =
        post(&admin, "/signin", "", &format!("token={READER_TOKEN}&next=%2Fturn%3Fns%3Dalpha%26id%3Dalpha-run")).await;
    assert_eq!(signed.header("location"), Some("/turn?ns=alpha&id=alpha-run"), "back to the deep link");
    let set_cookie = signed.header("set-cookie").expect("a cookie");
    assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"), "{set_cookie}");
    let reader = signed.cookie().expect("a session cookie");
    let overview = get(&admin, "/", &reader).await;
    assert!(overview.body.contains("data-ns=\"alpha\"") && !overview.body.contains("beta"), "only alpha is listed");
    for path in ["/turns?ns=beta", "/turn?ns=beta&id=beta-secret-run", "/keys?ns=beta", "/waits?ns=beta", "/?ns=beta"] {
        let refused = get(&admin, path, &reader).await;
        assert_eq!(refused.status, 403, "{path}");
        assert!(!refused.body.contains("beta-secret-run"), "{path}: nothing of beta shows");
    }
    let page = get(&admin, "/turns?ns=alpha", &reader).await;
    assert!(page.body.contains("alpha-run"));
    let out = post(&admin, "/signout", &reader, &format!("csrf={}", csrf(&page))).await;
    assert_eq!(out.status, 303);
    assert!(out.header("set-cookie").is_some_and(|c| c.contains("Max-Age=0")), "the cookie is cleared");
    assert_eq!(get(&admin, "/turns?ns=alpha", &reader).await.status, 303, "the session ended");
}

async fn key_state(keys: &mut IdempotencyClient) -> RecordState {
    let request = with_token(GetRequest { namespace: "alpha".into(), key: "charge-1".into() }, ADMIN_TOKEN);
    keys.get(request).await.expect("a key").into_inner().state()
}

#[tokio::test]
async fn an_action_needs_its_csrf_token_the_admin_role_and_a_confirmation() {
    let store = TestStore::new().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let admin = free_local_address();
    let auth = auth_file(dir.path());
    let log = dir.path().join("stderr.log");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--auth-file", auth.to_str().expect("UTF-8"), "--console", "admin", "--log", "info"])
        .stderr_to(&log)
        .spawn()
        .await;
    let mut keys = server.idempotency();
    let mut lease = begin_leased("charge-1", std::time::Duration::from_secs(600));
    lease.namespace = "alpha".to_owned();
    let begun = keys.begin(with_token(lease, ADMIN_TOKEN)).await.expect("begun").into_inner();
    assert_eq!(begun.outcome(), BeginOutcome::Acquired);
    let release = "ns=alpha&key=charge-1&permanent=on&error=stuck&confirmed=1";

    let reader = sign_in(&admin, READER_TOKEN).await;
    let page = get(&admin, "/keys?ns=alpha", &reader).await;
    assert!(!page.body.contains("/actions/release-key"), "a reader gets no action buttons");
    let refused = post(&admin, "/actions/release-key", &reader, &format!("csrf={}&{release}", csrf(&page))).await;
    assert_eq!(refused.status, 403, "a reader may not act");
    assert!(refused.body.contains("admin role"), "refused for the role, not the token: {}", refused.body);

    let operator = sign_in(&admin, ADMIN_TOKEN).await;
    let page = get(&admin, "/keys?ns=alpha", &operator).await;
    assert!(page.body.contains("/actions/release-key"), "an admin gets the buttons");
    assert_eq!(post(&admin, "/actions/release-key", &operator, release).await.status, 403, "no CSRF token");
    let forged = post(&admin, "/actions/release-key", &operator, &format!("csrf=forged&{release}")).await;
    assert_eq!(forged.status, 403, "a wrong CSRF token");
    assert_eq!(key_state(&mut keys).await, RecordState::InProgress, "nothing changed");

    let token = csrf(&page);
    let ask = post(
        &admin,
        "/actions/release-key",
        &operator,
        &format!("csrf={token}&ns=alpha&key=charge-1&permanent=on&error=stuck"),
    )
    .await;
    assert_eq!(ask.status, 200);
    assert!(ask.body.contains("name=\"confirmed\" value=\"1\""), "a confirmation comes first: {}", ask.body);
    assert_eq!(key_state(&mut keys).await, RecordState::InProgress, "asking changes nothing");
    let done = post(&admin, "/actions/release-key", &operator, &format!("csrf={token}&{release}")).await;
    assert_eq!(done.status, 303, "{}", done.body);
    assert_eq!(done.header("location"), Some("/keys?ns=alpha&notice=failed"));
    assert_eq!(key_state(&mut keys).await, RecordState::Failed, "the key failed permanently");
    let audit = std::fs::read_to_string(&log).expect("the log");
    for expected in [
        "action=\"release-key\"",
        "outcome=\"CSRF_TOKEN_WRONG\"",
        "outcome=\"PERMISSION_DENIED\"",
        "action=\"fail-key\"",
    ] {
        assert!(audit.contains(expected), "the audit log has {expected}: {audit}");
    }
}

#[tokio::test]
async fn a_read_only_console_refuses_actions_and_an_off_console_serves_no_page() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let mut client = server.client();
    client.checkpoint(checkpoint("run-1", "plan", T0, "{}")).await.expect("stored");
    let page = get(&admin, "/turns?ns=default", "").await;
    let cookie = page.cookie().expect("a session without an auth file, for the CSRF token");
    let page = get(&admin, "/turn?ns=default&id=run-1", &cookie).await;
    assert!(!page.body.contains("/actions/delete-turn"), "read is the default: no actions");
    let form = format!("csrf={}&ns=default&id=run-1&confirmed=1", csrf(&page));
    let refused = post(&admin, "/actions/delete-turn", &cookie, &form).await;
    assert_eq!(refused.status, 403);
    assert!(refused.body.contains("read-only"), "refused for the mode, not the token: {}", refused.body);
    assert_eq!(get(&admin, "/turn?ns=default&id=run-1", &cookie).await.status, 200, "the turn is still there");
    drop(server);

    let off = free_local_address();
    let server =
        SidecarProcess::builder(STEPWELL, &store).admin_listen(&off).flags(&["--console", "off"]).spawn().await;
    assert_eq!(get(&off, "/", "").await.status, 404, "no console");
    assert_eq!(get(&off, "/healthz", "").await.status, 200, "the probes stay");
    drop(server);
}

#[tokio::test]
async fn the_sessions_and_the_stalled_threshold_follow_their_flags() {
    let store = TestStore::new().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let admin = free_local_address();
    let auth = auth_file(dir.path());
    let flags = [
        "--auth-file",
        auth.to_str().expect("UTF-8"),
        "--console-sessions-max",
        "2",
        "--console-stalled-after-seconds",
        "60",
    ];
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).flags(&flags).spawn().await;
    let mut client = server.client();
    let now = stepwell::domain::clock::system_now();
    for (turn, ago) in [("quiet-run", 120), ("busy-run", 1)] {
        let request = in_namespace(checkpoint(turn, "plan", now - ago * 1_000_000_000, "{}"), "alpha");
        client.checkpoint(with_token(request, ADMIN_TOKEN)).await.expect("stored");
    }
    let first = sign_in(&admin, READER_TOKEN).await;
    let stalled = get(&admin, "/turns?ns=alpha&stalled=1", &first).await;
    assert!(stalled.body.contains("quiet-run") && !stalled.body.contains("busy-run"), "{}", stalled.body);
    sign_in(&admin, READER_TOKEN).await;
    let third = sign_in(&admin, READER_TOKEN).await;
    assert_eq!(get(&admin, "/", &first).await.status, 303, "the oldest session made room");
    assert_eq!(get(&admin, "/", &third).await.status, 200);
}

#[tokio::test]
async fn the_admin_listener_serves_tls_with_the_servers_certificate() {
    let store = TestStore::new().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let authority = Authority::new("console test CA");
    let (cert, key) = authority.server().write(dir.path(), "server");
    let admin = free_local_address();
    let (cert, key) = (cert.to_str().expect("UTF-8"), key.to_str().expect("UTF-8"));
    let flags = ["--tls-cert", cert, "--tls-key", key, "--admin-tls"];
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&flags)
        .client_tls(ClientTls::new(&authority, None))
        .stderr_to(dir.path().join("stderr.log"))
        .spawn_on_loopback()
        .await;
    let page = request_tls(&admin, &ClientTls::new(&authority, None), "/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.header("set-cookie").is_some_and(|c| c.contains("; Secure")), "the cookie is Secure over TLS");
    let mut plain = tokio::net::TcpStream::connect(&admin).await.expect("connect");
    plain.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("send");
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer).await;
    assert!(!answer.starts_with(b"HTTP/1.1 200"), "plain HTTP gets no page from a TLS listener");
    drop(server);
}

/// Every `rel="next"` link of a page, unescaped.
fn next_link(page: &HttpResponse) -> Option<String> {
    let at = page.body.find("rel=\"next\" href=\"")? + 17;
    Some(page.body[at..].split('"').next()?.replace("&#38;", "&").replace("&amp;", "&"))
}

/// The values of `attribute` on the page's rows, in order.
fn rows_of(page: &HttpResponse, attribute: &str) -> Vec<String> {
    let needle = format!("{attribute}=\"");
    page.body
        .match_indices(&needle)
        .map(|(at, _)| page.body[at + needle.len()..].split('"').next().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn pages_of_turns_and_of_a_turns_checkpoints_follow_their_cursors_through_ties() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let mut client = server.client();
    // 120 turns whose last activity ties in threes, and a turn of 450 checkpoints.
    for i in 0..120 {
        client.checkpoint(checkpoint(&format!("run-{i:03}"), "plan", T0 + i / 3, "{}")).await.expect("stored");
    }
    for i in 0..450 {
        client.checkpoint(checkpoint("long", &format!("step-{i:03}"), T0 + i / 2, "{}")).await.expect("stored");
    }
    let mut seen = Vec::new();
    let mut path = Some("/turns?ns=default&prefix=run-".to_owned());
    while let Some(next) = path {
        let page = get(&admin, &next, "").await;
        assert_eq!(page.status, 200, "{next}");
        seen.extend(rows_of(&page, "data-turn"));
        path = next_link(&page);
    }
    let mut expected: Vec<String> = (0..120).map(|i| format!("run-{i:03}")).collect();
    expected.sort_by_key(|id| std::cmp::Reverse((id[4..].parse::<i64>().unwrap() / 3, id.clone())));
    assert_eq!(seen, expected, "every turn once, newest activity first, ties by id");

    let mut phases = Vec::new();
    let mut path = Some("/turn?ns=default&id=long".to_owned());
    while let Some(next) = path {
        let page = get(&admin, &next, "").await;
        phases.extend(rows_of(&page, "data-phase"));
        path = next_link(&page);
    }
    let expected: Vec<String> = (0..450).rev().map(|i| format!("step-{i:03}")).collect();
    assert_eq!(phases, expected, "every checkpoint once, newest first, over three pages");
}

/// The memory page: the paths one label down, to walk; the items under the
/// path shown that match the filter, in the order they were first put, with
/// what callers wrote shown as text; a bad filter is a 400.
#[tokio::test]
async fn the_memory_page_walks_paths_and_lists_the_items_a_filter_matches() {
    use stepwell::api::pb::{MemoryWrite, PutItemsRequest};
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let item = |path: &[&str], key: &str, value: String| MemoryWrite {
        path: path.iter().map(|l| (*l).to_owned()).collect(),
        key: key.to_owned(),
        value: value.into_bytes(),
        ..Default::default()
    };
    let writes = vec![
        item(&["users", "alice", "prefs"], "drink", r#"{"kind": "fact", "text": "likes tea"}"#.to_owned()),
        item(&["users", "bob"], PAYLOAD, serde_json_text(PAYLOAD)),
        item(&["users", "alice", "prefs"], "food", r#"{"kind": "episode", "text": "no nuts"}"#.to_owned()),
    ];
    let mut memory = stepwell::api::pb::memory_service_client::MemoryServiceClient::new(server.channel());
    memory.put_items(PutItemsRequest { namespace: String::new(), writes }).await.expect("stored");

    let top = get(&admin, "/memory?ns=default", "").await;
    assert_eq!(top.status, 200, "{}", top.body);
    assert!(
        top.body.contains("href=\"/memory?ns=default&amp;path=users\"") || top.body.contains("path=users\""),
        "{}",
        top.body
    );
    assert!(!top.body.contains("<script>alert") && !top.body.contains("<img src=x"), "markup got through");
    // Paths by their first put, then items by theirs: alice's two, then bob's.
    let order: Vec<usize> =
        ["likes tea", "no nuts", "&#60;script&#62;"].iter().map(|t| top.body.find(t).expect(t)).collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "items in the order first put: {order:?}");

    let users = get(&admin, "/memory?ns=default&path=users", "").await;
    assert!(users.body.contains("users/alice") && users.body.contains("users/bob"), "one label down");
    assert!(!users.body.contains("users/alice/prefs</a>"), "not two labels down");
    let filtered = get(&admin, "/memory?ns=default&path=users%2Falice&filter=%7B%22kind%22%3A%22fact%22%7D", "").await;
    assert_eq!(filtered.status, 200, "{}", filtered.body);
    assert!(filtered.body.contains("likes tea") && !filtered.body.contains("no nuts"), "the filter narrows");
    let bad = get(&admin, "/memory?ns=default&filter=%7B%22k%22%3A%7B%22%24in%22%3A1%7D%7D", "").await;
    assert_eq!(bad.status, 400, "{}", bad.body);
}
