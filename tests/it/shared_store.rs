//! Several sidecar processes serving one store, as teams run them against a
//! shared Postgres (and as SQLite allows on one host): the store, not any
//! one sidecar, decides deduplication and who holds a lease. Each test runs
//! three real `stepwell` processes on one store and spreads its calls across
//! them.

use std::time::Duration;

use stepwell::api::pb::{BeginOutcome, CheckpointRequest, ListTurnsRequest, RecordState, RestoreRequest};
use tokio::task::JoinSet;
use tonic::Code;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{
    T0, assert_inserted, begin, begin_leased, checkpoint, complete, get, restore, restore_all,
};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

const SIDECARS: usize = 3;

/// Three sidecars on one fresh store, started at the same time, so their
/// migrations race as they would in a rolling deploy.
async fn three_sidecars(store: &TestStore) -> Vec<SidecarProcess> {
    let (a, b, c) = tokio::join!(
        SidecarProcess::builder(STEPWELL, store).name("a").spawn(),
        SidecarProcess::builder(STEPWELL, store).name("b").spawn(),
        SidecarProcess::builder(STEPWELL, store).name("c").spawn(),
    );
    vec![a, b, c]
}

#[tokio::test]
async fn identical_checkpoints_through_three_sidecars_store_one_row() {
    let store = TestStore::new().await;
    let sidecars = three_sidecars(&store).await;
    let request = checkpoint("turn", "tool-received", T0, r#"{"tool":"search","ok":true}"#);
    let mut calls = JoinSet::new();
    for i in 0..30 {
        let mut client = sidecars[i % SIDECARS].client();
        let request: CheckpointRequest = request.clone();
        calls.spawn(async move { client.checkpoint(request).await.expect("Checkpoint succeeds").into_inner() });
    }
    let answers = calls.join_all().await;
    let inserted = answers.iter().filter(|a| a.inserted).count();
    assert_eq!(inserted, 1, "exactly one call stores the checkpoint");
    assert!(answers.iter().all(|a| a.checkpoint == answers[0].checkpoint), "every call answers the stored row");
    for sidecar in &sidecars {
        assert_eq!(restore_all(&mut sidecar.client(), restore("turn")).await.len(), 1);
    }
}

#[tokio::test]
async fn concurrent_begins_through_three_sidecars_have_one_winner() {
    let store = TestStore::new().await;
    let sidecars = three_sidecars(&store).await;
    for key in ["charge", "email"] {
        let mut calls = JoinSet::new();
        for i in 0..60 {
            let mut client = sidecars[i % SIDECARS].idempotency();
            calls.spawn(async move { client.begin(begin(key)).await.expect("Begin succeeds").into_inner() });
        }
        let answers = calls.join_all().await;
        let acquired: Vec<_> = answers.iter().filter(|a| a.outcome() == BeginOutcome::Acquired).collect();
        assert_eq!(acquired.len(), 1, "{key}: exactly one Begin acquires");
        let expiry = acquired[0].lease_expires_at;
        for answer in answers.iter().filter(|a| a.outcome() != BeginOutcome::Acquired) {
            assert_eq!(answer.outcome(), BeginOutcome::InProgress);
            assert_eq!(answer.lease_expires_at, expiry, "the others see the winner's lease");
        }
    }
}

#[tokio::test]
async fn a_lease_that_runs_out_on_one_sidecar_is_taken_over_through_another_and_fenced() {
    let store = TestStore::new().await;
    let sidecars = three_sidecars(&store).await;
    let (mut a, mut b, mut c) = (sidecars[0].idempotency(), sidecars[1].idempotency(), sidecars[2].idempotency());

    let first = a.begin(begin_leased("charge", Duration::from_millis(200))).await.expect("Begin").into_inner();
    assert_eq!(first.outcome(), BeginOutcome::Acquired);
    // The lease runs out on the store's clock; wait for that condition.
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    while b.get(get("charge")).await.expect("Get").into_inner().state() != RecordState::Expired {
        assert!(tokio::time::Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let second = b.begin(begin("charge")).await.expect("Begin").into_inner();
    assert_eq!(second.outcome(), BeginOutcome::Acquired);
    assert!(second.previous_lease_expired);
    assert_eq!(second.attempt, 2);
    assert!(second.lease_token > first.lease_token, "the fencing token grows");

    let stale = a.complete(complete("charge", first.lease_token, b"first")).await.expect_err("fenced");
    assert_eq!(stale.code(), Code::Aborted);
    b.complete(complete("charge", second.lease_token, b"second")).await.expect("the holder completes");
    let seen = c.begin(begin("charge")).await.expect("Begin").into_inner();
    assert_eq!((seen.outcome(), seen.result.as_slice()), (BeginOutcome::Completed, &b"second"[..]));
}

#[tokio::test]
async fn namespaces_stay_isolated_across_sidecars() {
    let store = TestStore::new().await;
    let sidecars = three_sidecars(&store).await;
    let in_ns = |ns: &str, mut request: CheckpointRequest| {
        request.namespace = ns.to_owned();
        request
    };
    assert_inserted(&mut sidecars[0].client(), in_ns("team-a", checkpoint("turn", "started", T0, "{}"))).await;
    let mut held = begin("charge");
    held.namespace = "team-a".into();
    sidecars[0].idempotency().begin(held).await.expect("Begin in team-a");

    let mut b = sidecars[1].client();
    let restored = b.restore(RestoreRequest { namespace: "team-b".into(), ..restore("turn") }).await.expect("Restore");
    assert!(restored.into_inner().checkpoints.is_empty());
    let listed = b.list_turns(ListTurnsRequest { namespace: "team-b".into(), ..Default::default() }).await;
    assert!(listed.expect("ListTurns").into_inner().turns.is_empty());
    let mut other = begin("charge");
    other.namespace = "team-b".into();
    let answer = sidecars[2].idempotency().begin(other).await.expect("Begin in team-b").into_inner();
    assert_eq!(answer.outcome(), BeginOutcome::Acquired, "the same key in another namespace is another record");
}

/// Six sidecars started at once on a fresh store: each of them gets past
/// the race to make the migration lock and the schema (directly, or through
/// a pooler, where the lock is a row), serves, and sees what the others wrote.
#[tokio::test]
async fn six_sidecars_starting_at_once_on_a_fresh_store_all_serve() {
    let store = TestStore::new().await;
    let spawns = (0..6).map(|i| SidecarProcess::builder(STEPWELL, &store).name(&format!("s{i}")).spawn());
    let sidecars = futures::future::join_all(spawns).await;
    for (i, sidecar) in sidecars.iter().enumerate() {
        let request = checkpoint("turn", &format!("step-{i}"), T0 + i as i64, "{}");
        assert_inserted(&mut sidecar.client(), request).await;
    }
    for sidecar in &sidecars {
        assert_eq!(restore_all(&mut sidecar.client(), restore("turn")).await.len(), sidecars.len());
    }
}
