//! Moving a store (`stepwell migrate`, `export`, `import`): a store built
//! through a real sidecar with every kind of record is moved with the sidecar
//! stopped, and a sidecar on the copy must answer Restore, ListTurns, Get and
//! Begin exactly as on the original, and issue tokens above every old one.
//! Moves between SQLite and Postgres need both backends, so they live in
//! `postgres_only` below and run in the Postgres pass of scripts/test; the
//! export/import round trip and the failed verification run on the pass's
//! own backend against a SQLite file.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use stepwell::api::pb::{BeginOutcome, BeginRequest, CheckpointRequest, GetRequest, ReleaseRequest, TurnStatus};
use stepwell::config::Database;
use stepwell_test_support::IdempotencyClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{
    T0, begin, begin_leased, complete, duration, list_all, list_turns, restore, restore_all, ts,
};
use stepwell_test_support::sidecar::Sidecar;

use crate::STEPWELL;

const NAMESPACES: [&str; 3] = ["", "alpha", "beta"];
const TURNS: [&str; 4] = ["open", "done", "tied", "versions"];
const KEYS: [&str; 5] = ["held", "completed", "failed", "released", "fingerprinted"];

/// Fills `store` through a sidecar: in each namespace, an open turn, a
/// terminal one, a turn whose checkpoints share a timestamp (so their
/// insertion order decides Restore), one with sessions and versions, a
/// duplicate append, and idempotency keys held, completed, failed, released
/// and fingerprinted. Returns the greatest token issued.
async fn populate(sidecar: &Sidecar) -> u64 {
    let (mut client, mut keys) = (sidecar.client(), sidecar.idempotency());
    let mut max_token = 0;
    for (n, namespace) in NAMESPACES.into_iter().enumerate() {
        let base = T0 + n as i64 * 1_000;
        let append = |turn: &str, phase: &str, at: i64, terminal: bool| CheckpointRequest {
            namespace: namespace.to_owned(),
            turn_id: turn.to_owned(),
            phase: phase.to_owned(),
            timestamp: Some(ts(at)),
            state: format!(r#"{{"at":"{namespace}/{turn}/{phase}","text":"\u00e9\u0000"}}"#).into_bytes(),
            terminal,
            ..Default::default()
        };
        let requests = vec![
            append("open", "a", base + 1, false),
            append("open", "b", base + 2, false),
            append("done", "a", base + 1, false),
            append("done", "end", base + 5, true),
            // Equal timestamps: "z" then "m", which Restore returns in that order.
            append("tied", "z", base + 3, false),
            append("tied", "m", base + 3, false),
            CheckpointRequest {
                session_id: "s1".into(),
                workflow_version: "v1".into(),
                ..append("versions", "a", base + 1, false)
            },
            CheckpointRequest { session_id: "s2".into(), ..append("versions", "b", base + 4, false) },
            // Late, with an older timestamp: it names neither session nor the latest phase.
            CheckpointRequest {
                session_id: "s0".into(),
                workflow_version: "v0".into(),
                ..append("versions", "c", base, false)
            },
        ];
        for request in requests {
            let response = client.checkpoint(request.clone()).await.expect("Checkpoint").into_inner();
            assert!(response.inserted, "{request:?} is new");
        }
        let duplicate = client.checkpoint(append("open", "a", base + 1, false)).await.expect("Checkpoint");
        assert!(!duplicate.into_inner().inserted, "a duplicate is not inserted again");

        let begin_in =
            |key: &str, lease: Duration| BeginRequest { namespace: namespace.to_owned(), ..begin_leased(key, lease) };
        let hour = Duration::from_secs(3600);
        max_token = max_token.max(acquire(&mut keys, begin_in("held", hour)).await);
        let token = acquire(&mut keys, begin_in("completed", hour)).await;
        let mut done = complete("completed", token, b"\x00result bytes\xff");
        done.namespace = namespace.to_owned();
        keys.complete(done).await.expect("Complete");
        let token = acquire(&mut keys, begin_in("failed", hour)).await;
        let failure =
            ReleaseRequest { namespace: namespace.to_owned(), ..release_req("failed", token, true, "it broke") };
        keys.release(failure).await.expect("Release permanently");
        let token = acquire(&mut keys, begin_in("released", hour)).await;
        let again =
            ReleaseRequest { namespace: namespace.to_owned(), ..release_req("released", token, false, "retry") };
        keys.release(again).await.expect("Release");
        let fingerprinted = BeginRequest {
            fingerprint: b"fp".to_vec(),
            retention: Some(duration(Duration::from_secs(7 * 86_400))),
            ..begin_in("fingerprinted", hour)
        };
        max_token = max_token.max(acquire(&mut keys, fingerprinted).await);
        max_token = max_token.max(token);
    }
    max_token
}

async fn acquire(keys: &mut IdempotencyClient, request: BeginRequest) -> u64 {
    let answer = keys.begin(request).await.expect("Begin").into_inner();
    assert_eq!(answer.outcome(), BeginOutcome::Acquired);
    answer.lease_token
}

fn release_req(key: &str, token: u64, permanent: bool, error: &str) -> ReleaseRequest {
    stepwell_test_support::requests::release(key, token, permanent, error)
}

/// Everything a client can read of the populated store, as text: every
/// turn's Restore (both directions), every ListTurns by status, every key's
/// Get, and Begin on the keys where Begin only reads.
async fn answers(sidecar: &Sidecar) -> String {
    let (mut client, mut keys) = (sidecar.client(), sidecar.idempotency());
    let mut all = String::new();
    for namespace in NAMESPACES {
        for turn in TURNS {
            for newest_first in [false, true] {
                let request = stepwell::api::pb::RestoreRequest {
                    namespace: namespace.to_owned(),
                    newest_first,
                    page_size: 2,
                    ..restore(turn)
                };
                all += &format!("{namespace}/{turn} {newest_first}: {:?}\n", restore_all(&mut client, request).await);
            }
        }
        for status in [TurnStatus::Open, TurnStatus::Terminal, TurnStatus::Any] {
            let request = stepwell::api::pb::ListTurnsRequest {
                namespace: namespace.to_owned(),
                page_size: 1,
                ..list_turns(status)
            };
            all += &format!("{namespace} {status:?}: {:?}\n", list_all(&mut client, request).await);
        }
        for key in ["held", "completed", "failed", "fingerprinted"] {
            let request = BeginRequest { namespace: namespace.to_owned(), ..begin(key) };
            let answer = keys.begin(request).await.expect("Begin").into_inner();
            all += &format!("{namespace}/{key} begin: {answer:?}\n");
        }
        for key in KEYS {
            let request = GetRequest { namespace: namespace.to_owned(), key: key.to_owned() };
            let answer = keys.get(request).await.expect("Get").into_inner();
            all += &format!("{namespace}/{key} get: {answer:?}\n");
        }
    }
    all
}

/// A new key's first token on the store: must be above every old one.
async fn new_token(sidecar: &Sidecar, key: &str) -> u64 {
    let answer = sidecar.idempotency().begin(begin(key)).await.expect("Begin").into_inner();
    assert_eq!(answer.outcome(), BeginOutcome::Acquired);
    answer.lease_token
}

/// A store built by `populate`, its answers, and its greatest token; the
/// sidecar is stopped.
async fn populated(store: &TestStore) -> (String, u64) {
    let sidecar = Sidecar::builder().store(store).start().await;
    let max_token = populate(&sidecar).await;
    let before = answers(&sidecar).await;
    sidecar.stop().await.expect("stop the sidecar");
    (before, max_token)
}

/// What a sidecar on `store` answers, and the token of a new Begin of `key`.
async fn answers_on(store: &TestStore, key: &str) -> (String, u64) {
    let sidecar = Sidecar::builder().store(store).start().await;
    let after = answers(&sidecar).await;
    let token = new_token(&sidecar, key).await;
    sidecar.stop().await.expect("stop the sidecar");
    (after, token)
}

/// Runs the binary; returns its exit code and stderr.
fn run(args: &[&str]) -> (i32, String) {
    let Output { status, stderr, .. } = Command::new(STEPWELL).args(args).output().expect("run stepwell");
    (status.code().expect("an exit code"), String::from_utf8_lossy(&stderr).into_owned())
}

fn sqlite_in(dir: &Path, name: &str) -> TestStore {
    TestStore::on(Database::Sqlite { path: dir.join(name) })
}

/// The export's lines without the header (which names the backend) and each
/// checkpoint's `seq` (a position in one store's log).
fn portable_lines(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).expect("read the export");
    text.lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).expect("each line is JSON"))
        .filter(|value| value["kind"] != "header")
        .map(|mut value| {
            value.as_object_mut().expect("an object").remove("seq");
            value
        })
        .collect()
}

