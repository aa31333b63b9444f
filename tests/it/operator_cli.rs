//! The operator commands (`stepwell turns ls|show|rm`, `stepwell keys
//! get|release`, `stepwell records ls|rm`) run as the real binary against a
//! real sidecar on a Unix socket: checkpoints, idempotency records and
//! records are seeded through the gRPC API (checkpoints with fixed
//! timestamps), each command's `--json` output is compared with the NDJSON
//! it must print, and each exit code is checked, also for a caller the
//! sidecar refuses and for flags refused before anything is dialled.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use stepwell::api::pb::{ListRecordsRequest, PutMode, PutRecordsRequest, Record};
use stepwell::auth::token_sha256;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, begin, checkpoint, complete};
use stepwell_test_support::sidecar::SidecarProcess;
use stepwell_test_support::tls::{Authority, ClientTls};

use crate::STEPWELL;

/// 2023-11-14T22:13:20Z: old enough to count as stalled.
const OLD: &str = "2023-11-14T22:13:20Z";
/// 2100-01-01T00:00:00Z: a turn updated then is never stalled.
const LATER: i64 = 4_102_444_800_000_000_000;
const LATER_TEXT: &str = "2100-01-01T00:00:00Z";

/// What one run of the CLI did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The NDJSON lines of stdout, each parsed.
    fn rows(&self) -> Vec<Value> {
        self.stdout.lines().map(|line| serde_json::from_str(line).expect("each line is one JSON object")).collect()
    }
}

/// Runs `stepwell ARGS --target unix:SOCKET` with no STEPWELL_* variable
/// but those in `env`.
fn cli_env(socket: &Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    let output = Command::new(STEPWELL)
        .args(args)
        .arg("--target")
        .arg(format!("unix:{}", socket.display()))
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run stepwell");
    Run {
        code: output.status.code().expect("an exit code"),
        stdout: String::from_utf8(output.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8(output.stderr).expect("UTF-8 stderr"),
    }
}

fn cli(socket: &Path, args: &[&str]) -> Run {
    cli_env(socket, args, &[])
}

/// Runs a command that must succeed, and returns its NDJSON rows.
fn rows(socket: &Path, args: &[&str]) -> Vec<Value> {
    let run = cli(socket, args);
    assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{args:?}");
    run.rows()
}

/// Replaces the fields a test cannot know (times the sidecar chose) by
/// "*", after checking each is present and not null.
fn normalise(mut row: Value, fields: &[&str]) -> Value {
    for field in fields {
        let text = row.to_string();
        let value = row.get_mut(*field).unwrap_or_else(|| panic!("{field} in {text}"));
        assert!(!value.is_null(), "{field} is set in {text}");
        *value = json!("*");
    }
    row
}

/// Three turns: `a-stalled` (open since 2023), `b-done` (terminal in
/// 2023), `c-recent` (open, updated in 2100).
async fn seed_turns(server: &SidecarProcess) {
    let mut client = server.client();
    let mut started = checkpoint("a-stalled", "started", T0, r#"{"step": 1, "input": "hello"}"#);
    started.session_id = "s1".to_owned();
    started.workflow_version = "1.0.0".to_owned();
    for request in [
        started,
        checkpoint("a-stalled", "tool-called", T0 + 1_500_000_000, r#""waiting for the tool""#),
        checkpoint("b-done", "started", T0 + 2_000_000_000, r#"{"step": 1}"#),
        checkpoint("b-done", "done", T0 + 3_000_000_000, r#"{"answer": 42}"#),
        checkpoint("c-recent", "started", LATER, "[1, 2, 3]"),
    ] {
        let terminal = request.phase == "done";
        client.checkpoint(stepwell::api::pb::CheckpointRequest { terminal, ..request }).await.expect("seeded");
    }
}

fn summary(turn: &str, status: &str, count: u64, first: (&str, i64), last: (&str, i64), phase: &str) -> Value {
    let (session, version) = if turn == "a-stalled" { ("s1", "1.0.0") } else { ("", "") };
    json!({
        "turn_id": turn, "status": status, "checkpoints": count,
        "first_timestamp": first.0, "first_timestamp_ns": first.1,
        "last_timestamp": last.0, "last_timestamp_ns": last.1,
        "last_phase": phase, "session_id": session, "workflow_version": version,
    })
}

#[tokio::test]
async fn turns_ls_lists_open_terminal_any_and_stalled_turns() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_turns(&server).await;
    let socket = server.socket_path();

    let a = summary("a-stalled", "open", 2, (OLD, T0), ("2023-11-14T22:13:21.500Z", T0 + 1_500_000_000), "tool-called");
    let b = summary(
        "b-done",
        "terminal",
        2,
        ("2023-11-14T22:13:22Z", T0 + 2_000_000_000),
        ("2023-11-14T22:13:23Z", T0 + 3_000_000_000),
        "done",
    );
    let c = summary("c-recent", "open", 1, (LATER_TEXT, LATER), (LATER_TEXT, LATER), "started");

    assert_eq!(rows(socket, &["turns", "ls", "--json"]), [a.clone(), b.clone(), c.clone()], "every status by default");
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "all"]), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "open"]), [a.clone(), c.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "terminal"]), vec![b.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "any"]), [a.clone(), b.clone(), c.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "stalled"]), vec![a.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "stalled", "--older-than", "2d"]), vec![a.clone()]);
    assert_eq!(
        rows(socket, &["turns", "ls", "--json", "--status", "any", "--older-than", "1h"]),
        [a.clone(), b.clone()],
        "--older-than narrows any status"
    );
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "any", "--limit", "2"]), [a.clone(), b.clone()]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--namespace", "elsewhere"]), Vec::<Value>::new());
    let env = [("STEPWELL_NAMESPACE", "elsewhere")];
    let run = cli_env(socket, &["turns", "ls", "--json", "--status", "any"], &env);
    assert_eq!((run.code, run.stdout.as_str()), (0, ""), "STEPWELL_NAMESPACE is the namespace");
}

#[tokio::test]
async fn listing_works_under_any_page_size_max_the_operator_chose() {
    let store = TestStore::new().await;
    // Pages of at most 2: the commands must not ask for more than the sidecar allows.
    let flags = ["--page-size-max", "2", "--page-size-default", "2"];
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&flags).spawn().await;
    seed_turns(&server).await;
    seed_records(&server).await;
    let socket = server.socket_path();

    let turns = rows(socket, &["turns", "ls", "--json", "--status", "any"]);
    let listed: Vec<&str> = turns.iter().map(|t| t["turn_id"].as_str().expect("turn_id")).collect();
    assert_eq!(listed, ["a-stalled", "b-done", "c-recent"], "three turns over two pages");
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "any", "--limit", "1"]).len(), 1);
    assert_eq!(rows(socket, &["turns", "show", "a-stalled", "--json"]).len(), 2);
    let all = rows(socket, &["records", "ls", "--kind", "checkpoint", "--json"]);
    assert!(all.len() > 2, "records over more than one page: {}", all.len());
    assert_eq!(rows(socket, &["records", "ls", "--kind", "checkpoint", "--json", "--limit", "1"]).len(), 1);
}

