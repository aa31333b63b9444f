//! DeleteTurn against everything else: deletes and appends to the same turns
//! from many callers and two sidecars on one store leave every turn with
//! checkpoints with a summary row that counts them (so ListTurns(OPEN) still
//! finds it), and no write fails, as a deadlock would make one fail. A large
//! turn is deleted in chunks, one transaction each, with other writes
//! committed between them; a delete killed midway leaves the turn partly
//! deleted with a true summary, and a retry finishes it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use stepwell::api::pb::{DeleteTurnRequest, TurnStatus};
use stepwell::config::sections::Config;
use stepwell::domain::model::NewCheckpoint;
use stepwell::store::{self, Write};
use tokio::task::JoinSet;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::{Inspector, TestStore};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, list_all, list_turns, turn_ids};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

/// Per turn: how many checkpoints the log holds, and the count its summary
/// row says (`None`: no summary row).
type Counts = BTreeMap<String, (i64, Option<i64>)>;

/// Every turn of the log or of the summaries, with both counts.
async fn counts(inspector: &Inspector) -> Counts {
    // One statement, so one snapshot: a chunk whose commit lands while this
    // reads (a killed sidecar's last COMMIT may still be under way on the
    // server) is seen in both the log and the summaries, or in neither.
    const BOTH: &str = "SELECT 'log', turn_id, count(*) FROM checkpoints GROUP BY turn_id \
        UNION ALL SELECT 'summary', turn_id, CAST(checkpoint_count AS BIGINT) FROM turns";
    type Rows = Result<Vec<(String, String, i64)>, sqlx::Error>;
    let rows: Rows = match inspector {
        Inspector::Sqlite(pool) => sqlx::query_as(BOTH).fetch_all(pool).await,
        Inspector::Postgres(pool) => sqlx::query_as(BOTH).fetch_all(pool).await,
    };
    let mut counts = Counts::new();
    for (source, turn, n) in rows.expect("count the log and read the summaries") {
        let entry = counts.entry(turn).or_insert((0, None));
        if source == "log" {
            entry.0 = n;
        } else {
            entry.1 = Some(n);
        }
    }
    counts
}

/// The turns whose summary is missing or counts wrongly: none, always.
fn untrue(counts: &Counts) -> Vec<(&String, &(i64, Option<i64>))> {
    counts.iter().filter(|(_, (log, summary))| Some(*log) != *summary || *log == 0).collect()
}

const TURNS: usize = 4;
/// Checkpoints each turn holds when its deletion starts, so that a deletion
/// takes long enough for appends to land in the middle of it.
const FILL: i64 = 2_000;
const ROUNDS: i64 = 8;
/// Callers appending through each sidecar while the turns are deleted.
const APPENDERS: usize = 8;

/// Writes `n` checkpoints of `turn` in `phase` straight into the store, in
/// batches, with timestamps from T0 on.
async fn fill(store: &TestStore, turn: &str, phase: &str, n: i64) {
    let store = store::open(&Config::for_database(store.database()).store).await.expect("open the store");
    for start in (0..n).step_by(500) {
        let batch = (start..n.min(start + 500))
            .map(|k| {
                Write::Append(NewCheckpoint {
                    namespace: "default".into(),
                    turn_id: turn.into(),
                    session_id: String::new(),
                    phase: phase.into(),
                    state: b"{}".to_vec(),
                    timestamp: T0 + k,
                    terminal: false,
                    workflow_version: String::new(),
                })
            })
            .collect();
        store.write(batch).await.expect("fill the turn");
    }
    store.close().await;
}

#[tokio::test]
async fn deletes_racing_appends_leave_every_turn_with_a_true_summary() {
    race(&[Deleter::Second]).await;
}

#[tokio::test]
async fn deletes_and_appends_crossing_in_batches_never_fail() {
    race(&[Deleter::Second, Deleter::First]).await;
}

/// Through which sidecar a round's DeleteTurns go.
#[derive(Clone, Copy)]
enum Deleter {
    /// The second sidecar, which appends nothing: it deletes every turn,
    /// oldest first, with no append in its queue.
    Second,
    /// The first sidecar, beside the appends: it deletes every turn, newest
    /// first, with appends in its queue.
    First,
}