#[tokio::test]
async fn export_then_import_gives_a_store_that_answers_alike() {
    let source = TestStore::new().await;
    let (before, max_token) = populated(&source).await;
    let file = source.dir().join("backup.ndjson");
    let (code, stderr) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("exported 27 checkpoints, 12 turns and 15 idempotency records"), "{stderr}");

    let target = sqlite_in(source.dir(), "imported.db");
    let (code, stderr) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("checkpoints: 27 copied, 0 already present"), "{stderr}");
    assert!(stderr.contains("verified: every namespace matches"), "{stderr}");
    let (code, stderr) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("nothing to copy"), "a second import copies nothing: {stderr}");

    let again = source.dir().join("again.ndjson");
    let (code, stderr) = run(&["export", "--from", &target.url(), "--out", again.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(portable_lines(&file), portable_lines(&again), "exporting the import gives the same records");

    let (after, token) = answers_on(&target, "new").await;
    assert_eq!(before, after);
    assert!(token > max_token, "a new token {token} is above every old one ({max_token})");
}

#[tokio::test]
async fn a_truncated_export_is_refused() {
    let source = TestStore::new().await;
    populated(&source).await;
    let file = source.dir().join("backup.ndjson");
    let (code, stderr) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    let cut: Vec<&str> = text.lines().take(10).collect();
    std::fs::write(&file, cut.join("\n")).unwrap();
    let target = sqlite_in(source.dir(), "imported.db");
    let (code, stderr) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
}

#[tokio::test]
async fn a_target_that_disagrees_fails_verification() {
    let source = TestStore::new().await;
    populated(&source).await;
    // The target already holds one of the source's checkpoint keys, with
    // other bytes: it is kept, and the checksum tells.
    let target = sqlite_in(source.dir(), "other.db");
    let sidecar = Sidecar::builder().store(&target).start().await;
    let mut request = stepwell_test_support::requests::checkpoint("open", "a", T0 + 1, r#"{"other":1}"#);
    request.namespace = String::new();
    sidecar.client().checkpoint(request).await.expect("Checkpoint");
    sidecar.stop().await.expect("stop");
    let (code, stderr) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("26 copied, 1 already present"), "{stderr}");
    assert!(stderr.contains("DIFFERS") && stderr.contains("verification FAILED"), "{stderr}");
    assert!(stderr.lines().any(|l| l.starts_with("alpha") && l.ends_with(" ok")), "other namespaces match: {stderr}");
}

/// Moves between SQLite and Postgres; both backends are needed, so these
/// run in the Postgres pass only (scripts/test skips `postgres_only::` on SQLite).
mod postgres_only {
    use stepwell::moving::{MoveError, Plan, migrate_stores};
    use stepwell_test_support::backend::{TestStore, fresh_postgres_database};

    use super::{answers_on, populated, run, sqlite_in};
    use stepwell::config::Database;

    #[tokio::test]
    async fn migrate_from_sqlite_to_postgres_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let source = sqlite_in(dir.path(), "source.db");
        let (before, max_token) = populated(&source).await;
        let target = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });

        let (code, stderr) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("checkpoints: 27 copied, 0 already present"), "{stderr}");
        assert!(stderr.contains("idempotency records: 15 copied, 0 already present"), "{stderr}");
        assert!(stderr.contains("verified: every namespace matches"), "{stderr}");
        assert!(stderr.lines().filter(|l| l.ends_with(" ok")).count() == 3, "a row per namespace: {stderr}");

        let (code, stderr) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("checkpoints: 0 copied, 27 already present"), "{stderr}");
        assert!(stderr.contains("nothing to copy"), "a second run copies nothing: {stderr}");

        let (after, token) = answers_on(&target, "new").await;
        assert_eq!(before, after, "Postgres answers as SQLite did");
        assert!(token > max_token, "a new token {token} is above every old one ({max_token})");

        let back = sqlite_in(dir.path(), "back.db");
        let (code, stderr) = run(&["migrate", "--from", &target.url(), "--to", &back.url()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("verified: every namespace matches"), "{stderr}");
        let (again, newer) = answers_on(&back, "newer").await;
        assert_eq!(before, again, "back on SQLite, the same answers");
        assert!(newer > token, "the fence moved back with the store: {newer} > {token}");
    }

    #[tokio::test]
    async fn a_migration_stopped_halfway_completes_when_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let source = sqlite_in(dir.path(), "source.db");
        let (before, max_token) = populated(&source).await;
        let target = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });

        let plan = Plan { chunk_rows: 4, stop_after_chunks: Some(3) };
        let stopped = migrate_stores(&source.database(), &target.database(), plan).await;
        assert!(matches!(stopped, Err(MoveError::Stopped(3))), "{stopped:?}");
        assert_eq!(target.inspect().await.count("checkpoints").await, 12, "three chunks of four were committed");

        let (code, stderr) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("checkpoints: 15 copied, 12 already present"), "{stderr}");
        assert!(stderr.contains("verified: every namespace matches"), "{stderr}");
        let (after, token) = answers_on(&target, "new").await;
        assert_eq!(before, after);
        assert!(token > max_token, "a new token {token} is above every old one ({max_token})");
    }
}
