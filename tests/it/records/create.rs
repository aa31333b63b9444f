//! PUT_MODE_CREATE: a put that claims free addresses or is refused whole.
//! A create at a stored address is refused with ALREADY_EXISTS /
//! RECORD_EXISTS naming the record, and nothing of its request is written;
//! an address an earlier record of the request, or an earlier put of the
//! same group-commit batch, writes counts as taken, while a refused put
//! claims nothing. Writers racing to extend one sequence of ids (as an
//! agent session's items are) each get whole, contiguous runs, in one
//! order, however their calls batch; on Postgres, through two sidecars.

use std::collections::HashMap;

use stepwell::api::pb::{DeleteRecordsRequest, ListRecordsRequest, PutMode, Record};
use stepwell::config::sections::Config;
use stepwell::domain::keys::Fence;
use stepwell::domain::records::{NewRecord, PutMode as StorePutMode, PutRefusal, RecordPut};
use stepwell::store::{self, Database, Write};
use tokio::task::JoinSet;
use tonic::Code;

use stepwell_test_support::RecordClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::sidecar::Sidecar;

use super::{KIND, list_turn, payloads, put, put_ok, record, with_mode, with_payload};

fn create(turn: &str, id: &str, payload: &str) -> Record {
    with_mode(with_payload(record(turn, KIND, id), payload.as_bytes()), PutMode::Create)
}

#[tokio::test]
async fn a_create_at_a_stored_address_is_refused_whole_naming_the_record() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![create("t", "0002", "first")]).await;

    let refused = client
        .put_records(put(vec![create("t", "0001", "new"), create("t", "0002", "second"), record("t", "blob", "b")]))
        .await
        .expect_err("the address 0002 is taken");
    let info = assert_error(&refused, Code::AlreadyExists, "RECORD_EXISTS");
    let named: Vec<(&str, &str)> = ["turn_id", "scope", "kind", "id"]
        .iter()
        .map(|key| (*key, info.metadata.get(*key).map_or("<absent>", String::as_str)))
        .collect();
    assert_eq!(named, [("turn_id", "t"), ("scope", ""), ("kind", KIND), ("id", "0002")], "{info:?}");
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["first"], "nothing of the request was written");
    assert!(payloads(&mut client, list_turn("t", "blob")).await.is_empty(), "not even its upsert");

    // A free address is created, beside the stored one.
    put_ok(&mut client, vec![create("t", "0001", "new")]).await;
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["first", "new"]);
}

#[tokio::test]
async fn a_create_after_a_record_of_its_own_request_at_that_address_is_refused() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let twice = vec![create("t", "a", "one"), create("t", "a", "two")];
    let refused = client.put_records(put(twice)).await.expect_err("the second claims the first's address");
    assert_error(&refused, Code::AlreadyExists, "RECORD_EXISTS");
    let upsert_then_create = vec![with_payload(record("t", KIND, "b"), b"upsert"), create("t", "b", "create")];
    let refused = client.put_records(put(upsert_then_create)).await.expect_err("the upsert took the address");
    assert_error(&refused, Code::AlreadyExists, "RECORD_EXISTS");
    assert!(payloads(&mut client, list_turn("t", KIND)).await.is_empty(), "neither request wrote anything");

    // Created, then replaced by a later upsert of the same request.
    put_ok(&mut client, vec![create("t", "c", "create"), with_payload(record("t", KIND, "c"), b"upsert")]).await;
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["upsert"]);
}

pub(super) fn new_record(id: &str, payload: &str, mode: StorePutMode) -> NewRecord {
    super::store_record("t", id, payload, mode)
}

pub(super) fn put_of(records: Vec<NewRecord>, fence: Option<Fence>) -> Write {
    Write::PutRecords(RecordPut { namespace: "default".to_owned(), records, fence })
}

