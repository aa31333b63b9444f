//! What stepwell's fuzz targets and its seed generator share: the table from
//! the first byte of a `request` input to the RPC it calls, a real SQLite
//! store opened once per process in a temporary directory, and the call of
//! the real handlers (`CheckpointApi`, `IdempotencyApi`, `RecordApi`,
//! `WaitApi`) with the checks every successful answer must pass. An Await
//! waits at most a millisecond, so that no input stalls the fuzzer.
//!
//! The store lives as long as the process, so one input can see the records
//! earlier inputs left: a Begin followed later by a Complete with its lease
//! token exercises the lease rules, as a client would.
//!
//! It also holds the three targets' bodies (`request`, `state`,
//! `page_token`), so that the integration suite can include this file and
//! replay the seed corpus through them without libFuzzer.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use prost::Message;
use tonic::{Code, Request, Status};

use stepwell::api::checkpoint::CheckpointApi;
use stepwell::api::idempotency::IdempotencyApi;
use stepwell::api::pb::checkpoint_service_server::CheckpointService;
use stepwell::api::pb::idempotency_service_server::IdempotencyService;
use stepwell::api::pb::record_service_server::RecordService;
use stepwell::api::pb::wait_service_server::WaitService;
use stepwell::api::pb::{self, *};
use stepwell::api::records::RecordApi;
use stepwell::api::waits::WaitApi;
use stepwell::api::{Shared, validate};
use stepwell::config::sections::Config;
use stepwell::domain::model::Cursor;
use stepwell::store::Database;
use stepwell::store::Handle;
use stepwell::store::writer::Writer;

/// The RPCs of stepwell's four services; a selector byte picks one by its
/// place in `Rpc::ALL`.
pub use stepwell::domain::rpc::Rpc;

/// The RPC a selector byte picks.
pub fn rpc_from_selector(selector: u8) -> Rpc {
    Rpc::ALL[usize::from(selector) % Rpc::ALL.len()]
}

/// The selector byte that picks `rpc`.
pub fn selector(rpc: Rpc) -> u8 {
    Rpc::ALL.iter().position(|&listed| listed == rpc).expect("every RPC is listed") as u8
}

/// A `request` input: the selector byte, then the encoded request.
pub fn request_input(rpc: Rpc, request: &impl Message) -> Vec<u8> {
    let mut input = vec![selector(rpc)];
    request.encode(&mut input).expect("a Vec grows as needed");
    input
}

/// The codes stepwell may answer a well-formed client with when the request
/// or the state of its records is at fault. Anything else (INTERNAL,
/// UNKNOWN, UNAVAILABLE from a healthy local store, OUT_OF_RANGE, ...) is a
/// bug in stepwell.
pub const ALLOWED_CODES: [Code; 6] = [
    Code::InvalidArgument,
    Code::FailedPrecondition,
    Code::NotFound,
    Code::AlreadyExists,
    Code::Aborted,
    Code::ResourceExhausted,
];

/// The services over one SQLite store, on a runtime of their own.
pub struct Harness {
    runtime: tokio::runtime::Runtime,
    checkpoints: CheckpointApi,
    idempotency: IdempotencyApi,
    records: RecordApi,
    waits: WaitApi,
    shared: Arc<Shared>,
    /// The directory of the store's files.
    pub dir: PathBuf,
}

static HARNESS: OnceLock<Harness> = OnceLock::new();

/// The process's harness, opened on first use.
pub fn harness() -> &'static Harness {
    HARNESS.get_or_init(Harness::open)
}

