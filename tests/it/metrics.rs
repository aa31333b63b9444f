//! The admin listener as an on-call engineer's scraper meets it, against the
//! real binary: `/metrics` in the Prometheus text format counts every
//! request by method and status code (and an admission refusal by its
//! reason), the group commit, the store, idempotency outcomes and
//! checkpoint outcomes, exactly as many as were made; no label carries a
//! namespace unless asked, and then only an admitted call's and at most
//! `--metrics-namespace-labels-max` of them; `/healthz` and `/readyz` answer probes; and the
//! listener keeps to loopback unless the operator says otherwise.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use stepwell::auth::token_sha256;
use tonic::{Code, Request};

use stepwell::api::pb::{BeginOutcome, CheckpointRequest, DeleteTurnRequest, ListTurnsRequest};
use stepwell_test_support::admin::{Scrape, free_local_address, get};
use stepwell_test_support::backend::{Backend, TestStore, backend};
use stepwell_test_support::requests::{T0, begin, checkpoint, complete, release, restore};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

const RPC: &str = "rpc_server_call_duration_seconds";
const CHECKPOINT_SERVICE: &str = "stepwell.v1.CheckpointService";
const IDEMPOTENCY_SERVICE: &str = "stepwell.v1.IdempotencyService";

/// Requests of one method answered with one code, as the scrape counts them.
fn calls(scrape: &Scrape, service: &str, method: &str, code: Code) -> u64 {
    let code = (code as i32).to_string();
    scrape.count(RPC, &[("rpc_service", service), ("rpc_method", method), ("rpc_grpc_status_code", &code)])
}

