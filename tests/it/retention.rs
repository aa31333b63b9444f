//! Turn retention on both backends, on the store's injectable clock: the
//! turns are written over gRPC to a real sidecar, a retention pass
//! (`retention::purge_turns`, what the sweeper runs every interval) works
//! on the same store through a writer of its own, as a second sidecar's
//! sweeper would, and what is left is read back over gRPC. Then the real
//! binary with `--turn-retention` deletes old turns at its first sweep.
//! Record retention deletes the records of turns idle past their rule,
//! and keeps a turn written since it was chosen.

use std::time::Duration;

use stepwell::api::pb::{
    CheckpointRequest, ListRecordsRequest, ListTurnsRequest, PutRecordsRequest, Record, TurnStatus,
};
use stepwell::config::retention::{NamespaceRetention, TurnRetention};
use stepwell::config::sections::Config;
use stepwell::domain::clock::{Clock, system_now};
use stepwell::domain::records::RecordDelete;
use stepwell::observe::metrics::Metrics;
use stepwell::server::retention::{self, Purged};
use stepwell::store::writer::Writer;
use stepwell::store::{self, Expired, ExpiredQuery, Handle};
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{list_all, stored_states};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};
use stepwell_test_support::{Client, RecordClient};

use crate::STEPWELL;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// A checkpoint of `turn` in `namespace` at `ts`, terminal or not.
fn at(namespace: &str, turn: &str, phase: &str, ts: i64, terminal: bool) -> CheckpointRequest {
    CheckpointRequest {
        namespace: namespace.to_owned(),
        turn_id: turn.to_owned(),
        phase: phase.to_owned(),
        timestamp: Some(stepwell_test_support::requests::ts(ts)),
        state: br#"{"step":1}"#.to_vec(),
        terminal,
        ..Default::default()
    }
}

/// Writes a turn of two checkpoints whose newest is at `ts`.
async fn turn(client: &mut Client, namespace: &str, turn: &str, ts: i64, terminal: bool) {
    client.checkpoint(at(namespace, turn, "started", ts - 1, false)).await.expect("stored");
    client.checkpoint(at(namespace, turn, "ended", ts, terminal)).await.expect("stored");
}

/// The turn ids of a namespace, any status.
async fn turns_of(client: &mut Client, namespace: &str) -> Vec<String> {
    let request =
        ListTurnsRequest { namespace: namespace.to_owned(), status: TurnStatus::Any.into(), ..Default::default() };
    let mut ids: Vec<String> = list_all(client, request).await.into_iter().map(|t| t.turn_id).collect();
    ids.sort();
    ids
}

/// A store handle and writer of their own on `store`, on `clock`: what a
/// sidecar's sweeper works with.
async fn sweeper_on(store: &TestStore, clock: &Clock) -> (Handle, Writer) {
    let mut config = Config::for_database(store.database());
    config.store.clock = clock.clone();
    config.writes.delete_chunk_rows = 1;
    let handle = Handle::new(store::open(&config.store).await.expect("the store opens"));
    let (writer, _tasks) = Writer::start(handle.clone(), &config.writes, Metrics::off(), None);
    (handle, writer)
}

async fn pass(sweeper: &(Handle, Writer), rules: &TurnRetention, clock: &Clock) -> Purged {
    retention::purge_turns(&sweeper.0, &sweeper.1, rules, clock, 1000, &Metrics::off()).await.expect("a pass")
}

