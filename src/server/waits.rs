//! The tasks that keep waits moving beside the requests: the timer, which
//! settles the waits whose timer or expiry fell due, and the poll, which
//! reads again the waits this sidecar's Awaits wait for, so that a
//! settlement made through another sidecar (whose notification may be
//! lost, or which shares an SQLite file) wakes them within a second.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::clock::Clock;
use crate::domain::waits::{WaitDone, WaitStatus, WaitWrite};
use crate::observe::metrics::{Metrics, WaitSettledBy};
use crate::store::Handle;
use crate::store::writer::Writer;

/// Most waits one timer write settles; more due are settled by the next, at once.
const FIRE_BATCH_MAX: u32 = 1000;

/// The longest the timer sleeps: timers created through other sidecars of
/// the store are found within it.
const TIMER_SLEEP_MAX: Duration = Duration::from_secs(1);

/// The pause before firing again when waits are still due after a firing.
const FIRE_RETRY_PAUSE: Duration = Duration::from_millis(100);

/// How often the poll reads again the waits that Awaits wait for.
const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Settles the waits that fall due, forever: at once at start (everything
/// that fell due while no sidecar ran), then whenever the next due time
/// comes, looking again at least every `TIMER_SLEEP_MAX` and whenever this
/// sidecar creates a timed wait. Each settlement is a conditional update
/// of a PENDING wait through the writer, so of all the sidecars firing one
/// timer, one settles it; the writer wakes its Awaits.
pub(super) async fn timers(store: Handle, writer: Writer, clock: Clock, metrics: Arc<Metrics>) {
    loop {
        let mut until_due = next_due(&store, &clock).await;
        if until_due == Some(Duration::ZERO) {
            // Only a wait that is due costs a write: an idle store sees reads alone.
            fire_due(&writer, &clock, &metrics).await;
            until_due = next_due(&store, &clock).await;
        }
        let sleep = match until_due {
            // Still due after firing: the write failed, or more fell due; not a busy loop.
            Some(Duration::ZERO) => FIRE_RETRY_PAUSE,
            Some(until) => until,
            None => TIMER_SLEEP_MAX,
        };
        tokio::select! {
            () = tokio::time::sleep(sleep.min(TIMER_SLEEP_MAX)) => {}
            () = store.hub().timers_nudged() => {}
        }
    }
}

/// How long until the next pending wait falls due (zero if one is due
/// now); `None` when none is pending with a time, or the store cannot say.
async fn next_due(store: &Handle, clock: &Clock) -> Option<Duration> {
    let reads = store.reads().ok()?;
    match reads.next_due().await {
        Ok(due) => due.map(|due| Duration::from_nanos(due.saturating_sub(clock.now()).max(0) as u64)),
        Err(error) => {
            tracing::warn!(%error, "could not read when the next wait falls due; looking again soon");
            None
        }
    }
}

/// Settles every wait due now, a write of at most `FIRE_BATCH_MAX` at a
/// time, and counts each with how late it fired.
async fn fire_due(writer: &Writer, clock: &Clock, metrics: &Metrics) {
    loop {
        let now = clock.now();
        let fired = match writer.wait(WaitWrite::FireDue { now, limit: FIRE_BATCH_MAX }).await {
            Ok(Ok(WaitDone::Fired(fired))) => fired,
            Ok(_) => return,
            Err(error) => {
                tracing::warn!(%error, "could not settle the waits that fell due; trying again soon");
                return;
            }
        };
        for wait in &fired {
            let by = if wait.status == WaitStatus::Resolved { WaitSettledBy::Timer } else { WaitSettledBy::Expiry };
            metrics.wait_settled(by, now.saturating_sub(wait.due_at().unwrap_or(now)));
        }
        if fired.len() < FIRE_BATCH_MAX as usize {
            return;
        }
    }
}

/// Reads again, every `POLL_INTERVAL`, the waits this sidecar's Awaits wait
/// for, in one read, and wakes those found settled: the safety net under
/// the writer's wakes and the store's notifications, so a lost
/// notification costs latency, never an answer.
pub(super) async fn poll(store: Handle) {
    let mut interval = tokio::time::interval(POLL_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let keys = store.hub().keys();
        if keys.is_empty() {
            continue;
        }
        let Ok(reads) = store.reads() else { continue };
        match reads.settled_waits(&keys).await {
            Ok(settled) => {
                for wait in settled {
                    store.hub().wake(&wait.key.clone(), Some(Arc::new(wait)));
                }
            }
            Err(error) => tracing::warn!(%error, "could not read the waits Awaits wait for; trying again soon"),
        }
    }
}