#[tokio::test]
async fn turns_show_prints_the_timeline_and_rm_deletes_the_turn() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_turns(&server).await;
    let socket = server.socket_path();

    let shown: Vec<Value> = rows(socket, &["turns", "show", "a-stalled", "--json"])
        .into_iter()
        .map(|r| normalise(r, &["recorded_at", "recorded_at_ns"]))
        .collect();
    assert_eq!(
        shown,
        [
            json!({
                "turn_id": "a-stalled", "phase": "started", "timestamp": OLD, "timestamp_ns": T0, "terminal": false,
                "session_id": "s1", "workflow_version": "1.0.0", "recorded_at": "*", "recorded_at_ns": "*",
                "state_bytes": 29, "state": {"step": 1, "input": "hello"},
            }),
            json!({
                "turn_id": "a-stalled", "phase": "tool-called", "timestamp": "2023-11-14T22:13:21.500Z",
                "timestamp_ns": T0 + 1_500_000_000, "terminal": false, "session_id": "", "workflow_version": "",
                "recorded_at": "*", "recorded_at_ns": "*", "state_bytes": 22, "state": "waiting for the tool",
            }),
        ]
    );
    let done = rows(socket, &["turns", "show", "b-done", "--json"]);
    assert_eq!(done.iter().map(|r| r["terminal"].clone()).collect::<Vec<_>>(), [json!(false), json!(true)]);

    let gone_whole = json!({"turn_id": "b-done", "deleted": 2, "records_deleted": 0, "waits_deleted": 0});
    assert_eq!(rows(socket, &["turns", "rm", "b-done", "--json"]), [gone_whole]);
    let gone = cli(socket, &["turns", "show", "b-done", "--json"]);
    assert_eq!(
        (gone.code, gone.stdout.as_str(), gone.stderr.as_str()),
        (2, "", "stepwell turns show: turn \"b-done\" has no checkpoints\n")
    );
    let nothing = json!({"turn_id": "b-done", "deleted": 0, "records_deleted": 0, "waits_deleted": 0});
    assert_eq!(rows(socket, &["turns", "rm", "b-done", "--json"]), [nothing]);
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "terminal"]), Vec::<Value>::new());
}

#[tokio::test]
async fn keys_get_shows_a_record_and_an_unknown_key_exits_2() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut keys = server.idempotency();
    let held_token = keys.begin(begin("held")).await.expect("Begin").into_inner().lease_token;
    let token = keys.begin(begin("done")).await.expect("Begin").into_inner().lease_token;
    keys.complete(complete("done", token, br#"{"charged": 5}"#)).await.expect("Complete");
    let socket = server.socket_path();

    let times =
        ["lease_expires_at", "lease_expires_at_ns", "created_at", "created_at_ns", "updated_at", "updated_at_ns"];
    let held = rows(socket, &["keys", "get", "held", "--json"]);
    assert_eq!(held.len(), 1);
    assert_eq!(
        normalise(held[0].clone(), &times),
        json!({
            "key": "held", "state": "in_progress", "attempt": 1, "lease_token": held_token, "result_bytes": 0,
            "result": null, "error": "",
            "fingerprint": "", "lease_expires_at": "*", "lease_expires_at_ns": "*", "created_at": "*",
            "created_at_ns": "*", "updated_at": "*", "updated_at_ns": "*", "retained_until": null,
            "retained_until_ns": null,
        })
    );
    let done = rows(socket, &["keys", "get", "done", "--json"]);
    let unknown = ["created_at", "created_at_ns", "updated_at", "updated_at_ns", "retained_until", "retained_until_ns"];
    assert_eq!(
        normalise(done[0].clone(), &unknown),
        json!({
            "key": "done", "state": "completed", "attempt": 1, "lease_token": 0, "result_bytes": 14,
            "result": {"charged": 5},
            "error": "", "fingerprint": "", "lease_expires_at": null, "lease_expires_at_ns": null,
            "created_at": "*", "created_at_ns": "*", "updated_at": "*", "updated_at_ns": "*",
            "retained_until": "*", "retained_until_ns": "*",
        })
    );

    let missing = cli(socket, &["keys", "get", "missing", "--json"]);
    assert_eq!((missing.code, missing.stdout.as_str()), (2, ""));
    assert_eq!(missing.stderr, "stepwell keys get: NOT_FOUND (KEY_NOT_FOUND): no idempotency record for this key\n");
}

#[tokio::test]
async fn keys_release_frees_a_key_and_a_wrong_token_exits_4() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut keys = server.idempotency();
    let first = keys.begin(begin("retry")).await.expect("Begin").into_inner().lease_token;
    let second = keys.begin(begin("give-up")).await.expect("Begin").into_inner().lease_token;
    let socket = server.socket_path();

    let wrong = (first + second + 1000).to_string();
    let refused = cli(socket, &["keys", "release", "retry", "--token", &wrong, "--json"]);
    assert_eq!((refused.code, refused.stdout.as_str()), (4, ""), "{refused:?}");
    assert!(refused.stderr.starts_with("stepwell keys release: ABORTED (LEASE_LOST): "), "{}", refused.stderr);
    assert_eq!(refused.stderr.lines().count(), 1, "one line");

    let token = first.to_string();
    assert_eq!(
        rows(socket, &["keys", "release", "retry", "--token", &token, "--json"]),
        [json!({"key": "retry", "state": "released"})]
    );
    let again = cli(socket, &["keys", "release", "retry", "--token", &token, "--json"]);
    assert_eq!(again.code, 4, "a released key is held by no lease: {again:?}");

    let token = second.to_string();
    let permanent =
        ["keys", "release", "give-up", "--token", &token, "--permanent", "--error", "card declined", "--json"];
    assert_eq!(rows(socket, &permanent), [json!({"key": "give-up", "state": "failed"})]);
    let failed = &rows(socket, &["keys", "get", "give-up", "--json"])[0];
    assert_eq!((failed["state"].as_str(), failed["error"].as_str()), (Some("failed"), Some("card declined")));
}

#[tokio::test]
async fn a_caller_without_the_admin_role_cannot_rm_and_exits_3() {
    let store = TestStore::new().await;
    let grant = |id: &str, token: &str, role: &str| {
        format!(
            "[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{{ namespace = \"default\", role = \"{role}\" }}]\n\n",
            token_sha256(token)
        )
    };
    let path = store.dir().join("auth.toml");
    std::fs::write(&path, [grant("reader", "swt_reader", "read"), grant("admin", "swt_admin", "admin")].concat())
        .expect("write the auth file");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", path.to_str().expect("a UTF-8 path")])
        .spawn()
        .await;
    let socket = server.socket_path();

    let denied = cli(socket, &["turns", "rm", "t1", "--auth-token", "swt_reader"]);
    assert_eq!((denied.code, denied.stdout.as_str()), (3, ""));
    assert_eq!(
        denied.stderr,
        "stepwell turns rm: PERMISSION_DENIED (PERMISSION_DENIED): the caller has no admin grant for namespace \"default\"\n"
    );

    let anonymous = cli(socket, &["turns", "ls"]);
    assert_eq!(anonymous.code, 3);
    assert!(
        anonymous.stderr.starts_with("stepwell turns ls: UNAUTHENTICATED (UNAUTHENTICATED): "),
        "{}",
        anonymous.stderr
    );

    assert_eq!(cli(socket, &["turns", "ls", "--auth-token", "swt_reader"]).code, 0, "reading needs the read role only");
    let admin = cli_env(socket, &["turns", "rm", "t1", "--json"], &[("STEPWELL_TOKEN", "swt_admin")]);
    let nothing = "{\"deleted\":0,\"records_deleted\":0,\"turn_id\":\"t1\",\"waits_deleted\":0}\n";
    assert_eq!((admin.code, admin.stdout.as_str()), (0, nothing), "{admin:?}");
}