#[tokio::test]
async fn terminal_turns_past_retention_go_and_open_ones_stay_unless_asked() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let clock = Clock::system();
    let now = system_now();
    turn(&mut client, "", "old-done", now, true).await;
    turn(&mut client, "", "old-open", now, false).await;
    // Two days later on the store's clock, two more turns.
    clock.advance(2 * DAY);
    let later = now + i64::try_from((2 * DAY).as_nanos()).unwrap();
    turn(&mut client, "", "new-done", later, true).await;
    turn(&mut client, "", "new-open", later, false).await;
    let sweeper = sweeper_on(server.store(), &clock).await;

    let rules = TurnRetention { terminal: Some(DAY), ..Default::default() };
    let purged = pass(&sweeper, &rules, &clock).await;
    assert_eq!(purged, Purged { turns: 1, checkpoints: 2, ..Default::default() });
    assert_eq!(turns_of(&mut client, "").await, ["new-done", "new-open", "old-open"]);
    assert!(stored_states(&mut client, "old-done").await.is_empty(), "its checkpoints are gone too");

    // A second pass finds nothing more.
    assert_eq!(pass(&sweeper, &rules, &clock).await, Purged::default());

    // Open-turn retention, when asked, takes the abandoned open turn.
    let rules = TurnRetention { terminal: Some(DAY), open: Some(DAY), ..Default::default() };
    assert_eq!(pass(&sweeper, &rules, &clock).await.turns, 1);
    assert_eq!(turns_of(&mut client, "").await, ["new-done", "new-open"]);
}

#[tokio::test]
async fn a_namespace_rule_wins_over_the_flags() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let clock = Clock::system();
    let now = system_now();
    for namespace in ["plain", "kept", "short"] {
        turn(&mut client, namespace, "done", now, true).await;
    }
    clock.advance(2 * HOUR);
    let sweeper = sweeper_on(server.store(), &clock).await;
    // The flags keep terminal turns a day; "kept" forever; "short" an hour.
    let mut rules = TurnRetention { terminal: Some(DAY), ..Default::default() };
    rules.namespaces.insert("kept".into(), NamespaceRetention { terminal: None, open: None, records: None });
    rules.namespaces.insert("short".into(), NamespaceRetention { terminal: Some(HOUR), open: None, records: None });

    assert_eq!(pass(&sweeper, &rules, &clock).await.turns, 1);
    assert!(turns_of(&mut client, "short").await.is_empty(), "past its namespace's hour");
    assert_eq!(turns_of(&mut client, "plain").await, ["done"], "within the flags' day");

    clock.advance(2 * DAY);
    assert_eq!(pass(&sweeper, &rules, &clock).await.turns, 1);
    assert!(turns_of(&mut client, "plain").await.is_empty(), "past the flags' day");
    assert_eq!(turns_of(&mut client, "kept").await, ["done"], "its namespace keeps it forever");
}

#[tokio::test]
async fn a_turn_written_after_retention_chose_it_is_not_lost() {
    let server = Sidecar::builder().start().await;
    let mut client = server.client();
    let clock = Clock::system();
    let now = system_now();
    turn(&mut client, "", "revived", now, false).await;
    clock.advance(2 * DAY);
    let (store, writer) = sweeper_on(server.store(), &clock).await;

    // Retention chooses the abandoned turn; before its delete runs, the
    // turn's worker comes back and writes.
    let expired = Expired { last_before: clock.now() - i64::try_from(DAY.as_nanos()).unwrap(), terminal: false };
    let query = ExpiredQuery { namespace: None, except: Vec::new(), expired, limit: 10 };
    let chosen = store.reads().expect("up").expired_turns(&query).await.expect("chosen");
    assert_eq!(chosen, [(String::from("default"), String::from("revived"))]);
    let back = now + i64::try_from((2 * DAY).as_nanos()).unwrap();
    client.checkpoint(at("", "revived", "resumed", back, false)).await.expect("stored");

    let (deleted, gone) = writer.expire_turn("default".into(), "revived".into(), expired).await.expect("answered");
    assert_eq!((deleted, gone), (0, false), "kept whole");
    assert_eq!(stored_states(&mut client, "revived").await.len(), 3, "every checkpoint is still there");
}

