//! RecordService end to end, over real gRPC on a real store, one topic a
//! module: what a put stores and which put wins an address (`put`), how
//! ListRecords orders, filters and pages, with children and refs attached
//! (`list`), metadata containment as Postgres's `@>` defines it
//! (`metadata`), the response byte budget (`budget`) and entries cut at it
//! and continued across pages (`split`), DeleteRecords
//! (`delete`), CopyTurn (`copy`), puts fenced by an idempotency lease
//! (`fencing`), invalid input and limits (`validation`), and acknowledged
//! puts surviving a SIGKILL of the real binary (`durability`); on Postgres,
//! the plan of a metadata filter (`postgres_only`). This module holds what
//! they share: record and request builders, and listings read to the end.

mod budget;
mod copy;
mod create;
mod delete;
mod durability;
mod fencing;
mod list;
mod metadata;
mod postgres_only;
mod put;
mod split;
mod update;
mod validation;

use sqlx::Connection;
use sqlx::postgres::PgConnection;
use stepwell::api::pb::{
    ListRecordsRequest, ListRecordsResponse, PutMode, PutRecordsRequest, PutRecordsResponse, Record, RecordEntry,
};
use stepwell::config::sections::Config;
use stepwell::store::Database;
use tonic::Code;

use stepwell_test_support::backend::{TestStore, WriteLock};
use stepwell_test_support::errors::assert_invalid;
use stepwell_test_support::{RecordClient, WAIT_LIMIT};

/// The kind most tests write.
const KIND: &str = "checkpoint";

/// A record of `kind` at `id` in `turn` (empty scope), upserted, whose
/// payload names its address so that any mix-up shows.
fn record(turn: &str, kind: &str, id: &str) -> Record {
    Record {
        turn_id: turn.to_owned(),
        kind: kind.to_owned(),
        id: id.to_owned(),
        payload: format!("{turn}/{kind}/{id}").into_bytes(),
        ..Default::default()
    }
}

/// A record as the store takes it (for batches built at the store): `id` of
/// `KIND` in `turn` (empty scope), with `payload` and `mode`.
fn store_record(
    turn: &str,
    id: &str,
    payload: &str,
    mode: stepwell::domain::records::PutMode,
) -> stepwell::domain::records::NewRecord {
    stepwell::domain::records::NewRecord {
        turn_id: turn.to_owned(),
        scope: String::new(),
        kind: KIND.to_owned(),
        id: id.to_owned(),
        parent_id: String::new(),
        content_type: String::new(),
        payload: payload.as_bytes().to_vec(),
        metadata: None,
        refs: "[]".to_owned(),
        mode,
    }
}

/// `record` with an explicit payload.
fn with_payload(mut record: Record, payload: &[u8]) -> Record {
    record.payload = payload.to_vec();
    record
}

/// `record` in `scope`.
fn in_scope(mut record: Record, scope: &str) -> Record {
    record.scope = scope.to_owned();
    record
}

/// `record` with JSON `metadata`.
fn with_metadata(mut record: Record, metadata: &str) -> Record {
    record.metadata = metadata.as_bytes().to_vec();
    record
}

/// `record` put in `mode`.
fn with_mode(mut record: Record, mode: PutMode) -> Record {
    record.mode = mode as i32;
    record
}

/// A PutRecords of `records`, unfenced, in the default namespace.
fn put(records: Vec<Record>) -> PutRecordsRequest {
    PutRecordsRequest { records, ..Default::default() }
}

/// PutRecords, which must succeed.
async fn put_ok(client: &mut RecordClient, records: Vec<Record>) -> PutRecordsResponse {
    let response = client.put_records(put(records)).await.expect("PutRecords succeeds").into_inner();
    assert!(response.recorded_at.is_some(), "recorded_at is set: {response:?}");
    response
}

/// The largest payload PutRecords accepts for the record `make` builds
/// around a payload of the given size, found by bisection between 3 MiB
/// (accepted) and 4 MiB (refused); a refusal must be a size's. The
/// largest is then stored.
pub(crate) async fn largest_accepted(client: &mut RecordClient, make: impl Fn(usize) -> Record) -> usize {
    let (mut accepted, mut refused) = (3 << 20, 4 << 20);
    while refused - accepted > 1 {
        let size = accepted + (refused - accepted) / 2;
        match client.put_records(put(vec![make(size)])).await {
            Ok(_) => accepted = size,
            Err(status) => {
                let code = status.code();
                assert!(matches!(code, Code::InvalidArgument | Code::ResourceExhausted), "{status:?}");
                refused = size;
            }
        }
    }
    put_ok(client, vec![make(accepted)]).await;
    accepted
}

