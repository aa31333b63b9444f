//! Authentication and authorization with `--auth-file`: every RPC against
//! every kind of caller in one table, and proof that no refused call stored
//! anything, and that a request with two `authorization` headers is refused
//! whichever comes first; SIGHUP reloads the file for connections already open and keeps
//! the old principals when the new file is broken; a bad file stops the
//! start with exit 64; the audit events name principals and never tokens;
//! `stepwell auth new-token` prints a token whose hash is in its lines; and
//! reflection is off while authentication is on unless asked for.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use stepwell::api::pb as memory;
use stepwell::api::pb as waits;
use stepwell::api::pb::{
    BeginRequest, CheckpointRequest, CompleteRequest, CopyTurnRequest, DeleteRecordsRequest, DeleteTurnRequest,
    ExtendRequest, GetRequest, ListRecordsRequest, ListTurnsRequest, PutRecordsRequest, Record, RecordState,
    ReleaseRequest, RestoreRequest, WaitStatus,
};
use stepwell::auth::token_sha256;
use stepwell::domain::rpc::Rpc;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{T0, duration, nanos, ts};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};
use stepwell_test_support::{Client, IdempotencyClient, MemoryClient, RecordClient, WAIT_LIMIT, WaitClient};
use tonic::{Code, Request, Status};

use crate::STEPWELL;

/// One kind of caller: its `authorization` header, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Caller {
    NoToken,
    MalformedHeader,
    UnknownToken,
    Read,
    Write,
    Admin,
    OtherNamespace,
    Wildcard,
}

const CALLERS: [Caller; 8] = [
    Caller::NoToken,
    Caller::MalformedHeader,
    Caller::UnknownToken,
    Caller::Read,
    Caller::Write,
    Caller::Admin,
    Caller::OtherNamespace,
    Caller::Wildcard,
];

impl Caller {
    fn header(self) -> Option<String> {
        match self {
            Caller::NoToken => None,
            Caller::MalformedHeader => Some(format!("Token {}", token(Caller::Admin).expect("a token"))),
            caller => Some(format!("Bearer {}", token(caller).expect("a token"))),
        }
    }
}

/// The token each caller presents; only the ones in `AUTH_FILE` are known.
fn token(caller: Caller) -> Option<&'static str> {
    match caller {
        Caller::NoToken => None,
        Caller::MalformedHeader | Caller::Admin => Some("swt_admin-token"),
        Caller::UnknownToken => Some("swt_nobody-knows-this-one"),
        Caller::Read => Some("swt_reader-token"),
        Caller::Write => Some("swt_writer-token"),
        Caller::OtherNamespace => Some("swt_other-namespace-token"),
        Caller::Wildcard => Some("swt_wildcard-token"),
    }
}

/// The principals of the matrix: each role in `billing` and in the default
/// namespace, a caller granted only another namespace, and `*` = write.
fn auth_file_text() -> String {
    let principal = |id: &str, caller: Caller, grants: &str| {
        format!(
            "[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{grants}]\n\n",
            token_sha256(token(caller).expect("a token"))
        )
    };
    let both = |role: &str| {
        format!("{{ namespace = \"billing\", role = \"{role}\" }}, {{ namespace = \"default\", role = \"{role}\" }}")
    };
    [
        principal("reader", Caller::Read, &both("read")),
        principal("writer", Caller::Write, &both("write")),
        principal("admin", Caller::Admin, &both("admin")),
        principal("outsider", Caller::OtherNamespace, "{ namespace = \"elsewhere\", role = \"admin\" }"),
        principal("everywhere", Caller::Wildcard, "{ namespace = \"*\", role = \"write\" }"),
    ]
    .concat()
}

fn write_auth_file(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("auth.toml");
    std::fs::write(&path, text).expect("write the auth file");
    path
}

