//! Writes the seed corpus of stepwell's fuzz targets to `fuzz/seeds/`: a few
//! valid requests of every RPC, in the `request` input format, then JSON
//! states and page tokens, each a small file. Run it from `fuzz/` with
//! `cargo run --example make_seeds` after the contract changes.
//!
//! The requests form a short session (checkpoints of one turn, a lease begun
//! and completed), and are sent in that order through the real handlers as
//! a check that each is what stepwell accepts.

use std::path::{Path, PathBuf};

use prost_types::{Duration, Timestamp};
use stepwell::api::pb::*;
use stepwell::api::validate;
use stepwell::domain::model::Cursor;
use stepwell_fuzz::{Rpc, harness, request_input, rpc_from_selector, selector};

fn main() {
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    requests(&seeds.join("request"));
    states(&seeds.join("state"));
    page_tokens(&seeds.join("page_token"));
    // The check's store is of no further use.
    let _ = std::fs::remove_dir_all(&harness().dir);
}

fn requests(dir: &Path) {
    let at = |seconds: i64| Some(Timestamp { seconds, nanos: 0 });
    let lease = |seconds: i64| Some(Duration { seconds, nanos: 0 });
    let plan = CheckpointRequest {
        namespace: "fuzz".into(),
        turn_id: "turn-1".into(),
        session_id: "session-1".into(),
        phase: "plan".into(),
        state: br#"{"step":1,"todo":["search","answer"]}"#.to_vec(),
        timestamp: at(1_700_000_000),
        terminal: false,
        workflow_version: "1.2.0".into(),
    };
    let done = CheckpointRequest {
        phase: "answer/done".into(),
        state: br#"{"step":2,"ok":true}"#.to_vec(),
        timestamp: at(1_700_000_001),
        terminal: true,
        ..plan.clone()
    };
    let other = CheckpointRequest {
        namespace: String::new(),
        turn_id: "turn-2".into(),
        session_id: String::new(),
        phase: "tool:call".into(),
        state: b"[]".to_vec(),
        timestamp: Some(Timestamp { seconds: -1, nanos: 999_999_999 }),
        workflow_version: String::new(),
        ..plan.clone()
    };
    let resume = validate::restore_token(Cursor { timestamp: 1_700_000_001_000_000_000, seq: i64::MAX }, true);
    let key = |key: &str| (String::from("fuzz"), String::from(key));
    let (namespace, charge) = key("charge-1");

    let mut sent: Vec<(&str, Vec<u8>)> = vec![
        ("checkpoint-plan", request_input(Rpc::Checkpoint, &plan)),
        ("checkpoint-terminal", request_input(Rpc::Checkpoint, &done)),
        ("checkpoint-default-namespace", request_input(Rpc::Checkpoint, &other)),
        (
            "restore-page",
            request_input(
                Rpc::Restore,
                &RestoreRequest {
                    namespace: "fuzz".into(),
                    turn_id: "turn-1".into(),
                    page_size: 1,
                    ..Default::default()
                },
            ),
        ),
        (
            "restore-newest-filtered",
            request_input(
                Rpc::Restore,
                &RestoreRequest {
                    namespace: "fuzz".into(),
                    turn_id: "turn-1".into(),
                    page_size: 10,
                    page_token: resume,
                    newest_first: true,
                    phase: "plan".into(),
                    expect_workflow_version: "v1.4.1".into(),
                },
            ),
        ),
        (
            "list-turns-terminal",
            request_input(
                Rpc::ListTurns,
                &ListTurnsRequest {
                    namespace: "fuzz".into(),
                    status: TurnStatus::Terminal.into(),
                    session_id: "session-1".into(),
                    updated_before: at(1_800_000_000),
                    page_size: 1,
                    page_token: validate::turns_token("turn-0"),
                },
            ),
        ),
        (
            "delete-turn",
            request_input(
                Rpc::DeleteTurn,
                &DeleteTurnRequest { namespace: String::new(), turn_id: "turn-2".into(), include_records: false },
            ),
        ),
        (
            "begin",
            request_input(
                Rpc::Begin,
                &BeginRequest {
                    namespace: namespace.clone(),
                    key: charge.clone(),
                    fingerprint: b"sha256:0f".to_vec(),
                    lease: lease(30),
                    retention: lease(3600),
                },
            ),
        ),
        (
            "extend",
            request_input(
                Rpc::Extend,
                &ExtendRequest { namespace: namespace.clone(), key: charge.clone(), lease_token: 1, lease: lease(60) },
            ),
        ),
        (
            "complete",
            request_input(
                Rpc::Complete,
                &CompleteRequest {
                    namespace: namespace.clone(),
                    key: charge.clone(),
                    lease_token: 1,
                    result: br#"{"charge":"ch_7"}"#.to_vec(),
                },
            ),
        ),
        ("get", request_input(Rpc::Get, &GetRequest { namespace: namespace.clone(), key: charge })),
        (
            "begin-email",
            request_input(
                Rpc::Begin,
                &BeginRequest { namespace: namespace.clone(), key: "email-1".into(), ..Default::default() },
            ),
        ),
        (
            "release",
            request_input(
                Rpc::Release,
                &ReleaseRequest {
                    namespace,
                    key: "email-1".into(),
                    // Fencing tokens count up across keys: this is the second Begin.
                    lease_token: 2,
                    error: "smtp: 451 try later".into(),
                    permanent: false,
                },
            ),
        ),
    ];
    for (name, input) in &sent {
        let rpc = rpc_from_selector(input[0]);
        match harness().call(rpc, &input[1..]) {
            Some(Ok(())) => {}
            other => panic!("seed {name} ({}) was not accepted: {other:?}", rpc.as_str()),
        }
    }
    // Bytes that are no message at all: the codec's INVALID_ARGUMENT.
    sent.push(("undecodable", vec![selector(Rpc::Checkpoint), 0x0a, 0xff, 0xff]));
    write_all(dir, sent.iter().map(|(name, input)| (*name, input.clone())));
}

