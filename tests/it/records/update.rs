//! PUT_MODE_UPDATE: a put that replaces stored records or is refused whole.
//! An update at an empty address is refused with NOT_FOUND /
//! RECORD_NOT_FOUND naming the record, and nothing of its request is
//! written; an address an earlier record of the request, or an earlier put
//! of the same group-commit batch, writes counts as holding a record. A
//! deletion racing writers that update a turn's head leaves the turn empty:
//! no update lands after it, so nothing deleted comes back (on Postgres,
//! through two sidecars).

use stepwell::api::pb::{DeleteRecordsRequest, PutMode, Record};
use stepwell::config::sections::Config;
use stepwell::domain::records::PutMode as StorePutMode;
use stepwell::store::{self, Database};
use tokio::task::JoinSet;
use tonic::Code;

use stepwell_test_support::RecordClient;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::sidecar::Sidecar;

use super::create::{new_record, put_of, verdicts};
use super::{KIND, list_turn, payloads, put, put_ok, record, with_mode, with_payload};

fn update(turn: &str, id: &str, payload: &str) -> Record {
    with_mode(with_payload(record(turn, KIND, id), payload.as_bytes()), PutMode::Update)
}

#[tokio::test]
async fn an_update_at_an_empty_address_is_refused_whole_naming_the_record() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    put_ok(&mut client, vec![with_payload(record("t", KIND, "head"), b"v1")]).await;

    let refused = client
        .put_records(put(vec![update("t", "head", "v2"), update("t", "gone", "x"), record("t", "blob", "b")]))
        .await
        .expect_err("nothing is stored at gone");
    let info = assert_error(&refused, Code::NotFound, "RECORD_NOT_FOUND");
    let named: Vec<(&str, &str)> = ["turn_id", "scope", "kind", "id"]
        .iter()
        .map(|key| (*key, info.metadata.get(*key).map_or("<absent>", String::as_str)))
        .collect();
    assert_eq!(named, [("turn_id", "t"), ("scope", ""), ("kind", KIND), ("id", "gone")], "{info:?}");
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["v1"], "nothing of the request was written");
    assert!(payloads(&mut client, list_turn("t", "blob")).await.is_empty(), "not even its upsert");

    // A stored record is replaced; one the request writes first counts too.
    put_ok(&mut client, vec![update("t", "head", "v2"), with_payload(record("t", KIND, "new"), b"n1")]).await;
    put_ok(&mut client, vec![with_payload(record("t", KIND, "own"), b"o1"), update("t", "own", "o2")]).await;
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["o2", "n1", "v2"]);
}

#[tokio::test]
async fn in_one_batch_an_update_sees_what_an_earlier_put_wrote_and_a_refused_put_claims_nothing() {
    use StorePutMode::{Create, Update, Upsert};
    let test_store = TestStore::new().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    store.write(vec![put_of(vec![new_record("s", "stored", Upsert)], None)]).await.expect("the first batch");

    let answers = store
        .write(vec![
            put_of(vec![new_record("s", "s1", Update)], None),
            put_of(vec![new_record("a", "a-missing", Update)], None),
            put_of(vec![new_record("b", "b1", Create), new_record("x", "x-missing", Update)], None),
            put_of(vec![new_record("c", "c1", Upsert)], None),
            put_of(vec![new_record("c", "c2", Update), new_record("b", "b-missing", Update)], None),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(verdicts(&answers.put), ["ok", "missing a", "missing x", "ok", "missing b"]);
    drop(store);

    let server = Sidecar::builder().store(&test_store).start().await;
    let mut client = server.records();
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["s1", "c1"]);
}

const WRITERS: usize = 6;
/// A writer that never meets the deletion stops after this many puts.
const PUTS_MAX: usize = 400;

/// Writes as writer `w` until an update of the head is refused: each put
/// updates the head and adds a record of its own. Answers how many landed.
async fn write_until_deleted(mut client: RecordClient, w: usize) -> usize {
    for i in 0..PUTS_MAX {
        let records = vec![update("race", "head", &format!("w{w}-{i}")), record("race", KIND, &format!("w{w}-{i:04}"))];
        if let Err(status) = client.put_records(put(records)).await {
            assert_error(&status, Code::NotFound, "RECORD_NOT_FOUND");
            return i;
        }
    }
    PUTS_MAX
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deletion_racing_updates_leaves_nothing_behind() {
    let test_store = TestStore::new().await;
    let first = Sidecar::builder().store(&test_store).start().await;
    // On Postgres a second sidecar shares the store; SQLite's file has one.
    let second = match test_store.database() {
        Database::Postgres { .. } => Some(Sidecar::builder().store(&test_store).start().await),
        Database::Sqlite { .. } => None,
    };
    let mut client = first.records();
    put_ok(&mut client, vec![with_payload(record("race", KIND, "head"), b"created")]).await;
    let mut writers = JoinSet::new();
    for w in 0..WRITERS {
        let server = if w % 2 == 1 { second.as_ref().unwrap_or(&first) } else { &first };
        writers.spawn(write_until_deleted(server.records(), w));
    }
    // Deletes once the writers are well under way, while they still write.
    while payloads(&mut client, list_turn("race", KIND)).await.len() < 2 * WRITERS {
        tokio::task::yield_now().await;
    }
    let delete = DeleteRecordsRequest { turn_ids: vec!["race".to_owned()], ..Default::default() };
    client.delete_records(delete).await.expect("DeleteRecords");
    let landed: Vec<usize> = writers.join_all().await;
    println!("{WRITERS} writers: {landed:?} puts landed before the deletion stopped each");
    assert!(landed.iter().all(|n| *n < PUTS_MAX), "every writer met the deletion: {landed:?}");
    assert!(payloads(&mut client, list_turn("race", KIND)).await.is_empty(), "nothing came back after the deletion");
}
