//! DeleteTurn against everything else: deletes and appends to the same turns
//! from many callers and two sidecars on one store leave every turn with
//! checkpoints with a summary row that counts them (so ListTurns(OPEN) still
//! finds it), and no write fails, as a deadlock would make one fail.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use stepwell::api::pb::{DeleteTurnRequest, TurnStatus};
use stepwell::config::Config;
use stepwell::model::NewCheckpoint;
use stepwell::store::{self, Write};
use tokio::task::JoinSet;

use stepwell_test_support::backend::{Inspector, TestStore};
use stepwell_test_support::requests::{T0, checkpoint, list_all, list_turns, turn_ids};
use stepwell_test_support::sidecar::Sidecar;

/// Per turn: how many checkpoints the log holds, and the count its summary
/// row says (`None`: no summary row).
type Counts = BTreeMap<String, (i64, Option<i64>)>;

/// Every turn of the log or of the summaries, with both counts.
pub(crate) async fn counts(inspector: &Inspector) -> Counts {
    const LOG: &str = "SELECT turn_id, count(*) FROM checkpoints GROUP BY turn_id";
    const SUMMARIES: &str = "SELECT turn_id, checkpoint_count FROM turns";
    type Rows = Result<Vec<(String, i64)>, sqlx::Error>;
    let (log, summaries): (Rows, Rows) = match inspector {
        Inspector::Sqlite(pool) => {
            (sqlx::query_as(LOG).fetch_all(pool).await, sqlx::query_as(SUMMARIES).fetch_all(pool).await)
        }
        Inspector::Postgres(pool) => {
            (sqlx::query_as(LOG).fetch_all(pool).await, sqlx::query_as(SUMMARIES).fetch_all(pool).await)
        }
    };
    let mut counts = Counts::new();
    for (turn, n) in log.expect("count the log") {
        counts.entry(turn).or_insert((0, None)).0 = n;
    }
    for (turn, n) in summaries.expect("read the summaries") {
        counts.entry(turn).or_insert((0, None)).1 = Some(n);
    }
    counts
}

/// The turns whose summary is missing or counts wrongly: none, always.
pub(crate) fn untrue(counts: &Counts) -> Vec<(&String, &(i64, Option<i64>))> {
    counts.iter().filter(|(_, (log, summary))| Some(*log) != *summary || *log == 0).collect()
}

const TURNS: usize = 4;
/// Checkpoints each turn holds when its deletion starts, so that a deletion
/// takes long enough for appends to land in the middle of it.
const FILL: i64 = 2_000;
const ROUNDS: i64 = 8;
/// Callers appending through each sidecar while the turns are deleted.
const APPENDERS: usize = 8;

/// Fills every turn with `FILL` checkpoints, straight into the store.
async fn fill(store: &TestStore, round: i64) {
    let store = store::open(&Config::for_database(store.database()).store).await.expect("open the store");
    for turn in 0..TURNS {
        for chunk in 0..FILL / 500 {
            let batch = (0..500)
                .map(|k| {
                    Write::Append(NewCheckpoint {
                        namespace: "default".into(),
                        turn_id: format!("turn-{turn}"),
                        session_id: String::new(),
                        phase: format!("fill-{round}"),
                        state: b"{}".to_vec(),
                        timestamp: T0 + chunk * 500 + k,
                        terminal: false,
                        workflow_version: String::new(),
                    })
                })
                .collect();
            store.write(batch).await.expect("fill the turn");
        }
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
    };
    let first = Sidecar::builder().configure(configure).start().await;
    let second = Sidecar::builder().store(first.store()).configure(configure).start().await;
    let inspector = first.store().inspect().await;
    let mut client = first.client();
    for round in 0..ROUNDS {
        fill(first.store(), round).await;
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
