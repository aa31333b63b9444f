//! The wait writers of a fault run, and the reading back of the run's
//! waits. Each wait writer creates waits of its own, retrying a CreateWait
//! whose outcome was indeterminate, as a client would. Two in five get a
//! durable timer 10 to 500 ms ahead, and half of those are also signalled
//! at a random moment, racing the timer. The rest wait for a Signal: half
//! are signalled at once by two Signals with different payloads, sent
//! together, and half stay pending for a while (up to two seconds, across
//! kills) before the same contended pair settles them; those still
//! deferred when the run stops stay pending. Every Signal is retried with
//! its own payload while its outcome is indeterminate. Beside each writer
//! an awaiter Awaits the writer's recent waits, so that Awaits are in
//! flight when the sidecar dies.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use stepwell::api::pb::wait_service_client::WaitServiceClient;
use stepwell::api::pb::{
    AwaitRequest, CreateWaitRequest, ListWaitsRequest, SignalRequest, Wait, WaitSettled, WaitStatus,
};
use stepwell::api::status::reason;
use stepwell::domain::clock::system_now;
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

use stepwell_test_support::requests::{duration, ts};
use stepwell_test_support::rng::Rng;

use crate::checker::{History, Outcome};
use crate::wait_checker::{SignalAnswer, WaitId};
use crate::workload::{BACKOFF, NAMESPACE, deadline};

/// Waits per turn: well under the sidecar's per-turn limit.
const WAITS_PER_TURN: u64 = 50;

/// The content type of every Signal, so that payloads alone tell them apart.
const CONTENT_TYPE: &str = "text/plain";

/// How many of its latest waits a writer offers its awaiter.
const RECENT: usize = 16;

/// The waits a writer created lately, which its awaiter Awaits.
type Recent = Arc<Mutex<VecDeque<WaitId>>>;

/// Starts wait writer `w` and its awaiter, each on a channel of its own.
pub fn start(
    w: usize,
    channels: (Channel, Channel),
    history: &Arc<History>,
    stop: &Arc<AtomicBool>,
    mut rng: Rng,
) -> [JoinHandle<()>; 2] {
    let recent = Recent::default();
    let awaiter_rng = Rng::new(rng.next_u64());
    let writer = Writer {
        w,
        client: WaitServiceClient::new(channels.0),
        history: history.clone(),
        stop: stop.clone(),
        rng,
        recent: recent.clone(),
        deferred: VecDeque::new(),
    };
    let awaiter = awaiter(WaitServiceClient::new(channels.1), history.clone(), stop.clone(), recent, awaiter_rng);
    [tokio::spawn(writer.run()), tokio::spawn(awaiter)]
}

struct Writer {
    w: usize,
    client: WaitServiceClient<Channel>,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    rng: Rng,
    recent: Recent,
    /// Pending waits to settle later, and when.
    deferred: VecDeque<(WaitId, Instant)>,
}

impl Writer {
    async fn run(mut self) {
        let mut n = 0;
        while !self.stop.load(Ordering::SeqCst) {
            self.settle_deferred().await;
            n += 1;
            let id = WaitId { turn: format!("v{}-{}", self.w, n / WAITS_PER_TURN), name: format!("n{n:06}") };
            let timer = self.rng.chance(40);
            if !self.create(&id, timer).await {
                continue;
            }
            {
                let mut recent = self.recent.lock().unwrap();
                recent.push_back(id.clone());
                if recent.len() > RECENT {
                    recent.pop_front();
                }
            }
            if timer {
                if self.rng.chance(50) {
                    // The race's schedule, not a synchronisation: the Signal
                    // lands before the timer fires or after it.
                    tokio::time::sleep(self.rng.millis(0, 500)).await;
                    self.signal(&id, 1).await;
                }
            } else if self.rng.chance(50) {
                self.contend(&id).await;
            } else {
                self.deferred.push_back((id, Instant::now() + self.rng.millis(100, 2000)));
            }
        }
    }

