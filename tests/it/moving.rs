//! Moving a store (`stepwell migrate`, `export`, `import`): a store built
//! through a real sidecar with every kind of row (checkpoints, idempotency
//! keys, RecordService records, waits of every status) is moved with the
//! sidecar stopped, and a sidecar on the copy must answer Restore,
//! ListTurns, Get, Begin, ListRecords, ListWaits and GetWait exactly as on
//! the original, issue tokens above every old one, and fire the pending
//! timers and expiries it was moved with when their time comes.
//! Moves between SQLite and Postgres need both backends, so they live in
//! `postgres_only` below and run in the Postgres pass of scripts/test; the
//! export/import round trip, the failed verification, the chunks bounded
//! by bytes (a copy stopped after some chunks holds only the large rows that
//! fit them) and the largest chunk by rows (one SQLite statement) run on the
//! pass's own backend against a SQLite file.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use stepwell::api::pb::{
    AwaitRequest, BeginOutcome, BeginRequest, CancelWaitRequest, CheckpointRequest, CreateWaitRequest, GetRequest,
    GetWaitRequest, ListRecordsRequest, ListWaitsRequest, PutMode, PutRecordsRequest, Record, ReleaseRequest,
    SignalRequest, TurnStatus, Wait, WaitStatus,
};
use stepwell::domain::clock::{Clock, system_now};
use stepwell::ops::moving::{self, Plan, migrate_stores};
use stepwell::store::Database;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{
    T0, begin, begin_leased, complete, duration, list_all, list_turns, restore, restore_all, ts,
};
use stepwell_test_support::sidecar::Sidecar;
use stepwell_test_support::{IdempotencyClient, RecordClient, WAIT_LIMIT, WaitClient};

use crate::STEPWELL;

const NAMESPACES: [&str; 3] = ["", "alpha", "beta"];
const TURNS: [&str; 4] = ["open", "done", "tied", "versions"];
const KEYS: [&str; 5] = ["held", "completed", "failed", "released", "fingerprinted"];
/// The turns holding records, and the kinds and scopes of their records.
const RECORD_TURNS: [&str; 2] = ["graph", "tür|2"];
const RECORD_KINDS: [&str; 7] = ["checkpoint", "blob", "write", "agent-item", "adk-session", "adk-event", "adk-state"];
const RECORD_SCOPES: [&str; 2] = ["", "sub|graph:ü"];
/// Records `populate` puts per namespace.
const RECORDS_PER_NAMESPACE: u64 = 21;
/// Waits `create_waits` leaves per namespace.
const WAITS_PER_NAMESPACE: usize = 8;
const DAY: i64 = 86_400_000_000_000;

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
        put_records(&mut sidecar.records(), namespace).await;
    }
    max_token
}

/// Leaves `WAITS_PER_NAMESPACE` waits in `namespace`, of every status:
/// pending with no time, pending with a timer (a day away, expiring in
/// two), pending with an expiry (in a turn and name that sort bytewise);
/// resolved by a Signal that came before its wait (a binary payload), by
/// one after it, and by its timer (already due); cancelled; and expired.
async fn create_waits(waits: &mut WaitClient, namespace: &str) {
    let now = system_now();
    let create = |turn: &str, name: &str| CreateWaitRequest {
        namespace: namespace.to_owned(),
        turn_id: turn.to_owned(),
        name: name.to_owned(),
        metadata: format!(r#"{{ "ask" : "{namespace}/{name}", "n": 2.50 }}"#).into_bytes(),
        ..Default::default()
    };
    let signal = |turn: &str, name: &str, payload: &[u8], content_type: &str| SignalRequest {
        namespace: namespace.to_owned(),
        turn_id: turn.to_owned(),
        name: name.to_owned(),
        payload: payload.to_vec(),
        content_type: content_type.to_owned(),
        ..Default::default()
    };
    let created = [
        create("open", "approve"),
        CreateWaitRequest {
            resolve_at: Some(ts(now + DAY)),
            expire_at: Some(ts(now + 2 * DAY)),
            ..create("open", "nap")
        },
        CreateWaitRequest { expire_at: Some(ts(now + DAY)), ..create("tür|2", "wäit|1") },
        create("open", "asked"),
        CreateWaitRequest { resolve_at: Some(ts(T0)), ..create("open", "alarm") },
        create("done", "stop"),
        CreateWaitRequest { expire_at: Some(ts(T0)), ..create("done", "late") },
    ];
    for request in created {
        assert!(waits.create_wait(request).await.expect("CreateWait").into_inner().created);
    }
    for request in
        [signal("open", "go", b"\x00yes\xff", "application/octet-stream"), signal("open", "asked", b"ok", "")]
    {
        assert!(waits.signal(request).await.expect("Signal").into_inner().settled);
    }
    let cancel = CancelWaitRequest {
        namespace: namespace.to_owned(),
        turn_id: "done".into(),
        name: "stop".into(),
        ..Default::default()
    };
    assert!(waits.cancel_wait(cancel).await.expect("CancelWait").into_inner().cancelled);
    let alarm = settled(waits, namespace, "open", "alarm").await;
    assert_eq!((alarm.status(), alarm.settled_by.as_str()), (WaitStatus::Resolved, "stepwell:timer"));
    let late = settled(waits, namespace, "done", "late").await;
    assert_eq!((late.status(), late.settled_by.as_str()), (WaitStatus::Expired, "stepwell:expiry"));
}

/// The wait, once settled: Awaited again while it comes back pending, for
/// at most `WAIT_LIMIT`.
async fn settled(waits: &mut WaitClient, namespace: &str, turn: &str, name: &str) -> Wait {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let request = AwaitRequest {
            namespace: namespace.to_owned(),
            turn_id: turn.to_owned(),
            name: name.to_owned(),
            timeout: Some(duration(Duration::from_secs(5))),
            ..Default::default()
        };
        let wait = waits.r#await(request).await.expect("Await").into_inner().wait.expect("a wait");
        if wait.status() != WaitStatus::Pending {
            return wait;
        }
        assert!(tokio::time::Instant::now() < deadline, "{namespace}/{turn}/{name} was not settled in time");
    }
}

