//! Signal and Await: a Signal before its Await answers the Await at once,
//! one after it wakes it; of concurrent Signals one wins and every other
//! sees the winner; CreateWait is idempotent and names an unnamed wait;
//! handles stand for (turn_id, name); CancelWait; ListWaits.

use std::time::Duration;

use futures::future::join_all;
use stepwell::api::pb::{CancelWaitRequest, GetWaitRequest, ListWaitsRequest, SignalRequest, WaitStatus};
use stepwell::domain::waits::WaitKey;
use stepwell_test_support::errors::assert_invalid;
use stepwell_test_support::sidecar::Sidecar;
use tonic::Code;

use super::{await_for, await_settled, create, get, settled_detail, signal, signalled, until_metric, with_admin};

#[tokio::test]
async fn a_signal_before_the_await_answers_it_at_once() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    client.create_wait(create("t1", "approve")).await.expect("CreateWait");
    let answer = signalled(&mut client, signal("t1", "approve", b"yes")).await;
    assert!(answer.settled);
    let wait = client.r#await(await_for("t1", "approve", Duration::from_secs(30))).await.expect("Await");
    let wait = wait.into_inner().wait.expect("a wait");
    assert_eq!(wait.status(), WaitStatus::Resolved);
    assert_eq!(wait.payload, b"yes");
    assert!(wait.settled_at.is_some());
}

#[tokio::test]
async fn a_signal_after_the_await_wakes_it() {
    let (server, admin) = with_admin(|_| {}).await;
    let mut client = server.waits();
    client.create_wait(create("t1", "approve")).await.expect("CreateWait");
    let mut waiting = server.waits();
    let awaited = tokio::spawn(async move {
        waiting.r#await(await_for("t1", "approve", Duration::from_secs(120))).await.expect("Await").into_inner()
    });
    // The Await is pending (in the hub) before the Signal is sent.
    until_metric(&admin, "stepwell_awaits_pending", &[], 1.0).await;
    assert!(signalled(&mut client, signal("t1", "approve", b"go")).await.settled);
    let wait = awaited.await.expect("the Await task").wait.expect("a wait");
    assert_eq!((wait.status(), wait.payload.as_slice()), (WaitStatus::Resolved, &b"go"[..]));
    until_metric(&admin, "stepwell_awaits_pending", &[], 0.0).await;
}

#[tokio::test]
async fn a_signal_to_a_wait_not_created_yet_is_kept_and_creating_it_then_finds_it_resolved() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    assert!(signalled(&mut client, signal("t1", "early", b"first")).await.settled);
    let created = client.create_wait(create("t1", "early")).await.expect("CreateWait").into_inner();
    assert!(!created.created);
    let wait = created.wait.expect("a wait");
    assert_eq!((wait.status(), wait.payload.as_slice()), (WaitStatus::Resolved, &b"first"[..]));
}

#[tokio::test]
async fn of_a_hundred_concurrent_signals_one_wins_and_every_other_sees_the_winner() {
    let server = Sidecar::builder().start().await;
    server.waits().create_wait(create("t1", "race")).await.expect("CreateWait");
    let signals = (0..100).map(|i| {
        let mut client = server.waits();
        async move { client.signal(signal("t1", "race", format!("payload {i}").as_bytes())).await }
    });
    let answers = join_all(signals).await;
    let winners: Vec<_> = answers.iter().filter_map(|a| a.as_ref().ok()).filter(|a| a.get_ref().settled).collect();
    assert_eq!(winners.len(), 1, "exactly one Signal settles the wait");
    let winner = winners[0].get_ref().wait.clone().expect("a wait").payload;
    for answer in &answers {
        match answer {
            Ok(ok) => assert!(ok.get_ref().settled, "only the winner is OK (payloads differ)"),
            Err(status) => {
                let detail = settled_detail(status);
                assert!(!detail.payload_omitted);
                assert_eq!(detail.wait.expect("the settled wait").payload, winner, "a loser sees the winner");
            }
        }
    }
    let stored = super::get(&mut server.waits(), "t1", "race").await.expect("GetWait");
    assert_eq!(stored.payload, winner);
}

#[tokio::test]
async fn repeating_the_winning_signal_is_ok_and_settles_nothing() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    assert!(signalled(&mut client, signal("t1", "w", b"same")).await.settled);
    let again = signalled(&mut client, signal("t1", "w", b"same")).await;
    assert!(!again.settled);
    let other = SignalRequest { content_type: "text/plain".into(), ..signal("t1", "w", b"same") };
    let refused = client.signal(other).await.expect_err("another content type is another settlement");
    assert_eq!(settled_detail(&refused).wait.expect("a wait").payload, b"same");
}

