//! Timers and expiries: the store settles a wait by itself at its
//! resolve_at (RESOLVED, by "stepwell:timer") or its expire_at (EXPIRED, by
//! "stepwell:expiry"), whichever comes first, once; and a timer that fell
//! due while no sidecar ran fires when one starts. The tests move the
//! store's clock instead of sleeping.

use std::time::Duration;

use stepwell::api::pb::WaitStatus;
use stepwell::domain::clock::{Clock, system_now};
use stepwell_test_support::requests::ts;
use stepwell_test_support::sidecar::Sidecar;

use super::{await_settled, create, until_metric, with_admin};

const HOUR: i64 = 3_600_000_000_000;

#[tokio::test]
async fn a_wait_expires_at_its_expire_at() {
    let clock = Clock::system();
    let moved = clock.clone();
    let (server, admin) = with_admin(move |config| config.store.clock = moved).await;
    let mut client = server.waits();
    let mut request = create("t1", "w");
    request.expire_at = Some(ts(system_now() + HOUR));
    client.create_wait(request).await.expect("CreateWait");
    clock.advance(Duration::from_secs(2 * 3600));
    let wait = await_settled(&mut client, "t1", "w").await;
    assert_eq!(wait.status(), WaitStatus::Expired);
    assert_eq!(wait.settled_by, "stepwell:expiry");
    until_metric(&admin, "stepwell_wait_settlements_total", &[("by", "expiry")], 1.0).await;
}

#[tokio::test]
async fn a_timer_resolves_its_wait_once_and_its_later_expiry_finds_it_settled() {
    let clock = Clock::system();
    let moved = clock.clone();
    let (server, admin) = with_admin(move |config| config.store.clock = moved).await;
    let mut client = server.waits();
    let mut request = create("t1", "w");
    request.resolve_at = Some(ts(system_now() + HOUR));
    request.expire_at = Some(ts(system_now() + 2 * HOUR));
    client.create_wait(request).await.expect("CreateWait");
    clock.advance(Duration::from_secs(90 * 60));
    let wait = await_settled(&mut client, "t1", "w").await;
    assert_eq!((wait.status(), wait.settled_by.as_str()), (WaitStatus::Resolved, "stepwell:timer"));
    assert!(wait.payload.is_empty());
    until_metric(&admin, "stepwell_wait_settlements_total", &[("by", "timer")], 1.0).await;
    // Past the expiry too, a timer pass later, nothing settles it again.
    clock.advance(Duration::from_secs(3600));
    let mut other = create("t1", "later");
    other.resolve_at = Some(ts(system_now() + 2 * HOUR));
    client.create_wait(other).await.expect("CreateWait");
    let later = await_settled(&mut client, "t1", "later").await;
    assert_eq!(later.status(), WaitStatus::Resolved);
    until_metric(&admin, "stepwell_wait_settlements_total", &[("by", "timer")], 2.0).await;
    let scrape = stepwell_test_support::admin::Scrape::of(&admin).await;
    assert_eq!(scrape.value("stepwell_wait_settlements_total", &[("by", "expiry")]), 0.0);
    assert_eq!(super::get(&mut client, "t1", "w").await.expect("GetWait"), wait, "settled once");
}

#[tokio::test]
async fn a_timer_that_fell_due_while_no_sidecar_ran_fires_at_start_up() {
    let first = Sidecar::builder().start().await;
    let store = first.store().clone();
    let mut request = create("t1", "w");
    request.resolve_at = Some(ts(system_now() + HOUR));
    first.waits().create_wait(request).await.expect("CreateWait");
    first.stop().await.expect("the first sidecar stops");
    // The next sidecar starts two hours later, by the store's clock.
    let clock = Clock::system();
    clock.advance(Duration::from_secs(2 * 3600));
    let second = Sidecar::builder().store(&store).configure(move |config| config.store.clock = clock).start().await;
    let wait = await_settled(&mut second.waits(), "t1", "w").await;
    assert_eq!((wait.status(), wait.settled_by.as_str()), (WaitStatus::Resolved, "stepwell:timer"));
}