/// What each caller gets from each RPC, callers in the order of `CALLERS`:
/// `+` allowed, `U` UNAUTHENTICATED, `D` PERMISSION_DENIED. The same in the
/// explicit namespace and the empty one (`default`).
const MATRIX: [(Rpc, &str); 24] = [
    //                 none malformed unknown read write admin other wildcard(write)
    (Rpc::Checkpoint, "U U U D + + D +"),
    (Rpc::Restore, "U U U + + + D +"),
    (Rpc::ListTurns, "U U U + + + D +"),
    (Rpc::DeleteTurn, "U U U D D + D D"),
    (Rpc::Begin, "U U U D + + D +"),
    (Rpc::Complete, "U U U D + + D +"),
    (Rpc::Release, "U U U D + + D +"),
    (Rpc::Extend, "U U U D + + D +"),
    (Rpc::Get, "U U U + + + D +"),
    (Rpc::PutRecords, "U U U D + + D +"),
    (Rpc::ListRecords, "U U U + + + D +"),
    (Rpc::DeleteRecords, "U U U D + + D +"),
    (Rpc::CopyTurn, "U U U D + + D +"),
    (Rpc::CreateWait, "U U U D + + D +"),
    (Rpc::Signal, "U U U D + + D +"),
    (Rpc::Await, "U U U + + + D +"),
    (Rpc::GetWait, "U U U + + + D +"),
    (Rpc::ListWaits, "U U U + + + D +"),
    (Rpc::CancelWait, "U U U D + + D +"),
    (Rpc::PutItems, "U U U D + + D +"),
    (Rpc::GetItems, "U U U + + + D +"),
    (Rpc::SearchItems, "U U U + + + D +"),
    (Rpc::ListPaths, "U U U + + + D +"),
    (Rpc::DeleteItems, "U U U D + + D +"),
];

/// A put of the memory item at path [`name`], key "a".
fn item_in(name: &str) -> memory::MemoryWrite {
    memory::MemoryWrite {
        path: vec![name.to_owned()],
        key: "a".to_owned(),
        value: b"{}".to_vec(),
        ..Default::default()
    }
}

/// How many memory items path [`name`] holds, read as the admin.
async fn items_of(clients: &mut Clients, namespace: &str, name: &str) -> usize {
    let request = memory::SearchItemsRequest {
        namespace: namespace.to_owned(),
        path_prefix: vec![name.to_owned()],
        ..Default::default()
    };
    let admin = Caller::Admin.header();
    let found = clients.memory.search_items(with_header(request, admin.as_deref())).await.expect("the admin searches");
    found.into_inner().hits.len()
}

/// Makes a MemoryService cell's call on path [`name`].
async fn call_memory(
    memory: &mut MemoryClient,
    rpc: Rpc,
    namespace: String,
    name: String,
    header: Option<&str>,
) -> Result<(), Status> {
    use memory::*;
    match rpc {
        Rpc::PutItems => {
            let request = PutItemsRequest { namespace, writes: vec![item_in(&name)] };
            memory.put_items(with_header(request, header)).await.map(drop)
        }
        Rpc::GetItems => {
            let items = vec![ItemAddress { path: vec![name], key: "a".to_owned() }];
            let request = GetItemsRequest { namespace, items, refresh_ttl: true };
            memory.get_items(with_header(request, header)).await.map(drop)
        }
        Rpc::SearchItems => {
            let request = SearchItemsRequest { namespace, path_prefix: vec![name], ..Default::default() };
            memory.search_items(with_header(request, header)).await.map(drop)
        }
        Rpc::ListPaths => {
            let request = ListPathsRequest { namespace, ..Default::default() };
            memory.list_paths(with_header(request, header)).await.map(drop)
        }
        _ => {
            let request = DeleteItemsRequest { namespace, path_prefix: vec![name] };
            memory.delete_items(with_header(request, header)).await.map(drop)
        }
    }
}

/// A record in turn `name`, for the RecordService cells.
fn record_in(name: &str) -> Record {
    Record { turn_id: name.to_owned(), kind: "k".to_owned(), id: "a".to_owned(), ..Default::default() }
}

/// How many records turn `name` holds, read as the admin.
async fn records_of(clients: &mut Clients, namespace: &str, name: &str) -> usize {
    let request = ListRecordsRequest {
        namespace: namespace.to_owned(),
        turn_id: name.to_owned(),
        kind: "k".to_owned(),
        ..Default::default()
    };
    let admin = Caller::Admin.header();
    let listed = clients.records.list_records(with_header(request, admin.as_deref())).await;
    listed.expect("the admin lists records").into_inner().entries.len()
}

/// A request with the caller's header.
fn with_header<T>(message: T, header: Option<&str>) -> Request<T> {
    let mut request = Request::new(message);
    if let Some(header) = header {
        request.metadata_mut().insert("authorization", header.parse().expect("an ASCII header"));
    }
    request
}

/// The two services, for a caller that sets its header per request.
struct Clients {
    checkpoints: Client,
    keys: IdempotencyClient,
    records: RecordClient,
    waits: WaitClient,
    memory: MemoryClient,
}

/// What a cell was seeded with, to tell afterwards whether its call stored anything.
#[derive(Default)]
struct Seed {
    lease_token: u64,
    lease_expires_at: i64,
}