/// Every page of a ListWaits.
async fn list_waits(waits: &mut WaitClient, mut request: ListWaitsRequest) -> Vec<Wait> {
    let mut all = Vec::new();
    loop {
        let page = waits.list_waits(request.clone()).await.expect("ListWaits").into_inner();
        all.extend(page.waits);
        if page.next_page_token.is_empty() {
            return all;
        }
        request.page_token = page.next_page_token;
    }
}

/// What WaitService answers in `namespace`: every wait, paged by three;
/// the pending ones; those with a timer; and each wait read by its handle.
async fn wait_answers(sidecar: &Sidecar, namespace: &str) -> String {
    let mut waits = sidecar.waits();
    let base = ListWaitsRequest { namespace: namespace.to_owned(), page_size: 3, ..Default::default() };
    let all = list_waits(&mut waits, base.clone()).await;
    assert_eq!(all.len(), WAITS_PER_NAMESPACE, "{all:?}");
    let pending = ListWaitsRequest { status: WaitStatus::Pending as i32, ..base.clone() };
    let pending = list_waits(&mut waits, pending).await;
    let timed = ListWaitsRequest { resolve_before: Some(ts(T0 + 100 * 365 * DAY)), ..base };
    let timed = list_waits(&mut waits, timed).await;
    let mut text = format!("{namespace} waits: {all:?}\npending: {pending:?}\ntimed: {timed:?}\n");
    for wait in &all {
        let request = GetWaitRequest { handle: wait.handle.clone(), ..Default::default() };
        let got = waits.get_wait(request).await.expect("GetWait by handle").into_inner().wait;
        text += &format!("{}: {got:?}\n", wait.handle);
    }
    text
}

/// On a store `populate` filled and a move copied: a sidecar whose clock is
/// three days on fires every pending timer and expiry the move carried,
/// once, and a pending wait is signalled by the handle it had.
async fn moved_waits_fall_due(store: &TestStore) {
    let clock = Clock::system();
    clock.advance(Duration::from_secs(3 * 86_400));
    let sidecar = Sidecar::builder().store(store).configure(move |config| config.store.clock = clock).start().await;
    let mut waits = sidecar.waits();
    for namespace in NAMESPACES {
        let nap = settled(&mut waits, namespace, "open", "nap").await;
        assert_eq!((nap.status(), nap.settled_by.as_str()), (WaitStatus::Resolved, "stepwell:timer"));
        let expired = settled(&mut waits, namespace, "tür|2", "wäit|1").await;
        assert_eq!((expired.status(), expired.settled_by.as_str()), (WaitStatus::Expired, "stepwell:expiry"));
        let get = GetWaitRequest {
            namespace: namespace.to_owned(),
            turn_id: "open".into(),
            name: "approve".into(),
            ..Default::default()
        };
        let approve = waits.get_wait(get).await.expect("GetWait").into_inner().wait.expect("a wait");
        assert_eq!(approve.status(), WaitStatus::Pending, "a wait with no time stays pending");
        let by_handle = SignalRequest { handle: approve.handle, payload: b"yes".to_vec(), ..Default::default() };
        assert!(waits.signal(by_handle).await.expect("Signal by handle").into_inner().settled);
    }
    sidecar.stop().await.expect("stop the sidecar");
}

