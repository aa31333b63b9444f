//! Disk faults under SQLite, the embedded store.
//!
//! - A full disk, made with `--sqlite-bytes-max` (SQLite's page cap): writes
//!   get RESOURCE_EXHAUSTED and none is acknowledged, reads go on, and writes
//!   resume once turns are deleted, with no restart. `PRAGMA integrity_check`
//!   passes afterwards.
//! - An I/O-error sweep: `iofail.c`, preloaded into the sidecar, fails the
//!   Nth write or sync of the store's files with EIO or ENOSPC, for N = 1, 2,
//!   … until the operation completes without meeting the fault. Each time
//!   the answer is an error or OK with the row stored; the next write on the
//!   same sidecar succeeds; the file stays intact.

use std::path::PathBuf;

use serde_json::json;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{Connection, SqliteConnection};
use stepwell::api::pb::{
    BeginOutcome, BeginRequest, CheckpointRequest, DeleteTurnRequest, GetRequest, ListTurnsRequest, RecordState,
};
use stepwell::store::Database;
use tonic::Code;

use stepwell_test_support::backend::{Backend, TestStore, backend};
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::health::wait_for_serving;
use stepwell_test_support::requests::{T0, complete, stored_states, ts};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;
use crate::checker::Outcome;
use crate::profile::report;

/// These tests run in the SQLite pass; the Postgres pass skips them by name.
fn assert_sqlite_pass() {
    assert_eq!(backend(), Backend::Sqlite, "sqlite_only tests need STEPWELL_TEST_BACKEND=sqlite");
}

/// `PRAGMA integrity_check` on the store's file, with no sidecar running.
async fn integrity(store: &TestStore) -> String {
    let Database::Sqlite { path } = store.database() else { panic!("an SQLite store") };
    let mut conn = SqliteConnection::connect_with(&SqliteConnectOptions::new().filename(path))
        .await
        .expect("open the store's file");
    sqlx::query_scalar("PRAGMA integrity_check").fetch_one(&mut conn).await.expect("run integrity_check")
}