/// A ListRecords of `kind` across every turn of the default namespace.
fn list(kind: &str) -> ListRecordsRequest {
    ListRecordsRequest { kind: kind.to_owned(), ..Default::default() }
}

/// A ListRecords of `kind` in `turn`.
fn list_turn(turn: &str, kind: &str) -> ListRecordsRequest {
    ListRecordsRequest { turn_id: turn.to_owned(), ..list(kind) }
}

/// One page, which must be answered.
async fn page(client: &mut RecordClient, request: ListRecordsRequest) -> ListRecordsResponse {
    client.list_records(request).await.expect("ListRecords succeeds").into_inner()
}

/// Every entry `request` lists, following page tokens to the end; every
/// page but a lone first one holds at least one entry.
async fn list_all(client: &mut RecordClient, mut request: ListRecordsRequest) -> Vec<RecordEntry> {
    let mut entries = Vec::new();
    for pages in 0.. {
        let answer = page(client, request.clone()).await;
        assert!(pages == 0 || !answer.entries.is_empty(), "page {pages} after a next_page_token is empty");
        entries.extend(answer.entries);
        if answer.next_page_token.is_empty() {
            break;
        }
        request.page_token = answer.next_page_token;
    }
    entries
}

/// The records `request` lists, without their children and refs.
async fn records(client: &mut RecordClient, request: ListRecordsRequest) -> Vec<Record> {
    list_all(client, request).await.into_iter().map(|e| e.record.expect("an entry holds its record")).collect()
}

/// The ids `request` lists, in order.
async fn ids(client: &mut RecordClient, request: ListRecordsRequest) -> Vec<String> {
    records(client, request).await.into_iter().map(|r| r.id).collect()
}

/// The payloads `request` lists, in order, as text.
async fn payloads(client: &mut RecordClient, request: ListRecordsRequest) -> Vec<String> {
    records(client, request).await.into_iter().map(|r| String::from_utf8_lossy(&r.payload).into_owned()).collect()
}

/// The ids of `records`, in order.
fn ids_of(records: &[Record]) -> Vec<&str> {
    records.iter().map(|r| r.id.as_str()).collect()
}

/// A record's metadata, parsed (Postgres normalizes jsonb, so bytes may differ).
fn metadata_of(record: &Record) -> Option<serde_json::Value> {
    (!record.metadata.is_empty()).then(|| serde_json::from_slice(&record.metadata).expect("stored metadata is JSON"))
}

/// `status` must be INVALID_ARGUMENT naming `field` with ErrorInfo `reason`.
fn assert_refused_naming(status: Result<impl std::fmt::Debug, tonic::Status>, field: &str, reason: &str) {
    let status = status.expect_err(&format!("refused, naming {field}"));
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert_invalid(&status, field, reason);
}

/// A sidecar configuration whose writes wait out a held lock (see `hold_records_lock`).
fn waits_for_locks(config: &mut Config) {
    config.store.sqlite_busy_timeout = WAIT_LIMIT * 2;
    config.store.acquire_timeout = WAIT_LIMIT * 2;
    config.store.postgres_lock_timeout = WAIT_LIMIT * 2;
    config.store.postgres_statement_timeout = WAIT_LIMIT * 2;
}

/// The lock that keeps record writes waiting, held from outside the sidecar
/// so that concurrent calls queue and then commit together: SQLite's write
/// lock; on Postgres, the records and idempotency tables locked EXCLUSIVE
/// (reads go on).
enum RecordsLock {
    Sqlite(WriteLock),
    Postgres(PgConnection),
}

async fn hold_records_lock(store: &TestStore) -> RecordsLock {
    match store.database() {
        Database::Sqlite { .. } => RecordsLock::Sqlite(store.hold_write_lock().await),
        Database::Postgres { url } => {
            let mut conn = PgConnection::connect(&url).await.expect("connect to the test's database");
            sqlx::raw_sql("BEGIN; LOCK TABLE records, idempotency IN EXCLUSIVE MODE")
                .execute(&mut conn)
                .await
                .expect("lock the records");
            RecordsLock::Postgres(conn)
        }
    }
}

impl RecordsLock {
    async fn release(self) {
        match self {
            RecordsLock::Sqlite(lock) => lock.release().await,
            RecordsLock::Postgres(mut conn) => {
                sqlx::raw_sql("ROLLBACK").execute(&mut conn).await.expect("release the records' lock");
            }
        }
    }
}