/// Puts `RECORDS_PER_NAMESPACE` records in `namespace`: in two turns and
/// two scopes, checkpoints (metadata written with spaces, unsorted keys,
/// escapes and a 2.50 that jsonb prints otherwise; refs to blobs; the
/// second one's parent the first), blobs of binary payloads (non-UTF-8,
/// NUL) with no metadata, and writes whose parents are checkpoints; ids
/// with '|' and non-ASCII, which sort bytewise; and two items of an agent
/// session (kind `agent-item`, created, as the clients' sessions write them);
/// and a Google ADK session as the clients' session services write it (a
/// head, an event and a session-state key, its child).
async fn put_records(records: &mut RecordClient, namespace: &str) {
    let record = |turn: &str, scope: &str, kind: &str, id: &str| Record {
        turn_id: turn.to_owned(),
        scope: scope.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        payload: format!("{namespace}/{turn}/{scope}/{kind}/{id}").into_bytes(),
        content_type: "application/msgpack".to_owned(),
        ..Default::default()
    };
    let mut all = Vec::new();
    for turn in RECORD_TURNS {
        for (s, scope) in RECORD_SCOPES.into_iter().enumerate() {
            let first = Record {
                metadata: format!(
                    concat!(
                        r#"{{ "step" : {s}, "source": "loop", "run|id": "r\u00e9-{namespace}", "score": 2.50, "#,
                        r#""parents": {{"b": [1, {{"x": null}}], "a": true}} }}"#,
                    ),
                    s = s,
                    namespace = namespace,
                )
                .into_bytes(),
                refs: vec!["blob|1".to_owned(), "blöb-2".to_owned()],
                ..record(turn, scope, "checkpoint", "0001|a")
            };
            let second = Record {
                metadata: format!(r#"{{"step":{},"source":"update","writes":{{}}}}"#, s + 1).into_bytes(),
                parent_id: "0001|a".to_owned(),
                refs: vec!["blöb-2".to_owned()],
                ..record(turn, scope, "checkpoint", "0002-ü")
            };
            all.extend([first, second]);
        }
        // The blobs and writes of the first scope only.
        all.push(Record {
            payload: b"\x00\xff\xfe binary \xc3\x28".to_vec(),
            content_type: String::new(),
            ..record(turn, "", "blob", "blob|1")
        });
        all.push(Record { payload: Vec::new(), ..record(turn, "", "blob", "blöb-2") });
        all.push(Record { parent_id: "0001|a".to_owned(), ..record(turn, "", "write", "0001|a|task|0") });
        for (seq, item) in [(1, r#"{"role":"user","content":"réservez"}"#), (2, r#"{"type":"function_call"}"#)] {
            all.push(Record {
                payload: item.as_bytes().to_vec(),
                content_type: "application/json".to_owned(),
                metadata: format!(r#"{{"u":"{turn}-{seq}"}}"#).into_bytes(),
                mode: PutMode::Create as i32,
                ..record(turn, "", "agent-item", &format!("{seq:020}"))
            });
        }
    }
    all.extend(adk_session(namespace));
    assert_eq!(all.len() as u64, RECORDS_PER_NAMESPACE);
    let request = PutRecordsRequest { namespace: namespace.to_owned(), records: all, fence: None };
    records.put_records(request).await.expect("PutRecords");
}

/// A Google ADK session's head, first event and a state key.
fn adk_session(namespace: &str) -> [Record; 3] {
    let turn = "adk:app/u%C3%BC/s%7C1".to_owned();
    let json = |value: serde_json::Value| value.to_string().into_bytes();
    [
        Record {
            turn_id: turn.clone(),
            kind: "adk-session".to_owned(),
            id: "s".to_owned(),
            payload: json(serde_json::json!({"app": "app", "user": "uü", "id": "s|1", "create_time": 1.25,
                "last_update_time": 2.5, "ns": namespace})),
            content_type: "application/json".to_owned(),
            metadata: json(serde_json::json!({"app": "app", "user": "uü"})),
            mode: PutMode::Create as i32,
            ..Default::default()
        },
        Record {
            turn_id: turn.clone(),
            kind: "adk-event".to_owned(),
            id: format!("{:020}", 1),
            payload: json(serde_json::json!({"author": "user", "content": {"parts": [{"text": "réservez"}]}})),
            content_type: "application/json".to_owned(),
            mode: PutMode::Create as i32,
            ..Default::default()
        },
        Record {
            turn_id: turn,
            kind: "adk-state".to_owned(),
            id: "kcart".to_owned(),
            parent_id: "s".to_owned(),
            payload: b"[1,2.50]".to_vec(),
            content_type: "application/json".to_owned(),
            ..Default::default()
        },
    ]
}

/// JSON with its keys sorted and no whitespace: metadata compared as parsed
/// JSON, whatever text the store printed it as.
fn sorted_json(bytes: &[u8]) -> String {
    fn write(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                out.push('{');
                for (i, (key, item)) in entries.into_iter().enumerate() {
                    out.push_str(if i > 0 { "," } else { "" });
                    out.push_str(&Value::String(key.clone()).to_string());
                    out.push(':');
                    write(item, out);
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i > 0 { "," } else { "" });
                    write(item, out);
                }
                out.push(']');
            }
            scalar => out.push_str(&scalar.to_string()),
        }
    }
    if bytes.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    write(&serde_json::from_slice(bytes).expect("metadata is JSON"), &mut out);
    out
}

/// A listed record as text, its metadata as sorted JSON.
fn record_text(record: &Record) -> String {
    let metadata = sorted_json(&record.metadata);
    format!("{:?} metadata={metadata}", Record { metadata: Vec::new(), ..record.clone() })
}

/// Every page of a ListRecords, each entry with its children and refs.
async fn list_records(records: &mut RecordClient, mut request: ListRecordsRequest) -> Vec<String> {
    let mut entries = Vec::new();
    loop {
        let page = records.list_records(request.clone()).await.expect("ListRecords").into_inner();
        for entry in page.entries {
            let children: Vec<String> = entry.children.iter().map(record_text).collect();
            let refs: Vec<String> = entry.refs.iter().map(record_text).collect();
            let record = entry.record.expect("a record");
            entries.push(format!("{} children={children:?} refs={refs:?}", record_text(&record)));
        }
        if page.next_page_token.is_empty() {
            return entries;
        }
        request.page_token = page.next_page_token;
    }
}

/// What ListRecords answers in `namespace`: each kind across turns and in
/// each turn and scope, with children and refs, paged by two; and filtered
/// by metadata containment.
async fn record_answers(sidecar: &Sidecar, namespace: &str) -> String {
    let mut records = sidecar.records();
    let mut all = String::new();
    let base = ListRecordsRequest {
        namespace: namespace.to_owned(),
        children_kind: "write".to_owned(),
        refs_kind: "blob".to_owned(),
        page_size: 2,
        ..Default::default()
    };
    for kind in RECORD_KINDS {
        let request = ListRecordsRequest { kind: kind.to_owned(), ..base.clone() };
        all += &format!("{namespace}/{kind}: {:?}\n", list_records(&mut records, request).await);
        for turn in RECORD_TURNS {
            for scope in RECORD_SCOPES {
                let request = ListRecordsRequest {
                    kind: kind.to_owned(),
                    turn_id: turn.to_owned(),
                    scope: scope.to_owned(),
                    has_scope: true,
                    ..base.clone()
                };
                let listed = list_records(&mut records, request).await;
                all += &format!("{namespace}/{turn}/{scope}/{kind}: {listed:?}\n");
            }
        }
    }
    for filter in [r#"{"parents":{"b":[1]}}"#, r#"{"score":2.5}"#, r#"{"run|id":"ré-alpha"}"#, r#"{"writes":{}}"#] {
        let request = ListRecordsRequest {
            kind: "checkpoint".to_owned(),
            metadata_contains: filter.as_bytes().to_vec(),
            ..base.clone()
        };
        let listed = list_records(&mut records, request).await;
        assert!(!listed.is_empty() || (filter.contains("alpha") && namespace != "alpha"), "{filter} matches");
        all += &format!("{namespace} {filter}: {listed:?}\n");
    }
    all
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
        all += &record_answers(sidecar, namespace).await;
        all += &wait_answers(sidecar, namespace).await;
    }
    all
}

/// A new key's first token on the store: must be above every old one.
async fn new_token(sidecar: &Sidecar, key: &str) -> u64 {
    let answer = sidecar.idempotency().begin(begin(key)).await.expect("Begin").into_inner();
    assert_eq!(answer.outcome(), BeginOutcome::Acquired);
    answer.lease_token
}