/// Stores what the cell's call acts on, as the admin: a turn to restore or
/// delete, a held key to complete, release, extend or get.
async fn seed(clients: &mut Clients, rpc: Rpc, namespace: &str, name: &str) -> Seed {
    let admin = Caller::Admin.header();
    let admin = admin.as_deref();
    match rpc {
        Rpc::Restore | Rpc::DeleteTurn => {
            let request = CheckpointRequest {
                namespace: namespace.to_owned(),
                turn_id: name.to_owned(),
                phase: "seeded".to_owned(),
                timestamp: Some(ts(T0)),
                state: b"{}".to_vec(),
                ..Default::default()
            };
            clients.checkpoints.checkpoint(with_header(request, admin)).await.expect("the admin seeds a turn");
            Seed::default()
        }
        Rpc::Complete | Rpc::Release | Rpc::Extend | Rpc::Get => {
            let request = BeginRequest { namespace: namespace.to_owned(), key: name.to_owned(), ..Default::default() };
            let begun = clients.keys.begin(with_header(request, admin)).await.expect("the admin seeds a key");
            let begun = begun.into_inner();
            Seed { lease_token: begun.lease_token, lease_expires_at: nanos(begun.lease_expires_at) }
        }
        Rpc::DeleteRecords | Rpc::CopyTurn => {
            let request =
                PutRecordsRequest { namespace: namespace.to_owned(), records: vec![record_in(name)], fence: None };
            clients.records.put_records(with_header(request, admin)).await.expect("the admin seeds a record");
            Seed::default()
        }
        Rpc::Signal | Rpc::CancelWait | Rpc::Await | Rpc::GetWait => {
            // A pending wait to settle; the reads' waits are settled, so an Await answers at once.
            let create = waits::CreateWaitRequest {
                namespace: namespace.to_owned(),
                turn_id: name.to_owned(),
                name: "w".to_owned(),
                ..Default::default()
            };
            clients.waits.create_wait(with_header(create, admin)).await.expect("the admin seeds a wait");
            if matches!(rpc, Rpc::Await | Rpc::GetWait) {
                let signal = waits::SignalRequest {
                    namespace: namespace.to_owned(),
                    turn_id: name.to_owned(),
                    name: "w".to_owned(),
                    ..Default::default()
                };
                clients.waits.signal(with_header(signal, admin)).await.expect("the admin settles the wait");
            }
            Seed::default()
        }
        Rpc::GetItems | Rpc::SearchItems | Rpc::ListPaths | Rpc::DeleteItems => {
            let request = memory::PutItemsRequest { namespace: namespace.to_owned(), writes: vec![item_in(name)] };
            clients.memory.put_items(with_header(request, admin)).await.expect("the admin seeds an item");
            Seed::default()
        }
        Rpc::Checkpoint
        | Rpc::ListTurns
        | Rpc::Begin
        | Rpc::PutRecords
        | Rpc::ListRecords
        | Rpc::CreateWait
        | Rpc::ListWaits
        | Rpc::PutItems => Seed::default(),
    }
}

/// Makes a WaitService cell's call on the wait "w" of turn `name`.
async fn call_wait(
    waits: &mut WaitClient,
    rpc: Rpc,
    namespace: String,
    name: String,
    header: Option<&str>,
) -> Result<(), Status> {
    use waits::*;
    let (turn_id, wait) = (name, "w".to_owned());
    match rpc {
        Rpc::CreateWait => {
            let request = CreateWaitRequest { namespace, turn_id, name: wait, ..Default::default() };
            waits.create_wait(with_header(request, header)).await.map(drop)
        }
        Rpc::Signal => {
            let request = SignalRequest { namespace, turn_id, name: wait, ..Default::default() };
            waits.signal(with_header(request, header)).await.map(drop)
        }
        Rpc::Await => {
            let request = AwaitRequest { namespace, turn_id, name: wait, ..Default::default() };
            waits.r#await(with_header(request, header)).await.map(drop)
        }
        Rpc::GetWait => {
            let request = GetWaitRequest { namespace, turn_id, name: wait, ..Default::default() };
            waits.get_wait(with_header(request, header)).await.map(drop)
        }
        Rpc::ListWaits => {
            let request = ListWaitsRequest { namespace, ..Default::default() };
            waits.list_waits(with_header(request, header)).await.map(drop)
        }
        _ => {
            let request = CancelWaitRequest { namespace, turn_id, name: wait, ..Default::default() };
            waits.cancel_wait(with_header(request, header)).await.map(drop)
        }
    }
}

/// The status of the wait "w" of turn `name`, read as the admin; `None` when absent.
async fn wait_status(clients: &mut Clients, namespace: &str, name: &str) -> Option<WaitStatus> {
    let admin = Caller::Admin.header();
    let request = waits::GetWaitRequest {
        namespace: namespace.to_owned(),
        turn_id: name.to_owned(),
        name: "w".to_owned(),
        ..Default::default()
    };
    let found = clients.waits.get_wait(with_header(request, admin.as_deref())).await.ok()?;
    Some(found.into_inner().wait.expect("a wait").status())
}