/// Rounds in which callers append to a few full turns through one sidecar
/// while the `deleters` delete them, through two sidecars on one store with
/// several writer tasks each. No write may fail (a deadlock would fail one
/// with UNAVAILABLE), and after each round every turn's summary counts its
/// checkpoints, the answers account for every checkpoint, and ListTurns(OPEN)
/// lists every turn that has checkpoints.
async fn race(deleters: &[Deleter]) {
    let configure = |config: &mut Config| {
        config.writes.concurrency = 4;
        config.writes.delete_chunk_rows = 300;
        // A deadlock fails a write with UNAVAILABLE whatever the timeout; on
        // a busy machine under SERIALIZABLE a chunked delete can take longer
        // than the default 30 s, which is the machine's, not a finding.
        config.connections.request_timeout = std::time::Duration::from_secs(300);
    };
    let first = Sidecar::builder().configure(configure).start().await;
    let second = Sidecar::builder().store(first.store()).configure(configure).start().await;
    let inspector = first.store().inspect().await;
    let mut client = first.client();
    for round in 0..ROUNDS {
        for turn in 0..TURNS {
            fill(first.store(), &format!("turn-{turn}"), &format!("fill-{round}"), FILL).await;
        }
        // Callers append to the turns through the first sidecar until every
        // delete has answered.
        let deleting = Arc::new(AtomicBool::new(true));
        let mut appends = JoinSet::new();
        let mut deletes = JoinSet::new();
        {
            for a in 0..APPENDERS {
                let (mut client, deleting) = (first.client(), deleting.clone());
                appends.spawn(async move {
                    let mut inserted = 0u64;
                    let mut k = 0;
                    while deleting.load(Ordering::Relaxed) {
                        let turn = format!("turn-{}", (a + k as usize) % TURNS);
                        let ts = T0 + k * 1_000 + a as i64;
                        let request = checkpoint(&turn, &format!("append-{round}"), ts, "{}");
                        let response = client.checkpoint(request).await;
                        let response = response.unwrap_or_else(|status| panic!("an append failed: {status:?}"));
                        inserted += u64::from(response.into_inner().inserted);
                        k += 1;
                    }
                    inserted
                });
            }
        }
        for deleter in deleters {
            let (sidecar, order) = match deleter {
                Deleter::Second => (&second, [0, 1, 2, 3]),
                Deleter::First => (&first, [3, 2, 1, 0]),
            };
            for turn in order {
                let mut client = sidecar.client();
                let request = DeleteTurnRequest { turn_id: format!("turn-{turn}"), ..Default::default() };
                deletes.spawn(async move {
                    let response = client.delete_turn(request).await;
                    response.unwrap_or_else(|status| panic!("a DeleteTurn failed: {status:?}")).into_inner().deleted
                });
            }
        }
        let deleted: u64 = deletes.join_all().await.into_iter().sum();
        deleting.store(false, Ordering::Relaxed);
        let inserted: u64 = appends.join_all().await.into_iter().sum();

        let counts = counts(&inspector).await;
        assert_eq!(untrue(&counts), Vec::new(), "round {round}: every turn's summary counts its checkpoints");
        let stored: i64 = counts.values().map(|(log, _)| log).sum();
        let filled = FILL as u64 * TURNS as u64;
        assert_eq!(
            filled + inserted - deleted,
            stored as u64,
            "round {round}: the answers account for every checkpoint"
        );
        let open = list_all(&mut client, list_turns(TurnStatus::Open)).await;
        let with_checkpoints: Vec<&str> = counts.keys().map(String::as_str).collect();
        assert_eq!(turn_ids(&open), with_checkpoints, "round {round}: ListTurns(OPEN) finds every open turn");
        // Start the next round from empty turns.
        for turn in 0..TURNS {
            let request = DeleteTurnRequest { turn_id: format!("turn-{turn}"), ..Default::default() };
            client.delete_turn(request).await.expect("clear the turn");
        }
    }
}

/// From here on, the store records in `events`, in order: `chunk` when the
/// summary of turn `big` shrinks, `gone` when it is deleted, and `other` when
/// a checkpoint of turn `other` is inserted.
async fn record_events(store: &TestStore) {
    store
        .execute(
            "CREATE TABLE events (n INTEGER PRIMARY KEY AUTOINCREMENT, what TEXT NOT NULL); \
             CREATE TRIGGER chunk_event AFTER UPDATE ON turns WHEN NEW.turn_id = 'big' \
               BEGIN INSERT INTO events (what) VALUES ('chunk'); END; \
             CREATE TRIGGER gone_event AFTER DELETE ON turns WHEN OLD.turn_id = 'big' \
               BEGIN INSERT INTO events (what) VALUES ('gone'); END; \
             CREATE TRIGGER other_event AFTER INSERT ON checkpoints WHEN NEW.turn_id = 'other' \
               BEGIN INSERT INTO events (what) VALUES ('other'); END;",
            "CREATE TABLE events (n BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, what TEXT NOT NULL); \
             CREATE FUNCTION record_event() RETURNS trigger LANGUAGE plpgsql AS $$ \
               BEGIN INSERT INTO events (what) VALUES (TG_ARGV[0]); RETURN NULL; END $$; \
             CREATE TRIGGER chunk_event AFTER UPDATE ON turns FOR EACH ROW WHEN (NEW.turn_id = 'big') \
               EXECUTE FUNCTION record_event('chunk'); \
             CREATE TRIGGER gone_event AFTER DELETE ON turns FOR EACH ROW WHEN (OLD.turn_id = 'big') \
               EXECUTE FUNCTION record_event('gone'); \
             CREATE TRIGGER other_event AFTER INSERT ON checkpoints FOR EACH ROW WHEN (NEW.turn_id = 'other') \
               EXECUTE FUNCTION record_event('other');",
        )
        .await;
}

