//! The load generator: drives a `Workload` closed-loop (N callers, each
//! sending its next call when the previous one answered) or open-loop at a
//! fixed rate, and records latencies in an HDR histogram.
//!
//! A run has a warm-up, then a measurement window. Latency is recorded for
//! calls that started inside the window (for a fixed rate: whose *intended*
//! send time fell inside it, so a server that falls behind shows as latency
//! instead of fewer samples, avoiding coordinated omission); throughput
//! counts calls that completed inside it. CPU meters are read when the
//! window opens and closes. Errors and failed checks are counted over the
//! whole run, warm-up included; a caller stops at its first error.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use hdrhistogram::Histogram;
use tokio::sync::Semaphore;

use crate::meter::{Meters, Usage};
use crate::shape::{self, Callers};

/// Why a call did not succeed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The call failed (an RPC status, a database error).
    Error(String),
    /// The call answered, but not what the workload requires.
    Check(String),
}

pub type CallResult = Result<(), Failure>;

/// Something to call: call `k` of caller `caller`. Callers number from 0,
/// and each caller's calls from 0, so a workload can derive every request
/// from the pair.
pub trait Workload: Send + Sync + 'static {
    fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult>;
}

/// How calls are paced.
#[derive(Debug, Clone, Copy)]
pub enum Pace {
    /// `callers` callers, each with one call in flight.
    Closed { callers: usize },
    /// `rate` calls per second whatever the answers, spread over `lanes`
    /// callers (call i is call i / lanes of caller i % lanes), with at most
    /// `max_in_flight` outstanding.
    Fixed { rate: f64, lanes: usize, max_in_flight: usize },
}

/// Warm-up, then measurement.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub warmup: Duration,
    pub measure: Duration,
}

/// Latency in microseconds, up to an hour, at 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds")
}

/// What a run measured.
#[derive(Debug)]
pub struct Measured {
    /// Latencies (µs) of calls started in the window.
    pub latency: Histogram<u64>,
    /// Calls that completed successfully inside the window.
    pub completed: u64,
    pub errors: u64,
    pub check_failures: u64,
    /// The first error or failed check, for the report.
    pub first_problem: Option<String>,
    pub usage: Usage,
    /// Fixed rate only: how late the sender was against the schedule (µs).
    pub send_lag: Option<Histogram<u64>>,
}

impl Measured {
    /// Nothing measured (a point that could not run).
    pub fn empty() -> Measured {
        Measured {
            latency: new_histogram(),
            completed: 0,
            errors: 0,
            check_failures: 0,
            first_problem: None,
            usage: Usage::default(),
            send_lag: None,
        }
    }

    pub fn throughput(&self) -> f64 {
        self.completed as f64 / self.usage.seconds.max(1e-9)
    }
}

/// The running tally of one or all callers.
struct Tally {
    latency: Histogram<u64>,
    completed: u64,
    errors: u64,
    check_failures: u64,
    first_problem: Option<String>,
}

impl Tally {
    fn new() -> Tally {
        Tally { latency: new_histogram(), completed: 0, errors: 0, check_failures: 0, first_problem: None }
    }

    /// Records one call that was due at `start` and answered at `end`.
    fn record(&mut self, result: &CallResult, start: Instant, end: Instant, window: (Instant, Instant)) {
        let (from, until) = window;
        match result {
            Ok(()) => {
                if start >= from && start < until {
                    self.latency.saturating_record(end.duration_since(start).as_micros() as u64);
                }
                if end >= from && end < until {
                    self.completed += 1;
                }
            }
            Err(failure) => {
                let text = match failure {
                    Failure::Error(text) => {
                        self.errors += 1;
                        format!("error: {text}")
                    }
                    Failure::Check(text) => {
                        self.check_failures += 1;
                        format!("check failed: {text}")
                    }
                };
                self.first_problem.get_or_insert(text);
            }
        }
    }