impl Harness {
    /// Opens a fresh store as `stepwell serve` does: `store::open` (which
    /// migrates), the group-commit writer, and `Shared` with the writer set.
    /// Its directory is made under `$STEPWELL_FUZZ_STORE_DIR`, or the
    /// system's temporary directory, and is left behind for the caller
    /// (scripts/fuzz removes its own).
    fn open() -> Harness {
        let base = std::env::var_os("STEPWELL_FUZZ_STORE_DIR").map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
        std::fs::create_dir_all(&base).expect("the store's base directory can be made");
        let dir = tempfile::Builder::new()
            .prefix("stepwell-fuzz-")
            .tempdir_in(&base)
            .expect("a temporary directory for the store")
            .keep();
        let config = Config::for_database(Database::Sqlite { path: dir.join("fuzz.db") });
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
        let store = runtime.block_on(stepwell::store::open(&config.store)).expect("the SQLite store opens");
        let store = Handle::new(store);
        let (writer, _tasks) = {
            let _entered = runtime.enter();
            Writer::start(store.clone(), &config.writes, stepwell::observe::metrics::Metrics::off(), None)
        };
        let shared = Shared::new(config.limits.clone());
        shared.set_store(store, writer);
        Harness {
            runtime,
            checkpoints: CheckpointApi::new(shared.clone()),
            idempotency: IdempotencyApi::new(shared.clone()),
            records: RecordApi::new(shared.clone()),
            waits: WaitApi::new(shared.clone()),
            shared,
            dir,
        }
    }

    /// Decodes `body` as `rpc`'s request, as the server's codec does, and
    /// calls the real handler. `None` when the bytes do not decode (the
    /// server answers those INVALID_ARGUMENT before any handler runs).
    /// A successful answer is checked against its request here, and a
    /// broken promise panics; an error status is returned for the caller.
    pub fn call(&self, rpc: Rpc, body: &[u8]) -> Option<Result<(), Status>> {
        let answer = match rpc {
            Rpc::Checkpoint => self.checkpoint(CheckpointRequest::decode(body).ok()?),
            Rpc::Restore => self.restore(RestoreRequest::decode(body).ok()?),
            Rpc::ListTurns => self.list_turns(ListTurnsRequest::decode(body).ok()?),
            Rpc::DeleteTurn => self.delete_turn(DeleteTurnRequest::decode(body).ok()?),
            Rpc::Begin => self.begin(BeginRequest::decode(body).ok()?),
            Rpc::Complete => self.complete(CompleteRequest::decode(body).ok()?),
            Rpc::Release => self.release(ReleaseRequest::decode(body).ok()?),
            Rpc::Extend => self.extend(ExtendRequest::decode(body).ok()?),
            Rpc::Get => self.get(GetRequest::decode(body).ok()?),
            Rpc::PutRecords => self.put_records(PutRecordsRequest::decode(body).ok()?),
            Rpc::ListRecords => self.list_records(ListRecordsRequest::decode(body).ok()?),
            Rpc::DeleteRecords => {
                let request = DeleteRecordsRequest::decode(body).ok()?;
                self.runtime.block_on(self.records.delete_records(Request::new(request))).map(drop)
            }
            Rpc::CopyTurn => {
                let request = CopyTurnRequest::decode(body).ok()?;
                self.runtime.block_on(self.records.copy_turn(Request::new(request))).map(drop)
            }
            wait => self.wait_call(wait, body)?,
        };
        Some(answer)
    }