async fn events(inspector: &Inspector) -> Vec<String> {
    const EVENTS: &str = "SELECT what FROM events ORDER BY n";
    match inspector {
        Inspector::Sqlite(pool) => sqlx::query_scalar(EVENTS).fetch_all(pool).await,
        Inspector::Postgres(pool) => sqlx::query_scalar(EVENTS).fetch_all(pool).await,
    }
    .expect("read the events")
}

/// How many checkpoints turn `big`'s summary counts; 0 once it is gone.
async fn big_count(inspector: &Inspector) -> i64 {
    counts(inspector).await.get("big").and_then(|(_, summary)| *summary).unwrap_or(0)
}

/// Waits until `big`'s summary counts fewer than `below`: the delete has
/// committed a chunk. Reads without sleeping; gives up after WAIT_LIMIT.
async fn until_partly_deleted(inspector: &Inspector, below: i64) -> i64 {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let count = big_count(inspector).await;
        if count < below {
            return count;
        }
        assert!(tokio::time::Instant::now() < deadline, "the delete never committed a chunk of its own");
        tokio::task::yield_now().await;
    }
}

const BIG: i64 = 10_000;
const CHUNK: u32 = 10;

#[tokio::test]
async fn a_large_turn_is_deleted_in_chunks_with_other_writes_committed_between_them() {
    let store = TestStore::new().await;
    fill(&store, "big", "step", BIG).await;
    record_events(&store).await;
    let server = Sidecar::builder()
        .store(&store)
        .configure(|config| {
            config.writes.delete_chunk_rows = CHUNK;
            // Deleting 10,000 checkpoints one chunk at a time outlasts the
            // default 30 s on a loaded machine under serializable isolation.
            config.connections.request_timeout = std::time::Duration::from_secs(300);
        })
        .start()
        .await;
    let inspector = store.inspect().await;
    let mut deleting = server.client();
    let delete = tokio::spawn(async move {
        deleting.delete_turn(DeleteTurnRequest { turn_id: "big".into(), ..Default::default() }).await
    });

    // Once the delete is under way, a write to another turn is answered
    // while the delete still goes on: it did not wait for the whole delete.
    until_partly_deleted(&inspector, BIG).await;
    assert_inserted(&mut server.client(), checkpoint("other", "started", T0, "{}")).await;
    assert!(!delete.is_finished(), "the write was answered before the delete");
    let deleted = delete.await.expect("the delete's task").expect("DeleteTurn succeeds").into_inner().deleted;
    assert_eq!(deleted, BIG as u64, "the delete answers every checkpoint it deleted");

    // The store's own record: one transaction per chunk, each shrinking the
    // summary but the last, which deletes it; the write committed between
    // two of them.
    let events = events(&inspector).await;
    let chunks = (BIG as usize).div_ceil(CHUNK as usize);
    let shrinks = events.iter().filter(|what| *what == "chunk").count();
    assert_eq!(shrinks, chunks - 1, "every chunk but the last shrinks the summary");
    assert_eq!(events.last().map(String::as_str), Some("gone"), "the last chunk deletes the summary");
    let other = events.iter().position(|what| what == "other").expect("the write is recorded");
    assert!(
        0 < other && other < events.len() - 2,
        "the write committed between two chunks: {other} of {}",
        events.len()
    );

    let counts = counts(&inspector).await;
    assert_eq!(untrue(&counts), Vec::new(), "every summary counts its checkpoints");
    assert_eq!(counts.keys().collect::<Vec<_>>(), ["other"], "nothing of the deleted turn is left");
}