/// Makes the cell's call; `Ok` when it was answered without an error.
async fn call(
    clients: &mut Clients,
    rpc: Rpc,
    namespace: &str,
    name: &str,
    seed: &Seed,
    header: Option<&str>,
) -> Result<(), Status> {
    let namespace = namespace.to_owned();
    let name = name.to_owned();
    let token = seed.lease_token;
    let (c, k, r) = (&mut clients.checkpoints, &mut clients.keys, &mut clients.records);
    match rpc {
        Rpc::Checkpoint => {
            let request = CheckpointRequest {
                namespace,
                turn_id: name,
                phase: "written".to_owned(),
                timestamp: Some(ts(T0)),
                state: b"{}".to_vec(),
                ..Default::default()
            };
            c.checkpoint(with_header(request, header)).await.map(drop)
        }
        Rpc::Restore => c
            .restore(with_header(RestoreRequest { namespace, turn_id: name, ..Default::default() }, header))
            .await
            .map(drop),
        Rpc::ListTurns => {
            c.list_turns(with_header(ListTurnsRequest { namespace, ..Default::default() }, header)).await.map(drop)
        }
        Rpc::DeleteTurn => c
            .delete_turn(with_header(DeleteTurnRequest { namespace, turn_id: name, include_records: false }, header))
            .await
            .map(drop),
        Rpc::Begin => {
            k.begin(with_header(BeginRequest { namespace, key: name, ..Default::default() }, header)).await.map(drop)
        }
        Rpc::Complete => {
            let request = CompleteRequest { namespace, key: name, lease_token: token, result: b"done".to_vec() };
            k.complete(with_header(request, header)).await.map(drop)
        }
        Rpc::Release => {
            let request = ReleaseRequest {
                namespace,
                key: name,
                lease_token: token,
                error: "gave up".to_owned(),
                permanent: true,
            };
            k.release(with_header(request, header)).await.map(drop)
        }
        Rpc::Extend => {
            let lease = Some(duration(std::time::Duration::from_secs(3600)));
            let request = ExtendRequest { namespace, key: name, lease_token: token, lease };
            k.extend(with_header(request, header)).await.map(drop)
        }
        Rpc::Get => k.get(with_header(GetRequest { namespace, key: name }, header)).await.map(drop),
        Rpc::PutRecords => {
            let request = PutRecordsRequest { namespace, records: vec![record_in(&name)], fence: None };
            r.put_records(with_header(request, header)).await.map(drop)
        }
        Rpc::ListRecords => {
            let request = ListRecordsRequest { namespace, kind: "k".to_owned(), ..Default::default() };
            r.list_records(with_header(request, header)).await.map(drop)
        }
        Rpc::DeleteRecords => {
            let request = DeleteRecordsRequest { namespace, turn_ids: vec![name], ..Default::default() };
            r.delete_records(with_header(request, header)).await.map(drop)
        }
        Rpc::CopyTurn => {
            let target_turn_id = format!("{name}-copy");
            let request = CopyTurnRequest { namespace, source_turn_id: name, target_turn_id };
            r.copy_turn(with_header(request, header)).await.map(drop)
        }
        Rpc::CreateWait | Rpc::Signal | Rpc::Await | Rpc::GetWait | Rpc::ListWaits | Rpc::CancelWait => {
            call_wait(&mut clients.waits, rpc, namespace, name, header).await
        }
        Rpc::PutItems | Rpc::GetItems | Rpc::SearchItems | Rpc::ListPaths | Rpc::DeleteItems => {
            call_memory(&mut clients.memory, rpc, namespace, name, header).await
        }
    }
}