    fn merge(&mut self, other: Tally) {
        self.latency.add(&other.latency).expect("histograms of one shape");
        self.completed += other.completed;
        self.errors += other.errors;
        self.check_failures += other.check_failures;
        if self.first_problem.is_none() {
            self.first_problem = other.first_problem;
        }
    }
}

/// How long in-flight calls may take to finish once the window has closed.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// Runs `workload` at `pace` through `window`, metering CPU over the window.
pub async fn drive(workload: Arc<dyn Workload>, pace: Pace, window: Window, meters: Meters) -> Measured {
    let start = Instant::now();
    let from = start + window.warmup;
    let until = from + window.measure;
    let load = match pace {
        Pace::Closed { callers } => tokio::spawn(closed_loop(workload, callers, (from, until))),
        Pace::Fixed { rate, lanes, max_in_flight } => {
            tokio::spawn(fixed_rate(workload, rate, lanes, max_in_flight, start, (from, until)))
        }
    };
    tokio::time::sleep_until(from.into()).await;
    let opened = meters.snapshot();
    tokio::time::sleep_until(until.into()).await;
    let usage = opened.until(&meters.snapshot());
    let (tally, send_lag) = match tokio::time::timeout(DRAIN_LIMIT, load).await {
        Ok(Ok(done)) => done,
        Ok(Err(panic)) => std::panic::resume_unwind(panic.into_panic()),
        Err(_) => {
            let mut tally = Tally::new();
            tally.errors += 1;
            tally.first_problem = Some(format!("calls still in flight {DRAIN_LIMIT:?} after the window closed"));
            (tally, None)
        }
    };
    Measured {
        latency: tally.latency,
        completed: tally.completed,
        errors: tally.errors,
        check_failures: tally.check_failures,
        first_problem: tally.first_problem,
        usage,
        send_lag,
    }
}

async fn closed_loop(
    workload: Arc<dyn Workload>,
    callers: usize,
    window: (Instant, Instant),
) -> (Tally, Option<Histogram<u64>>) {
    let mut total = Tally::new();
    match shape::get().callers {
        Callers::Spawned => {
            let tasks: Vec<_> =
                (0..callers).map(|caller| tokio::spawn(one_caller(workload.clone(), caller, window))).collect();
            for task in tasks {
                total.merge(task.await.expect("a caller panicked"));
            }
        }
        Callers::OneTask => {
            let all = (0..callers).map(|caller| one_caller(workload.clone(), caller, window));
            for tally in futures::future::join_all(all).await {
                total.merge(tally);
            }
        }
    }
    (total, None)
}

/// One closed-loop caller: its next call as soon as the last one answered.
async fn one_caller(workload: Arc<dyn Workload>, caller: usize, window: (Instant, Instant)) -> Tally {
    let mut tally = Tally::new();
    for k in 0.. {
        let sent = Instant::now();
        if sent >= window.1 {
            break;
        }
        let result = workload.call(caller, k).await;
        tally.record(&result, sent, Instant::now(), window);
        if result.is_err() {
            break;
        }
    }
    tally
}