#[tokio::test]
async fn a_token_file_keeps_the_token_off_the_command_line() {
    let store = TestStore::new().await;
    let path = store.dir().join("auth.toml");
    let reader = format!(
        "[[principals]]\nid = \"reader\"\ntoken_sha256 = \"{}\"\ngrants = [{{ namespace = \"default\", role = \"read\" }}]\n",
        token_sha256("swt_reader")
    );
    std::fs::write(&path, reader).expect("write the auth file");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", path.to_str().expect("a UTF-8 path")])
        .spawn()
        .await;
    let socket = server.socket_path();
    let token_file = store.dir().join("token");
    let file = token_file.to_str().expect("a UTF-8 path");

    // A trailing newline, as `echo` or an editor leaves it, is no part of the token.
    for text in ["swt_reader\n", "swt_reader\r\n", "swt_reader"] {
        std::fs::write(&token_file, text).expect("write the token file");
        let run = cli(socket, &["turns", "ls", "--json", "--auth-token-file", file]);
        assert_eq!((run.code, run.stderr.as_str()), (0, ""), "{text:?}");
    }
    let from_env = cli_env(socket, &["turns", "ls", "--json"], &[("STEPWELL_TOKEN_FILE", file)]);
    assert_eq!((from_env.code, from_env.stderr.as_str()), (0, ""), "STEPWELL_TOKEN_FILE");
    std::fs::write(&token_file, "swt_wrong\n").expect("write the token file");
    assert_eq!(cli(socket, &["turns", "ls", "--auth-token-file", file]).code, 3, "the file's token is the one sent");

    let usage = |run: Run, what: &str| {
        assert_eq!((run.code, run.stdout.as_str()), (64, ""), "{what}: {run:?}");
        assert!(run.stderr.contains("--auth-token-file"), "{what}: {}", run.stderr);
        run.stderr
    };
    let missing = store.dir().join("no-such-token");
    let missing = cli(socket, &["turns", "ls", "--auth-token-file", missing.to_str().expect("a UTF-8 path")]);
    assert!(usage(missing, "a missing file").contains("no-such-token"));
    std::fs::write(&token_file, "\n").expect("write the token file");
    assert!(usage(cli(socket, &["turns", "ls", "--auth-token-file", file]), "an empty file").contains("no token"));
    let both = cli(socket, &["turns", "ls", "--auth-token", "swt_reader", "--auth-token-file", file]);
    assert!(usage(both, "both").contains("give the token once"));
    let env_and_file =
        cli_env(socket, &["turns", "ls", "--auth-token-file", file], &[("STEPWELL_TOKEN", "swt_reader")]);
    assert!(usage(env_and_file, "STEPWELL_TOKEN and a file").contains("give the token once"));

    // --help steers operators away from a token on the command line.
    let help = Command::new(STEPWELL).args(["turns", "ls", "--help"]).env_clear().output().expect("run stepwell");
    let help = String::from_utf8(help.stdout).expect("UTF-8 help");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains(
            "visible to every user of the host (`ps`): prefer --auth-token-file or the STEPWELL_TOKEN variable"
        ),
        "{help}"
    );
    assert!(help.contains("--auth-token-file <PATH>"), "{help}");
}

#[tokio::test]
async fn without_json_the_output_is_a_table_with_headers() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_turns(&server).await;
    let socket = server.socket_path();

    let listed = cli(socket, &["turns", "ls"]);
    assert_eq!(listed.code, 0);
    assert!(
        listed.stderr.contains("turns of every status with checkpoints")
            && listed.stderr.contains("stepwell records ls"),
        "the listing says what it holds, on stderr: {}",
        listed.stderr
    );
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", listed.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["TURN", "STATUS", "CHECKPOINTS", "FIRST", "LAST", "PHASE", "SESSION"]);
    for (line, turn) in lines[1..].iter().zip(["a-stalled", "b-done", "c-recent"]) {
        assert!(line.starts_with(turn), "{line}");
    }
    assert!(lines[1].contains(OLD) && lines[1].contains("tool-called") && lines[1].ends_with("s1"), "{}", lines[1]);
    let status_column = lines[0].find("STATUS").expect("a STATUS column");
    assert_eq!(&lines[2][status_column..status_column + 8], "terminal", "columns are aligned:\n{}", listed.stdout);

    let shown = cli(socket, &["turns", "show", "a-stalled"]);
    assert_eq!(shown.code, 0);
    let lines: Vec<&str> = shown.stdout.lines().collect();
    assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>(), ["TIMESTAMP", "PHASE", "END", "BYTES", "STATE"]);
    assert!(lines[1].starts_with(OLD) && lines[1].ends_with("{input, step}"), "{}", lines[1]);
    assert!(lines[2].ends_with("\"waiting for the tool\""), "{}", lines[2]);
}

#[tokio::test]
async fn over_mutual_tls_the_cli_dials_with_its_certificate() {
    let store = TestStore::new().await;
    let dir = store.dir();
    let ca = Authority::new("stepwell test CA");
    let (cert, key) = ca.server().write(dir, "server");
    let ca_path = ca.write(&dir.join("ca.pem"));
    let client = ca.client("spiffe://example.org/operator", "operator.example.org");
    let (client_cert, client_key) = client.write(dir, "operator");
    let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
    let flags = ["--tls-cert", &path(&cert), "--tls-key", &path(&key), "--tls-client-ca", &path(&ca_path)];
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&flags)
        .client_tls(ClientTls::new(&ca, Some(&client)))
        .spawn()
        .await;
    seed_turns(&server).await;
    let socket = server.socket_path();

    let env = [
        ("STEPWELL_CLI_TLS_CA", path(&ca_path)),
        ("STEPWELL_CLI_TLS_CERT", path(&client_cert)),
        ("STEPWELL_CLI_TLS_KEY", path(&client_key)),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let listed = cli_env(socket, &["turns", "ls", "--json", "--status", "terminal"], &env);
    assert_eq!((listed.code, listed.stderr.as_str()), (0, ""));
    assert_eq!(listed.rows().iter().map(|r| r["turn_id"].clone()).collect::<Vec<_>>(), [json!("b-done")]);

    let anonymous = cli_env(socket, &["turns", "ls", "--json"], &env[..1]);
    assert_eq!((anonymous.code, anonymous.stdout.as_str()), (1, ""), "without a client certificate: {anonymous:?}");
    let plaintext = cli(socket, &["turns", "ls", "--json"]);
    assert_eq!((plaintext.code, plaintext.stdout.as_str()), (1, ""), "plaintext to TLS: {plaintext:?}");
    assert_eq!(plaintext.stderr.lines().count(), 1, "one line: {}", plaintext.stderr);
    let half = cli_env(socket, &["turns", "ls"], &env[1..2]);
    assert_eq!(half.code, 64, "a certificate without its key or a CA is a usage error: {half:?}");
}

