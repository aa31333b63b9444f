//! The soak's latency arithmetic, free of I/O: the request kinds of the
//! mixed workload, and latency per kind in fixed windows of the run (by
//! each request's intended send time), with p50/p99 per window.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::load::new_histogram;

/// A request kind of the mixed workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Checkpoint,
    Restore,
    BeginComplete,
    BeginRepeat,
    PutRecords,
    ListRecords,
    SignalAwait,
    TimerAwait,
    DeleteTurn,
}

impl Kind {
    pub const ALL: [Kind; 9] = [
        Kind::Checkpoint,
        Kind::Restore,
        Kind::BeginComplete,
        Kind::BeginRepeat,
        Kind::PutRecords,
        Kind::ListRecords,
        Kind::SignalAwait,
        Kind::TimerAwait,
        Kind::DeleteTurn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Checkpoint => "checkpoint",
            Kind::Restore => "restore",
            Kind::BeginComplete => "begin+complete",
            Kind::BeginRepeat => "begin (completed key)",
            Kind::PutRecords => "put records",
            Kind::ListRecords => "list records",
            Kind::SignalAwait => "create+signal+await",
            Kind::TimerAwait => "create (1 s timer)+await",
            Kind::DeleteTurn => "delete turn",
        }
    }

    pub fn index(self) -> usize {
        Kind::ALL.iter().position(|k| *k == self).expect("every kind is in ALL")
    }
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// Nothing to act on yet (e.g. no turn old enough to delete): not sent.
    Skipped,
    /// An RPC error, or an answer that is not what was written.
    Failed(String),
}

/// The tally of one kind in one window.
struct Cell {
    latency: Histogram<u64>,
    errors: u64,
    skipped: u64,
}

/// Latencies per kind in consecutive windows of `length`.
pub struct Windows {
    length: Duration,
    cells: Vec<Vec<Cell>>,
    /// The first few failures, for the report.
    pub failures: Vec<String>,
    pub failed: u64,
}

/// What the report shows of one kind in one window.
#[derive(Debug, Clone, Serialize)]
pub struct KindStat {
    pub kind: Kind,
    pub requests: u64,
    pub errors: u64,
    pub skipped: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// One window's figures.
#[derive(Debug, Clone, Serialize)]
pub struct WindowStat {
    pub start_s: f64,
    pub end_s: f64,
    pub kinds: Vec<KindStat>,
}

impl WindowStat {
    pub fn requests(&self) -> u64 {
        self.kinds.iter().map(|k| k.requests).sum()
    }

    pub fn errors(&self) -> u64 {
        self.kinds.iter().map(|k| k.errors).sum()
    }

    pub fn kind(&self, kind: Kind) -> &KindStat {
        &self.kinds[kind.index()]
    }
}

/// How many failures the report keeps word for word.
const FAILURES_KEPT: usize = 10;

impl Windows {
    pub fn new(length: Duration) -> Windows {
        Windows { length: length.max(Duration::from_millis(1)), cells: Vec::new(), failures: Vec::new(), failed: 0 }
    }

    /// Records a request of `kind` due `due` into the run that took `took`.
    pub fn record(&mut self, kind: Kind, due: Duration, took: Duration, outcome: Outcome) {
        let window = (due.as_nanos() / self.length.as_nanos()) as usize;
        while self.cells.len() <= window {
            let fresh = Kind::ALL.iter().map(|_| Cell { latency: new_histogram(), errors: 0, skipped: 0 }).collect();
            self.cells.push(fresh);
        }
        let cell = &mut self.cells[window][kind.index()];
        match outcome {
            Outcome::Ok => cell.latency.saturating_record(took.as_micros().max(1) as u64),
            Outcome::Skipped => cell.skipped += 1,
            Outcome::Failed(why) => {
                cell.errors += 1;
                self.failed += 1;
                if self.failures.len() < FAILURES_KEPT {
                    self.failures.push(format!("{} at {:.1} s: {why}", kind.name(), due.as_secs_f64()));
                }
            }
        }
    }

    /// Every window's figures; the last one may be shorter than the rest.
    pub fn stats(&self, run: Duration) -> Vec<WindowStat> {
        let length = self.length.as_secs_f64();
        let quantile =
            |h: &Histogram<u64>, q: f64| if h.is_empty() { 0.0 } else { h.value_at_quantile(q) as f64 / 1e3 };
        self.cells
            .iter()
            .enumerate()
            .map(|(i, cells)| WindowStat {
                start_s: i as f64 * length,
                end_s: ((i + 1) as f64 * length).min(run.as_secs_f64().max(i as f64 * length)),
                kinds: Kind::ALL
                    .iter()
                    .zip(cells)
                    .map(|(&kind, c)| KindStat {
                        kind,
                        requests: c.latency.len() + c.errors,
                        errors: c.errors,
                        skipped: c.skipped,
                        p50_ms: quantile(&c.latency, 0.5),
                        p99_ms: quantile(&c.latency, 0.99),
                    })
                    .collect(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn requests_fall_in_the_window_of_their_due_time() {
        let mut windows = Windows::new(Duration::from_secs(10));
        for i in 1..=100 {
            windows.record(Kind::Checkpoint, ms(i * 10), ms(i), Outcome::Ok);
        }
        windows.record(Kind::Restore, ms(12_000), ms(40), Outcome::Ok);
        windows.record(Kind::Restore, ms(13_000), ms(1), Outcome::Failed("wrong page".into()));
        windows.record(Kind::DeleteTurn, ms(14_000), ms(1), Outcome::Skipped);
        let stats = windows.stats(Duration::from_secs(15));
        assert_eq!(stats.len(), 2);
        let first = stats[0].kind(Kind::Checkpoint);
        assert_eq!((first.requests, first.errors), (100, 0));
        assert!((first.p50_ms - 50.0).abs() < 0.1, "{}", first.p50_ms);
        assert!((first.p99_ms - 99.0).abs() < 0.1, "{}", first.p99_ms);
        let restore = stats[1].kind(Kind::Restore);
        assert_eq!((restore.requests, restore.errors), (2, 1));
        assert!((restore.p99_ms - 40.0).abs() < 0.1, "{}", restore.p99_ms);
        assert_eq!(stats[1].kind(Kind::DeleteTurn).skipped, 1);
        assert_eq!((stats[1].requests(), stats[1].errors(), stats[1].end_s), (2, 1, 15.0));
        assert_eq!(windows.failed, 1);
        assert!(windows.failures[0].contains("wrong page"));
    }
}