#[tokio::test]
async fn the_sidecar_deletes_turns_past_retention_at_its_sweep() {
    let store = TestStore::new().await;
    let first = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = first.client();
    let now = system_now();
    let week = i64::try_from((7 * DAY).as_nanos()).unwrap();
    turn(&mut client, "", "last-week", now - week, true).await;
    turn(&mut client, "", "today", now, true).await;
    turn(&mut client, "", "open-last-week", now - week, false).await;
    first.terminate();
    assert!(first.wait().await.success());

    // The first sweep runs as the sidecar starts.
    let log = SidecarProcess::builder(STEPWELL, &store)
        .flags(&["--turn-retention", "1d"])
        .run_until_logged("turn retention deleted turns");
    assert!(log.contains("turns=1") && log.contains("checkpoints=2"), "{log}");

    let again = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = again.client();
    assert_eq!(turns_of(&mut client, "").await, ["open-last-week", "today"]);
}

/// Puts two records (of two kinds) in `turn` of `namespace`.
async fn records_in(client: &mut RecordClient, namespace: &str, turn: &str) {
    let record = |kind: &str| Record {
        turn_id: turn.to_owned(),
        kind: kind.to_owned(),
        id: "a".to_owned(),
        payload: b"x".to_vec(),
        ..Default::default()
    };
    let request =
        PutRecordsRequest { namespace: namespace.to_owned(), records: vec![record("one"), record("two")], fence: None };
    client.put_records(request).await.expect("stored");
}

/// The turns of a namespace holding a record of kind "one".
async fn record_turns(client: &mut RecordClient, namespace: &str) -> Vec<String> {
    let request = ListRecordsRequest { namespace: namespace.to_owned(), kind: "one".to_owned(), ..Default::default() };
    let listed = client.list_records(request).await.expect("listed").into_inner();
    let mut turns: Vec<String> = listed.entries.into_iter().map(|e| e.record.expect("a record").turn_id).collect();
    turns.sort();
    turns
}

#[tokio::test]
async fn record_retention_deletes_idle_turns_per_namespace_and_keeps_a_turn_written_since() {
    let server = Sidecar::builder().start().await;
    let mut client = server.records();
    for (namespace, turn) in [("", "a"), ("", "b"), ("kept", "c"), ("short", "d")] {
        records_in(&mut client, namespace, turn).await;
    }
    let clock = Clock::system();
    let sweeper = sweeper_on(server.store(), &clock).await;
    let mut rules = TurnRetention { records: Some(DAY), ..Default::default() };
    rules.namespaces.insert("kept".into(), NamespaceRetention { records: None, ..Default::default() });
    rules.namespaces.insert("short".into(), NamespaceRetention { records: Some(HOUR), ..Default::default() });

    // Freshly written: nothing is past any rule.
    assert_eq!(pass(&sweeper, &rules, &clock).await, Purged::default());

    // Two hours later only the namespace with an hour's rule loses its turn.
    clock.advance(2 * HOUR);
    let purged = pass(&sweeper, &rules, &clock).await;
    assert_eq!(purged, Purged { record_turns: 1, records: 2, ..Default::default() });
    assert!(record_turns(&mut client, "short").await.is_empty());
    assert_eq!(record_turns(&mut client, "").await, ["a", "b"]);

    // Two days later the flag's rule takes the default namespace's turns,
    // and the namespace without a rule keeps its own.
    clock.advance(2 * DAY);
    let purged = pass(&sweeper, &rules, &clock).await;
    assert_eq!(purged, Purged { record_turns: 2, records: 4, ..Default::default() });
    assert!(record_turns(&mut client, "").await.is_empty());
    assert_eq!(record_turns(&mut client, "kept").await, ["c"]);

    // A turn chosen as idle before `chosen_before` but written since is kept
    // whole: the deletion checks, in its transaction, that no record of the
    // turn was written at or after the cutoff it was chosen with.
    let chosen_before = system_now();
    records_in(&mut client, "", "e").await;
    let delete = RecordDelete {
        namespace: "default".into(),
        turn_ids: vec!["e".into()],
        selection: None,
        idle_before: Some(chosen_before),
    };
    assert_eq!(sweeper.1.delete_records(delete).await.expect("answered"), 0);
    assert_eq!(record_turns(&mut client, "").await, ["e"]);
}