/// Sends call i at `start + i / rate` from a dedicated thread (a thread's
/// sleep is far more punctual than the runtime's millisecond timer), and
/// measures each call from that intended time.
async fn fixed_rate(
    workload: Arc<dyn Workload>,
    rate: f64,
    lanes: usize,
    max_in_flight: usize,
    start: Instant,
    window: (Instant, Instant),
) -> (Tally, Option<Histogram<u64>>) {
    let runtime = tokio::runtime::Handle::current();
    let tally = Arc::new(Mutex::new(Tally::new()));
    let in_flight = Arc::new(Semaphore::new(max_in_flight));
    let sender = {
        let (tally, in_flight) = (tally.clone(), in_flight.clone());
        std::thread::spawn(move || {
            let mut lag = new_histogram();
            let lanes = lanes.max(1) as u64;
            for i in 0u64.. {
                let intended = start + Duration::from_secs_f64(i as f64 / rate);
                if intended >= window.1 {
                    break;
                }
                if let Some(wait) = intended.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                // A full window of outstanding calls holds the sender back;
                // the delay still counts, as every call is timed from `intended`.
                let Ok(permit) = runtime.block_on(in_flight.clone().acquire_owned()) else { break };
                lag.saturating_record(Instant::now().saturating_duration_since(intended).as_micros() as u64);
                let call = workload.call((i % lanes) as usize, i / lanes);
                let tally = tally.clone();
                runtime.spawn(async move {
                    let result = call.await;
                    tally.lock().expect("tally lock").record(&result, intended, Instant::now(), window);
                    drop(permit);
                });
            }
            lag
        })
    };
    let lag = tokio::task::spawn_blocking(move || sender.join().expect("the sender panicked"))
        .await
        .expect("the sender thread joins");
    // Every permit back means every call answered.
    let all = u32::try_from(max_in_flight).expect("max_in_flight fits u32");
    let _drained = in_flight.acquire_many(all).await.expect("the semaphore stays open");
    let tally = std::mem::replace(&mut *tally.lock().expect("tally lock"), Tally::new());
    (tally, Some(lag))
}

/// Runs calls 0..`calls` of each of `callers` callers to completion (no
/// timing), e.g. to fill a store; answers the first failure.
pub async fn run_all(workload: Arc<dyn Workload>, callers: usize, calls: u64) -> Result<(), Failure> {
    let tasks: Vec<_> = (0..callers)
        .map(|caller| {
            let workload = workload.clone();
            tokio::spawn(async move {
                for k in 0..calls {
                    workload.call(caller, k).await?;
                }
                Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a caller panicked")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    /// Answers after a fixed delay; fails the check on call 3 of caller 1.
    struct Sleepy(Duration);

    impl Workload for Sleepy {
        fn call(&self, caller: usize, k: u64) -> BoxFuture<'static, CallResult> {
            let delay = self.0;
            async move {
                tokio::time::sleep(delay).await;
                if (caller, k) == (1, 3) { Err(Failure::Check("three".into())) } else { Ok(()) }
            }
            .boxed()
        }
    }

    fn window(ms: u64) -> Window {
        Window { warmup: Duration::from_millis(50), measure: Duration::from_millis(ms) }
    }

    #[tokio::test]
    async fn closed_loop_counts_calls_and_failures() {
        let measured = drive(
            Arc::new(Sleepy(Duration::from_millis(5))),
            Pace::Closed { callers: 4 },
            window(300),
            Meters::default(),
        )
        .await;
        assert_eq!(measured.check_failures, 1);
        assert!(measured.first_problem.unwrap().contains("three"));
        // 3 callers for 300 ms at ~5 ms per call (the failed one stopped early).
        assert!((100..=190).contains(&measured.completed), "{}", measured.completed);
        assert!(measured.latency.value_at_quantile(0.5) >= 5_000);
    }

    #[tokio::test]
    async fn fixed_rate_keeps_the_rate_and_times_from_the_schedule() {
        let pace = Pace::Fixed { rate: 1000.0, lanes: 8, max_in_flight: 1000 };
        let measured = drive(Arc::new(Sleepy(Duration::from_millis(2))), pace, window(500), Meters::default()).await;
        let throughput = measured.throughput();
        assert!((900.0..1100.0).contains(&throughput), "{throughput}");
        assert!(measured.latency.value_at_quantile(0.5) >= 2_000);
        assert!(measured.send_lag.is_some());
    }

    #[tokio::test]
    async fn fixed_rate_counts_a_backlog_as_latency() {
        // One call in flight at a time, each 10 ms, asked for at 500/s: the
        // backlog grows, and so does the latency measured from the schedule.
        let pace = Pace::Fixed { rate: 500.0, lanes: 1, max_in_flight: 1 };
        let measured = drive(Arc::new(Sleepy(Duration::from_millis(10))), pace, window(300), Meters::default()).await;
        assert!(measured.latency.max() > 100_000, "max {} µs", measured.latency.max());
    }
}