/// A store built by `populate` and `create_waits`, its answers, and its
/// greatest token; the sidecar is stopped.
async fn populated(store: &TestStore) -> (String, u64) {
    let sidecar = Sidecar::builder().store(store).start().await;
    let max_token = populate(&sidecar).await;
    for namespace in NAMESPACES {
        create_waits(&mut sidecar.waits(), namespace).await;
    }
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

/// Runs the binary; returns its exit code and what it printed, stdout then stderr.
fn run(args: &[&str]) -> (i32, String) {
    let (code, stdout, stderr) = run_apart(args);
    (code, format!("{stdout}{stderr}"))
}

/// Runs the binary; returns its exit code, stdout and stderr.
fn run_apart(args: &[&str]) -> (i32, String, String) {
    let Output { status, stdout, stderr } = Command::new(STEPWELL).args(args).output().expect("run stepwell");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (status.code().expect("an exit code"), text(&stdout), text(&stderr))
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

/// The reports of export, import and migrate go to stdout, so a script can
/// read them; errors and progress go to stderr; `export --out -` keeps
/// stdout for the data and reports on stderr.
#[tokio::test]
async fn reports_go_to_stdout_and_errors_to_stderr() {
    let source = TestStore::new().await;
    populated(&source).await;
    let file = source.dir().join("report.ndjson");
    let (code, out, err) = run_apart(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("exported 27 checkpoints") && !err.contains("exported"), "stdout {out:?}, stderr {err:?}");
    let (code, out, err) = run_apart(&["export", "--from", &source.url(), "--out", "-"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.lines().all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok()), "only data on stdout");
    assert!(err.contains("exported 27 checkpoints"), "{err}");
    let target = sqlite_in(source.dir(), "reported.db");
    let (code, out, err) = run_apart(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("checkpoints: 27 copied") && out.contains("verified: every namespace matches"), "{out}");
    assert!(!err.contains("copied") && !err.contains("verified"), "{err}");
    let moved = sqlite_in(source.dir(), "moved.db");
    let (code, out, err) = run_apart(&["migrate", "--from", &target.url(), "--to", &moved.url()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("waits (WaitService): 24 copied") && out.contains("verified"), "{out}");
    assert!(!err.contains("copied"), "{err}");
    let (code, out, err) = run_apart(&["import", "--to", &moved.url(), "--in", "/nonexistent/stepwell.ndjson"]);
    assert_eq!(code, 1);
    assert!(err.contains("stepwell import:") && out.is_empty(), "stdout {out:?}, stderr {err:?}");
}

#[tokio::test]
async fn export_then_import_gives_a_store_that_answers_alike() {
    let source = TestStore::new().await;
    let (before, max_token) = populated(&source).await;
    let file = source.dir().join("backup.ndjson");
    let (code, output) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    let exported = "exported 27 checkpoints, 12 turns, 15 idempotency records, 63 records and 24 waits";
    assert!(output.contains(exported), "{output}");

    let target = sqlite_in(source.dir(), "imported.db");
    let (code, output) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("checkpoints: 27 copied, 0 already present"), "{output}");
    assert!(output.contains("records (RecordService): 63 copied, 0 already present"), "{output}");
    assert!(output.contains("waits (WaitService): 24 copied, 0 already present"), "{output}");
    assert!(output.contains("verified: every namespace matches"), "{output}");
    let (code, output) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("nothing to copy"), "a second import copies nothing: {output}");
    assert!(output.contains("records (RecordService): 0 copied, 63 already present"), "{output}");
    assert!(output.contains("waits (WaitService): 0 copied, 24 already present"), "{output}");

    let again = source.dir().join("again.ndjson");
    let (code, output) = run(&["export", "--from", &target.url(), "--out", again.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    assert_eq!(portable_lines(&file), portable_lines(&again), "exporting the import gives the same records");

    let (after, token) = answers_on(&target, "new").await;
    assert_eq!(before, after);
    assert!(token > max_token, "a new token {token} is above every old one ({max_token})");
    moved_waits_fall_due(&target).await;
}

/// An export as an older stepwell wrote it: format 1 (before records) or 2
/// (before waits), without the lines of what came later and without their
/// counts on the end line. Returns its lines, and the lines left out.
fn as_format(text: &str, format: u32) -> (Vec<String>, Vec<String>) {
    let (later, counts): (&[&str], &[&str]) =
        if format == 1 { (&["record", "wait"], &["stored_records", "waits"]) } else { (&["wait"], &["waits"]) };
    let (mut kept, mut left_out) = (Vec::new(), Vec::new());
    for line in text.lines() {
        let mut value: Value = serde_json::from_str(line).unwrap();
        let kind = value["kind"].as_str().unwrap().to_owned();
        if later.contains(&kind.as_str()) {
            left_out.push(line.to_owned());
            continue;
        }
        if kind == "header" {
            value["format"] = format.into();
        }
        if kind == "end" {
            for count in counts {
                value.as_object_mut().unwrap().remove(*count).expect("format 3 counts it");
            }
        }
        kept.push(value.to_string());
    }
    (kept, left_out)
}

/// A populated store's export, as text, in its directory.
async fn exported(source: &TestStore) -> String {
    let file = source.dir().join("backup.ndjson");
    let (code, output) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    std::fs::read_to_string(&file).unwrap()
}

/// Imports `lines` into a new SQLite store `name` beside `source`; returns
/// the store, the exit code and output.
fn import_lines(source: &TestStore, name: &str, lines: &[String]) -> (TestStore, i32, String) {
    let file = source.dir().join(format!("{name}.ndjson"));
    std::fs::write(&file, lines.join("\n")).unwrap();
    let target = sqlite_in(source.dir(), name);
    let (code, output) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    (target, code, output)
}

#[tokio::test]
async fn an_export_in_format_1_still_imports_and_holds_no_records() {
    let source = TestStore::new().await;
    populated(&source).await;
    // As stepwell wrote it before records: format 1, no record or wait lines, no count of them.
    let (old, left_out) = as_format(&exported(&source).await, 1);
    assert_eq!(left_out.len(), 63 + 24);
    let (target, code, output) = import_lines(&source, "imported.db", &old);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("checkpoints: 27 copied, 0 already present"), "{output}");
    assert!(output.contains("records (RecordService): 0 copied, 0 already present"), "{output}");
    assert!(output.contains("verified: every namespace matches"), "{output}");
    assert_eq!(target.inspect().await.count("records").await, 0);

    // A record line in a format 1 file is refused, before anything of it is written.
    let mut bad = old.clone();
    let record = left_out.iter().find(|line| line.contains(r#""kind":"record""#)).expect("a record line");
    bad.insert(old.len() - 1, record.clone());
    let (other, code, output) = import_lines(&source, "other.db", &bad);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("a record in a format 1 file"), "{output}");
    assert_eq!(other.inspect().await.count("records").await, 0);
}

#[tokio::test]
async fn an_export_in_format_2_still_imports_and_holds_no_waits() {
    let source = TestStore::new().await;
    populated(&source).await;
    // As stepwell wrote it before waits: format 2, no wait lines, no count of them.
    let (old, waits) = as_format(&exported(&source).await, 2);
    assert_eq!(waits.len(), 24);
    let (target, code, output) = import_lines(&source, "imported.db", &old);
    assert_eq!(code, 0, "{output}");
    assert!(output.contains("records (RecordService): 63 copied, 0 already present"), "{output}");
    assert!(output.contains("waits (WaitService): 0 copied, 0 already present"), "{output}");
    assert!(output.contains("verified: every namespace matches"), "{output}");
    assert_eq!(target.inspect().await.count("waits").await, 0);

    // A wait line in a format 2 file is refused, before anything of it is written.
    let mut bad = old.clone();
    bad.insert(old.len() - 1, waits[0].clone());
    let (other, code, output) = import_lines(&source, "other.db", &bad);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("a wait in a format 2 file"), "{output}");
    assert_eq!(other.inspect().await.count("waits").await, 0);
    // So is a format 2 end line that counts waits.
    let mut end: Value = serde_json::from_str(old.last().unwrap()).unwrap();
    end["waits"] = 0.into();
    let counted = [&old[..old.len() - 1], &[end.to_string()]].concat();
    let (_, code, output) = import_lines(&source, "counted.db", &counted);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("the end line does not match the header's format"), "{output}");
}

#[tokio::test]
async fn a_wait_line_of_an_unknown_status_is_refused() {
    let source = TestStore::new().await;
    populated(&source).await;
    let text = exported(&source).await;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut value: Value = serde_json::from_str(line).unwrap();
            if value["kind"] == "wait" && value["name"] == "approve" {
                value["status"] = 9.into();
            }
            value.to_string()
        })
        .collect();
    let (_, code, output) = import_lines(&source, "imported.db", &lines);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("wait status 9 is not known"), "{output}");
}