/// Reads back, as the admin, whether the cell's call changed the store;
/// `None` for the reads, which change nothing by definition.
async fn changed(clients: &mut Clients, rpc: Rpc, namespace: &str, name: &str, seed: &Seed) -> Option<bool> {
    let admin = Caller::Admin.header();
    let admin = admin.as_deref();
    let restore = RestoreRequest { namespace: namespace.to_owned(), turn_id: name.to_owned(), ..Default::default() };
    let get = GetRequest { namespace: namespace.to_owned(), key: name.to_owned() };
    let checkpoints = match rpc {
        Rpc::Checkpoint | Rpc::DeleteTurn => {
            let restored = clients.checkpoints.restore(with_header(restore, admin)).await.expect("the admin restores");
            restored.into_inner().checkpoints.len()
        }
        _ => 0,
    };
    let record = match rpc {
        Rpc::Begin | Rpc::Complete | Rpc::Release | Rpc::Extend => {
            clients.keys.get(with_header(get, admin)).await.ok().map(|found| found.into_inner())
        }
        _ => None,
    };
    let held = |record: Option<stepwell::api::pb::GetResponse>| record.expect("the seeded key is there");
    let records = match rpc {
        Rpc::PutRecords | Rpc::DeleteRecords => records_of(clients, namespace, name).await,
        Rpc::CopyTurn => records_of(clients, namespace, &format!("{name}-copy")).await,
        Rpc::PutItems | Rpc::DeleteItems => items_of(clients, namespace, name).await,
        _ => 0,
    };
    match rpc {
        Rpc::Checkpoint => Some(checkpoints == 1),
        Rpc::DeleteTurn => Some(checkpoints == 0),
        Rpc::Begin => Some(record.is_some()),
        Rpc::Complete | Rpc::Release => Some(held(record).state != i32::from(RecordState::InProgress)),
        Rpc::Extend => Some(nanos(held(record).lease_expires_at) != seed.lease_expires_at),
        Rpc::PutRecords | Rpc::CopyTurn => Some(records == 1),
        Rpc::DeleteRecords => Some(records == 0),
        Rpc::CreateWait => Some(wait_status(clients, namespace, name).await.is_some()),
        Rpc::Signal => Some(wait_status(clients, namespace, name).await == Some(WaitStatus::Resolved)),
        Rpc::CancelWait => Some(wait_status(clients, namespace, name).await == Some(WaitStatus::Cancelled)),
        Rpc::PutItems => Some(records == 1),
        Rpc::DeleteItems => Some(records == 0),
        Rpc::Restore
        | Rpc::ListTurns
        | Rpc::Get
        | Rpc::ListRecords
        | Rpc::Await
        | Rpc::GetWait
        | Rpc::ListWaits
        | Rpc::GetItems
        | Rpc::SearchItems
        | Rpc::ListPaths => None,
    }
}

#[tokio::test]
async fn every_rpc_answers_every_caller_as_the_matrix_says_and_refusals_store_nothing() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    let mut clients = Clients {
        checkpoints: server.client(),
        keys: server.idempotency(),
        records: server.records(),
        waits: server.waits(),
        memory: server.memory(),
    };

    let mut cells = Vec::new();
    for (rpc, row) in MATRIX {
        let expected: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(expected.len(), CALLERS.len(), "{rpc:?}'s row has a column per caller");
        for (caller, expected) in CALLERS.into_iter().zip(expected) {
            for (namespace, effective) in [("billing", "billing"), ("", "default")] {
                let name = format!("{}-{caller:?}-{effective}", rpc.as_str());
                let seed = seed(&mut clients, rpc, namespace, &name).await;
                let header = caller.header();
                let answer = call(&mut clients, rpc, namespace, &name, &seed, header.as_deref()).await;
                let cell = format!("{rpc:?} by {caller:?} in {namespace:?}");
                match (expected, &answer) {
                    ("+", Ok(())) => {}
                    ("U" | "D", Err(status)) => {
                        let (code, reason) = match expected {
                            "U" => (Code::Unauthenticated, "UNAUTHENTICATED"),
                            _ => (Code::PermissionDenied, "PERMISSION_DENIED"),
                        };
                        let info = assert_error(status, code, reason);
                        // An unknown caller is refused before its message is read, so
                        // its answer cannot name the namespace.
                        let namespace = (expected == "D").then_some(effective);
                        assert_eq!(info.metadata.get("namespace").map(String::as_str), namespace, "{cell}");
                        assert_eq!(info.metadata.get("role").map(String::as_str), Some(rpc.role().as_str()), "{cell}");
                        let shown = format!("{status:?}");
                        for caller in CALLERS {
                            let token = token(caller).unwrap_or("no token");
                            assert!(!shown.contains(token), "{cell}: the answer shows a token: {shown}");
                        }
                    }
                    _ => panic!("{cell}: expected {expected}, got {answer:?}"),
                }
                cells.push((rpc, namespace, name, seed, expected == "+"));
            }
        }
    }
    assert_eq!(cells.len(), MATRIX.len() * 8 * 2);

    // Every write the matrix refused left the store as it was; every one it
    // allowed changed it, so the read-back can tell the two apart.
    for (rpc, namespace, name, seed, allowed) in &cells {
        if let Some(changed) = changed(&mut clients, *rpc, namespace, name, seed).await {
            assert_eq!(changed, *allowed, "{rpc:?} {name}: changed the store {changed}, allowed {allowed}");
        }
    }
}

