//! WaitService end to end, over real gRPC on a real store, one topic a
//! module: Signal before and after Await, races of Signals, naming by
//! handle, cancelling and listing (`signals`); Signals fenced by a lease
//! (`fencing`); timers and expiries, across
//! a restart (`timers`); each limit's refusal (`limits`); DeleteTurn taking
//! a turn's waits (`lifecycle`); 10,000 pending Awaits on one sidecar
//! (`scale`); and, on Postgres, Awaits and timers across three sidecars
//! sharing a store (`shared`). This module holds what they share: request
//! builders and the reading of a WAIT_SETTLED refusal.

mod fencing;
mod lifecycle;
mod limits;
mod postgres_only;
mod scale;
mod signals;
mod timers;

use std::time::Duration;

use prost::Message;
use stepwell::api::pb::{
    AwaitRequest, CreateWaitRequest, GetWaitRequest, SignalRequest, SignalResponse, Wait, WaitSettled, WaitStatus,
};
use stepwell::api::status::reason;
use stepwell_test_support::WaitClient;
use stepwell_test_support::admin::Scrape;
use stepwell_test_support::errors::assert_error;
use tonic::{Code, Status};

/// A CreateWait of `name` in `turn`, in the default namespace.
fn create(turn: &str, name: &str) -> CreateWaitRequest {
    CreateWaitRequest { turn_id: turn.to_owned(), name: name.to_owned(), ..Default::default() }
}

/// A Signal of `name` in `turn` with `payload`.
fn signal(turn: &str, name: &str, payload: &[u8]) -> SignalRequest {
    SignalRequest { turn_id: turn.to_owned(), name: name.to_owned(), payload: payload.to_vec(), ..Default::default() }
}

/// An Await of `name` in `turn` that waits at most `timeout`.
fn await_for(turn: &str, name: &str, timeout: Duration) -> AwaitRequest {
    AwaitRequest {
        turn_id: turn.to_owned(),
        name: name.to_owned(),
        timeout: Some(stepwell_test_support::requests::duration(timeout)),
        ..Default::default()
    }
}

/// The wait `name` of `turn`, read.
async fn get(client: &mut WaitClient, turn: &str, name: &str) -> Result<Wait, Status> {
    let request = GetWaitRequest { turn_id: turn.to_owned(), name: name.to_owned(), ..Default::default() };
    Ok(client.get_wait(request).await?.into_inner().wait.expect("a wait"))
}

/// Awaits until the wait is settled, asking again while it comes back
/// pending, for at most `WAIT_LIMIT`.
async fn await_settled(client: &mut WaitClient, turn: &str, name: &str) -> Wait {
    let deadline = tokio::time::Instant::now() + stepwell_test_support::WAIT_LIMIT;
    loop {
        let wait = client.r#await(await_for(turn, name, Duration::from_secs(5))).await.expect("Await answers");
        let wait = wait.into_inner().wait.expect("a wait");
        if wait.status() != WaitStatus::Pending {
            return wait;
        }
        assert!(tokio::time::Instant::now() < deadline, "the wait {turn}/{name} was not settled in time");
    }
}

/// A Signal's answer, which must be OK.
async fn signalled(client: &mut WaitClient, request: SignalRequest) -> SignalResponse {
    client.signal(request).await.expect("Signal answers OK").into_inner()
}

/// The settled wait an ALREADY_EXISTS, WAIT_SETTLED refusal carries.
fn settled_detail(status: &Status) -> WaitSettled {
    assert_error(status, Code::AlreadyExists, reason::WAIT_SETTLED);
    let details = tonic_types::Status::decode(status.details()).expect("the details are a google.rpc.Status");
    let any = details
        .details
        .iter()
        .find(|any| any.type_url == "type.googleapis.com/stepwell.v1.WaitSettled")
        .unwrap_or_else(|| panic!("a WaitSettled detail in {status:?}"));
    WaitSettled::decode(any.value.as_slice()).expect("a WaitSettled")
}

/// Polls the admin listener at `admin` until the gauge or counter `name`
/// (with `labels`) reaches `value`, for at most `WAIT_LIMIT`.
async fn until_metric(admin: &str, name: &str, labels: &[(&str, &str)], value: f64) {
    let deadline = tokio::time::Instant::now() + stepwell_test_support::WAIT_LIMIT;
    loop {
        let seen = Scrape::of(admin).await.value(name, labels);
        if seen == value {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} stayed at {seen}, not {value}");
        tokio::task::yield_now().await;
    }
}

/// Polls the admin listener at `admin` until the gauge `name` reaches
/// `value`, for at most `limit` (what many requests take to arrive on a
/// busy machine, far beyond `WAIT_LIMIT`).
async fn until_count(admin: &str, name: &str, value: f64, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = Scrape::of(admin).await.value(name, &[]);
        if seen == value {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{name} stayed at {seen}, not {value}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An in-process sidecar with an admin listener, configured further by
/// `configure`; answers it and the listener's address.
async fn with_admin(
    configure: impl FnOnce(&mut stepwell::config::sections::Config) + 'static,
) -> (stepwell_test_support::sidecar::Sidecar, String) {
    let admin = stepwell_test_support::admin::free_local_address();
    let address = admin.parse().expect("an address");
    let server = stepwell_test_support::sidecar::Sidecar::builder()
        .configure(move |config| {
            config.observability.admin_listen = Some(address);
            configure(config);
        })
        .start()
        .await;
    (server, admin)
}