/// The records of `records_ls_*` and `*_rm_*`: three checkpoints and a blob
/// in turn `t1` (one checkpoint in scope `sub`), a checkpoint in `t2`.
async fn seed_records(server: &SidecarProcess) {
    seed_records_as(server, None).await;
}

/// `seed_records` with a bearer token.
async fn seed_records_as(server: &SidecarProcess, token: Option<&str>) {
    let record = |turn: &str, scope: &str, kind: &str, id: &str, payload: &[u8], metadata: &str| Record {
        turn_id: turn.to_owned(),
        scope: scope.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        payload: payload.to_vec(),
        content_type: "application/json".to_owned(),
        metadata: metadata.as_bytes().to_vec(),
        ..Default::default()
    };
    let records = vec![
        record("t1", "", "checkpoint", "c1", b"first", r#"{"source": "input"}"#),
        Record {
            parent_id: "c1".to_owned(),
            ..record("t1", "", "checkpoint", "c2", b"0123456789", r#"{"source": "loop"}"#)
        },
        Record {
            refs: vec!["b1".to_owned()],
            ..record("t1", "sub", "checkpoint", "c3", b"{}", r#"{"source": "loop", "step": 2}"#)
        },
        Record { content_type: String::new(), ..record("t1", "sub", "blob", "b1", &[0, 1, 255], "") },
        record("t2", "", "checkpoint", "c9", b"other", r#"{"source": "loop"}"#),
    ];
    let mut request = tonic::Request::new(PutRecordsRequest { namespace: String::new(), records, fence: None });
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("an ASCII token"));
    }
    server.records().put_records(request).await.expect("records seeded");
}

/// The `id` of each row.
fn ids(rows: &[Value]) -> Vec<&str> {
    rows.iter().map(|r| r["id"].as_str().expect("an id")).collect()
}

#[tokio::test]
async fn records_ls_lists_a_turns_records_of_a_kind_newest_first() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_records(&server).await;
    let socket = server.socket_path();

    let listed: Vec<Value> = rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json"])
        .into_iter()
        .map(|r| normalise(r, &["recorded_at", "recorded_at_ns"]))
        .collect();
    let row = |scope: &str, id: &str, parent: &str, bytes: usize, metadata: Value, refs: &[&str]| {
        json!({
            "turn_id": "t1", "scope": scope, "kind": "checkpoint", "id": id, "parent_id": parent,
            "content_type": "application/json", "payload_bytes": bytes, "metadata": metadata, "refs": refs,
            "recorded_at": "*", "recorded_at_ns": "*",
        })
    };
    assert_eq!(
        listed,
        [
            row("sub", "c3", "", 2, json!({"source": "loop", "step": 2}), &["b1"]),
            row("", "c2", "c1", 10, json!({"source": "loop"}), &[]),
            row("", "c1", "", 5, json!({"source": "input"}), &[]),
        ]
    );

    let blobs = rows(socket, &["records", "ls", "t1", "--kind", "blob", "--json", "--payload"]);
    assert_eq!(blobs.len(), 1);
    assert_eq!(
        (&blobs[0]["payload"], &blobs[0]["payload_bytes"], &blobs[0]["metadata"], &blobs[0]["content_type"]),
        (&json!("AAH/"), &json!(3), &Value::Null, &json!("")),
        "--payload adds the payload in base64: {}",
        blobs[0]
    );
    let without = rows(socket, &["records", "ls", "t1", "--kind", "blob", "--json"]);
    assert!(without[0].get("payload").is_none(), "no payload without --payload: {}", without[0]);

    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--scope", "sub"])),
        ["c3"]
    );
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--scope", ""])),
        ["c2", "c1"],
        "the empty scope is a scope of its own"
    );
    let across = rows(socket, &["records", "ls", "--kind", "checkpoint", "--json"]);
    assert_eq!(ids(&across), ["c9", "c3", "c2", "c1"], "without a turn, every turn's");
    assert_eq!(across[0]["turn_id"], json!("t2"));
    assert_eq!(rows(socket, &["records", "ls", "t1", "--kind", "write", "--json"]), Vec::<Value>::new());
    assert_eq!(
        rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--namespace", "elsewhere"]),
        Vec::<Value>::new()
    );
}

#[tokio::test]
async fn records_ls_filters_by_metadata_and_stops_at_the_limit() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_records(&server).await;
    let socket = server.socket_path();

    let loop_ = r#"{"source": "loop"}"#;
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--metadata", loop_])),
        ["c3", "c2"]
    );
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "--kind", "checkpoint", "--json", "--metadata", loop_])),
        ["c9", "c3", "c2"]
    );
    let step = r#"{"step": 2}"#;
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--metadata", step])),
        ["c3"]
    );
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--metadata", "{}"])),
        ["c3", "c2", "c1"]
    );

    assert_eq!(
        ids(&rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json", "--limit", "2"])),
        ["c3", "c2"]
    );
    assert_eq!(ids(&rows(socket, &["records", "ls", "--kind", "checkpoint", "--json", "--limit", "1"])), ["c9"]);
}

#[tokio::test]
async fn records_ls_follows_page_tokens_up_to_the_limit() {
    let store = TestStore::new().await;
    // A 1 KiB response budget: each page holds one 600-byte record.
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&["--response-bytes-max", "1024"]).spawn().await;
    let records = (0..5)
        .map(|i| Record {
            turn_id: "big".to_owned(),
            kind: "blob".to_owned(),
            id: format!("b{i}"),
            payload: vec![b'x'; 600],
            ..Default::default()
        })
        .collect();
    server
        .records()
        .put_records(PutRecordsRequest { namespace: String::new(), records, fence: None })
        .await
        .expect("records seeded");
    let mut client = server.records();
    let first = client
        .list_records(ListRecordsRequest { turn_id: "big".to_owned(), kind: "blob".to_owned(), ..Default::default() })
        .await
        .expect("ListRecords")
        .into_inner();
    assert_eq!(first.entries.len(), 1, "the budget cuts pages short");
    let socket = server.socket_path();

    assert_eq!(
        ids(&rows(socket, &["records", "ls", "big", "--kind", "blob", "--json"])),
        ["b4", "b3", "b2", "b1", "b0"]
    );
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "big", "--kind", "blob", "--json", "--limit", "3"])),
        ["b4", "b3", "b2"]
    );
}