    /// The WaitService RPCs, each answer checked against its request where
    /// the request names the wait.
    fn wait_call(&self, rpc: Rpc, body: &[u8]) -> Option<Result<(), Status>> {
        let waits = &self.waits;
        let answer = match rpc {
            Rpc::CreateWait => {
                let request = CreateWaitRequest::decode(body).ok()?;
                let named = request.name.clone();
                self.runtime.block_on(waits.create_wait(Request::new(request))).map(|answer| {
                    let wait = answer.into_inner().wait.expect("CreateWait answers the wait");
                    assert!(named.is_empty() || wait.name == named, "CreateWait answered another wait");
                    assert!(!wait.handle.is_empty(), "every wait has a handle");
                })
            }
            Rpc::Signal => {
                let request = SignalRequest::decode(body).ok()?;
                let payload = request.payload.clone();
                self.runtime.block_on(waits.signal(Request::new(request))).map(|answer| {
                    let answer = answer.into_inner();
                    let wait = answer.wait.expect("Signal answers the wait");
                    assert_eq!(wait.status(), WaitStatus::Resolved, "an accepted Signal leaves the wait resolved");
                    assert_eq!(wait.payload, payload, "an accepted Signal's payload is the winner's");
                })
            }
            Rpc::Await => {
                let mut request = AwaitRequest::decode(body).ok()?;
                request.timeout = Some(prost_types::Duration { seconds: 0, nanos: 1_000_000 });
                self.runtime.block_on(waits.r#await(Request::new(request))).map(drop)
            }
            Rpc::GetWait => {
                let request = GetWaitRequest::decode(body).ok()?;
                self.runtime.block_on(waits.get_wait(Request::new(request))).map(drop)
            }
            Rpc::ListWaits => {
                let request = ListWaitsRequest::decode(body).ok()?;
                let limit = effective_page_size(request.page_size, self.shared.limits());
                self.runtime.block_on(waits.list_waits(Request::new(request))).map(|answer| {
                    assert!(answer.into_inner().waits.len() <= limit, "ListWaits answered more than a page");
                })
            }
            _ => {
                let request = CancelWaitRequest::decode(body).ok()?;
                self.runtime.block_on(waits.cancel_wait(Request::new(request))).map(drop)
            }
        };
        Some(answer)
    }

    fn checkpoint(&self, req: CheckpointRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.checkpoints.checkpoint(Request::new(req.clone())))?.into_inner();
        let stored = response.checkpoint.expect("Checkpoint answers the stored checkpoint");
        assert_eq!(stored.namespace, namespace_of(&req.namespace), "Checkpoint stored another namespace");
        assert_eq!(
            (&stored.turn_id, &stored.phase, stored.timestamp),
            (&req.turn_id, &req.phase, req.timestamp),
            "Checkpoint answered another checkpoint's key"
        );
        // A duplicate is the same content; either way it is the request's.
        assert_eq!(stored.state, req.state, "Checkpoint answered other state");
        assert_eq!(
            (stored.terminal, &stored.session_id, &stored.workflow_version),
            (req.terminal, &req.session_id, &req.workflow_version),
            "Checkpoint answered other content"
        );
        Ok(())
    }