#[tokio::test]
async fn metrics_count_every_request_by_method_and_code_and_every_outcome() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let idle = Scrape::of(&admin).await;
    let mut client = server.client();
    let mut keys = server.idempotency();

    // Checkpoints: 5 stored, 2 duplicates, 1 conflict, 1 invalid; 2 restores,
    // 1 listing, and the deletion of a turn of 2.
    for (turn, phase, ts) in [
        ("a", "started", T0),
        ("a", "step", T0 + 1),
        ("a", "done", T0 + 2),
        ("b", "started", T0),
        ("b", "step", T0 + 1),
    ] {
        assert!(client.checkpoint(checkpoint(turn, phase, ts, "{}")).await.expect("stored").into_inner().inserted);
    }
    for _ in 0..2 {
        let again = client.checkpoint(checkpoint("a", "started", T0, "{}")).await.expect("a duplicate is answered");
        assert!(!again.into_inner().inserted);
    }
    let conflict = client.checkpoint(checkpoint("a", "started", T0, r#"{"other":1}"#)).await.expect_err("a conflict");
    assert_eq!(conflict.code(), Code::AlreadyExists);
    let invalid =
        client.checkpoint(CheckpointRequest { turn_id: String::new(), ..checkpoint("a", "x", T0, "{}") }).await;
    assert_eq!(invalid.expect_err("no turn id").code(), Code::InvalidArgument);
    for _ in 0..2 {
        client.restore(restore("a")).await.expect("restored");
    }
    client.list_turns(ListTurnsRequest::default()).await.expect("listed");
    let deleted = client
        .delete_turn(DeleteTurnRequest { turn_id: "b".into(), ..Default::default() })
        .await
        .expect("deleted")
        .into_inner();
    assert_eq!(deleted.deleted, 2);

    // Idempotency: Begin acquired twice, in progress, completed and failed
    // once each; a Complete with a stale token is LEASE_LOST.
    let first = keys.begin(begin("k1")).await.expect("begun").into_inner();
    assert_eq!(first.outcome(), BeginOutcome::Acquired);
    assert_eq!(keys.begin(begin("k1")).await.expect("begun").into_inner().outcome(), BeginOutcome::InProgress);
    let stale = keys.complete(complete("k1", first.lease_token + 1, b"{}")).await.expect_err("not its token");
    assert_eq!(stale.code(), Code::Aborted);
    keys.complete(complete("k1", first.lease_token, b"{}")).await.expect("completed");
    assert_eq!(keys.begin(begin("k1")).await.expect("begun").into_inner().outcome(), BeginOutcome::Completed);
    let second = keys.begin(begin("k2")).await.expect("begun").into_inner();
    keys.release(release("k2", second.lease_token, true, "declined")).await.expect("released");
    assert_eq!(keys.begin(begin("k2")).await.expect("begun").into_inner().outcome(), BeginOutcome::Failed);

    let scrape = Scrape::of(&admin).await;
    // Every request, by method and code.
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "Checkpoint", Code::Ok), 7);
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "Checkpoint", Code::AlreadyExists), 1);
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "Checkpoint", Code::InvalidArgument), 1);
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "Restore", Code::Ok), 2);
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "ListTurns", Code::Ok), 1);
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "DeleteTurn", Code::Ok), 1);
    assert_eq!(calls(&scrape, IDEMPOTENCY_SERVICE, "Begin", Code::Ok), 5);
    assert_eq!(calls(&scrape, IDEMPOTENCY_SERVICE, "Complete", Code::Ok), 1);
    assert_eq!(calls(&scrape, IDEMPOTENCY_SERVICE, "Complete", Code::Aborted), 1);
    assert_eq!(calls(&scrape, IDEMPOTENCY_SERVICE, "Release", Code::Ok), 1);
    assert_eq!(scrape.count(RPC, &[]), 21, "nothing else was counted");
    // Outcomes.
    assert_eq!(scrape.value("stepwell_checkpoints_appended_total", &[]), 5.0);
    assert_eq!(scrape.value("stepwell_checkpoints_duplicate_total", &[]), 2.0);
    assert_eq!(scrape.value("stepwell_checkpoint_conflicts_total", &[]), 1.0);
    assert_eq!(scrape.value("stepwell_turns_deleted_total", &[]), 1.0);
    assert_eq!(scrape.value("stepwell_checkpoints_deleted_total", &[]), 2.0);
    for (outcome, count) in [("acquired", 2.0), ("in_progress", 1.0), ("completed", 1.0), ("failed", 1.0)] {
        assert_eq!(scrape.value("stepwell_idempotency_begins_total", &[("outcome", outcome)]), count, "{outcome}");
    }
    assert_eq!(scrape.value("stepwell_idempotency_lease_lost_total", &[]), 1.0);
    assert_eq!(scrape.value("stepwell_idempotency_takeovers_total", &[]), 0.0);
    // The group commit: every write waited once and was in one batch.
    let batches = scrape.count("stepwell_batch_writes", &[]);
    let writes = scrape.sum("stepwell_batch_writes", &[]);
    assert!(batches >= 1 && writes >= 9.0, "{batches} batches of {writes} writes");
    assert_eq!(scrape.count("stepwell_write_queue_wait_seconds", &[]) as f64, writes);
    let backend_label = match backend() {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(scrape.count("stepwell_batch_commit_duration_seconds", &[("backend", backend_label)]), batches);
    assert_eq!(scrape.value("stepwell_batches_failed_total", &[("backend", backend_label)]), 0.0);
    assert_eq!(scrape.value("stepwell_write_queue_depth", &[]), 0.0);
    assert_eq!(scrape.value("stepwell_write_queue_bytes", &[]), 0.0);
    // The store and the process.
    assert_eq!(scrape.value("stepwell_store_up", &[]), 1.0);
    assert_eq!(scrape.value("stepwell_store_breaker_open", &[]), 0.0);
    assert_eq!(scrape.value("stepwell_build_info", &[("backend", backend_label)]), 1.0);
    assert!(scrape.value("process_start_time_seconds", &[]) > 1.7e9);
    match backend() {
        Backend::Sqlite => {
            assert!(scrape.value("stepwell_sqlite_file_bytes", &[("file", "database")]) > 0.0);
            assert!(scrape.value("stepwell_sqlite_file_bytes", &[("file", "wal")]) > 0.0, "appends are in the WAL");
        }
        Backend::Postgres => {
            let max = scrape.value("stepwell_postgres_pool_max_connections", &[]);
            let in_use = scrape.value("stepwell_postgres_pool_connections", &[("state", "in_use")]);
            let idle = scrape.value("stepwell_postgres_pool_connections", &[("state", "idle")]);
            assert_eq!(scrape.value("stepwell_postgres_pool_waiting_requests", &[]), 0.0, "none waits when idle");
            assert!(max >= 1.0 && idle >= 1.0 && in_use + idle <= max, "in use {in_use}, idle {idle}, max {max}");
        }
    }
    // No caller-chosen value is a label.
    for label in ["namespace", "turn_id", "key", "phase"] {
        assert!(!scrape.label_names().iter().any(|name| name == label), "{label} is not a label");
    }

    // An idle sidecar's scrape already lists every family, typed.
    for (family, kind) in FAMILIES {
        assert_eq!(idle.types.get(*family).map(String::as_str), Some(*kind), "{family} in\n{}", idle.text);
    }
    assert_eq!(idle.count(RPC, &[]), 0);
}