/// What each put of a batch was answered: "ok", "exists <id>", "missing
/// <id>" or "fenced".
pub(super) fn verdicts(answers: &[Result<i64, PutRefusal>]) -> Vec<String> {
    answers
        .iter()
        .map(|answer| match answer {
            Ok(_) => "ok".to_owned(),
            Err(PutRefusal::Exists(address)) => format!("exists {}", address.id),
            Err(PutRefusal::Missing(address)) => format!("missing {}", address.id),
            Err(PutRefusal::Fence(_)) => "fenced".to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn in_one_batch_the_first_create_of_an_address_wins_and_a_refused_put_claims_nothing() {
    use StorePutMode::{Create, Upsert};
    let test_store = TestStore::new().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    store.write(vec![put_of(vec![new_record("s", "stored", Upsert)], None)]).await.expect("the first batch");
    let unheld = Fence { namespace: "default".to_owned(), key: "no-lease".to_owned(), lease_token: 1 };

    // Puts of several callers in one batch, as the writer would take them.
    let answers = store
        .write(vec![
            put_of(vec![new_record("f", "fenced", Create)], Some(unheld)),
            put_of(vec![new_record("f", "f1", Create), new_record("a", "a1", Create)], None),
            put_of(vec![new_record("a", "a2", Create)], None),
            put_of(vec![new_record("b", "b1", Create), new_record("s", "s1", Create)], None),
            put_of(vec![new_record("b", "b2", Create)], None),
            put_of(vec![new_record("a", "a3", Upsert)], None),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(verdicts(&answers.put), ["fenced", "ok", "exists a", "exists s", "ok", "ok"]);
    drop(store);

    let server = Sidecar::builder().store(&test_store).start().await;
    let mut client = server.records();
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["stored", "f1", "b2", "a3"]);
}

const WRITERS: usize = 8;
const BATCHES: usize = 10;
const BATCH: usize = 3;

/// The newest id of the turn's sequence, as a number (0 when empty).
async fn newest(client: &mut RecordClient) -> u64 {
    let request = ListRecordsRequest { page_size: 1, ..list_turn("seq", KIND) };
    let page = client.list_records(request).await.expect("ListRecords").into_inner();
    page.entries.first().and_then(|e| e.record.as_ref()).map_or(0, |r| r.id.parse().expect("a numeric id"))
}

/// Appends `BATCHES` runs of `BATCH` records as writer `w`, each run at the
/// ids after the newest, created, and claimed again further on when another
/// writer took them first. Answers how many refusals it met.
async fn append_runs(mut client: RecordClient, w: usize) -> usize {
    let (mut next, mut refused) = (newest(&mut client).await + 1, 0);
    for b in 0..BATCHES {
        loop {
            let run: Vec<Record> = (0..BATCH as u64)
                .map(|i| create("seq", &format!("{:020}", next + i), &format!("w{w}-b{b}-{i}")))
                .collect();
            match client.put_records(put(run)).await {
                Ok(_) => break,
                Err(status) => {
                    assert_error(&status, Code::AlreadyExists, "RECORD_EXISTS");
                    refused += 1;
                    next = newest(&mut client).await + 1;
                }
            }
        }
        next += BATCH as u64;
    }
    refused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_writers_extend_one_sequence_in_whole_runs_in_one_order() {
    let test_store = TestStore::new().await;
    let first = Sidecar::builder().store(&test_store).start().await;
    // On Postgres a second sidecar shares the store; SQLite's file has one.
    let second = match test_store.database() {
        Database::Postgres { .. } => Some(Sidecar::builder().store(&test_store).start().await),
        Database::Sqlite { .. } => None,
    };
    let mut writers = JoinSet::new();
    for w in 0..WRITERS {
        let server = if w % 2 == 1 { second.as_ref().unwrap_or(&first) } else { &first };
        writers.spawn(append_runs(server.records(), w));
    }
    let refused: usize = writers.join_all().await.into_iter().sum();
    println!("{WRITERS} writers, {BATCHES} runs each: {refused} creates refused and claimed again");

    let mut client = first.records();
    let mut stored = payloads(&mut client, ListRecordsRequest { page_size: 1000, ..list_turn("seq", KIND) }).await;
    stored.reverse();
    let total = WRITERS * BATCHES * BATCH;
    assert_eq!(stored.len(), total, "every run stored once");
    assert_eq!(newest(&mut client).await, total as u64, "no gaps: the ids run 1..={total}");
    let mut runs_seen: HashMap<usize, usize> = HashMap::new();
    for run in stored.chunks(BATCH) {
        let (w, b) = run_of(&run[0]);
        for (i, payload) in run.iter().enumerate() {
            assert_eq!(payload, &format!("w{w}-b{b}-{i}"), "a run is whole and in order: {run:?}");
        }
        let seen = runs_seen.entry(w).or_default();
        assert_eq!(b, *seen, "writer {w}'s runs come in its order");
        *seen += 1;
    }
    // Emptied, the sequence starts again at 1 for the next writer.
    let delete = DeleteRecordsRequest { turn_ids: vec!["seq".to_owned()], kind: KIND.to_owned(), ..Default::default() };
    client.delete_records(delete).await.expect("DeleteRecords");
    assert_eq!(append_runs(client.clone(), 0).await, 0);
    assert_eq!(newest(&mut client).await, (BATCHES * BATCH) as u64);
}

/// The (writer, run) a payload "w{w}-b{b}-{i}" names.
fn run_of(payload: &str) -> (usize, usize) {
    let parts: Vec<&str> = payload.split('-').collect();
    (parts[0][1..].parse().expect("writer"), parts[1][1..].parse().expect("run"))
}