fn states(dir: &Path) {
    // Mode byte: bits 0-1 pick the limit (3 = 1 MiB), bits 2-4 the repeats.
    let doc = |mode: u8, body: &[u8]| [&[mode][..], body].concat();
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
    write_all(
        dir,
        [
            ("object", doc(3, br#"{"step":1,"items":[1,2.5,"x",null,true],"nested":{"a":{"b":[]}}}"#)),
            ("string", doc(3, br#""just a string""#)),
            ("brackets-in-strings", doc(3, br#"{"k":"[[[{{{\"","l":["]]]"]}"#)),
            ("depth-limit", doc(3, &nested(64))),
            ("depth-over-limit", doc(3, &nested(65))),
            ("deep-arrays-repeated", doc(3 | (6 << 2), b"[")),
            ("deep-objects-repeated", doc(3 | (7 << 2), br#"{"a":"#)),
            ("not-utf8", doc(3, b"\"\xff\xfe\"")),
            ("huge-number", doc(3, b"[1e400,-0,123456789012345678901234567890]")),
            ("over-size-limit", doc(1, &[b' '; 100])),
        ],
    );
}

fn page_tokens(dir: &Path) {
    let cursor = Cursor { timestamp: 1_700_000_000_000_000_000, seq: 3 };
    let token = |mode: u8, text: String| [vec![mode], text.into_bytes()].concat();
    write_all(
        dir,
        [
            ("restore-oldest-first", token(0, validate::restore_token(cursor, false))),
            ("restore-newest-first", token(1, validate::restore_token(cursor, true))),
            ("turns", token(0, validate::turns_token("turn-1"))),
            ("empty", vec![0]),
            ("not-base64", token(0, "!!not-a-token".into())),
            ("cursor-bytes", [&[1u8][..], &i64::MIN.to_be_bytes(), &(-1i64).to_be_bytes()].concat()),
        ],
    );
}

/// Replaces the seeds in `dir` with `seeds`.
fn write_all<'a>(dir: &Path, seeds: impl IntoIterator<Item = (&'a str, Vec<u8>)>) {
    if dir.exists() {
        std::fs::remove_dir_all(dir).expect("old seeds can be removed");
    }
    std::fs::create_dir_all(dir).expect("the seed directory can be made");
    let mut count = 0;
    for (name, bytes) in seeds {
        let path: PathBuf = dir.join(name);
        std::fs::write(&path, bytes).expect("a seed can be written");
        count += 1;
    }
    println!("{count} seeds in {}", dir.display());
}