    fn restore(&self, req: RestoreRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.checkpoints.restore(Request::new(req.clone())))?.into_inner();
        let limit = effective_page_size(req.page_size, self.shared.limits());
        assert!(response.checkpoints.len() <= limit, "Restore answered more than a page");
        let after = validate::restore_cursor(&req.page_token, req.newest_first).expect("a token Restore accepted");
        let mut previous: Option<i64> = None;
        for checkpoint in &response.checkpoints {
            assert_eq!(checkpoint.namespace, namespace_of(&req.namespace), "Restore crossed namespaces");
            assert_eq!(checkpoint.turn_id, req.turn_id, "Restore answered another turn's checkpoint");
            if !req.phase.is_empty() {
                assert_eq!(checkpoint.phase, req.phase, "Restore ignored its phase filter");
            }
            let ts = nanos(checkpoint.timestamp.expect("a stored checkpoint has a timestamp"));
            if let Some(cursor) = after {
                let in_order = if req.newest_first { ts <= cursor.timestamp } else { ts >= cursor.timestamp };
                assert!(in_order, "Restore went back before its page token");
            }
            if let Some(previous) = previous {
                let in_order = if req.newest_first { ts <= previous } else { ts >= previous };
                assert!(in_order, "Restore answered checkpoints out of order");
            }
            previous = Some(ts);
        }
        if !response.next_page_token.is_empty() {
            assert_eq!(response.checkpoints.len(), limit, "a next page after a short page");
            let next = validate::restore_cursor(&response.next_page_token, req.newest_first)
                .expect("Restore's own token is accepted");
            assert!(next.is_some(), "Restore's own token names a position");
        }
        Ok(())
    }

    fn list_turns(&self, req: ListTurnsRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.checkpoints.list_turns(Request::new(req.clone())))?.into_inner();
        let limit = effective_page_size(req.page_size, self.shared.limits());
        assert!(response.turns.len() <= limit, "ListTurns answered more than a page");
        let after = validate::turns_after(&req.page_token).expect("a token ListTurns accepted");
        let mut previous = after.as_deref();
        for turn in &response.turns {
            if let Some(previous) = previous {
                assert!(turn.turn_id.as_str() > previous, "ListTurns out of turn id order or repeated a turn");
            }
            previous = Some(&turn.turn_id);
            match pb::TurnStatus::try_from(req.status) {
                Ok(pb::TurnStatus::Open) => assert!(!turn.terminal, "ListTurns(OPEN) answered a terminal turn"),
                Ok(pb::TurnStatus::Terminal) => assert!(turn.terminal, "ListTurns(TERMINAL) answered an open turn"),
                _ => {}
            }
            if !req.session_id.is_empty() {
                assert_eq!(turn.session_id, req.session_id, "ListTurns ignored its session filter");
            }
            if let Some(before) = req.updated_before {
                let last = nanos(turn.last_timestamp.expect("a turn has a last timestamp"));
                assert!(last < nanos(before), "ListTurns ignored updated_before");
            }
            assert!(turn.checkpoint_count >= 1, "ListTurns answered a turn without checkpoints");
        }
        if !response.next_page_token.is_empty() {
            assert_eq!(response.turns.len(), limit, "a next page after a short page");
            let next = validate::turns_after(&response.next_page_token).expect("ListTurns' own token is accepted");
            assert_eq!(next.as_ref(), response.turns.last().map(|t| &t.turn_id), "the token resumes after the page");
        }
        Ok(())
    }

    fn delete_turn(&self, req: DeleteTurnRequest) -> Result<(), Status> {
        self.runtime.block_on(self.checkpoints.delete_turn(Request::new(req.clone())))?;
        // Once deleted, the turn restores empty.
        let restore = RestoreRequest { namespace: req.namespace, turn_id: req.turn_id, ..RestoreRequest::default() };
        let left = self
            .runtime
            .block_on(self.checkpoints.restore(Request::new(restore)))
            .expect("a deleted turn restores")
            .into_inner();
        assert!(left.checkpoints.is_empty(), "DeleteTurn left checkpoints behind");
        Ok(())
    }

    fn begin(&self, req: BeginRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.idempotency.begin(Request::new(req)))?.into_inner();
        match pb::BeginOutcome::try_from(response.outcome) {
            Ok(pb::BeginOutcome::Acquired) => {
                assert!(response.lease_token >= 1, "an acquired lease has a token");
                assert!(response.attempt >= 1, "an acquired lease counts its attempt");
                assert!(response.lease_expires_at.is_some(), "an acquired lease expires");
            }
            Ok(pb::BeginOutcome::InProgress) => {
                assert!(response.lease_expires_at.is_some(), "a live lease expires");
            }
            Ok(pb::BeginOutcome::Completed | pb::BeginOutcome::Failed) => {}
            other => panic!("Begin answered outcome {other:?}"),
        }
        Ok(())
    }

    fn complete(&self, req: CompleteRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.idempotency.complete(Request::new(req)))?.into_inner();
        assert!(response.completed_at.is_some(), "Complete answers when");
        Ok(())
    }

    fn release(&self, req: ReleaseRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.idempotency.release(Request::new(req)))?.into_inner();
        let state = pb::RecordState::try_from(response.state);
        assert!(
            matches!(state, Ok(pb::RecordState::Released | pb::RecordState::Failed)),
            "Release answered state {state:?}"
        );
        Ok(())
    }

    fn extend(&self, req: ExtendRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.idempotency.extend(Request::new(req)))?.into_inner();
        assert!(response.lease_expires_at.is_some(), "Extend answers the new expiry");
        Ok(())
    }

    fn get(&self, req: GetRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.idempotency.get(Request::new(req)))?.into_inner();
        let state = pb::RecordState::try_from(response.state);
        assert!(matches!(state, Ok(s) if s != pb::RecordState::Unspecified), "Get answered state {state:?}");
        Ok(())
    }
}