#[tokio::test]
async fn a_known_caller_hears_of_a_malformed_namespace_and_an_unknown_one_does_not() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    let mut keys = server.idempotency();
    let get = || GetRequest { namespace: "Not-Valid".to_owned(), key: "k".to_owned() };

    let unknown = keys.get(with_header(get(), None)).await.expect_err("refused");
    let info = assert_error(&unknown, Code::Unauthenticated, "UNAUTHENTICATED");
    assert_eq!(info.metadata.get("namespace"), None, "a malformed namespace is not echoed");
    let admin = Caller::Admin.header();
    let known = keys.get(with_header(get(), admin.as_deref())).await.expect_err("refused");
    assert_error(&known, Code::InvalidArgument, "FIELD_MALFORMED");
}

#[tokio::test]
async fn a_request_with_two_authorization_headers_is_refused_in_either_order() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    let mut checkpoints = server.client();
    let header = |caller: Caller| caller.header().expect("a header");
    let (admin, unknown) = (header(Caller::Admin), header(Caller::UnknownToken));
    let (admin, unknown) = (admin.as_str(), unknown.as_str());
    let delete = |headers: &[&str]| {
        let mut request = Request::new(DeleteTurnRequest {
            namespace: "billing".to_owned(),
            turn_id: "t".to_owned(),
            include_records: false,
        });
        for value in headers {
            request.metadata_mut().append("authorization", value.parse().expect("an ASCII header"));
        }
        request
    };

    checkpoints.delete_turn(delete(&[admin])).await.expect("one admin header is served");
    for headers in [[admin, unknown], [unknown, admin], [admin, admin]] {
        let refused = checkpoints.delete_turn(delete(&headers)).await.expect_err("two headers are refused");
        let info = assert_error(&refused, Code::Unauthenticated, "UNAUTHENTICATED");
        assert_eq!(info.metadata.get("role").map(String::as_str), Some("admin"), "{headers:?}");
    }
}

#[tokio::test]
async fn without_an_auth_file_no_call_needs_a_token() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let request =
        DeleteTurnRequest { namespace: "billing".to_owned(), turn_id: "t".to_owned(), include_records: false };
    client.delete_turn(with_header(request, Some("Bearer whatever"))).await.expect("no authentication");
    server.idempotency().get(GetRequest { key: "k".to_owned(), ..Default::default() }).await.expect_err("not found");
}

/// Calls Get in the default namespace as the holder of `token` on `keys`;
/// `Ok` when the call was authenticated (the key itself is never there).
async fn authenticated(keys: &mut IdempotencyClient, token: &str) -> Result<(), Status> {
    let request =
        with_header(GetRequest { key: "absent".to_owned(), ..Default::default() }, Some(&format!("Bearer {token}")));
    match keys.get(request).await {
        Err(status) if status.code() == Code::NotFound => Ok(()),
        Err(status) => Err(status),
        Ok(found) => panic!("no key was stored: {found:?}"),
    }
}

fn admin_of_default(id: &str, token: &str) -> String {
    format!(
        "[[principals]]\nid = \"{id}\"\ntoken_sha256 = \"{}\"\ngrants = [{{ namespace = \"default\", role = \"admin\" }}]\n\n",
        token_sha256(token)
    )
}

/// Retries `attempt` until it returns true, bounded by `WAIT_LIMIT`.
async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut attempt: F) {
    let waited = tokio::time::timeout(WAIT_LIMIT, async {
        while !attempt().await {
            tokio::task::yield_now().await;
        }
    });
    waited.await.unwrap_or_else(|_| panic!("{what} within {WAIT_LIMIT:?}"));
}

