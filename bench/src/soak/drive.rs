//! How the soak sends its requests and watches the sidecar meanwhile.
//!
//! At a fixed rate, request `i` is due `i / rate` seconds after the start
//! and is sent then whatever the answers (open loop), unless `max_in_flight`
//! requests are outstanding, when it waits for one to finish; its latency
//! runs from its due time either way, so a sidecar that falls behind shows
//! as latency rather than as fewer requests. Without a rate (the peak
//! probe) each request is due as soon as a slot is free. The sampler reads
//! the sidecar every `every` until the load ends.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use super::mix::Mix;
use super::sample::{self, Sample};
use super::stats::{Kind, Outcome, Windows};

/// How long outstanding requests may take to finish once sending stops.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// What a drive sent.
pub struct Driven {
    pub windows: Windows,
    /// Requests sent, skipped ones (nothing to act on yet) included.
    pub sent: u64,
    pub seconds: f64,
}

impl Driven {
    /// Requests answered successfully per second.
    pub fn throughput(&self, run: Duration) -> f64 {
        let ok: u64 = self.windows.stats(run).iter().map(|w| w.requests() - w.errors()).sum();
        ok as f64 / self.seconds.max(1e-9)
    }
}

/// Sends `mix`'s requests for `duration`, at `rate` per second or as fast
/// as `max_in_flight` allows, recording them in windows of `window`.
pub async fn drive(
    mix: Arc<Mix>,
    rate: Option<f64>,
    duration: Duration,
    max_in_flight: usize,
    window: Duration,
) -> Driven {
    let windows = Arc::new(Mutex::new(Windows::new(window)));
    let slots = Arc::new(Semaphore::new(max_in_flight));
    let start = Instant::now();
    let end = start + duration;
    let mut sent = 0;
    for i in 0.. {
        let due = match rate {
            Some(rate) => start + Duration::from_secs_f64(i as f64 / rate),
            None => Instant::now(),
        };
        if due >= end {
            break;
        }
        tokio::time::sleep_until(due.into()).await;
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let due = if rate.is_some() { due } else { Instant::now() };
        let (kind, request, windows) = (Mix::kind(i), mix.request(i), windows.clone());
        tokio::spawn(async move {
            let outcome = request.await;
            let took = due.elapsed();
            windows.lock().expect("not poisoned").record(kind, due - start, took, outcome);
            drop(slot);
        });
        sent += 1;
    }
    let drained = tokio::time::timeout(DRAIN_LIMIT, slots.acquire_many(max_in_flight as u32)).await;
    let seconds = start.elapsed().as_secs_f64().min(duration.as_secs_f64());
    let mut windows = std::mem::replace(&mut *windows.lock().expect("not poisoned"), Windows::new(window));
    if drained.is_err() {
        let why = format!("requests still outstanding {DRAIN_LIMIT:?} after sending stopped");
        windows.record(Kind::Checkpoint, duration, DRAIN_LIMIT, Outcome::Failed(why));
    }
    Driven { windows, sent, seconds }
}

/// Where the sampler looks.
#[derive(Clone)]
pub struct Watched {
    pub pid: u32,
    pub admin: Option<String>,
    pub sqlite: Option<PathBuf>,
    pub postgres: Option<String>,
}

/// Readings of `watched` every `every` until `stop` is set; Postgres
/// tables every `pg_every`th reading. Failed readings are kept as problems.
pub async fn sample(watched: Watched, every: Duration, pg_every: u32, stop: Arc<tokio::sync::Notify>) -> Sampled {
    let start = Instant::now();
    let mut sampled = Sampled::default();
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for n in 0u32.. {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stop.notified() => break,
        }
        match read(&watched, start, n % pg_every.max(1) == 0).await {
            Ok(reading) => sampled.samples.push(reading),
            Err(why) => sampled.problems.push(format!("at {:.0} s: {why}", start.elapsed().as_secs_f64())),
        }
    }
    sampled
}

#[derive(Default)]
pub struct Sampled {
    pub samples: Vec<Sample>,
    pub problems: Vec<String>,
}

async fn read(watched: &Watched, start: Instant, with_tables: bool) -> Result<Sample, String> {
    let t_s = start.elapsed().as_secs_f64();
    let (rss_kib, fds) = sample::process(watched.pid)?;
    let metrics = match &watched.admin {
        Some(admin) => sample::metrics(admin).await?,
        None => Default::default(),
    };
    let pg_tables = match (&watched.postgres, with_tables) {
        (Some(url), true) => Some(sample::pg_tables(url).await?),
        _ => None,
    };
    let wal_bytes = watched.sqlite.as_deref().map(sample::wal_bytes);
    Ok(Sample { t_s, rss_kib, fds, load1: sample::load1(), wal_bytes, metrics, pg_tables })
}