impl Harness {
    /// A put that succeeded stored each address's last upsert (or, with
    /// none, something): every record it wrote lists back at its address.
    fn put_records(&self, req: PutRecordsRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.records.put_records(Request::new(req.clone())))?.into_inner();
        assert!(response.recorded_at.is_some(), "PutRecords answered no recorded_at");
        let last = req.records.last().expect("an accepted put has a record");
        let list = ListRecordsRequest {
            namespace: req.namespace.clone(),
            turn_id: last.turn_id.clone(),
            scope: last.scope.clone(),
            has_scope: true,
            kind: last.kind.clone(),
            id: last.id.clone(),
            page_size: 1,
            ..Default::default()
        };
        let listed = self.runtime.block_on(self.records.list_records(Request::new(list)))?.into_inner();
        let entry = listed.entries.first().expect("a record just put lists back");
        let stored = entry.record.as_ref().expect("an entry holds its record");
        let upserted = last.mode != pb::PutMode::InsertIfAbsent as i32;
        if upserted {
            assert_eq!(stored.payload, last.payload, "the last upsert of an address is what is stored");
        }
        Ok(())
    }

    /// A page holds at most its size, of the kind, turn and scope asked,
    /// newest id first, below `before_id`.
    fn list_records(&self, req: ListRecordsRequest) -> Result<(), Status> {
        let response = self.runtime.block_on(self.records.list_records(Request::new(req.clone())))?.into_inner();
        let limit = effective_page_size(req.page_size, self.shared.limits());
        assert!(response.entries.len() <= limit, "ListRecords answered more than a page");
        let mut previous: Option<String> = None;
        for entry in &response.entries {
            let record = entry.record.as_ref().expect("an entry holds its record");
            assert_eq!(record.kind, req.kind, "ListRecords answered another kind");
            if !req.turn_id.is_empty() {
                assert_eq!(record.turn_id, req.turn_id, "ListRecords answered another turn");
            }
            if req.has_scope || !req.scope.is_empty() {
                assert_eq!(record.scope, req.scope, "ListRecords answered another scope");
            }
            if !req.before_id.is_empty() {
                assert!(record.id < req.before_id, "ListRecords answered an id at or above before_id");
            }
            if let Some(previous) = &previous {
                assert!(record.id <= *previous, "ListRecords answered ids out of order");
            }
            previous = Some(record.id.clone());
        }
        Ok(())
    }
}

/// The namespace a request lands in: empty means the default one.
fn namespace_of(requested: &str) -> &str {
    if requested.is_empty() { validate::DEFAULT_NAMESPACE } else { requested }
}

/// The page size a request that was accepted asked for.
fn effective_page_size(requested: i32, limits: &stepwell::config::sections::Limits) -> usize {
    if requested == 0 { limits.page_size_default as usize } else { requested as usize }
}

/// A timestamp as nanoseconds; stored timestamps always fit.
fn nanos(t: prost_types::Timestamp) -> i64 {
    t.seconds * 1_000_000_000 + i64::from(t.nanos)
}

// The targets' bodies: fuzz_targets/*.rs hand each input to one of them, and
// the integration suite's fuzz_seeds module replays the seed corpus and its
// mutations through them on every test run.

/// Fuzz target `page_token`: raw bytes as the `page_token` of a Restore or a
/// ListTurns request, read by `stepwell::api::validate::restore_cursor` and
/// `turns_after`. Neither may panic; a token either reader accepts must be
/// the very token stepwell would have issued for that position, and every
/// token stepwell issues must read back to its position, in its direction
/// only.
///
/// Input: bit 0 of byte 0 is Restore's `newest_first`; the rest is the token
/// (as UTF-8, which protobuf strings are) and, read as two big-endian i64s,
/// a cursor to issue a token for.
pub fn page_token(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let newest_first = mode & 1 == 1;
    let token = String::from_utf8_lossy(rest);

    if let Ok(Some(cursor)) = validate::restore_cursor(&token, newest_first) {
        assert_eq!(validate::restore_token(cursor, newest_first), token, "a restore token that was not issued");
    }
    if let Ok(Some(after)) = validate::turns_after(&token) {
        assert_eq!(validate::turns_token(&after), token, "a turns token that was not issued");
    }
    if token.is_empty() {
        assert!(matches!(validate::restore_cursor(&token, newest_first), Ok(None)), "no token is the first page");
        assert!(matches!(validate::turns_after(&token), Ok(None)), "no token is the first page");
    }

    if let (Some(timestamp), Some(seq)) = (be_i64(rest, 0), be_i64(rest, 8)) {
        let cursor = Cursor { timestamp, seq };
        let issued = validate::restore_token(cursor, newest_first);
        assert_eq!(
            validate::restore_cursor(&issued, newest_first).ok(),
            Some(Some(cursor)),
            "a restore token lost its place"
        );
        assert!(validate::restore_cursor(&issued, !newest_first).is_err(), "a restore token changed direction");
        assert!(validate::turns_after(&issued).is_err(), "a restore token read as a turns token");
    }
    let issued = validate::turns_token(&token);
    assert_eq!(
        validate::turns_after(&issued).ok(),
        Some(Some(token.clone().into_owned())),
        "a turns token lost its place"
    );
    assert!(validate::restore_cursor(&issued, newest_first).is_err(), "a turns token read as a restore token");
}

