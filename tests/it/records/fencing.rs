//! Puts fenced by an idempotency lease: written while the fence's token is
//! the key's current one and the lease was not given back (also after it ran
//! out, while no one took over); otherwise refused FAILED_PRECONDITION with
//! LEASE_LOST (another holder took over) or NOT_ACQUIRED (no lease held), and
//! then nothing of the put is stored. A refused fenced put shares its batch
//! with others' puts without affecting them (a batch built at the store,
//! and concurrent calls queued behind a held write lock). Leases expire on the store's
//! moved clock, never by sleeping.

use std::time::Duration;

use stepwell::api::pb::{BeginOutcome, Fence, PutRecordsRequest, Record};
use stepwell::config::sections::Config;
use stepwell::domain::clock::Clock;
use stepwell::domain::keys::{BeginArgs, Fence as StoreFence, Refusal};
use stepwell::domain::records::{NewRecord, PutMode, PutRefusal, RecordPut};
use stepwell::store::{self, Write};
use tonic::Code;

use stepwell_test_support::errors::{DOMAIN, Rejection, assert_error};
use stepwell_test_support::requests::{begin, begin_leased, complete, release};
use stepwell_test_support::sidecar::Sidecar;
use stepwell_test_support::{IdempotencyClient, RecordClient, backend::TestStore};
use tokio::task::JoinSet;

use super::{
    KIND, assert_refused_naming, hold_records_lock, list_turn, payloads, put, put_ok, record, waits_for_locks,
    with_payload,
};

const KEY: &str = "turn-1/step-3";

fn fenced(records: Vec<Record>, key: &str, lease_token: u64) -> PutRecordsRequest {
    PutRecordsRequest { fence: Some(Fence { key: key.to_owned(), lease_token }), ..put(records) }
}

/// Two records of one put, so that a partial write would show.
fn pair(turn: &str, tag: &str) -> Vec<Record> {
    vec![
        with_payload(record(turn, KIND, "c1"), format!("{tag} checkpoint").as_bytes()),
        with_payload(record(turn, "blob", "b1"), format!("{tag} blob").as_bytes()),
    ]
}

/// What turn `turn` holds, checkpoints then blobs.
async fn stored(client: &mut RecordClient, turn: &str) -> Vec<String> {
    let mut all = payloads(client, list_turn(turn, KIND)).await;
    all.extend(payloads(client, list_turn(turn, "blob")).await);
    all
}

async fn acquire(keys: &mut IdempotencyClient, request: stepwell::api::pb::BeginRequest) -> u64 {
    let answer = keys.begin(request).await.expect("Begin succeeds").into_inner();
    assert_eq!(answer.outcome(), BeginOutcome::Acquired, "{answer:?}");
    answer.lease_token
}

/// A fenced put that must be refused with ErrorInfo `reason`, storing
/// nothing. (The status code is `a_lost_lease_is_failed_precondition`'s to check.)
async fn assert_fenced_off(client: &mut RecordClient, request: PutRecordsRequest, reason: &str) {
    let turn = request.records[0].turn_id.clone();
    let before = stored(client, &turn).await;
    let status = client.put_records(request).await.expect_err("the fence refuses the put");
    let rejection = Rejection::of(&status);
    assert_eq!((rejection.domain.as_str(), rejection.reason.as_str()), (DOMAIN, reason), "{status:?}");
    assert_eq!(stored(client, &turn).await, before, "nothing of a refused put is stored");
}

async fn start_on_clock() -> (Sidecar, Clock) {
    let clock = Clock::system();
    let server = Sidecar::builder().configure(|config| config.store.clock = clock.clone()).start().await;
    (server, clock)
}

#[tokio::test]
async fn a_put_under_the_held_lease_is_written_and_a_wrong_token_writes_nothing() {
    let server = Sidecar::builder().start().await;
    let (mut client, mut keys) = (server.records(), server.idempotency());
    let token = acquire(&mut keys, begin(KEY)).await;

    client.put_records(fenced(pair("t", "held"), KEY, token)).await.expect("the holder's put is written");
    assert_eq!(stored(&mut client, "t").await, ["held checkpoint", "held blob"]);

    assert_fenced_off(&mut client, fenced(pair("t", "wrong"), KEY, token + 1), "LEASE_LOST").await;
    assert_fenced_off(&mut client, fenced(pair("u", "wrong"), KEY, token + 1), "LEASE_LOST").await;
    assert!(stored(&mut client, "u").await.is_empty());
    // Another key, never begun, holds no lease.
    assert_fenced_off(&mut client, fenced(pair("u", "none"), "never-begun", token), "NOT_ACQUIRED").await;
    // The fence's key is read in the request's namespace.
    let elsewhere = PutRecordsRequest { namespace: "other".to_owned(), ..fenced(pair("u", "ns"), KEY, token) };
    let status = client.put_records(elsewhere).await.expect_err("no lease in namespace other");
    assert_error(&status, Code::FailedPrecondition, "NOT_ACQUIRED");

    // The holder still writes.
    client.put_records(fenced(pair("t", "again"), KEY, token)).await.expect("the holder's second put");
    assert_eq!(stored(&mut client, "t").await, ["again checkpoint", "again blob"]);
}