fn checkpoint_of(turn: &str, n: i64, state: Vec<u8>) -> CheckpointRequest {
    CheckpointRequest {
        turn_id: turn.to_owned(),
        phase: "step".to_owned(),
        timestamp: Some(ts(T0 + n)),
        state,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers_when_space_is_freed() {
    assert_sqlite_pass();
    let store = TestStore::new().await;
    let server =
        SidecarProcess::builder(STEPWELL, &store).name("full").flags(&["--sqlite-bytes-max", "1048576"]).spawn().await;
    let mut client = server.client();
    let state = |n: i64| format!("\"{n}:{}\"", "x".repeat(16 * 1024)).into_bytes();
    let turn_of = |n: i64| format!("fill-{}", n / 8);

    // Fill until the store refuses; every refusal is STORE_FULL.
    let mut acknowledged = Vec::new();
    let mut refused = Vec::new();
    for n in 0..1000 {
        match client.checkpoint(checkpoint_of(&turn_of(n), n, state(n))).await {
            Ok(_) => acknowledged.push(n),
            Err(status) => {
                assert_error(&status, Code::ResourceExhausted, "STORE_FULL");
                refused.push(n);
                if refused.len() == 5 {
                    break;
                }
            }
        }
    }
    assert_eq!(refused.len(), 5, "the capped store filled up");
    let status = server
        .idempotency()
        .begin(BeginRequest { key: "x".repeat(500), fingerprint: vec![7; 256], ..Default::default() })
        .await;
    if let Err(status) = status {
        assert_error(&status, Code::ResourceExhausted, "STORE_FULL");
    }

    // Reads go on, health stays SERVING, and nothing refused was stored.
    wait_for_serving(&server.channel()).await;
    for &n in &acknowledged {
        assert!(
            stored_states(&mut client, &turn_of(n)).await.contains(&state(n)),
            "acknowledged checkpoint {n} is readable"
        );
    }
    for &n in &refused {
        assert!(
            !stored_states(&mut client, &turn_of(n)).await.contains(&state(n)),
            "refused checkpoint {n} is not stored"
        );
    }
    client.list_turns(ListTurnsRequest::default()).await.expect("ListTurns works on a full store");

    // Deleting turns frees pages, and writes resume on the same sidecar.
    let freed: Vec<i64> = acknowledged.iter().copied().filter(|n| n / 8 < 10).collect();
    for turn in 0..10 {
        let request = DeleteTurnRequest { turn_id: format!("fill-{turn}"), ..Default::default() };
        client.delete_turn(request).await.expect("DeleteTurn works on a full store");
    }
    for n in 2000..2010 {
        client.checkpoint(checkpoint_of(&turn_of(n), n, state(n))).await.expect("writes resume once space is freed");
    }
    server.kill().await;
    assert_eq!(integrity(&store).await, "ok");

    let server = SidecarProcess::builder(STEPWELL, &store).name("after").spawn().await;
    let mut client = server.client();
    for n in acknowledged.iter().copied().filter(|n| !freed.contains(n)).chain(2000..2010) {
        assert!(stored_states(&mut client, &turn_of(n)).await.contains(&state(n)), "checkpoint {n} survives a restart");
    }
    report(
        "disk full",
        json!({ "acknowledged_before_full": acknowledged.len(), "refused": refused.len(), "integrity_check": "ok" }),
    );
}

/// Builds the shim with the system C compiler, once per test binary run.
fn shim() -> PathBuf {
    static SHIM: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    SHIM.get_or_init(|| crate::build_shim("iofail", &["-ldl"], "the I/O-error sweep tests")).clone()
}

/// What one injected fault did to one operation.
struct Injected {
    outcome: Outcome,
    fired: bool,
}

/// The operation a sweep repeats.
#[derive(Debug, Clone, Copy)]
enum Operation {
    Checkpoint,
    Complete,
}

/// Starts a sidecar with the shim set to fail the `nth` `op`, runs
/// `operation` with the fault armed, and asserts that the answer was
/// honest, the next write succeeds, the file is intact, and what is stored
/// agrees with the answer.
async fn inject_and_assert_survived(operation: Operation, op: &str, errno: &str, nth: usize) -> Injected {
    let store = TestStore::new().await;
    let dir = store.dir().to_owned();
    let (arm, fired) = (dir.join("arm"), dir.join("fired"));
    let shim = shim();
    let server = SidecarProcess::builder(STEPWELL, &store)
        .name("iofail")
        .env("LD_PRELOAD", shim)
        .env("STEPWELL_IOFAIL_DIR", &dir)
        .env("STEPWELL_IOFAIL_OP", op)
        .env("STEPWELL_IOFAIL_NTH", nth.to_string())
        .env("STEPWELL_IOFAIL_ERRNO", errno)
        .env("STEPWELL_IOFAIL_ARM", &arm)
        .env("STEPWELL_IOFAIL_FIRED", &fired)
        .spawn()
        .await;
    let mut client = server.client();
    let mut operations = server.idempotency();
    let state = br#"{"charged":true}"#.to_vec();
    let (key, result) = ("charge-1", b"receipt-1".to_vec());
    let token = match operation {
        Operation::Checkpoint => 0,
        Operation::Complete => {
            let begun = operations.begin(BeginRequest { key: key.into(), ..Default::default() }).await;
            let begun = begun.expect("Begin before the fault").into_inner();
            assert_eq!(begun.outcome(), BeginOutcome::Acquired);
            begun.lease_token
        }
    };

    std::fs::write(&arm, b"").expect("arm the fault");
    let answer = match operation {
        Operation::Checkpoint => client.checkpoint(checkpoint_of("swept", 1, state.clone())).await.map(drop),
        Operation::Complete => operations.complete(complete(key, token, &result)).await.map(drop),
    };
    let outcome = match answer {
        Ok(()) => Outcome::Ok,
        Err(status) => Outcome::of(&status),
    };
    std::fs::remove_file(&arm).expect("disarm the fault");
    let what = format!("{operation:?} with the {nth}th {op} failing with {errno}");
    assert!(!matches!(outcome, Outcome::Unexpected(_)), "{what}: {outcome:?}");
    // The fault was one call: the next write on the same sidecar succeeds.
    let mut next = Err(tonic::Status::unknown("not tried"));
    for _ in 0..3 {
        next = client.checkpoint(checkpoint_of("after", 2, b"{}".to_vec())).await;
        if next.is_ok() {
            break;
        }
    }
    next.unwrap_or_else(|status| panic!("{what}: the next write fails: {status:?}"));
    server.kill().await;
    assert_eq!(integrity(&store).await, "ok", "{what}: the file is intact");

    // Read back on a sidecar without the shim.
    let server = SidecarProcess::builder(STEPWELL, &store).name("clean").spawn().await;
    let mut client = server.client();
    match operation {
        Operation::Checkpoint => {
            let stored = stored_states(&mut client, "swept").await;
            match outcome {
                Outcome::Ok => assert_eq!(stored, [state], "{what}: acknowledged, so stored byte for byte"),
                Outcome::Definite(_) => assert!(stored.is_empty(), "{what}: refused, so not stored"),
                _ => assert!(stored.is_empty() || stored == [state], "{what}: indeterminate: absent or once"),
            }
        }
        Operation::Complete => {
            let record = server.idempotency().get(GetRequest { key: key.into(), ..Default::default() }).await;
            let record = record.expect("the begun key has a record").into_inner();
            let completed = record.state() == RecordState::Completed;
            match outcome {
                Outcome::Ok => assert!(completed && record.result == result, "{what}: acknowledged, so COMPLETED"),
                Outcome::Definite(_) => assert!(!completed, "{what}: refused, so not COMPLETED"),
                _ => assert!(!completed || record.result == result, "{what}: indeterminate: leased, or COMPLETED"),
            }
        }
    }
    Injected { outcome, fired: fired.exists() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_single_io_error_is_reported_or_survived_and_never_corrupts() {
    assert_sqlite_pass();
    let mut figures = Vec::new();
    for operation in [Operation::Checkpoint, Operation::Complete] {
        for (op, errno) in [("write", "EIO"), ("sync", "EIO"), ("write", "ENOSPC")] {
            let (mut ok, mut errors) = (0, 0);
            let mut codes = std::collections::BTreeSet::new();
            let mut nth = 1;
            loop {
                let injected = inject_and_assert_survived(operation, op, errno, nth).await;
                if !injected.fired {
                    assert!(injected.outcome.is_ok(), "{operation:?} succeeds with no fault");
                    break;
                }
                match injected.outcome {
                    Outcome::Ok => ok += 1,
                    Outcome::Definite(code) | Outcome::Indeterminate(code) => {
                        errors += 1;
                        codes.insert(format!("{code:?}"));
                    }
                    Outcome::Unexpected(_) => unreachable!("inject_and_assert_survived rejects unexpected answers"),
                }
                nth += 1;
                assert!(nth <= 64, "{operation:?} kept meeting {op} faults past 64 calls");
            }
            figures.push(json!({
                "operation": format!("{operation:?}"), "fault": format!("{op} {errno}"),
                "faults_injected": nth - 1, "answered_ok": ok, "answered_error": errors, "error_codes": codes,
            }));
        }
    }
    assert!(
        figures.iter().all(|f| f["faults_injected"].as_u64() > Some(0)),
        "every sweep injected at least one fault: {figures:?}"
    );
    report("io error sweep", json!(figures));
}