/// Every metric family and its type, as docs/reference/metrics.md lists them.
const FAMILIES: &[(&str, &str)] = &[
    (RPC, "histogram"),
    ("stepwell_batch_writes", "histogram"),
    ("stepwell_write_queue_wait_seconds", "histogram"),
    ("stepwell_batch_commit_duration_seconds", "histogram"),
    ("stepwell_batches_failed_total", "counter"),
    ("stepwell_write_queue_depth", "gauge"),
    ("stepwell_write_queue_bytes", "gauge"),
    ("stepwell_store_up", "gauge"),
    ("stepwell_store_breaker_open", "gauge"),
    ("stepwell_idempotency_begins_total", "counter"),
    ("stepwell_idempotency_takeovers_total", "counter"),
    ("stepwell_idempotency_lease_lost_total", "counter"),
    ("stepwell_idempotency_records_purged_total", "counter"),
    ("stepwell_sweeps_total", "counter"),
    ("stepwell_sweep_last_success_timestamp_seconds", "gauge"),
    ("stepwell_checkpoints_appended_total", "counter"),
    ("stepwell_checkpoints_duplicate_total", "counter"),
    ("stepwell_checkpoint_conflicts_total", "counter"),
    ("stepwell_turns_deleted_total", "counter"),
    ("stepwell_checkpoints_deleted_total", "counter"),
    ("stepwell_tls_handshakes_shed_total", "counter"),
    ("stepwell_build_info", "gauge"),
    ("process_start_time_seconds", "gauge"),
];

#[tokio::test]
async fn a_request_refused_by_admission_is_counted_with_its_reason() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--state-bytes-max", "4096", "--result-bytes-max", "4096", "--message-bytes-max", "70000"])
        .spawn()
        .await;
    let mut client = server.client();
    let large = format!(r#"{{"s":"{}"}}"#, "x".repeat(100_000));
    let refused = client.checkpoint(checkpoint("a", "started", T0, &large)).await.expect_err("too large");
    assert_eq!(refused.code(), Code::ResourceExhausted);
    client.checkpoint(checkpoint("a", "started", T0, "{}")).await.expect("a small one is stored");

    let scrape = Scrape::of(&admin).await;
    let exhausted = (Code::ResourceExhausted as i32).to_string();
    let labels = [("rpc_method", "Checkpoint"), ("rpc_grpc_status_code", exhausted.as_str())];
    assert_eq!(scrape.count(RPC, &[("refusal", "MESSAGE_TOO_LARGE"), labels[0], labels[1]]), 1);
    assert_eq!(scrape.count(RPC, &labels), 1, "no refusal without its reason");
    assert_eq!(calls(&scrape, CHECKPOINT_SERVICE, "Checkpoint", Code::Ok), 1);
    assert_eq!(scrape.value("stepwell_checkpoints_appended_total", &[]), 1.0, "the refused one was not stored");
}

#[tokio::test]
async fn namespace_labels_appear_only_when_asked_for() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--metrics-namespace-labels"])
        .spawn()
        .await;
    let mut client = server.client();
    for namespace in ["tenant-a", "tenant-b", "tenant-b"] {
        let request = CheckpointRequest { namespace: namespace.into(), ..checkpoint("t", "started", T0, "{}") };
        client.checkpoint(request).await.expect("stored or a duplicate");
    }

    let scrape = Scrape::of(&admin).await;
    let ok = (Code::Ok as i32).to_string();
    let by =
        |namespace| [("rpc_method", "Checkpoint"), ("rpc_grpc_status_code", ok.as_str()), ("namespace", namespace)];
    assert_eq!(scrape.count(RPC, &by("tenant-a")), 1);
    assert_eq!(scrape.count(RPC, &by("tenant-b")), 2);
}