#[tokio::test]
async fn records_ls_lists_the_largest_record_a_sidecar_accepts_whatever_its_message_limit() {
    let store = TestStore::new().await;
    // Defaults: the largest record a put accepts, with the longest ids and
    // a record after it, so that a page token follows it.
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let (turn, scope) = ("t".repeat(256), "s".repeat(1024));
    let blob = |id: String, bytes: usize| Record {
        turn_id: turn.clone(),
        scope: scope.clone(),
        kind: "blob".to_owned(),
        id,
        payload: vec![b'x'; bytes],
        ..Default::default()
    };
    let mut client = server.records();
    let largest = crate::records::largest_accepted(&mut client, |n| blob(format!("z{}", "i".repeat(1023)), n)).await;
    client
        .put_records(PutRecordsRequest { records: vec![blob("a".to_owned(), 10)], ..Default::default() })
        .await
        .expect("the record after it");
    let listed = rows(server.socket_path(), &["records", "ls", &turn, "--kind", "blob", "--json"]);
    let sizes: Vec<u64> = listed.iter().map(|r| r["payload_bytes"].as_u64().expect("a size")).collect();
    assert_eq!(sizes, [largest as u64, 10]);
    drop(server);

    // A sidecar that takes records of 8 MiB sends pages above gRPC's default 4 MiB.
    let raised = ["--message-bytes-max", "16777216", "--record-bytes-max", "8388608"];
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&raised).spawn().await;
    const BIG: usize = (8 << 20) - 16;
    let big = Record { turn_id: "big".to_owned(), ..blob("b".to_owned(), BIG) };
    let mut client = server.records().max_encoding_message_size(16 << 20);
    client.put_records(PutRecordsRequest { records: vec![big], ..Default::default() }).await.expect("an 8 MiB record");
    let listed = rows(server.socket_path(), &["records", "ls", "big", "--kind", "blob", "--json", "--payload"]);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["payload_bytes"], BIG);
    assert_eq!(listed[0]["payload"].as_str().map(str::len), Some(BIG.div_ceil(3) * 4), "the payload in base64");
}

#[tokio::test]
async fn records_ls_without_json_is_a_table() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_records(&server).await;
    let socket = server.socket_path();

    let listed = cli(socket, &["records", "ls", "t1", "--kind", "checkpoint"]);
    assert_eq!((listed.code, listed.stderr.as_str()), (0, ""));
    let lines: Vec<&str> = listed.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", listed.stdout);
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(header, ["TURN", "SCOPE", "KIND", "ID", "PARENT", "TYPE", "BYTES", "METADATA", "RECORDED"]);
    let cells: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(cells[..8], ["t1", "-", "checkpoint", "c2", "c1", "application/json", "10", r#"{"source":"loop"}"#]);
    assert!(cells[8].ends_with('Z') && cells[8].len() >= 20, "a recorded-at time: {}", lines[2]);
    assert!(lines[1].starts_with("t1") && lines[1].contains(" sub ") && lines[1].contains(" c3 "), "{}", lines[1]);
    let id_column = lines[0].find("ID").expect("an ID column");
    assert_eq!(&lines[3][id_column..id_column + 2], "c1", "columns are aligned:\n{}", listed.stdout);
}

#[tokio::test]
async fn records_rm_deletes_the_turns_records_and_keeps_their_checkpoints() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_turns(&server).await;
    seed_records(&server).await;
    let socket = server.socket_path();

    assert_eq!(rows(socket, &["records", "rm", "t1", "--json"]), [json!({"turn_ids": ["t1"], "deleted": 4})]);
    assert_eq!(rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json"]), Vec::<Value>::new());
    assert_eq!(rows(socket, &["records", "ls", "t1", "--kind", "blob", "--json"]), Vec::<Value>::new());
    assert_eq!(ids(&rows(socket, &["records", "ls", "--kind", "checkpoint", "--json"])), ["c9"], "t2's records stay");
    assert_eq!(
        rows(socket, &["records", "rm", "t1", "t2", "--json"]),
        [json!({"turn_ids": ["t1", "t2"], "deleted": 1})]
    );
    let again = cli(socket, &["records", "rm", "t1", "t2"]);
    assert_eq!((again.code, again.stdout.as_str()), (0, "turns:   t1, t2\ndeleted: 0 records\n"), "{again:?}");
    assert_eq!(rows(socket, &["turns", "ls", "--json", "--status", "any"]).len(), 3, "checkpoints stay");

    let none = cli(socket, &["records", "rm"]);
    assert_eq!((none.code, none.stdout.as_str()), (64, ""), "a turn is required: {none:?}");
}

#[tokio::test]
async fn turns_rm_erases_the_turn_whole_and_checkpoints_only_keeps_its_records() {
    use stepwell::api::pb::CreateWaitRequest;

    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_records(&server).await;
    let mut client = server.client();
    for turn in ["t1", "t2"] {
        client.checkpoint(checkpoint(turn, "started", T0, r#"{"step": 1}"#)).await.expect("seeded");
    }
    let wait = CreateWaitRequest { turn_id: "t1".to_owned(), name: "approve".to_owned(), ..Default::default() };
    server.waits().create_wait(wait).await.expect("a wait");
    let socket = server.socket_path();

    let kept = json!({"turn_id": "t2", "deleted": 1, "records_deleted": 0, "waits_deleted": 0});
    assert_eq!(rows(socket, &["turns", "rm", "t2", "--checkpoints-only", "--json"]), [kept]);
    assert_eq!(ids(&rows(socket, &["records", "ls", "t2", "--kind", "checkpoint", "--json"])), ["c9"], "records stay");

    let whole = json!({"turn_id": "t1", "deleted": 1, "records_deleted": 4, "waits_deleted": 1});
    assert_eq!(rows(socket, &["turns", "rm", "t1", "--json"]), [whole]);
    assert_eq!(rows(socket, &["records", "ls", "t1", "--kind", "checkpoint", "--json"]), Vec::<Value>::new());
    assert_eq!(rows(socket, &["records", "ls", "t1", "--kind", "blob", "--json"]), Vec::<Value>::new());
    assert_eq!(rows(socket, &["waits", "ls", "t1", "--json"]), Vec::<Value>::new());
    assert_eq!(cli(socket, &["turns", "show", "t1"]).code, 2, "no checkpoints left");

    // --records, which older scripts pass, deletes the records as the default does.
    let table = cli(socket, &["turns", "rm", "t2", "--records"]);
    assert_eq!(
        (table.code, table.stdout.as_str()),
        (
            0,
            "turn:            t2\ndeleted:         0 checkpoints\nrecords deleted: 1 records\nwaits deleted:   0 waits\n"
        ),
        "{table:?}"
    );
    assert_eq!(rows(socket, &["records", "ls", "--kind", "checkpoint", "--json"]), Vec::<Value>::new());
    let both = cli(socket, &["turns", "rm", "t2", "--records", "--checkpoints-only"]);
    assert_eq!(both.code, 64, "contradictory flags are refused before dialling: {both:?}");
}

/// Every command reads what the sidecar accepted, past gRPC's default 4 MiB:
/// a state at --state-bytes-max.
#[tokio::test]
async fn turns_show_reads_a_state_at_the_largest_size_the_sidecar_accepts() {
    let store = TestStore::new().await;
    let raised = ["--message-bytes-max", "16777216", "--state-bytes-max", "8388608"];
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&raised).spawn().await;
    const BIG: usize = 8 << 20;
    let state = format!("\"{}\"", "x".repeat(BIG - 2));
    // The answer carries the checkpoint back, state and all.
    let mut client = server.client().max_encoding_message_size(16 << 20).max_decoding_message_size(16 << 20);
    client.checkpoint(checkpoint("ticket-big", "started", T0, &state)).await.expect("an 8 MiB state");
    let shown = rows(server.socket_path(), &["turns", "show", "ticket-big", "--json"]);
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0]["state_bytes"], BIG);
    assert_eq!(shown[0]["state"].as_str().map(str::len), Some(BIG - 2));
    let table = cli(server.socket_path(), &["turns", "show", "ticket-big"]);
    assert_eq!((table.code, table.stderr.as_str()), (0, ""), "the table too");
}

