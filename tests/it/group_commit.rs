//! Group commit: many callers' writes share one transaction, and each still
//! gets the answer it would get alone. Batches are built directly against
//! the store (so their contents are known) and through the sidecar's queue
//! (so the queue's bound and a failed commit are seen as clients see them).

use std::collections::HashSet;

use stepwell::api::pb::CheckpointResponse;
use stepwell::config::sections::Config;
use stepwell::domain::keys::{BeginArgs, BeginOutcome};
use stepwell::domain::model::{Appended, NewCheckpoint};
use stepwell::store::{self, Write};
use tokio::task::JoinSet;
use tonic::{Code, Status};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{T0, checkpoint, restore, restore_all, states};
use stepwell_test_support::sidecar::Sidecar;

fn new_checkpoint(turn: &str, phase: &str, ts: i64, state: &str) -> NewCheckpoint {
    NewCheckpoint {
        namespace: "default".into(),
        turn_id: turn.into(),
        session_id: String::new(),
        phase: phase.into(),
        state: state.as_bytes().to_vec(),
        timestamp: ts,
        terminal: false,
        workflow_version: String::new(),
    }
}

fn begin_args(key: &str) -> BeginArgs {
    BeginArgs {
        namespace: "default".into(),
        key: key.into(),
        fingerprint: Vec::new(),
        lease: 30_000_000_000,
        retention: 60_000_000_000,
    }
}

async fn open(store: &TestStore) -> std::sync::Arc<dyn store::Store> {
    store::open(&Config::for_database(store.database()).store).await.expect("open the store")
}

/// A trigger that fails any insert of turn "poison": a commit that fails
/// partway through a batch, injected through the database itself.
async fn poison_inserts(store: &TestStore) {
    store
        .execute(
            "CREATE TRIGGER poison BEFORE INSERT ON checkpoints WHEN NEW.turn_id = 'poison' \
             BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
            "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NEW.turn_id = 'poison' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$; \
             CREATE TRIGGER poison BEFORE INSERT ON checkpoints FOR EACH ROW EXECUTE FUNCTION poison()",
        )
        .await;
}