/// The values the `namespace` label takes in the request metrics.
fn labelled_namespaces(scrape: &Scrape) -> BTreeSet<String> {
    scrape.matching(RPC, &[]).filter_map(|sample| sample.labels.get("namespace").map(str::to_owned)).collect()
}

/// `message` as the holder of `token` sends it.
fn as_holder<T>(token: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert("authorization", format!("Bearer {token}").parse().expect("an ASCII header"));
    request
}

/// An auth file with a writer of every namespace (`swt_writer`) and a
/// reader of `open` (`swt_reader`), in `dir`.
fn writer_and_reader(dir: &std::path::Path) -> String {
    let principal = |id: &str, token: &str, grant: &str| {
        format!("[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{grant}]\n\n", token_sha256(token))
    };
    let text = [
        principal("writer", "swt_writer", "{ namespace = \"*\", role = \"write\" }"),
        principal("reader", "swt_reader", "{ namespace = \"open\", role = \"read\" }"),
    ]
    .concat();
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).expect("write the auth file");
    path.to_str().expect("a UTF-8 path").to_owned()
}

#[tokio::test]
async fn callers_the_sidecar_refuses_label_no_series() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let auth_file = writer_and_reader(store.dir());
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--auth-file", &auth_file, "--metrics-namespace-labels"])
        .spawn()
        .await;
    let mut client = server.client();
    let in_namespace = |namespace: String| CheckpointRequest { namespace, ..checkpoint("t", "started", T0, "{}") };
    for i in 0..20 {
        let refused = client.checkpoint(in_namespace(format!("stranger-{i}"))).await.expect_err("no token");
        assert_eq!(refused.code(), Code::Unauthenticated);
        let unknown = as_holder("swt_unknown", in_namespace(format!("guess-{i}")));
        assert_eq!(client.checkpoint(unknown).await.expect_err("unknown token").code(), Code::Unauthenticated);
    }
    let denied = client.checkpoint(as_holder("swt_reader", in_namespace("open".to_owned()))).await;
    assert_eq!(denied.expect_err("a reader may not write").code(), Code::PermissionDenied);
    client.checkpoint(as_holder("swt_writer", in_namespace("tenant-a".to_owned()))).await.expect("stored");

    let scrape = Scrape::of(&admin).await;
    assert_eq!(labelled_namespaces(&scrape), BTreeSet::from(["tenant-a".to_owned()]), "{}", scrape.text);
    let unauthenticated = (Code::Unauthenticated as i32).to_string();
    let refused = [("rpc_method", "Checkpoint"), ("rpc_grpc_status_code", unauthenticated.as_str())];
    assert_eq!(scrape.count(RPC, &refused), 40, "every refused call is still counted");
}

#[tokio::test]
async fn namespaces_past_the_label_cap_are_counted_together() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let auth_file = writer_and_reader(store.dir());
    let server = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen(&admin)
        .flags(&["--auth-file", &auth_file, "--metrics-namespace-labels", "--metrics-namespace-labels-max", "3"])
        .spawn()
        .await;
    let mut client = server.client();
    for namespace in ["ns-1", "ns-2", "ns-3", "ns-4", "ns-5", "ns-1", "ns-6"] {
        let request = CheckpointRequest { namespace: namespace.into(), ..checkpoint("t", "started", T0, "{}") };
        client.checkpoint(as_holder("swt_writer", request)).await.expect("stored or a duplicate");
    }

    let scrape = Scrape::of(&admin).await;
    let expected = ["ns-1", "ns-2", "ns-3", "_other"].map(str::to_owned);
    assert_eq!(labelled_namespaces(&scrape), BTreeSet::from(expected), "{}", scrape.text);
    let ok = (Code::Ok as i32).to_string();
    let by =
        |namespace| [("rpc_method", "Checkpoint"), ("rpc_grpc_status_code", ok.as_str()), ("namespace", namespace)];
    assert_eq!(scrape.count(RPC, &by("ns-1")), 2);
    assert_eq!(scrape.count(RPC, &by("_other")), 3, "ns-4, ns-5 and ns-6 under one value");
}