#[test]
fn a_bad_metadata_filter_or_a_missing_kind_exits_64_without_calling_anything() {
    // Nothing listens here: a command that dialled would exit 1.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let socket = dir.path().join("nobody.sock");
    for metadata in ["[1, 2]", "\"loop\"", "{not json", "null"] {
        let run = cli(&socket, &["records", "ls", "t1", "--kind", "checkpoint", "--metadata", metadata]);
        assert_eq!((run.code, run.stdout.as_str()), (64, ""), "{metadata}: {run:?}");
        assert!(run.stderr.contains("--metadata"), "{metadata}: {}", run.stderr);
    }
    let no_kind = cli(&socket, &["records", "ls", "t1"]);
    assert_eq!((no_kind.code, no_kind.stdout.as_str()), (64, ""), "{no_kind:?}");
    assert!(no_kind.stderr.contains("--kind"), "{}", no_kind.stderr);
    let limit = cli(&socket, &["records", "ls", "--kind", "checkpoint", "--limit", "0"]);
    assert_eq!(limit.code, 64, "{limit:?}");
    let dialled = cli(&socket, &["records", "ls", "t1", "--kind", "checkpoint", "--metadata", "{}"]);
    assert_eq!(dialled.code, 1, "good flags do dial: {dialled:?}");
}

#[tokio::test]
async fn records_rm_needs_the_write_role_and_turns_rm_records_the_admin_role() {
    let store = TestStore::new().await;
    let grant = |id: &str, token: &str, role: &str| {
        format!(
            "[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{{ namespace = \"default\", role = \"{role}\" }}]\n\n",
            token_sha256(token)
        )
    };
    let path = store.dir().join("auth.toml");
    let principals = [
        grant("reader", "swt_reader", "read"),
        grant("writer", "swt_writer", "write"),
        grant("admin", "swt_admin", "admin"),
    ];
    std::fs::write(&path, principals.concat()).expect("write the auth file");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", path.to_str().expect("a UTF-8 path")])
        .spawn()
        .await;
    seed_records_as(&server, Some("swt_admin")).await;
    let socket = server.socket_path();
    let ls = ["records", "ls", "t1", "--kind", "checkpoint", "--json", "--auth-token", "swt_reader"];

    assert_eq!(ids(&rows(socket, &ls)), ["c3", "c2", "c1"], "listing needs the read role only");
    let anonymous = cli(socket, &["records", "ls", "t1", "--kind", "checkpoint"]);
    assert_eq!((anonymous.code, anonymous.stdout.as_str()), (3, ""));
    assert!(
        anonymous.stderr.starts_with("stepwell records ls: UNAUTHENTICATED (UNAUTHENTICATED): "),
        "{}",
        anonymous.stderr
    );

    let denied = cli(socket, &["records", "rm", "t1", "--auth-token", "swt_reader"]);
    assert_eq!((denied.code, denied.stdout.as_str()), (3, ""));
    assert_eq!(
        denied.stderr,
        "stepwell records rm: PERMISSION_DENIED (PERMISSION_DENIED): the caller has no write grant for namespace \"default\"\n"
    );
    let writer = cli(socket, &["turns", "rm", "t1", "--records", "--auth-token", "swt_writer"]);
    assert_eq!((writer.code, writer.stdout.as_str()), (3, ""), "DeleteTurn needs the admin role: {writer:?}");
    assert!(writer.stderr.starts_with("stepwell turns rm: PERMISSION_DENIED "), "{}", writer.stderr);
    assert_eq!(ids(&rows(socket, &ls)), ["c3", "c2", "c1"], "refused before any record went");

    let env = [("STEPWELL_TOKEN", "swt_writer")];
    let removed = cli_env(socket, &["records", "rm", "t1", "--json"], &env);
    assert_eq!((removed.code, removed.stdout.as_str()), (0, "{\"deleted\":4,\"turn_ids\":[\"t1\"]}\n"), "{removed:?}");
    assert_eq!(rows(socket, &ls), Vec::<Value>::new());
}

