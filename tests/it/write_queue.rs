//! The write queue's bounds as a client meets them: the bytes of the writes
//! waiting (or being committed) are bounded as well as their count, and a
//! write over the byte budget is refused at once with RESOURCE_EXHAUSTED,
//! never stored; a write whose caller gave up while it waited (its deadline
//! passed) is dropped before its batch starts and never stored.
//!
//! Each test holds the store's write lock, so the writer's first batch waits
//! on it and everything after waits in the queue: what is queued, refused
//! or cancelled is then known before the lock is released.

use std::collections::HashSet;
use std::time::Duration;

use tokio::task::JoinSet;
use tonic::{Code, Request};

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{T0, checkpoint, restore, restore_all};
use stepwell_test_support::sidecar::Sidecar;

/// A JSON state of about `bytes` bytes.
fn state(bytes: usize) -> String {
    format!(r#"{{"s":"{}"}}"#, "x".repeat(bytes))
}

const STATE_BYTES: usize = 100_000;

#[tokio::test]
async fn writes_over_the_queues_byte_budget_are_refused_at_once_and_not_stored() {
    let server = Sidecar::builder()
        .configure(|config| {
            // Three writes of a 100 kB state fit, a fourth does not; the count
            // bound (the default 10,000) is far away.
            config.writes.queue_bytes_max = STATE_BYTES * 7 / 2;
            // The first batch waits on the lock below; it must not time out.
            config.store.sqlite_busy_timeout = WAIT_LIMIT * 2;
            config.store.acquire_timeout = WAIT_LIMIT * 2;
        })
        .start()
        .await;
    let lock = server.store().hold_write_lock().await;
    let mut calls = JoinSet::new();
    for i in 0..8 {
        let mut client = server.client();
        let turn = format!("turn-{i}");
        let request = checkpoint(&turn, "started", T0, &state(STATE_BYTES));
        calls.spawn(async move { (turn, client.checkpoint(request).await) });
    }
    // Three wait for the lock (one in the batch, two in the queue), holding
    // the budget; the five others are refused while the lock is still held.
    let mut refused = HashSet::new();
    let five_refused = async {
        while refused.len() < 5 {
            let (turn, answer) = calls.join_next().await.expect("eight calls").expect("the call task");
            let status = answer.expect_err("nothing is answered OK while the write lock is held");
            assert_error(&status, Code::ResourceExhausted, "OVERLOADED");
            assert!(status.message().contains("bytes"), "the refusal names the byte bound: {status:?}");
            refused.insert(turn);
        }
    };
    tokio::time::timeout(WAIT_LIMIT, five_refused)
        .await
        .expect("five of the eight writes are refused at once: the queue's bytes are bounded");
    lock.release().await;

    let mut accepted = Vec::new();
    for (turn, answer) in calls.join_all().await {
        answer.unwrap_or_else(|status| panic!("{turn} waited within the budget and is stored: {status:?}"));
        accepted.push(turn);
    }
    assert_eq!(accepted.len(), 3, "{accepted:?}");
    let mut client = server.client();
    for turn in &accepted {
        assert_eq!(restore_all(&mut client, restore(turn)).await.len(), 1, "{turn} was accepted and is stored");
    }
    for turn in &refused {
        assert!(restore_all(&mut client, restore(turn)).await.is_empty(), "{turn} was refused and is absent");
    }
    // Answered writes give their bytes back: the full budget is free again.
    let mut again = JoinSet::new();
    for i in 0..3 {
        let mut client = server.client();
        let request = checkpoint(&format!("again-{i}"), "started", T0, &state(STATE_BYTES));
        again.spawn(async move { client.checkpoint(request).await });
    }
    for answer in again.join_all().await {
        answer.expect("the budget is released once the writes are answered");
    }
}

#[tokio::test]
async fn a_write_whose_caller_gave_up_while_queued_is_never_stored() {
    let server = Sidecar::builder()
        .configure(|config| {
            // One request per batch and one waiting in the queue.
            config.writes.queue_max = 1;
            config.writes.batch_max = 1;
            // The batches wait on the held lock for as long as the test
            // takes: a batch that timed out on it would be tried again
            // without the callers that have gone, which is not what this
            // test is about.
            config.store.sqlite_busy_timeout = WAIT_LIMIT * 2;
            config.store.postgres_lock_timeout = WAIT_LIMIT * 2;
            config.store.postgres_statement_timeout = WAIT_LIMIT * 2;
            config.store.acquire_timeout = WAIT_LIMIT * 2;
        })
        .start()
        .await;
    let lock = server.store().hold_write_lock().await;
    let mut client = server.client();
    // Writes to turns of their own, one at a time, each with a deadline that
    // passes while it waits: each writer task takes one into a batch, which
    // waits on the lock, and the next waits in the queue. Once two have been
    // accepted and the next is refused, the queue holds a write whose caller
    // has gone, behind batches that have started.
    let mut accepted = Vec::new();
    let queued_and_abandoned = async {
        for i in 0.. {
            let turn = format!("gave-up-{i}");
            let mut request = Request::new(checkpoint(&turn, "started", T0, "{}"));
            // Long enough that an idle writer task takes the write into a
            // batch before its caller gives up, even on a loaded machine.
            request.set_timeout(Duration::from_secs(2));
            let status = client.checkpoint(request).await.expect_err("no write is answered OK while locked");
            match status.code() {
                Code::ResourceExhausted if accepted.len() >= 2 => return,
                Code::ResourceExhausted => drop(assert_error(&status, Code::ResourceExhausted, "OVERLOADED")),
                // The deadline passed while the write waited: the server's
                // (DEADLINE_EXCEEDED), or the client's own, which then
                // resets the call (CANCELLED).
                Code::DeadlineExceeded | Code::Cancelled => accepted.push(turn),
                _ => panic!("waiting or refused, not {status:?}"),
            };
        }
    };
    tokio::time::timeout(WAIT_LIMIT, queued_and_abandoned).await.expect("writes queue behind the first batch");

    lock.release().await;
    // Once a write after them is answered, the batch has committed and the
    // abandoned write has been taken from the queue.
    let after = async {
        loop {
            match client.checkpoint(checkpoint("after", "started", T0, "{}")).await {
                Ok(_) => return,
                Err(status) => drop(assert_error(&status, Code::ResourceExhausted, "OVERLOADED")),
            }
        }
    };
    tokio::time::timeout(WAIT_LIMIT, after).await.expect("the queue has room again");
    let mut stored = Vec::new();
    for turn in &accepted {
        if !restore_all(&mut client, restore(turn)).await.is_empty() {
            stored.push(turn.clone());
        }
    }
    // Every writer task (one on SQLite, several on Postgres) took one write
    // into a batch, which, once started, commits though its caller has
    // gone: those are stored (all of them, unless a writer task was so
    // slow to run that a caller gave up before its batch began, when that
    // write too was dropped unstored). The last one accepted waited in the
    // queue while its caller gave up, and is never stored.
    let (abandoned, batched) = accepted.split_last().expect("two were accepted");
    assert!(!stored.contains(abandoned), "{abandoned}, abandoned in the queue, is not stored: {stored:?}");
    assert!(stored.iter().all(|turn| batched.contains(turn)), "{stored:?} were batched: {batched:?}");
    assert!(!stored.is_empty(), "a batch that started commits after its caller gave up: {batched:?}");
}