#[tokio::test]
async fn a_migration_stopped_in_the_records_finishes_on_the_next_run() {
    let source = TestStore::new().await;
    let (before, max_token) = populated(&source).await;
    let target = sqlite_in(source.dir(), "target.db");

    // Chunks of four: 7 of checkpoints, 4 of idempotency records, then 2 of records.
    let plan = Plan { chunk_rows: 4, stop_after_chunks: Some(13), ..Plan::default() };
    let stopped = migrate_stores(&source.database(), &target.database(), plan).await;
    assert!(matches!(stopped, Err(moving::Error::Stopped(13))), "{stopped:?}");
    let inspect = target.inspect().await;
    assert_eq!(inspect.count("idempotency").await, 15, "every idempotency record was copied");
    assert_eq!(inspect.count("records").await, 8, "two chunks of four records were committed");

    // Resumed in chunks of three, which page through keys with '|' and non-ASCII.
    let plan = Plan { chunk_rows: 3, ..Plan::default() };
    let (copied, expected, found) = migrate_stores(&source.database(), &target.database(), plan).await.unwrap();
    assert_eq!((copied.checkpoints_copied, copied.checkpoints_present), (0, 27));
    assert_eq!((copied.keys_copied, copied.keys_present), (0, 15));
    assert_eq!((copied.stored_records_copied, copied.stored_records_present), (55, 8));
    assert_eq!((copied.waits_copied, copied.waits_present), (24, 0));
    assert_eq!(expected, found, "the target tallies as the source");
    assert_eq!(found.values().map(|t| t.stored_records).collect::<Vec<_>>(), [21, 21, 21]);
    assert_eq!(found.values().map(|t| t.waits).collect::<Vec<_>>(), [8, 8, 8]);

    let (copied, expected, found) = migrate_stores(&source.database(), &target.database(), plan).await.unwrap();
    assert_eq!((copied.stored_records_copied, copied.stored_records_present), (0, 63), "nothing left to copy");
    assert_eq!((copied.waits_copied, copied.waits_present), (0, 24));
    assert_eq!(expected, found);

    let (after, token) = answers_on(&target, "new").await;
    assert_eq!(before, after);
    assert!(token > max_token, "a new token {token} is above every old one ({max_token})");
}

#[tokio::test]
async fn a_truncated_export_is_refused() {
    let source = TestStore::new().await;
    populated(&source).await;
    let file = source.dir().join("backup.ndjson");
    let (code, output) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    let text = std::fs::read_to_string(&file).unwrap();
    let cut: Vec<&str> = text.lines().take(10).collect();
    std::fs::write(&file, cut.join("\n")).unwrap();
    let target = sqlite_in(source.dir(), "imported.db");
    let (code, output) = run(&["import", "--to", &target.url(), "--in", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("cut short"), "{output}");
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
    let (code, output) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("26 copied, 1 already present"), "{output}");
    assert!(output.contains("DIFFERS") && output.contains("verification FAILED"), "{output}");
    assert!(output.lines().any(|l| l.starts_with("alpha") && l.ends_with(" ok")), "other namespaces match: {output}");
}