#[tokio::test]
async fn sighup_reloads_the_file_for_open_connections_and_a_broken_file_keeps_the_old() {
    let store = TestStore::new().await;
    let path = write_auth_file(
        store.dir(),
        &[admin_of_default("kept", "swt_kept"), admin_of_default("revoked", "swt_revoked")].concat(),
    );
    let log = store.dir().join("stepwell.log");
    let mut server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", path.to_str().expect("a UTF-8 path")])
        .stderr_to(&log)
        .spawn()
        .await;
    // One channel, one connection, used before and after every reload.
    let mut keys = server.idempotency();
    authenticated(&mut keys, "swt_revoked").await.expect("the token works before the reload");

    write_auth_file(store.dir(), &admin_of_default("kept", "swt_kept"));
    server.signal(libc::SIGHUP);
    eventually("the revoked token is refused", async || match authenticated(&mut keys, "swt_revoked").await {
        Ok(()) => false,
        Err(status) => {
            assert_error(&status, Code::Unauthenticated, "UNAUTHENTICATED");
            true
        }
    })
    .await;
    authenticated(&mut keys, "swt_kept").await.expect("the kept token still works");

    write_auth_file(store.dir(), "[[principals]]\nid = \"kept\"\ntoken_sha256 = \"not a hash\"\n");
    server.signal(libc::SIGHUP);
    eventually("the broken file is reported", async || {
        std::fs::read_to_string(&log).unwrap_or_default().contains("could not be reloaded")
    })
    .await;
    let logged = std::fs::read_to_string(&log).expect("the log");
    assert!(logged.contains("64 lowercase hexadecimal"), "the log says why: {logged}");
    authenticated(&mut keys, "swt_kept").await.expect("the old principals stay in force");
    let refused = authenticated(&mut keys, "swt_revoked").await.expect_err("still revoked");
    assert_error(&refused, Code::Unauthenticated, "UNAUTHENTICATED");
    assert!(server.is_running(), "SIGHUP does not stop the sidecar");
}

#[tokio::test]
async fn a_bad_auth_file_at_start_up_exits_64_with_the_reason() {
    let store = TestStore::new().await;
    let cases = [
        (
            "[[principals]]\nid = \"billing\"\ntoken_sha256 = \"abc\"\n",
            "principal \"billing\": token_sha256 must be 64",
        ),
        ("[[principals]]\nid = \"billing\"\ncertificate = \"spiffe://x\"\npassword = \"p\"\n", "password"),
    ];
    for (text, reason) in cases {
        let path = write_auth_file(store.dir(), text);
        let (status, stderr) = SidecarProcess::builder(STEPWELL, &store)
            .flags(&["--auth-file", path.to_str().expect("a UTF-8 path")])
            .run_until_exit();
        assert_eq!(status.code(), Some(64), "{stderr}");
        assert!(stderr.contains("--auth-file") && stderr.contains(reason), "{reason:?} in {stderr}");
    }
    let missing = store.dir().join("missing.toml");
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", missing.to_str().expect("a UTF-8 path")])
        .run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("could not read the auth file"), "{stderr}");
}

#[tokio::test]
async fn the_audit_log_has_one_event_per_delete_permanent_release_and_denial_and_no_token() {
    let store = TestStore::new().await;
    let path = write_auth_file(store.dir(), &auth_file_text());
    let log = store.dir().join("stepwell.log");
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--auth-file", path.to_str().expect("a UTF-8 path"), "--log-format", "json", "--log", "info"])
        .stderr_to(&log)
        .spawn()
        .await;
    let (mut checkpoints, mut keys) = (server.client(), server.idempotency());
    let admin = Caller::Admin.header();
    let writer = Caller::Write.header();
    let (admin, writer) = (admin.as_deref(), writer.as_deref());

    let delete =
        DeleteTurnRequest { namespace: "billing".to_owned(), turn_id: "turn-9".to_owned(), include_records: false };
    checkpoints.delete_turn(with_header(delete, admin)).await.expect("the admin deletes");
    for (key, permanent) in [("key-permanent", true), ("key-retry", false)] {
        let begun = keys.begin(with_header(BeginRequest { key: key.to_owned(), ..Default::default() }, writer));
        let token = begun.await.expect("begun").into_inner().lease_token;
        let release = ReleaseRequest { key: key.to_owned(), lease_token: token, permanent, ..Default::default() };
        keys.release(with_header(release, writer)).await.expect("released");
    }
    let denied = GetRequest { namespace: "billing".to_owned(), key: "key-x".to_owned() };
    let other = Caller::OtherNamespace.header();
    keys.get(with_header(denied, other.as_deref())).await.expect_err("denied");
    let unknown = Caller::UnknownToken.header();
    let request = with_header(CheckpointRequest::default(), unknown.as_deref());
    checkpoints.checkpoint(request).await.expect_err("not authenticated");

    server.terminate();
    assert!(server.wait().await.success(), "a clean exit flushes the log");
    let text = std::fs::read_to_string(&log).expect("the log");
    for caller in CALLERS {
        if let Some(token) = token(caller) {
            assert!(!text.contains(token), "the log shows {caller:?}'s token:\n{text}");
        }
    }
    let events: Vec<Value> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["target"] == "stepwell::audit")
        .collect();
    let summary: Vec<[String; 6]> = events
        .iter()
        .map(|event| {
            let field = |name: &str| event["fields"][name].as_str().unwrap_or("-").to_owned();
            let level = event["level"].as_str().unwrap_or("-").to_owned();
            let subject = if event["fields"]["turn_id"].is_string() { field("turn_id") } else { field("key") };
            [level, field("principal"), field("rpc"), field("namespace"), subject, field("outcome")]
        })
        .collect();
    let expected = [
        ["INFO", "admin", "DeleteTurn", "billing", "turn-9", "ok"],
        ["INFO", "writer", "Release", "default", "key-permanent", "ok"],
        ["WARN", "outsider", "Get", "billing", "key-x", "PERMISSION_DENIED"],
        ["WARN", "anonymous", "Checkpoint", "-", "-", "UNAUTHENTICATED"], // refused before its message was read
    ];
    assert_eq!(summary, expected.map(|row| row.map(str::to_owned)), "{text}");
    assert!(events.iter().all(|event| event["fields"]["peer"].is_string()), "every event names its peer");
}