#[tokio::test]
async fn waits_ls_show_signal_and_cancel_act_on_a_sidecars_waits() {
    use stepwell::api::pb::CreateWaitRequest;

    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut waits = server.waits();
    for (turn, name) in [("t1", "approve"), ("t1", "review"), ("t2", "approve")] {
        let request = CreateWaitRequest {
            turn_id: turn.to_owned(),
            name: name.to_owned(),
            metadata: br#"{"ticket": 7}"#.to_vec(),
            ..Default::default()
        };
        waits.create_wait(request).await.expect("wait created");
    }
    let socket = server.socket_path();
    let names = |rows: &[Value]| -> Vec<String> {
        rows.iter().map(|r| format!("{}/{}={}", r["turn_id"], r["name"], r["status"]).replace('"', "")).collect()
    };
    let pending = ["t1/approve=pending", "t1/review=pending", "t2/approve=pending"];
    assert_eq!(names(&rows(socket, &["waits", "ls", "--json"])), pending);
    assert_eq!(names(&rows(socket, &["waits", "ls", "t1", "--json", "--limit", "1"])), ["t1/approve=pending"]);

    let signalled = rows(socket, &["waits", "signal", "t1", "approve", "--payload", r#"{"ok": true}"#, "--json"]);
    assert_eq!(
        (signalled[0]["status"].as_str(), signalled[0]["resolved"].as_str()),
        (Some("resolved"), Some("by this call"))
    );
    assert_eq!(signalled[0]["payload"], json!({"ok": true}), "a JSON payload is shown as JSON");
    let repeat = rows(socket, &["waits", "signal", "t1", "approve", "--payload", r#"{"ok": true}"#, "--json"]);
    assert_eq!(repeat[0]["resolved"].as_str(), Some("before: the same payload"));
    let other = cli(socket, &["waits", "signal", "t1", "approve", "--payload", "no"]);
    assert_eq!((other.code, other.stdout.as_str()), (4, ""), "{other:?}");
    assert!(other.stderr.starts_with("stepwell waits signal: ALREADY_EXISTS (WAIT_SETTLED): "), "{}", other.stderr);
    assert!(
        other.stderr.contains("settled already: resolved") && other.stderr.contains("with 12 bytes of payload"),
        "the loser is told who won: {}",
        other.stderr
    );
    let table = cli(socket, &["waits", "show", "t1", "approve"]);
    assert!(table.stdout.contains(r#"{"ok":true}"#) && table.stdout.contains("payload bytes"), "{}", table.stdout);

    let cancelled = rows(socket, &["waits", "cancel", "t1", "review", "--json"]);
    assert_eq!(
        (cancelled[0]["status"].as_str(), cancelled[0]["cancelled"].as_str()),
        (Some("cancelled"), Some("by this call"))
    );
    assert_eq!(names(&rows(socket, &["waits", "ls", "--status", "pending", "--json"])), ["t2/approve=pending"]);
    for every in ["any", "all"] {
        assert_eq!(rows(socket, &["waits", "ls", "--status", every, "--json"]).len(), 3, "--status {every}");
    }
    let bad = cli(socket, &["waits", "ls", "--status", "some"]);
    assert_eq!(bad.code, 64);
    assert!(bad.stderr.contains("Usage: stepwell waits ls"), "the subcommand's usage: {}", bad.stderr);

    let shown = rows(socket, &["waits", "show", "t2", "approve", "--json"]);
    assert_eq!((shown[0]["metadata"].clone(), shown[0]["settled_by"].as_str()), (json!({"ticket": 7}), Some("")));
    let handle = shown[0]["handle"].as_str().expect("a handle").to_owned();
    let by_handle = rows(socket, &["waits", "signal", "--handle", &handle, "--payload", "yes", "--json"]);
    assert_eq!((by_handle[0]["turn_id"].as_str(), by_handle[0]["payload"].as_str()), (Some("t2"), Some("yes")));

    let missing = cli(socket, &["waits", "show", "t9", "nothing"]);
    assert_eq!((missing.code, missing.stdout.as_str()), (2, ""), "{missing:?}");
    let both = cli(socket, &["waits", "show", "t1", "approve", "--handle", &handle]);
    assert_eq!(both.code, 64, "a turn and a handle together are refused before dialling: {both:?}");
}

/// Agent sessions as the clients' session adapters write them: "s1" with
/// three items (and a checkpoint record of the same turn), then "s2" with one.
async fn seed_sessions(server: &SidecarProcess) {
    let item = |session: &str, seq: u64, json: &str| Record {
        turn_id: session.to_owned(),
        kind: "agent-item".to_owned(),
        id: format!("{seq:020}"),
        payload: json.as_bytes().to_vec(),
        content_type: "application/json".to_owned(),
        metadata: format!(r#"{{"u": "{session}-{seq}"}}"#).into_bytes(),
        mode: PutMode::Create as i32,
        ..Default::default()
    };
    let first = vec![
        item("s1", 1, r#"{"role":"user","content":"book a table\nfor two"}"#),
        item("s1", 2, r#"{"type":"function_call","call_id":"c1","name":"book","arguments":"{}"}"#),
        item("s1", 3, r#"{"role":"assistant","content":[{"type":"output_text","text":"Booked."}]}"#),
        Record { kind: "checkpoint".to_owned(), id: "c1".to_owned(), ..Default::default() },
    ];
    let first = first.into_iter().map(|r| Record { turn_id: "s1".to_owned(), ..r }).collect();
    let mut client = server.records();
    for records in [first, vec![item("s2", 1, r#"{"role":"user","content":"hi"}"#)]] {
        client.put_records(PutRecordsRequest { namespace: String::new(), records, fence: None }).await.expect("seeded");
    }
}

#[tokio::test]
async fn sessions_ls_show_and_rm_see_the_agent_sessions_items() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_sessions(&server).await;
    let socket = server.socket_path();

    let listed: Vec<Value> = rows(socket, &["sessions", "ls", "--json"])
        .into_iter()
        .map(|r| normalise(r, &["last_written_at", "last_written_at_ns"]))
        .collect();
    let session = |id: &str, items: u64| json!({"session_id": id, "items": items, "last_written_at": "*", "last_written_at_ns": "*"});
    assert_eq!(listed, [session("s2", 1), session("s1", 3)], "newest written first, checkpoints not counted");
    assert_eq!(rows(socket, &["sessions", "ls", "--json", "--limit", "1"]).len(), 1);

    let shown: Vec<Value> = rows(socket, &["sessions", "show", "s1", "--json", "--limit", "2"])
        .into_iter()
        .map(|r| normalise(r, &["recorded_at", "recorded_at_ns"]))
        .collect();
    let call = json!({"type": "function_call", "call_id": "c1", "name": "book", "arguments": "{}"});
    let answer = json!({"role": "assistant", "content": [{"type": "output_text", "text": "Booked."}]});
    let row = |seq: u64, item: Value| json!({"session_id": "s1", "seq": seq, "item": item, "recorded_at": "*", "recorded_at_ns": "*"});
    assert_eq!(shown, [row(2, call), row(3, answer)], "the newest items, oldest first");

    let table = cli(socket, &["sessions", "show", "s1"]);
    assert_eq!((table.code, table.stderr.as_str()), (0, ""));
    let lines: Vec<Vec<&str>> = table.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["SEQ", "ITEM", "TEXT", "RECORDED"]);
    assert_eq!(lines[1][..6], ["1", "user", "book", "a", "table", "for"], "{}", table.stdout);
    assert_eq!(lines[3][..3], ["3", "assistant", "Booked."], "{}", table.stdout);

    assert_eq!(rows(socket, &["sessions", "rm", "s1", "--json"]), [json!({"session_ids": ["s1"], "deleted": 3})]);
    let gone = cli(socket, &["sessions", "show", "s1"]);
    assert_eq!((gone.code, gone.stdout.as_str()), (2, ""), "{gone:?}");
    assert!(gone.stderr.starts_with("stepwell sessions show: session \"s1\" holds no items"), "{}", gone.stderr);
    assert_eq!(
        ids(&rows(socket, &["records", "ls", "s1", "--kind", "checkpoint", "--json"])),
        ["c1"],
        "other records stay"
    );
    let again = cli(socket, &["sessions", "rm", "s1"]);
    assert_eq!((again.code, again.stdout.as_str()), (0, "sessions: s1\ndeleted:  0 items\n"), "{again:?}");
}

/// Google ADK sessions as the clients' session services write them: app
/// "shop", user "u 1" (encoded in the turn), session "s1" with two events
/// and a state key, and session "s2" updated later; "s3" of another app.
async fn seed_adk_sessions(server: &SidecarProcess) {
    let head = |turn: &str, app: &str, user: &str, id: &str, updated: f64| Record {
        turn_id: turn.to_owned(),
        kind: "adk-session".to_owned(),
        id: "s".to_owned(),
        payload: json!({"app": app, "user": user, "id": id, "create_time": 1.5, "last_update_time": updated})
            .to_string()
            .into_bytes(),
        metadata: json!({"app": app, "user": user}).to_string().into_bytes(),
        mode: PutMode::Create as i32,
        ..Default::default()
    };
    let event = |seq: u64, body: Value| Record {
        turn_id: "adk:shop/u%201/s1".to_owned(),
        kind: "adk-event".to_owned(),
        id: format!("{seq:020}"),
        payload: body.to_string().into_bytes(),
        mode: PutMode::Create as i32,
        ..Default::default()
    };
    let records = vec![
        head("adk:shop/u%201/s1", "shop", "u 1", "s1", 1_800_000_000.0),
        event(
            1,
            json!({"author": "user", "content": {"parts": [{"text": "two\ntickets"}]}, "timestamp": 1_795_000_000.423}),
        ),
        event(
            2,
            json!({"author": "clerk", "content": {"parts": [{"functionCall": {"name": "book", "args": {"n": 2}}}]}}),
        ),
        Record {
            turn_id: "adk:shop/u%201/s1".to_owned(),
            kind: "adk-state".to_owned(),
            id: "kcart".to_owned(),
            parent_id: "s".to_owned(),
            payload: b"[\"ticket\"]".to_vec(),
            ..Default::default()
        },
        head("adk:shop/u%201/s2", "shop", "u 1", "s2", 1_800_000_100.0),
        Record {
            turn_id: "adk-app:shop".to_owned(),
            kind: "adk-state".to_owned(),
            id: "kregion".to_owned(),
            payload: b"\"eu\"".to_vec(),
            ..Default::default()
        },
        Record {
            turn_id: "adk-user:shop/u%201".to_owned(),
            kind: "adk-state".to_owned(),
            id: "ktier".to_owned(),
            payload: b"\"gold\"".to_vec(),
            ..Default::default()
        },
        head("adk:desk/u%201/s3", "desk", "u 1", "s3", 1_800_000_200.0),
    ];
    let request = PutRecordsRequest { namespace: String::new(), records, fence: None };
    server.records().put_records(request).await.expect("seeded");
}

#[tokio::test]
async fn adk_ls_show_and_rm_see_the_adk_sessions() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_adk_sessions(&server).await;
    let socket = server.socket_path();

    let listed = rows(socket, &["adk", "ls", "--app", "shop", "--json"]);
    let ids_of = |rows: &[Value]| rows.iter().map(|r| r["id"].as_str().unwrap_or("?").to_owned()).collect::<Vec<_>>();
    assert_eq!(ids_of(&listed), ["s2", "s1"], "the app's sessions, newest update first");
    assert_eq!(listed[1]["user"], "u 1");
    assert_eq!(ids_of(&rows(socket, &["adk", "ls", "--json"])), ["s3", "s2", "s1"]);
    assert_eq!(ids_of(&rows(socket, &["adk", "ls", "--user", "u 1", "--limit", "1", "--json"])), ["s3"]);
    let table = cli(socket, &["adk", "ls", "--app", "shop"]);
    assert_eq!(
        table.stdout.lines().nth(1).map(|l| l.split_whitespace().collect::<Vec<_>>()).unwrap_or_default()[..4],
        ["shop", "u", "1", "s2"],
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("2027-01-15T08:01:40Z"), "the update time in RFC 3339: {}", table.stdout);

    let shown = rows(socket, &["adk", "show", "shop", "u 1", "s1", "--json", "--limit", "1"]);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!((shown[0]["seq"].as_u64(), shown[0]["event"]["author"].as_str()), (Some(2), Some("clerk")));
    assert_eq!(shown[1], json!({"state": {"cart": ["ticket"], "app:region": "eu", "user:tier": "gold"}}));
    let table = cli(socket, &["adk", "show", "shop", "u 1", "s1"]);
    let lines: Vec<Vec<&str>> = table.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0], ["SEQ", "AUTHOR", "TEXT", "TIME"], "{}", table.stdout);
    assert_eq!(lines[1][..4], ["1", "user", "two", "tickets"], "{}", table.stdout);
    assert_eq!(lines[2][..3], ["2", "clerk", r#"book({"n":2})"#], "{}", table.stdout);
    assert!(table.stdout.contains("cart:") && table.stdout.contains(r#"["ticket"]"#), "{}", table.stdout);
    assert!(table.stdout.contains("app:region:") && table.stdout.contains("user:tier:"), "{}", table.stdout);
    assert!(table.stdout.contains("2026-11-18T11:06:40.423Z"), "an event's time without float noise: {}", table.stdout);

    let removed = rows(socket, &["adk", "rm", "shop", "u 1", "s1", "--json"]);
    assert_eq!(removed, [json!({"app": "shop", "user": "u 1", "session_ids": ["s1"], "deleted": 4})]);
    let gone = cli(socket, &["adk", "show", "shop", "u 1", "s1"]);
    assert_eq!((gone.code, gone.stdout.as_str()), (2, ""), "{gone:?}");
    assert!(gone.stderr.starts_with("stepwell adk show: no session \"s1\""), "{}", gone.stderr);
    assert_eq!(ids_of(&rows(socket, &["adk", "ls", "--app", "shop", "--json"])), ["s2"]);
    let again = cli(socket, &["adk", "rm", "shop", "u 1", "s1"]);
    assert_eq!((again.code, again.stdout.as_str()), (0, "sessions: s1\ndeleted:  0 records\n"), "{again:?}");
}

/// Memory items under two users' paths, one with a time to live.
async fn seed_memory(server: &SidecarProcess) {
    use stepwell::api::pb::{MemoryWrite, PutItemsRequest};
    let item = |path: &[&str], key: &str, value: Value| MemoryWrite {
        path: path.iter().map(|l| (*l).to_owned()).collect(),
        key: key.to_owned(),
        value: value.to_string().into_bytes(),
        ..Default::default()
    };
    let mut expiring = item(&["users", "bob"], "note", json!({"kind": "episode", "text": "asked about tea"}));
    expiring.ttl = Some(stepwell_test_support::requests::duration(std::time::Duration::from_secs(3600)));
    let writes = vec![
        item(&["users", "alice", "prefs"], "drink", json!({"kind": "fact", "text": "likes tea", "score": 5})),
        item(&["users", "alice", "prefs"], "food", json!({"kind": "fact", "text": "no nuts", "score": 3})),
        expiring,
    ];
    let mut memory = stepwell::api::pb::memory_service_client::MemoryServiceClient::new(server.channel());
    memory.put_items(PutItemsRequest { namespace: String::new(), writes }).await.expect("seeded");
}

#[tokio::test]
async fn memory_ls_show_search_and_rm_act_on_a_sidecars_memory() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    seed_memory(&server).await;
    let socket = server.socket_path();

    let paths = rows(socket, &["memory", "ls", "--json"]);
    assert_eq!(paths, [json!({"path": ["users", "alice", "prefs"]}), json!({"path": ["users", "bob"]})]);
    assert_eq!(rows(socket, &["memory", "ls", "users", "--depth", "2", "--json"]).len(), 2);
    let shown = rows(socket, &["memory", "show", "users/bob", "note", "--json"]);
    assert_eq!(
        normalise(
            shown[0].clone(),
            &["created_at", "created_at_ns", "updated_at", "updated_at_ns", "expires_at", "expires_at_ns"]
        ),
        json!({"path": ["users", "bob"], "key": "note", "value": {"kind": "episode", "text": "asked about tea"},
               "created_at": "*", "created_at_ns": "*", "updated_at": "*", "updated_at_ns": "*",
               "expires_at": "*", "expires_at_ns": "*"})
    );
    let found = rows(socket, &["memory", "search", "users", "--filter", r#"{"score": {"$gte": 4}}"#, "--json"]);
    assert_eq!(found.iter().map(|r| r["key"].clone()).collect::<Vec<_>>(), [json!("drink")]);
    let table = cli(socket, &["memory", "search", "users/alice"]);
    assert_eq!(table.code, 0, "{table:?}");
    assert!(
        table.stdout.starts_with("PATH")
            && table.stdout.contains("users/alice/prefs")
            && table.stdout.contains("likes tea")
    );

    assert_eq!(rows(socket, &["memory", "rm", "users/bob", "note", "--json"])[0]["deleted"], Value::Null);
    let gone = cli(socket, &["memory", "show", "users/bob", "note"]);
    assert_eq!(gone.code, 2, "an absent item is not found: {gone:?}");
    assert!(gone.stderr.starts_with("stepwell memory show: no memory item note at users/bob"), "{}", gone.stderr);
    assert_eq!(rows(socket, &["memory", "rm", "users", "--recursive", "--json"])[0]["deleted"], json!(2));
    assert!(rows(socket, &["memory", "search", "--json"]).is_empty());
    let neither = cli(socket, &["memory", "rm", "users"]);
    assert_eq!(neither.code, 64, "a key or --recursive is required: {neither:?}");
}