/// The big-endian i64 at `at`, if `bytes` reach that far.
fn be_i64(bytes: &[u8], at: usize) -> Option<i64> {
    bytes.get(at..at + 8).map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// The size limits tried: tiny, small, and the default `--state-bytes-max`.
const LIMITS: [usize; 4] = [1, 64, 4096, 1 << 20];
/// How many copies of the input body make the document.
const REPEATS: [usize; 8] = [1, 1, 1, 1, 2, 16, 256, 4096];
/// No document grows past this, so one run stays within the time limit.
const DOCUMENT_MAX: usize = 2 << 20;
/// The contract's nesting limit (`limits::STATE_DEPTH_MAX`).
const DEPTH_MAX: usize = stepwell::domain::limits::STATE_DEPTH_MAX;

/// Fuzz target `state`: raw bytes as the `state` of a Checkpoint request,
/// checked by `stepwell::api::validate::state` under one of a few size
/// limits. It must never panic, must stay fast on deep nesting, and must
/// agree with serde_json: a JSON document within the size and depth limits
/// is accepted, and an accepted one is within them.
///
/// Input: byte 0 picks the limit (bits 0-1) and how many times the rest is
/// repeated to make the document (bits 2-4), so a short input can grow into
/// a long or deeply nested one; the rest is the document.
pub fn state(data: &[u8]) {
    let Some((&mode, body)) = data.split_first() else { return };
    let max = LIMITS[usize::from(mode & 0b11)];
    let repeats = REPEATS[usize::from((mode >> 2) & 0b111)];
    let document: Vec<u8> = body.iter().copied().cycle().take((body.len() * repeats).min(DOCUMENT_MAX)).collect();

    let accepted = validate::state(&document, max).is_ok();

    if accepted {
        assert!(document.len() <= max, "a state over its limit was accepted");
        assert!(std::str::from_utf8(&document).is_ok(), "a state that is not UTF-8 was accepted");
    }
    if document.len() <= max {
        // serde_json's own nesting limit (128) keeps this parse bounded.
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&document) {
            let depth = depth(&value);
            assert_eq!(accepted, depth <= DEPTH_MAX, "JSON nested {depth} deep was judged wrongly");
        }
    }
}

/// How deep arrays and objects nest in `value`.
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Fuzz target `request`: raw bytes as a stepwell client could send them.
/// The first byte picks one of the nine RPCs of CheckpointService and
/// IdempotencyService, the rest is decoded with prost as the server's codec
/// does, and the decoded request goes to the real handler over a real SQLite
/// store (opened once per process; see `stepwell_fuzz::Harness`).
///
/// Bytes that do not decode are the codec's INVALID_ARGUMENT and end the
/// input. A handler may refuse a request only with a code the contract
/// allows for a bad request or a record's state; any other code (INTERNAL,
/// UNKNOWN, UNAVAILABLE from the healthy local store, ...) or any panic is a
/// finding.
pub fn request(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let rpc = rpc_from_selector(selector);
    let Some(answer) = harness().call(rpc, body) else { return };
    if let Err(status) = answer {
        assert!(
            ALLOWED_CODES.contains(&status.code()),
            "{} answered {:?}: {}",
            rpc.as_str(),
            status.code(),
            status.message()
        );
    }
}