#[tokio::test]
async fn a_lost_lease_is_aborted_and_no_lease_is_failed_precondition_as_the_contract_says() {
    let server = Sidecar::builder().start().await;
    let (mut client, mut keys) = (server.records(), server.idempotency());
    let token = acquire(&mut keys, begin(KEY)).await;
    let status = client.put_records(fenced(pair("t", "wrong"), KEY, token + 1)).await.expect_err("refused");
    // records.proto, Fence: "ABORTED with reason LEASE_LOST when another holder took the key
    // over, FAILED_PRECONDITION with reason NOT_ACQUIRED when no lease is held".
    assert_error(&status, Code::Aborted, "LEASE_LOST");
    let status = client.put_records(fenced(pair("t", "none"), "never-begun", token)).await.expect_err("refused");
    assert_error(&status, Code::FailedPrecondition, "NOT_ACQUIRED");
}

#[tokio::test]
async fn after_release_or_complete_a_fenced_put_is_not_acquired() {
    let server = Sidecar::builder().start().await;
    let (mut client, mut keys) = (server.records(), server.idempotency());
    let token = acquire(&mut keys, begin(KEY)).await;
    keys.release(release(KEY, token, false, "")).await.expect("Release succeeds");
    assert_fenced_off(&mut client, fenced(pair("t", "released"), KEY, token), "NOT_ACQUIRED").await;

    let token = acquire(&mut keys, begin(KEY)).await;
    client.put_records(fenced(pair("t", "second attempt"), KEY, token)).await.expect("the new holder writes");
    keys.complete(complete(KEY, token, b"done")).await.expect("Complete succeeds");
    assert_fenced_off(&mut client, fenced(pair("t", "completed"), KEY, token), "NOT_ACQUIRED").await;

    let other = "turn-1/step-4";
    let token = acquire(&mut keys, begin(other)).await;
    keys.release(release(other, token, true, "gave up")).await.expect("a permanent Release");
    assert_fenced_off(&mut client, fenced(pair("t", "failed"), other, token), "NOT_ACQUIRED").await;
    assert_eq!(stored(&mut client, "t").await, ["second attempt checkpoint", "second attempt blob"]);
}

#[tokio::test]
async fn an_expired_lease_still_writes_until_another_begin_takes_over() {
    let (server, clock) = start_on_clock().await;
    let (mut client, mut keys) = (server.records(), server.idempotency());
    let stale = acquire(&mut keys, begin_leased(KEY, Duration::from_secs(10))).await;
    clock.advance(Duration::from_secs(11));
    client.put_records(fenced(pair("t", "late"), KEY, stale)).await.expect("no one took over yet");

    let taker = acquire(&mut keys, begin_leased(KEY, Duration::from_secs(10))).await;
    assert!(taker > stale);
    assert_fenced_off(&mut client, fenced(pair("t", "stale"), KEY, stale), "LEASE_LOST").await;
    client.put_records(fenced(pair("t", "taker"), KEY, taker)).await.expect("the new holder writes");
    assert_eq!(stored(&mut client, "t").await, ["taker checkpoint", "taker blob"]);
}

fn new_record(turn: &str, id: &str, payload: &str) -> NewRecord {
    super::store_record(turn, id, payload, PutMode::Upsert)
}

fn store_put(records: Vec<NewRecord>, fence: Option<(&str, u64)>) -> Write {
    let fence = fence.map(|(key, lease_token)| StoreFence {
        namespace: "default".to_owned(),
        key: key.to_owned(),
        lease_token,
    });
    Write::PutRecords(RecordPut { namespace: "default".to_owned(), records, fence })
}

