//! Ambiguous commits: the sidecar commits, and the reply is lost on the way
//! back (the `LossyProxy` closes the connection instead of forwarding it).
//! The client hears an indeterminate error; its retry with the same tuple
//! gets OK with `inserted=false`, and its retry of the same key gets
//! COMPLETED (and the repeated Complete OK), and the store holds exactly one
//! row. Then the same fault at random under the full workload, for the
//! checker.

use std::sync::Arc;
use std::time::Instant;

use serde_json::json;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::{BeginOutcome, BeginRequest, CheckpointRequest, GetRequest, RecordState, RestoreRequest};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, complete, restore_all, ts};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;
use crate::checker::{History, Outcome};
use crate::profile::{Profile, fault_rng};
use crate::proxy::LossyProxy;
use crate::workload::{NAMESPACE, Workload, settle_and_assert_clean};

fn assert_indeterminate(status: &tonic::Status, what: &str) {
    assert!(
        matches!(Outcome::of(status), Outcome::Indeterminate(_)),
        "{what}: a lost reply is indeterminate: {status:?}"
    );
}

/// Retries a call as a client does while its outcome is indeterminate (the
/// first retry may still meet the cut connection), asserting that every
/// failure is indeterminate, and returns the answer.
async fn retried_asserting_indeterminate<T, F: Future<Output = Result<tonic::Response<T>, tonic::Status>>>(
    what: &str,
    mut call: impl FnMut() -> F,
) -> T {
    for _ in 0..10 {
        match call().await {
            Ok(response) => return response.into_inner(),
            Err(status) => assert_indeterminate(&status, what),
        }
    }
    panic!("{what}: still no answer after 10 retries")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_settled_by_the_retry_and_stored_once() {
    let profile = Profile::from_env();
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).name("ambiguous").spawn().await;
    let proxy = LossyProxy::start(server.socket_path()).await;
    let mut checkpoints = CheckpointServiceClient::new(proxy.channel());
    let mut operations = IdempotencyServiceClient::new(proxy.channel());
    let mut direct = server.client();

    for round in 0..profile.ambiguous_rounds {
        let turn = format!("ambiguous-{round}");
        let request = CheckpointRequest {
            namespace: NAMESPACE.to_owned(),
            turn_id: turn.clone(),
            phase: "charged".to_owned(),
            timestamp: Some(ts(T0 + round as i64)),
            state: format!(r#"{{"round":{round}}}"#).into_bytes(),
            ..Default::default()
        };
        proxy.cut_next_reply();
        let lost = checkpoints.checkpoint(request.clone()).await.expect_err("the reply is lost");
        assert_indeterminate(&lost, "Checkpoint");
        let retry = retried_asserting_indeterminate("retried Checkpoint", || {
            let (mut client, request) = (checkpoints.clone(), request.clone());
            async move { client.checkpoint(request).await }
        })
        .await;
        assert!(!retry.inserted, "round {round}: the lost reply's write was committed; the retry is a duplicate");
        let rows = restore_all(
            &mut direct,
            RestoreRequest { namespace: NAMESPACE.to_owned(), turn_id: turn, ..Default::default() },
        )
        .await;
        assert_eq!(rows.len(), 1, "round {round}: exactly one row");
        assert_eq!(rows[0].state, request.state, "round {round}: stored byte for byte");

        let key = format!("ambiguous-{round}");
        let begin = BeginRequest { namespace: NAMESPACE.to_owned(), key: key.clone(), ..Default::default() };
        let acquired = operations.begin(begin.clone()).await.expect("Begin").into_inner();
        assert_eq!(acquired.outcome(), BeginOutcome::Acquired);
        let result = format!("receipt-{round}").into_bytes();
        let mut finish = complete(&key, acquired.lease_token, &result);
        finish.namespace = NAMESPACE.to_owned();
        proxy.cut_next_reply();
        let lost = operations.complete(finish.clone()).await.expect_err("the reply is lost");
        assert_indeterminate(&lost, "Complete");
        let again = retried_asserting_indeterminate("retried Begin", || {
            let (mut client, begin) = (operations.clone(), begin.clone());
            async move { client.begin(begin).await }
        })
        .await;
        assert_eq!(again.outcome(), BeginOutcome::Completed, "round {round}: the lost Complete was committed");
        assert_eq!(again.result, result, "round {round}: with its result");
        retried_asserting_indeterminate("retried Complete", || {
            let (mut client, finish) = (operations.clone(), finish.clone());
            async move { client.complete(finish).await }
        })
        .await;
        let record = server
            .idempotency()
            .get(GetRequest { namespace: NAMESPACE.to_owned(), key })
            .await
            .expect("Get")
            .into_inner();
        assert_eq!((record.state(), record.result), (RecordState::Completed, result));
    }
    assert_eq!(proxy.cuts_made(), 2 * profile.ambiguous_rounds, "every round lost its replies");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_lost_at_random_under_load_lose_and_duplicate_nothing() {
    let profile = Profile::from_env();
    let mut rng = fault_rng();
    let seed = rng.seed();
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).name("lossy").spawn().await;
    let proxy = LossyProxy::start(server.socket_path()).await;
    let history = Arc::new(History::default());
    let workload = Workload::start(profile.writers, seed, &history, || proxy.channel());

    let cuts = profile.ambiguous_rounds * 5;
    for made in 1..=cuts {
        // The fault schedule: how long replies flow between two losses.
        tokio::time::sleep(rng.millis(10, 100)).await;
        let asked = Instant::now();
        proxy.cut_next_reply();
        proxy.cuts_reach(made).await;
        history.window(asked, Instant::now());
    }
    workload.stop().await;

    let figures = json!({ "replies_lost": proxy.cuts_made() });
    settle_and_assert_clean("lost replies", seed, server.channel(), &history, figures).await;
}