/// A running `stepwell serve` that is killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn probes_hear_not_ready_until_the_store_opens_while_the_process_is_live() {
    // A Postgres no one listens on: the sidecar retries it, NOT_SERVING.
    let store = TestStore::new().await;
    let nowhere = format!("postgres://stepwell@{}/stepwell", free_local_address());
    let admin = free_local_address();
    let mut child = Command::new(STEPWELL)
        .args(["serve", "--listen", &format!("unix:{}", store.dir().join("s.sock").display())])
        .args(["--database-url", &nowhere, "--admin-listen", &admin])
        .env("STEPWELL_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the stepwell binary");
    let stderr = child.stderr.take().expect("piped");
    let _running = Running(child);
    // The admin listener is bound before the store is tried.
    let seen = tokio::task::spawn_blocking(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("retrying") {
                return seen;
            }
        }
        panic!("stepwell stopped before retrying the store:\n{seen}");
    })
    .await
    .expect("the log reader");
    assert!(seen.contains("admin listening"), "{seen}");

    let (status, _, body) = get(&admin, "/healthz").await;
    assert_eq!(status, 200, "live: {body}");
    let (status, _, body) = get(&admin, "/readyz").await;
    assert_eq!(status, 503, "not ready: {body}");
    let scrape = Scrape::of(&admin).await;
    assert_eq!(scrape.value("stepwell_store_up", &[]), 0.0);
}

#[tokio::test]
async fn readyz_answers_ready_while_serving() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let _server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let (status, _, body) = get(&admin, "/readyz").await;
    assert_eq!((status, body.trim()), (200, "ready"));
    let (status, _, _) = get(&admin, "/nothing-here").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn an_admin_listener_beyond_loopback_needs_the_operators_word() {
    let store = TestStore::new().await;
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).admin_listen("0.0.0.0:0").run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("admin-listen") && stderr.contains("--insecure-allow-network"), "{stderr}");

    let log = SidecarProcess::builder(STEPWELL, &store)
        .admin_listen("0.0.0.0:0")
        .flags(&["--insecure-allow-network"])
        .run_until_logged("admin listening");
    assert!(log.contains("admin_address=0.0.0.0:"), "{log}");
}

#[tokio::test]
async fn an_admin_address_in_use_stops_the_start_and_says_which() {
    let store = TestStore::new().await;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port");
    let address = taken.local_addr().expect("bound").to_string();
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).admin_listen(&address).run_until_exit();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&format!("--admin-listen {address}")), "{stderr}");
}

#[tokio::test]
async fn admin_listen_off_serves_no_admin_listener() {
    let store = TestStore::new().await;
    let log = SidecarProcess::builder(STEPWELL, &store).admin_listen("off").run_until_logged("serving");
    assert!(!log.contains("admin listening"), "{log}");
}

/// The metric families named in `text`: words that start like stepwell's
/// metrics, without a histogram's series suffix.
fn families_named(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|word| ["stepwell_", "rpc_server_", "process_"].iter().any(|prefix| word.starts_with(prefix)))
        .map(|word| {
            let family = ["_bucket", "_sum", "_count"].iter().find_map(|suffix| word.strip_suffix(suffix));
            family.unwrap_or(word).to_owned()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn the_dashboard_and_the_alerts_name_only_metrics_a_sidecar_serves() {
    let store = TestStore::new().await;
    let admin = free_local_address();
    let _server = SidecarProcess::builder(STEPWELL, &store).admin_listen(&admin).spawn().await;
    let scrape = Scrape::of(&admin).await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // The other backend's own families are checked in its pass.
    let other_backend = match backend() {
        Backend::Sqlite => "stepwell_postgres_",
        Backend::Postgres => "stepwell_sqlite_",
    };
    for file in ["deploy/grafana/stepwell.json", "deploy/prometheus/stepwell-alerts.yml"] {
        let text = std::fs::read_to_string(root.join(file)).expect("the file is in the repository");
        let named = families_named(&text);
        assert!(named.len() >= 5, "{file} names metrics: {named:?}");
        for family in named.into_iter().filter(|family| !family.starts_with(other_backend)) {
            assert!(scrape.types.contains_key(&family), "{file} names {family}, which /metrics does not serve");
        }
    }
    // The metrics reference lists every family a sidecar serves.
    let reference = std::fs::read_to_string(root.join("docs/reference/metrics.md")).expect("the metrics reference");
    for family in scrape.types.keys() {
        assert!(reference.contains(&format!("`{family}`")), "docs/reference/metrics.md lists `{family}`");
    }
}