#[tokio::test]
async fn requests_in_one_batch_get_the_answers_they_would_get_alone() {
    let test_store = TestStore::new().await;
    let store = open(&test_store).await;
    let first = new_checkpoint("t", "tool-received", T0, r#"{"n":1}"#);
    let answers = store
        .write(vec![
            Write::Append(first.clone()),
            Write::Append(first.clone()),
            Write::Append(new_checkpoint("t", "tool-received", T0, r#"{"n":2}"#)),
            Write::Append(new_checkpoint("t", "tool-received", T0 + 1, r#"{"n":3}"#)),
            Write::Begin(begin_args("charge")),
            Write::Begin(begin_args("charge")),
        ])
        .await
        .expect("the batch commits");

    let (appended, begun) = (&answers.appended, &answers.begun);
    assert_eq!((appended.len(), begun.len()), (4, 2), "one answer per request, by kind: {answers:?}");
    let seq = match &appended[0] {
        Appended::Inserted(stored) => stored.seq,
        other => panic!("the first append inserts: {other:?}"),
    };
    assert!(
        matches!(&appended[1], Appended::Duplicate(s) if s.seq == seq && s.checkpoint == first),
        "an identical append in the same batch is a duplicate of the first: {:?}",
        appended[1]
    );
    assert!(matches!(appended[2], Appended::Conflict), "different content conflicts");
    assert!(matches!(&appended[3], Appended::Inserted(s) if s.seq > seq), "another timestamp inserts");
    assert!(matches!(begun[0], Ok(BeginOutcome::Acquired { attempt: 1, .. })), "{:?}", begun[0]);
    assert!(matches!(begun[1], Ok(BeginOutcome::InProgress { .. })), "{:?}", begun[1]);

    // Repeated in a later batch, the same requests are duplicates and conflicts of what is stored.
    let again = store
        .write(vec![Write::Append(first.clone()), Write::Append(new_checkpoint("t", "tool-received", T0, "{}"))])
        .await
        .expect("the batch commits");
    assert!(matches!(&again.appended[..], [Appended::Duplicate(s), Appended::Conflict] if s.seq == seq), "{again:?}");
    let inspector = test_store.inspect().await;
    assert_eq!(inspector.count("checkpoints").await, 2);
    assert_eq!(inspector.count("idempotency").await, 1);
}

#[tokio::test]
async fn a_batch_whose_commit_fails_stores_nothing_and_the_next_one_commits() {
    let test_store = TestStore::new().await;
    let store = open(&test_store).await;
    poison_inserts(&test_store).await;

    let failed = store
        .write(vec![
            Write::Append(new_checkpoint("good", "started", T0, "{}")),
            Write::Begin(begin_args("charge")),
            Write::Append(new_checkpoint("poison", "started", T0, "{}")),
        ])
        .await;
    assert!(failed.is_err(), "the batch fails as a whole");
    let inspector = test_store.inspect().await;
    assert_eq!(inspector.count("checkpoints").await, 0, "nothing of the failed batch is stored");
    assert_eq!(inspector.count("idempotency").await, 0);

    let next = store.write(vec![Write::Append(new_checkpoint("good", "started", T0, "{}"))]).await;
    assert!(matches!(next.as_ref().map(|w| &w.appended[..]), Ok([Appended::Inserted(_)])), "{next:?}");
}

#[tokio::test]
async fn through_the_queue_every_answer_is_either_stored_or_unavailable() {
    let server = Sidecar::builder().start().await;
    poison_inserts(server.store()).await;
    let mut calls = JoinSet::new();
    for i in 0..40 {
        let mut client = server.client();
        let turn = if i == 20 { "poison".to_owned() } else { format!("turn-{i}") };
        calls.spawn(async move { (turn.clone(), client.checkpoint(checkpoint(&turn, "started", T0, "{}")).await) });
    }
    let answers: Vec<(String, Result<tonic::Response<CheckpointResponse>, Status>)> = calls.join_all().await;
    let mut client = server.client();
    let mut refused = 0;
    for (turn, answer) in answers {
        let stored = restore_all(&mut client, restore(&turn)).await;
        match answer {
            Ok(response) => {
                assert!(response.into_inner().inserted);
                assert_eq!(states(&stored), ["{}"], "{turn} was acknowledged, so it is stored");
            }
            Err(status) => {
                assert_error(&status, Code::Unavailable, "STORE_UNAVAILABLE");
                assert!(stored.is_empty(), "{turn} was refused, so it is absent");
                refused += 1;
            }
        }
    }
    assert!(refused >= 1, "the poisoned write is refused");
}

#[tokio::test]
async fn a_full_write_queue_refuses_with_resource_exhausted_and_stores_nothing_it_refused() {
    let server = Sidecar::builder()
        .configure(|config| {
            config.writes.queue_max = 1;
            config.writes.batch_max = 1;
        })
        .start()
        .await;
    // While the store's write lock is held, one batch of one waits for it
    // and one request waits in the queue: every other request is refused.
    let lock = server.store().hold_write_lock().await;
    let mut calls = JoinSet::new();
    for i in 0..10 {
        let mut client = server.client();
        let turn = format!("turn-{i}");
        calls.spawn(async move { (turn.clone(), client.checkpoint(checkpoint(&turn, "started", T0, "{}")).await) });
    }
    let mut refused = HashSet::new();
    let mut accepted = Vec::new();
    while refused.len() < 8 {
        let (turn, answer) = calls.join_next().await.expect("ten calls").expect("the call task");
        match answer {
            Err(status) => {
                assert_error(&status, Code::ResourceExhausted, "OVERLOADED");
                refused.insert(turn);
            }
            Ok(_) => accepted.push(turn),
        }
    }
    lock.release().await;
    for (turn, answer) in calls.join_all().await {
        match answer {
            Ok(_) => accepted.push(turn),
            Err(status) => {
                assert_error(&status, Code::ResourceExhausted, "OVERLOADED");
                refused.insert(turn);
            }
        }
    }
    assert!(!accepted.is_empty() && accepted.len() <= 2, "at most the batch and the queue are accepted: {accepted:?}");
    let mut client = server.client();
    for turn in &accepted {
        assert_eq!(restore_all(&mut client, restore(turn)).await.len(), 1, "{turn} was accepted and is stored");
    }
    for turn in &refused {
        assert!(restore_all(&mut client, restore(turn)).await.is_empty(), "{turn} was refused and is absent");
    }
}