#[tokio::test]
async fn a_delete_killed_midway_leaves_true_summaries_and_a_retry_finishes_it() {
    let store = TestStore::new().await;
    fill(&store, "big", "step", BIG).await;
    // A long request timeout: the retry deletes thousands of chunks, slow on a loaded machine.
    let flags = ["--delete-chunk-rows", &CHUNK.to_string(), "--request-timeout-ms", "300000"];
    let sidecar = SidecarProcess::builder(STEPWELL, &store).flags(&flags).spawn().await;
    let inspector = store.inspect().await;
    let mut deleting = sidecar.client();
    let delete = tokio::spawn(async move {
        deleting.delete_turn(DeleteTurnRequest { turn_id: "big".into(), ..Default::default() }).await
    });
    until_partly_deleted(&inspector, BIG).await;
    sidecar.kill().await;
    assert!(delete.await.expect("the delete's task").is_err(), "the killed sidecar never answered the delete");

    // Whatever chunk the kill fell in, it committed whole or not at all.
    inspector.until_other_transactions_end().await;
    let after_kill = counts(&inspector).await;
    assert_eq!(untrue(&after_kill), Vec::new(), "every summary counts its checkpoints after the kill");
    let left = after_kill.get("big").map_or(0, |(log, _)| *log);
    assert!(0 < left && left < BIG, "the turn is partly deleted: {left} of {BIG} left");
    let restarted = SidecarProcess::builder(STEPWELL, &store).flags(&flags).spawn().await;
    let mut client = restarted.client();
    let open = list_all(&mut client, list_turns(TurnStatus::Open)).await;
    assert_eq!(turn_ids(&open), ["big"], "the partly deleted turn is still listed, so it can be found and retried");
    assert_eq!(open[0].checkpoint_count, left as u64, "and its count is what is left");

    let retry = client.delete_turn(DeleteTurnRequest { turn_id: "big".into(), ..Default::default() }).await;
    assert_eq!(retry.expect("the retry succeeds").into_inner().deleted, left as u64, "the retry deletes the rest");
    assert!(counts(&inspector).await.is_empty(), "nothing of the turn is left");
}

#[tokio::test]
async fn a_checkpoint_appended_mid_delete_with_an_older_timestamp_is_deleted_too() {
    let test_store = TestStore::new().await;
    fill(&test_store, "t", "step", 30).await;
    let inspector = test_store.inspect().await;
    let store = store::open(&Config::for_database(test_store.database()).store).await.expect("open the store");
    let chunk =
        |after| Write::DeleteTurn { namespace: "default".into(), turn_id: "t".into(), rows: 10, after, only_if: None };
    let delete = async |after| store.write(vec![chunk(after)]).await.expect("a chunk commits").deleted[0];
    let first_ts = async || -> i64 {
        let sql = "SELECT first_ts_ns FROM turns WHERE turn_id = 't'";
        match &inspector {
            Inspector::Sqlite(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
            Inspector::Postgres(pool) => sqlx::query_scalar(sql).fetch_one(pool).await,
        }
        .expect("the turn's summary")
    };

    let one = delete(None).await;
    assert_eq!((one.checkpoints, one.gone), (10, false));
    assert_eq!(first_ts().await, T0 + 10, "the summary starts at the oldest left");
    // Another writer appends a checkpoint older than every one left.
    let older = NewCheckpoint {
        namespace: "default".into(),
        turn_id: "t".into(),
        session_id: String::new(),
        phase: "late".into(),
        state: b"{}".to_vec(),
        timestamp: T0 - 1,
        terminal: false,
        workflow_version: String::new(),
    };
    store.write(vec![Write::Append(older)]).await.expect("the append commits");
    assert_eq!(first_ts().await, T0 - 1);

    let two = delete(one.next).await;
    assert_eq!((two.checkpoints, two.gone), (10, false), "the next chunk goes on after the cursor");
    assert_eq!(first_ts().await, T0 - 1, "the older checkpoint is still the turn's first");
    assert_eq!(untrue(&counts(&inspector).await), Vec::new(), "the summary counts what is left");
    let three = delete(two.next).await;
    assert_eq!((three.checkpoints, three.gone), (10, false), "the last ten after the cursor");
    let restart = delete(three.next).await;
    assert_eq!((restart.checkpoints, restart.gone, restart.next), (0, false, None), "nothing after: start again");
    let last = delete(restart.next).await;
    assert_eq!((last.checkpoints, last.gone), (1, true), "the older checkpoint goes, and the summary with it");
    assert!(counts(&inspector).await.is_empty(), "nothing of the turn is left");
    store.close().await;
}