#[tokio::test]
async fn a_wait_missing_from_the_target_fails_verification() {
    let source = TestStore::new().await;
    populated(&source).await;
    // A target that silently drops one wait of "alpha" as it is inserted.
    let target = sqlite_in(source.dir(), "target.db");
    Sidecar::builder().store(&target).start().await.stop().await.expect("stop");
    target
        .execute(
            "CREATE TRIGGER drop_one_wait BEFORE INSERT ON waits \
             WHEN NEW.namespace = 'alpha' AND NEW.name = 'nap' BEGIN SELECT RAISE(IGNORE); END",
            "",
        )
        .await;
    let (code, output) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
    assert_eq!(code, 1, "{output}");
    assert!(output.contains("waits (WaitService): 23 copied, 1 already present"), "{output}");
    assert!(output.contains("verification FAILED"), "{output}");
    let alpha = output.lines().find(|l| l.starts_with("alpha")).expect("a row for alpha");
    assert!(alpha.ends_with("DIFFERS"), "{output}");
    assert!(alpha.split_whitespace().collect::<Vec<_>>()[9..11] == ["8", "7"], "waits src and dst: {alpha}");
    assert!(output.lines().any(|l| l.starts_with("beta") && l.ends_with(" ok")), "other namespaces match: {output}");
}

/// Bytes of each large row's state, result or payload (records' and waits').
const LARGE_BYTES: usize = 40_000;
/// Large rows of each kind `populate_large` puts.
const LARGE_ROWS: i64 = 6;
/// A chunk byte budget that three large rows reach and two do not.
const THREE_LARGE_ROWS: usize = 100_000;