#[tokio::test]
async fn create_wait_is_idempotent_and_the_first_creation_stands() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    let mut first = create("t1", "w");
    first.metadata = br#"{"step":1}"#.to_vec();
    let created = client.create_wait(first).await.expect("CreateWait").into_inner();
    assert!(created.created);
    let mut second = create("t1", "w");
    second.metadata = br#"{"step":2}"#.to_vec();
    let again = client.create_wait(second).await.expect("CreateWait again").into_inner();
    assert!(!again.created);
    let wait = again.wait.expect("a wait");
    assert_eq!(wait.metadata, br#"{"step":1}"#);
    assert_eq!(wait.status(), WaitStatus::Pending);
    assert_eq!(wait, created.wait.expect("a wait"));
}

#[tokio::test]
async fn an_unnamed_wait_gets_a_uuid_v7_and_its_handle_names_it_everywhere() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    let wait = client.create_wait(create("t1", "")).await.expect("CreateWait").into_inner().wait.expect("a wait");
    let uuid = uuid::Uuid::parse_str(&wait.name).expect("the name is a UUID");
    assert_eq!(uuid.get_version_num(), 7, "{}", wait.name);
    let handle = wait.handle.clone();
    assert!(!handle.is_empty());
    let by_handle = GetWaitRequest { handle: handle.clone(), ..Default::default() };
    assert_eq!(client.get_wait(by_handle).await.expect("GetWait by handle").into_inner().wait, Some(wait.clone()));
    let signal = SignalRequest { handle: handle.clone(), payload: b"ok".to_vec(), ..Default::default() };
    assert!(signalled(&mut client, signal).await.settled);
    let mut by_handle = await_for("", "", Duration::from_secs(30));
    by_handle.handle = handle;
    let awaited = client.r#await(by_handle).await.expect("Await by handle").into_inner().wait.expect("a wait");
    assert_eq!((awaited.name, awaited.payload), (wait.name, b"ok".to_vec()));
}

#[tokio::test]
async fn a_handle_with_a_turn_or_a_name_is_invalid_and_so_is_a_made_up_handle() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    let wait = client.create_wait(create("t1", "w")).await.expect("CreateWait").into_inner().wait.expect("a wait");
    let with_turn = SignalRequest { handle: wait.handle.clone(), turn_id: "t1".into(), ..Default::default() };
    assert_invalid(&client.signal(with_turn).await.expect_err("refused"), "turn_id", "FIELD_MALFORMED");
    let with_name = GetWaitRequest { handle: wait.handle.clone(), name: "w".into(), ..Default::default() };
    assert_invalid(&client.get_wait(with_name).await.expect_err("refused"), "name", "FIELD_MALFORMED");
    let other_namespace =
        GetWaitRequest { handle: wait.handle.clone(), namespace: "other".into(), ..Default::default() };
    assert_invalid(&client.get_wait(other_namespace).await.expect_err("refused"), "namespace", "FIELD_MALFORMED");
    let made_up = GetWaitRequest { handle: "wt1_nonsense!".into(), ..Default::default() };
    assert_invalid(&client.get_wait(made_up).await.expect_err("refused"), "handle", "FIELD_MALFORMED");
    // A well-formed handle that names a namespace no request could is a
    // malformed handle too, not a malformed namespace.
    let key = WaitKey { namespace: "Not Valid".into(), turn_id: "t1".into(), name: "w".into() };
    let bad_namespace = GetWaitRequest { handle: key.handle(), ..Default::default() };
    assert_invalid(&client.get_wait(bad_namespace).await.expect_err("refused"), "handle", "FIELD_MALFORMED");
    let neither = GetWaitRequest::default();
    assert_invalid(&client.get_wait(neither).await.expect_err("refused"), "turn_id", "FIELD_REQUIRED");
}

#[tokio::test]
async fn an_unknown_wait_is_not_found_to_get_and_await() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    let status = get(&mut client, "t1", "nobody").await.expect_err("no such wait");
    stepwell_test_support::errors::assert_error(&status, Code::NotFound, "WAIT_NOT_FOUND");
    let status = client.r#await(await_for("t1", "nobody", Duration::from_secs(1))).await.expect_err("no such wait");
    stepwell_test_support::errors::assert_error(&status, Code::NotFound, "WAIT_NOT_FOUND");
}

#[tokio::test]
async fn an_await_answers_the_wait_still_pending_when_its_timeout_passes() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    client.create_wait(create("t1", "w")).await.expect("CreateWait");
    let wait = client.r#await(await_for("t1", "w", Duration::from_millis(50))).await.expect("Await");
    assert_eq!(wait.into_inner().wait.expect("a wait").status(), WaitStatus::Pending);
}

#[tokio::test]
async fn cancelling_settles_the_wait_once_and_a_signal_after_it_sees_the_cancellation() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    client.create_wait(create("t1", "w")).await.expect("CreateWait");
    let cancel = || CancelWaitRequest { turn_id: "t1".into(), name: "w".into(), ..Default::default() };
    let first = client.cancel_wait(cancel()).await.expect("CancelWait").into_inner();
    assert!(first.cancelled);
    assert_eq!(first.wait.expect("a wait").status(), WaitStatus::Cancelled);
    assert!(!client.cancel_wait(cancel()).await.expect("CancelWait again").into_inner().cancelled);
    let refused = client.signal(signal("t1", "w", b"late")).await.expect_err("settled already");
    assert_eq!(settled_detail(&refused).wait.expect("a wait").status(), WaitStatus::Cancelled);
    assert_eq!(await_settled(&mut client, "t1", "w").await.status(), WaitStatus::Cancelled);
    // Cancelling a wait not created yet creates it cancelled.
    let absent = CancelWaitRequest { turn_id: "t1".into(), name: "absent".into(), ..Default::default() };
    assert!(client.cancel_wait(absent).await.expect("CancelWait").into_inner().cancelled);
    assert_eq!(get(&mut client, "t1", "absent").await.expect("GetWait").status(), WaitStatus::Cancelled);
}