#[tokio::test]
async fn a_refused_fenced_put_leaves_the_other_puts_of_its_batch_alone() {
    let test_store = TestStore::new().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    let begun = store
        .write(vec![Write::Begin(BeginArgs {
            namespace: "default".to_owned(),
            key: KEY.to_owned(),
            fingerprint: Vec::new(),
            lease: 30_000_000_000,
            retention: 60_000_000_000,
        })])
        .await
        .expect("Begin commits");
    let token = match begun.begun.as_slice() {
        [Ok(stepwell::domain::keys::BeginOutcome::Acquired { lease_token, .. })] => *lease_token,
        other => panic!("acquired: {other:?}"),
    };

    // One batch: unfenced puts, a fenced put with a stale token between
    // them, one with the held token, and one on a key never begun, with
    // overlapping addresses.
    let answers = store
        .write(vec![
            store_put(vec![new_record("t", "a", "unfenced a")], None),
            store_put(vec![new_record("t", "a", "stale a"), new_record("t", "s", "stale s")], Some((KEY, token + 7))),
            store_put(vec![new_record("t", "b", "held b")], Some((KEY, token))),
            store_put(vec![new_record("t", "n", "none n"), new_record("t", "b", "none b")], Some(("never", 1))),
            store_put(vec![new_record("t", "c", "unfenced c")], None),
        ])
        .await
        .expect("the batch commits");
    assert_eq!(
        answers.put.iter().map(|a| a.as_ref().err().cloned()).collect::<Vec<_>>(),
        [None, Some(PutRefusal::Fence(Refusal::LeaseLost)), None, Some(PutRefusal::Fence(Refusal::NotAcquired)), None],
        "{answers:?}"
    );
    drop(store);

    let server = Sidecar::builder().store(&test_store).start().await;
    let mut client = server.records();
    assert_eq!(payloads(&mut client, list_turn("t", KIND)).await, ["unfenced c", "held b", "unfenced a"]);
}

#[tokio::test]
async fn a_fence_is_checked_as_a_field_first() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    let answer = client.put_records(fenced(pair("t", "x"), KEY, 0)).await;
    assert_refused_naming(answer, "fence.lease_token", "FIELD_REQUIRED");
    let answer = client.put_records(fenced(pair("t", "x"), "", 1)).await;
    assert_refused_naming(answer, "fence.key", "FIELD_REQUIRED");
    let answer = client.put_records(fenced(pair("t", "x"), "k\u{7}", 1)).await;
    assert_refused_naming(answer, "fence.key", "FIELD_MALFORMED");
    assert!(stored(&mut client, "t").await.is_empty());
    put_ok(&mut client, pair("t", "unfenced")).await;
}

#[tokio::test]
async fn a_fence_names_any_key_begin_accepts() {
    let server = Sidecar::builder().start().await;
    let (mut client, mut keys) = (server.records(), server.idempotency());
    // Begin takes keys of up to 512 bytes; a fence must be able to name them.
    let key = "k".repeat(512);
    let token = acquire(&mut keys, begin(&key)).await;
    client.put_records(fenced(pair("t", "long key"), &key, token)).await.expect("the holder of a 512-byte key writes");
    assert_eq!(stored(&mut client, "t").await, ["long key checkpoint", "long key blob"]);
    let answer = client.put_records(fenced(pair("t", "x"), &"k".repeat(513), token)).await;
    assert_refused_naming(answer, "fence.key", "FIELD_TOO_LONG");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_unfenced_puts_are_written_beside_a_refused_fenced_one() {
    let server = Sidecar::builder().configure(waits_for_locks).start().await;
    let mut keys = server.idempotency();
    let token = acquire(&mut keys, begin(KEY)).await;
    // The writer waits on the lock, so the calls queue and commit together.
    let lock = hold_records_lock(server.store()).await;
    let mut calls = JoinSet::new();
    for n in 0..12 {
        let mut client = server.records();
        let request = match n % 4 {
            0 => fenced(pair("shared", &format!("stale {n}")), KEY, token + 1),
            1 => fenced(pair(&format!("held-{n}"), "held"), KEY, token),
            _ => put(pair(&format!("free-{n}"), "free")),
        };
        calls.spawn(async move { (n, client.put_records(request).await) });
    }
    lock.release().await;
    let mut client = server.records();
    for (n, answer) in calls.join_all().await {
        match (n % 4, answer) {
            (0, Err(status)) => assert_eq!(Rejection::of(&status).reason, "LEASE_LOST", "{status:?}"),
            (0, Ok(_)) => panic!("put {n} under a stale token was written"),
            (_, answer) => {
                answer.unwrap_or_else(|status| panic!("put {n} was refused beside a fenced one: {status:?}"));
            }
        }
    }
    for n in 0..12 {
        let turn = match n % 4 {
            0 => continue,
            1 => format!("held-{n}"),
            _ => format!("free-{n}"),
        };
        assert_eq!(stored(&mut client, &turn).await.len(), 2, "{turn} holds both records of its put");
    }
    assert!(stored(&mut client, "shared").await.is_empty(), "nothing of a stale put");
}