/// Fills `store` through a sidecar with `LARGE_ROWS` checkpoints, completed
/// idempotency keys, records and resolved waits, each some `LARGE_BYTES` long.
async fn populate_large(store: &TestStore) {
    let sidecar = Sidecar::builder().store(store).start().await;
    let (mut client, mut keys) = (sidecar.client(), sidecar.idempotency());
    let pad = "x".repeat(LARGE_BYTES);
    for i in 0..LARGE_ROWS {
        let state = format!(r#"{{"pad":"{pad}"}}"#);
        let request = stepwell_test_support::requests::checkpoint("big", &format!("p{i}"), T0 + i, &state);
        client.checkpoint(request).await.expect("Checkpoint");
        let key = format!("big-{i}");
        let token = acquire(&mut keys, begin_leased(&key, Duration::from_secs(3600))).await;
        keys.complete(complete(&key, token, pad.as_bytes())).await.expect("Complete");
    }
    let records = (0..LARGE_ROWS)
        .map(|i| Record {
            turn_id: "big".to_owned(),
            kind: "blob".to_owned(),
            id: format!("b{i}"),
            payload: vec![i as u8; LARGE_BYTES],
            ..Default::default()
        })
        .collect();
    let request = PutRecordsRequest { namespace: String::new(), records, fence: None };
    sidecar.records().put_records(request).await.expect("PutRecords");
    for i in 0..LARGE_ROWS {
        let signal = SignalRequest {
            turn_id: "big".to_owned(),
            name: format!("w{i}"),
            payload: vec![i as u8; LARGE_BYTES],
            ..Default::default()
        };
        sidecar.waits().signal(signal).await.expect("Signal");
    }
    sidecar.stop().await.expect("stop the sidecar");
}

/// The rows `target` holds: checkpoints, idempotency records, records, waits.
async fn held(target: &TestStore) -> (i64, i64, i64, i64) {
    let inspect = target.inspect().await;
    let (checkpoints, keys) = (inspect.count("checkpoints").await, inspect.count("idempotency").await);
    (checkpoints, keys, inspect.count("records").await, inspect.count("waits").await)
}

/// Runs `migrate_stores` with `plan` until it stops after `stop` chunks.
async fn migrate_stopped(source: &TestStore, target: &TestStore, plan: Plan, stop: usize) {
    let plan = Plan { stop_after_chunks: Some(stop), ..plan };
    let stopped = migrate_stores(&source.database(), &target.database(), plan).await;
    assert!(matches!(stopped, Err(moving::Error::Stopped(n)) if n == stop), "{stopped:?}");
}

#[tokio::test]
async fn a_chunk_holds_only_the_rows_that_fit_its_byte_budget() {
    let source = TestStore::new().await;
    populate_large(&source).await;
    let target = sqlite_in(source.dir(), "target.db");
    // 500 rows a chunk, but three large rows reach the budget: each table
    // goes in two chunks of three. Each run starts over and skips what the
    // target holds.
    let plan = Plan { chunk_bytes: THREE_LARGE_ROWS, ..Plan::default() };
    assert_eq!(plan.chunk_rows, 500);
    migrate_stopped(&source, &target, plan, 1).await;
    assert_eq!(held(&target).await, (3, 0, 0, 0), "the first chunk held three checkpoints");
    migrate_stopped(&source, &target, plan, 3).await;
    assert_eq!(held(&target).await, (6, 3, 0, 0), "then three idempotency records");
    migrate_stopped(&source, &target, plan, 5).await;
    assert_eq!(held(&target).await, (6, 6, 3, 0), "then three records");
    migrate_stopped(&source, &target, plan, 7).await;
    assert_eq!(held(&target).await, (6, 6, 6, 3), "then three waits");

    let (copied, expected, found) = migrate_stores(&source.database(), &target.database(), plan).await.unwrap();
    assert_eq!((copied.checkpoints_copied, copied.checkpoints_present), (0, 6));
    assert_eq!((copied.keys_copied, copied.keys_present), (0, 6));
    assert_eq!((copied.stored_records_copied, copied.stored_records_present), (0, 6));
    assert_eq!((copied.waits_copied, copied.waits_present), (3, 3));
    assert_eq!(expected, found, "the target tallies as the source");
    assert_eq!(held(&target).await, (6, 6, 6, 6));
}

#[tokio::test]
async fn a_row_larger_than_the_byte_budget_moves_alone() {
    let source = TestStore::new().await;
    populate_large(&source).await;
    let target = sqlite_in(source.dir(), "target.db");
    let plan = Plan { chunk_bytes: 1_000, ..Plan::default() };
    migrate_stopped(&source, &target, plan, 1).await;
    assert_eq!(held(&target).await, (1, 0, 0, 0), "one checkpoint, larger than the budget, made a chunk");
    migrate_stopped(&source, &target, plan, 7).await;
    assert_eq!(held(&target).await, (6, 1, 0, 0), "a chunk per checkpoint, then one idempotency record");
    migrate_stopped(&source, &target, plan, 13).await;
    assert_eq!(held(&target).await, (6, 6, 1, 0), "a chunk per idempotency record, then one record");
    migrate_stopped(&source, &target, plan, 19).await;
    assert_eq!(held(&target).await, (6, 6, 6, 1), "a chunk per record, then one wait");

    let (copied, expected, found) = migrate_stores(&source.database(), &target.database(), plan).await.unwrap();
    assert_eq!((copied.stored_records_copied, copied.stored_records_present), (0, 6));
    assert_eq!((copied.waits_copied, copied.waits_present), (5, 1));
    assert_eq!(expected, found, "the target tallies as the source");
    assert_eq!(held(&target).await, (6, 6, 6, 6));
}

#[tokio::test]
async fn an_import_writes_chunks_bounded_by_bytes() {
    let source = TestStore::new().await;
    populate_large(&source).await;
    let file = source.dir().join("backup.ndjson");
    // Exported a row a chunk, through the flags.
    let out = file.to_str().unwrap();
    let (code, output) =
        run(&["export", "--from", &source.url(), "--out", out, "--chunk-rows", "1", "--chunk-bytes-max", "1048576"]);
    assert_eq!(code, 0, "{output}");
    let exported = "exported 6 checkpoints, 1 turns, 6 idempotency records, 6 records and 6 waits";
    assert!(output.contains(exported), "{output}");

    let target = sqlite_in(source.dir(), "imported.db");
    let database = target.database();
    let import = |plan: Plan| {
        let input = std::io::BufReader::new(std::fs::File::open(&file).unwrap());
        stepwell::ops::moving::import_into(&database, input, plan)
    };
    let plan = Plan { chunk_bytes: THREE_LARGE_ROWS, ..Plan::default() };
    let stopped = import(Plan { stop_after_chunks: Some(1), ..plan }).await;
    assert!(matches!(stopped, Err(moving::Error::Stopped(1))), "{stopped:?}");
    assert_eq!(held(&target).await, (3, 0, 0, 0), "the first chunk held three checkpoints");
    let stopped = import(Plan { stop_after_chunks: Some(3), ..plan }).await;
    assert!(matches!(stopped, Err(moving::Error::Stopped(3))), "{stopped:?}");
    assert_eq!(held(&target).await, (6, 3, 0, 0), "then three idempotency records");
    let stopped = import(Plan { stop_after_chunks: Some(7), ..plan }).await;
    assert!(matches!(stopped, Err(moving::Error::Stopped(7))), "{stopped:?}");
    assert_eq!(held(&target).await, (6, 6, 6, 3), "then three waits");

    let (copied, expected, found) = import(plan).await.unwrap();
    assert_eq!((copied.keys_copied, copied.keys_present), (0, 6));
    assert_eq!((copied.stored_records_copied, copied.stored_records_present), (0, 6));
    assert_eq!((copied.waits_copied, copied.waits_present), (3, 3));
    assert_eq!(expected, found, "the target tallies as the file");
    assert_eq!(held(&target).await, (6, 6, 6, 6));
}

#[tokio::test]
async fn a_chunk_of_the_most_rows_fits_one_sqlite_statement() {
    let source = TestStore::new().await;
    populate_large(&source).await;
    let file = source.dir().join("backup.ndjson");
    let (code, output) = run(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{output}");
    // 2000 idempotency records or waits (the most --chunk-rows takes), each
    // binding 13 or 14 values: one chunk, one statement.
    let text = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<Value> = text.lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    for (kind, key, held_after) in [("idempotency", "key", (0, 2000, 0, 0)), ("wait", "name", (0, 0, 0, 2000))] {
        let template = lines.iter().find(|line| line["kind"] == kind).unwrap().clone();
        let mut many: Vec<Value> = lines.iter().filter(|line| line["kind"] == "header").cloned().collect();
        for i in 0..2000 {
            let mut line = template.clone();
            line[key] = format!("k{i:04}").into();
            line[if kind == "wait" { "payload" } else { "result" }] = "".into();
            many.push(line);
        }
        let (keys, waits) = if kind == "wait" { (0, 2000) } else { (2000, 0) };
        let end = serde_json::json!({"kind": "end", "checkpoints": 0, "turns": 0, "records": keys,
                                     "stored_records": 0, "waits": waits});
        many.push(end);
        let text: Vec<String> = many.iter().map(Value::to_string).collect();
        std::fs::write(&file, text.join("\n")).unwrap();

        let target = sqlite_in(source.dir(), &format!("imported-{kind}.db"));
        let input = std::io::BufReader::new(std::fs::File::open(&file).unwrap());
        let plan = Plan { chunk_rows: 2000, stop_after_chunks: Some(1), ..Plan::default() };
        let stopped = stepwell::ops::moving::import_into(&target.database(), input, plan).await;
        assert!(matches!(stopped, Err(moving::Error::Stopped(1))), "{stopped:?}");
        assert_eq!(held(&target).await, held_after, "one chunk wrote every {kind}");
    }
}

#[test]
fn chunk_flags_are_documented_and_bounded() {
    for command in ["migrate", "export", "import"] {
        let output = Command::new(STEPWELL).args([command, "--help"]).output().expect("run stepwell");
        let help = String::from_utf8_lossy(&output.stdout);
        assert!(help.contains("--chunk-rows <ROWS>") && help.contains("--chunk-bytes-max <BYTES>"), "{help}");
    }
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("none.db").display());
    let file = dir.path().join("none.ndjson");
    let file = file.to_str().unwrap();
    for (rows, bytes) in [("0", "1048575"), ("2001", "268435457"), ("many", "64MiB")] {
        let chunks = ["--chunk-rows", rows, "--chunk-bytes-max", bytes];
        for args in [
            [&["migrate", "--from", &db, "--to", &db][..], &chunks].concat(),
            [&["export", "--from", &db, "--out", file][..], &chunks].concat(),
            [&["import", "--to", &db, "--in", file][..], &chunks].concat(),
        ] {
            let (code, output) = run(&args);
            assert_eq!(code, 64, "{args:?} is a configuration error: {output}");
            assert!(output.contains("--chunk-rows") && output.contains("--chunk-bytes-max"), "{output}");
        }
    }
    assert!(!dir.path().join("none.db").exists(), "no store was opened");
}

/// Moves between SQLite and Postgres; both backends are needed, so these
/// run in the Postgres pass only (scripts/test skips `postgres_only::` on SQLite).
mod postgres_only {
    use stepwell_test_support::backend::{TestStore, fresh_postgres_database};

    use super::{Plan, answers_on, migrate_stores, moved_waits_fall_due, moving, populated, run, sqlite_in};
    use stepwell::store::Database;

    #[tokio::test]
    async fn migrate_from_sqlite_to_postgres_and_back() {
        let dir = tempfile::tempdir().unwrap();
        let source = sqlite_in(dir.path(), "source.db");
        let (before, max_token) = populated(&source).await;
        let target = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });

        let (code, output) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("checkpoints: 27 copied, 0 already present"), "{output}");
        assert!(output.contains("idempotency keys: 15 copied, 0 already present"), "{output}");
        assert!(output.contains("records (RecordService): 63 copied, 0 already present"), "{output}");
        assert!(output.contains("waits (WaitService): 24 copied, 0 already present"), "{output}");
        assert!(output.contains("verified: every namespace matches"), "{output}");
        assert!(output.lines().filter(|l| l.ends_with(" ok")).count() == 3, "a row per namespace: {output}");

        let (code, output) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("checkpoints: 0 copied, 27 already present"), "{output}");
        assert!(output.contains("records (RecordService): 0 copied, 63 already present"), "{output}");
        assert!(output.contains("waits (WaitService): 0 copied, 24 already present"), "{output}");
        assert!(output.contains("nothing to copy"), "a second run copies nothing: {output}");

        let (after, token) = answers_on(&target, "new").await;
        assert_eq!(before, after, "Postgres answers as SQLite did");
        assert!(token > max_token, "a new token {token} is above every old one ({max_token})");

        let back = sqlite_in(dir.path(), "back.db");
        let (code, output) = run(&["migrate", "--from", &target.url(), "--to", &back.url()]);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("records (RecordService): 63 copied, 0 already present"), "{output}");
        assert!(output.contains("waits (WaitService): 24 copied, 0 already present"), "{output}");
        assert!(output.contains("verified: every namespace matches"), "{output}");
        let (again, newer) = answers_on(&back, "newer").await;
        assert_eq!(before, again, "back on SQLite, the same answers");
        assert!(newer > token, "the fence moved back with the store: {newer} > {token}");
        moved_waits_fall_due(&back).await;
    }

    #[tokio::test]
    async fn a_migration_stopped_halfway_completes_when_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let source = sqlite_in(dir.path(), "source.db");
        let (before, max_token) = populated(&source).await;
        let target = TestStore::on(Database::Postgres { url: fresh_postgres_database().await });

        let plan = Plan { chunk_rows: 4, stop_after_chunks: Some(3), ..Plan::default() };
        let stopped = migrate_stores(&source.database(), &target.database(), plan).await;
        assert!(matches!(stopped, Err(moving::Error::Stopped(3))), "{stopped:?}");
        assert_eq!(target.inspect().await.count("checkpoints").await, 12, "three chunks of four were committed");

        let (code, output) = run(&["migrate", "--from", &source.url(), "--to", &target.url()]);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("checkpoints: 15 copied, 12 already present"), "{output}");
        assert!(output.contains("records (RecordService): 63 copied, 0 already present"), "{output}");
        assert!(output.contains("waits (WaitService): 24 copied, 0 already present"), "{output}");
        assert!(output.contains("verified: every namespace matches"), "{output}");
        let (after, token) = answers_on(&target, "new").await;
        assert_eq!(before, after);
        assert!(token > max_token, "a new token {token} is above every old one ({max_token})");
    }
}