    /// Settles the deferred waits whose time has come.
    async fn settle_deferred(&mut self) {
        while let Some((id, due)) = self.deferred.front().cloned() {
            if due > Instant::now() || self.stop.load(Ordering::SeqCst) {
                return;
            }
            self.deferred.pop_front();
            self.contend(&id).await;
        }
    }

    /// Creates wait `id`, retrying while the outcome is indeterminate;
    /// whether a CreateWait was acknowledged.
    async fn create(&mut self, id: &WaitId, timer: bool) -> bool {
        let resolve_at = timer.then(|| ts(system_now() + self.rng.millis(10, 500).as_nanos() as i64));
        let request = CreateWaitRequest {
            namespace: NAMESPACE.to_owned(),
            turn_id: id.turn.clone(),
            name: id.name.clone(),
            metadata: format!(r#"{{"writer":{}}}"#, self.w).into_bytes(),
            resolve_at,
            ..Default::default()
        };
        loop {
            let start = Instant::now();
            let outcome = match self.client.create_wait(deadline(request.clone())).await {
                Ok(_) => Outcome::Ok,
                Err(status) => Outcome::of(&status),
            };
            self.history.wait_created(id, timer, start, outcome.clone());
            if outcome.is_ok() {
                return true;
            }
            let retry = matches!(outcome, Outcome::Indeterminate(_) | Outcome::Definite(Code::ResourceExhausted));
            if !retry || self.stop.load(Ordering::SeqCst) {
                return false;
            }
            tokio::time::sleep(BACKOFF).await;
        }
    }

    /// Signals wait `id` with two payloads at once: one settles it, the
    /// other hears the winner.
    async fn contend(&mut self, id: &WaitId) {
        let first = signal(self.client.clone(), &self.history, &self.stop, id, payload(id, 1));
        let second = signal(self.client.clone(), &self.history, &self.stop, id, payload(id, 2));
        tokio::join!(first, second);
    }

    async fn signal(&mut self, id: &WaitId, k: u8) {
        signal(self.client.clone(), &self.history, &self.stop, id, payload(id, k)).await;
    }
}

/// Signaller `k`'s payload for wait `id`: its own, never empty (the
/// timer's payload is).
fn payload(id: &WaitId, k: u8) -> Vec<u8> {
    format!("{}/{}#{k}", id.turn, id.name).into_bytes()
}

/// Signals wait `id` with `payload`, retrying with the same payload while
/// the outcome is indeterminate, as a client would.
async fn signal(
    mut client: WaitServiceClient<Channel>,
    history: &History,
    stop: &AtomicBool,
    id: &WaitId,
    payload: Vec<u8>,
) {
    let request = SignalRequest {
        namespace: NAMESPACE.to_owned(),
        turn_id: id.turn.clone(),
        name: id.name.clone(),
        payload: payload.clone(),
        content_type: CONTENT_TYPE.to_owned(),
        ..Default::default()
    };
    loop {
        let start = Instant::now();
        let answer = match client.signal(deadline(request.clone())).await {
            Ok(answer) => {
                let answer = answer.into_inner();
                SignalAnswer::Answered { settled: answer.settled, wait: answer.wait.expect("a Signal answers a wait") }
            }
            Err(status) => refusal(&status),
        };
        let retry = matches!(
            answer,
            SignalAnswer::Failed(Outcome::Indeterminate(_) | Outcome::Definite(Code::ResourceExhausted))
        );
        history.wait_signalled(id, &payload, start, answer);
        if !retry || stop.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(BACKOFF).await;
    }
}

/// A failed Signal's answer: the winner an ALREADY_EXISTS WAIT_SETTLED
/// refusal carries, or the outcome of any other error.
fn refusal(status: &Status) -> SignalAnswer {
    if status.code() != Code::AlreadyExists {
        return SignalAnswer::Failed(Outcome::of(status));
    }
    let reason_ok = status.get_details_error_info().is_some_and(|info| info.reason == reason::WAIT_SETTLED);
    let settled = tonic_types::Status::decode(status.details()).ok().and_then(|details| {
        let any = details.details.iter().find(|any| any.type_url == "type.googleapis.com/stepwell.v1.WaitSettled")?;
        WaitSettled::decode(any.value.as_slice()).ok()
    });
    match settled {
        Some(WaitSettled { wait: Some(wait), payload_omitted }) if reason_ok => {
            SignalAnswer::Refused { wait, payload_omitted }
        }
        _ => SignalAnswer::Failed(Outcome::Unexpected(format!(
            "ALREADY_EXISTS without reason WAIT_SETTLED and the settled wait: {status:?}"
        ))),
    }
}

/// Awaits the writer's recent waits, one at a time, each for a random 0.2
/// to 2 seconds, logging every wait that comes back settled.
async fn awaiter(
    mut client: WaitServiceClient<Channel>,
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    recent: Recent,
    mut rng: Rng,
) {
    while !stop.load(Ordering::SeqCst) {
        let picked = {
            let recent = recent.lock().unwrap();
            (!recent.is_empty()).then(|| recent[rng.below(recent.len())].clone())
        };
        let Some(id) = picked else {
            // Nothing created yet: the writer's first CreateWait is on its way.
            tokio::time::sleep(BACKOFF).await;
            continue;
        };
        let request = AwaitRequest {
            namespace: NAMESPACE.to_owned(),
            turn_id: id.turn.clone(),
            name: id.name.clone(),
            timeout: Some(duration(rng.millis(200, 2000))),
            ..Default::default()
        };
        let start = Instant::now();
        match client.r#await(deadline(request)).await {
            Ok(answer) => {
                let wait = answer.into_inner().wait.expect("an Await answers a wait");
                if wait.status() == WaitStatus::Pending {
                    history.await_unsettled(start, Outcome::Ok);
                } else {
                    history.wait_awaited(&id, start, Some(wait));
                }
            }
            Err(status) if status.code() == Code::NotFound => history.wait_awaited(&id, start, None),
            Err(status) => {
                history.await_unsettled(start, Outcome::of(&status));
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
}

/// How long the settle phase waits, at most, for the run's timers to fire:
/// far beyond the second a timer may take, for a busy machine.
const TIMERS_LIMIT: Duration = Duration::from_secs(60);

/// Polls until no wait of the run with a timer is pending (bounded by
/// `TIMERS_LIMIT`; the checker names any still pending), and answers how
/// long that took.
pub async fn until_timers_fired(channel: Channel) -> Duration {
    let started = Instant::now();
    let mut client = WaitServiceClient::new(channel);
    loop {
        let request = ListWaitsRequest {
            namespace: NAMESPACE.to_owned(),
            status: WaitStatus::Pending.into(),
            // Far enough ahead for every timer of the run.
            resolve_before: Some(ts(system_now() + 3_600_000_000_000)),
            page_size: 1,
            ..Default::default()
        };
        let page = client.list_waits(request).await.expect("ListWaits of the pending timers").into_inner();
        if page.waits.is_empty() || started.elapsed() > TIMERS_LIMIT {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every wait of the run's namespace, in (turn_id, name) order.
pub async fn read_waits(channel: Channel) -> Vec<Wait> {
    let mut client = WaitServiceClient::new(channel);
    let mut waits = Vec::new();
    let mut page_token = String::new();
    loop {
        let request =
            ListWaitsRequest { namespace: NAMESPACE.to_owned(), page_size: 10_000, page_token, ..Default::default() };
        let page = client.list_waits(request).await.expect("ListWaits of the run's namespace").into_inner();
        waits.extend(page.waits);
        if page.next_page_token.is_empty() {
            return waits;
        }
        page_token = page.next_page_token;
    }
}