#[tokio::test]
async fn new_token_prints_a_token_and_lines_that_hold_its_hash() {
    let output = Command::new(STEPWELL).args(["auth", "new-token", "--id", "billing"]).output().expect("run stepwell");
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let (token, lines) = text.split_once('\n').expect("the token, then the lines");
    assert!(token.starts_with("swt_") && token.len() > 40, "{token}");
    let hash = format!("token_sha256 = \"{}\"", token_sha256(token));
    assert!(lines.contains(&hash) && !lines.contains(token), "{lines}");
    let another = Command::new(STEPWELL).args(["auth", "new-token", "--id", "billing"]).output().expect("run");
    assert!(!String::from_utf8_lossy(&another.stdout).contains(token), "every token is new");

    // The printed lines, with a grant, make a file that admits the token.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = format!("{lines}grants = [{{ namespace = \"default\", role = \"read\" }}]\n");
    let path = write_auth_file(dir.path(), &file);
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    authenticated(&mut server.idempotency(), token).await.expect("the new token is known");
}

#[tokio::test]
async fn reflection_is_off_with_authentication_unless_asked_for() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;

    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    for with_auth in [false, true] {
        let path = path.clone();
        let server = Sidecar::builder()
            .configure(|config| {
                config.security.auth_file = Some(path);
                config.security.reflection_with_auth = with_auth;
            })
            .start()
            .await;
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let answer =
            ServerReflectionClient::new(server.channel()).server_reflection_info(tokio_stream::iter([request])).await;
        match (with_auth, answer) {
            (false, Err(status)) => assert_eq!(status.code(), Code::Unimplemented, "{status:?}"),
            (true, Ok(mut stream)) => {
                stream.get_mut().message().await.expect("reflection answers").expect("one response");
            }
            (with_auth, answer) => panic!("--reflection-with-auth {with_auth}: {answer:?}"),
        }
    }
}

#[tokio::test]
async fn a_signal_and_a_cancellation_record_the_principal_that_settled_the_wait() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    let mut client = server.waits();
    let writer = Caller::Write.header();
    let signal = waits::SignalRequest { turn_id: "t".into(), name: "a".into(), ..Default::default() };
    let signalled = client.signal(with_header(signal, writer.as_deref())).await.expect("the writer signals");
    assert_eq!(signalled.into_inner().wait.expect("a wait").settled_by, "writer");
    let admin = Caller::Admin.header();
    let cancel = waits::CancelWaitRequest { turn_id: "t".into(), name: "b".into(), ..Default::default() };
    let cancelled = client.cancel_wait(with_header(cancel, admin.as_deref())).await.expect("the admin cancels");
    assert_eq!(cancelled.into_inner().wait.expect("a wait").settled_by, "admin");
}

#[tokio::test]
async fn a_handle_is_authorized_in_the_namespace_it_names() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = write_auth_file(dir.path(), &auth_file_text());
    let server = Sidecar::builder().configure(|config| config.security.auth_file = Some(path)).start().await;
    let mut client = server.waits();
    let admin = Caller::Admin.header();
    let create = waits::CreateWaitRequest {
        namespace: "billing".into(),
        turn_id: "t".into(),
        name: "w".into(),
        ..Default::default()
    };
    let created = client.create_wait(with_header(create, admin.as_deref())).await.expect("the admin creates");
    let handle = created.into_inner().wait.expect("a wait").handle;
    // The outsider may write only in "elsewhere": the handle's namespace decides, not the empty field.
    let outsider = Caller::OtherNamespace.header();
    let signal = waits::SignalRequest { handle, ..Default::default() };
    let refused = client.signal(with_header(signal, outsider.as_deref())).await.expect_err("refused");
    let info = assert_error(&refused, Code::PermissionDenied, "PERMISSION_DENIED");
    assert_eq!(info.metadata.get("namespace").map(String::as_str), Some("billing"));
}