#[tokio::test]
async fn list_waits_pages_in_turn_and_name_order_and_filters() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    for (turn, name) in [("a", "2"), ("a", "1"), ("b", "1"), ("c", "9")] {
        client.create_wait(create(turn, name)).await.expect("CreateWait");
    }
    signalled(&mut client, signal("b", "1", b"x")).await;
    let (mut seen, mut token) = (Vec::new(), String::new());
    loop {
        let page = ListWaitsRequest { page_size: 3, page_token: token, ..Default::default() };
        let page = client.list_waits(page).await.expect("ListWaits").into_inner();
        seen.extend(page.waits.into_iter().map(|w| format!("{}/{}", w.turn_id, w.name)));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(seen, ["a/1", "a/2", "b/1", "c/9"]);
    let pending = ListWaitsRequest { status: WaitStatus::Pending as i32, ..Default::default() };
    let pending = client.list_waits(pending).await.expect("ListWaits").into_inner().waits;
    assert_eq!(pending.len(), 3);
    let of_a = ListWaitsRequest { turn_id: "a".into(), ..Default::default() };
    assert_eq!(client.list_waits(of_a).await.expect("ListWaits").into_inner().waits.len(), 2);
    let mut timed = create("d", "timer");
    timed.resolve_at = Some(stepwell_test_support::requests::ts(stepwell_test_support::requests::T0));
    client.create_wait(timed).await.expect("CreateWait");
    let before = |nanos: i64| ListWaitsRequest {
        resolve_before: Some(stepwell_test_support::requests::ts(nanos)),
        ..Default::default()
    };
    let due = client.list_waits(before(stepwell_test_support::requests::T0 + 1)).await.expect("ListWaits");
    let due: Vec<String> = due.into_inner().waits.into_iter().map(|w| format!("{}/{}", w.turn_id, w.name)).collect();
    assert_eq!(due, ["d/timer"], "only the waits whose timer is before resolve_before");
    let none = client.list_waits(before(stepwell_test_support::requests::T0)).await.expect("ListWaits");
    assert!(none.into_inner().waits.is_empty());
    let bad = ListWaitsRequest { page_token: "nope".into(), ..Default::default() };
    assert_invalid(&client.list_waits(bad).await.expect_err("refused"), "page_token", "INVALID_PAGE_TOKEN");
}

#[tokio::test]
async fn a_refusal_leaves_out_a_winning_payload_over_4_kib_and_says_so() {
    let server = Sidecar::builder().start().await;
    let mut client = server.waits();
    let large = vec![b'x'; 5000];
    let won = signalled(&mut client, signal("t1", "w", &large)).await;
    assert_eq!(won.wait.expect("a wait").settled_by, "", "no principal without authentication");
    let refused = client.signal(signal("t1", "w", b"other")).await.expect_err("settled already");
    let detail = settled_detail(&refused);
    assert!(detail.payload_omitted);
    let wait = detail.wait.expect("the settled wait");
    assert!(wait.payload.is_empty());
    assert_eq!(wait.status(), WaitStatus::Resolved);
    assert_eq!(get(&mut client, "t1", "w").await.expect("GetWait reads it").payload, large);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signal_racing_the_creation_of_its_wait_settles_it() {
    let store = stepwell_test_support::backend::TestStore::new().await;
    let first = Sidecar::builder().store(&store).start().await;
    // On Postgres a second sidecar shares the store: its writer commits
    // beside the first's, as another replica's would.
    let second = match store.database() {
        stepwell::store::Database::Postgres { .. } => Some(Sidecar::builder().store(&store).start().await),
        stepwell::store::Database::Sqlite { .. } => None,
    };
    let (mut creator, mut signaller) = (first.waits(), second.as_ref().unwrap_or(&first).waits());
    for i in 0..200 {
        let name = format!("w{i}");
        let (created, signalled) = futures::join!(
            creator.create_wait(create("t1", &name)),
            signaller.signal(signal("t1", &name, b"approved"))
        );
        created.expect("CreateWait");
        let answer = signalled.unwrap_or_else(|status| panic!("the Signal of {name} was refused: {status:?}"));
        assert!(answer.get_ref().settled, "the only Signal of {name} settles it");
        let wait = super::get(&mut creator, "t1", &name).await.expect("GetWait");
        assert_eq!((wait.status(), wait.payload.as_slice()), (WaitStatus::Resolved, &b"approved"[..]), "{name}");
    }
}