/// Memory items are not moved yet: migrate and export refuse a store that
/// holds any, before they copy or write anything, and say why.
#[tokio::test]
async fn a_store_holding_memory_items_is_refused_whole_by_migrate_and_export() {
    let source = TestStore::new().await;
    populated(&source).await;
    let sidecar = Sidecar::builder().store(&source).start().await;
    let write = stepwell::api::pb::MemoryWrite {
        path: vec!["users".to_owned()],
        key: "k".to_owned(),
        value: b"{}".to_vec(),
        ..Default::default()
    };
    let request = stepwell::api::pb::PutItemsRequest { namespace: String::new(), writes: vec![write] };
    sidecar.memory().put_items(request).await.expect("an item");
    drop(sidecar);
    let file = source.dir().join("refused.ndjson");
    let (code, _, err) = run_apart(&["export", "--from", &source.url(), "--out", file.to_str().unwrap()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("1 memory items") && err.contains("nothing was copied"), "{err}");
    assert!(!file.exists(), "a refused export writes no file");
    let target = sqlite_in(source.dir(), "refused.db");
    let (code, _, err) = run_apart(&["migrate", "--from", &source.url(), "--to", &target.url()]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("memory items"), "{err}");
    assert!(!source.dir().join("refused.db").exists(), "a refused migration creates no target");
}
