//! The soak's verdicts, free of I/O: the growth of a sampled figure after
//! warm-up, and whether RSS and descriptors stayed within 10% of it, each
//! window's p99 within twice the first window's, the SQLite WAL bounded,
//! and no request failed. Only errors and wrong reads fail a run; the timing
//! and growth verdicts are printed, never asserted.

use serde::Serialize;

use super::stats::WindowStat;

/// A sampled figure after warm-up: its first reading, last, and largest,
/// and the growth from first to last in percent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Growth {
    pub first: f64,
    pub last: f64,
    pub max: f64,
    pub growth_percent: f64,
}

/// The growth of `(t_s, value)` readings taken at or after `warmup_s`;
/// None without any.
pub fn growth(readings: &[(f64, f64)], warmup_s: f64) -> Option<Growth> {
    let after: Vec<f64> = readings.iter().filter(|(t, _)| *t >= warmup_s).map(|(_, v)| *v).collect();
    let (&first, &last) = (after.first()?, after.last()?);
    let max = after.iter().copied().fold(f64::MIN, f64::max);
    let growth_percent = if first > 0.0 { (last - first) / first * 100.0 } else { 0.0 };
    Some(Growth { first, last, max, growth_percent })
}

/// How much a verdict matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Met.
    Pass,
    /// Not met; printed, not failed (timing and growth).
    Warning,
    /// Not met, and the run fails (errors, wrong reads).
    Fail,
}

#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub what: String,
    pub level: Level,
    pub detail: String,
}

/// The bound on RSS and fd growth after warm-up, in percent.
pub const GROWTH_BOUND: f64 = 10.0;
/// How far a window's p99 may be from the first window's.
pub const P99_FACTOR: f64 = 2.0;

/// A growth verdict: within the bound, or a warning.
pub fn growth_verdict(what: &str, growth: Option<Growth>) -> Verdict {
    let Some(g) = growth else {
        return Verdict { what: what.into(), level: Level::Warning, detail: "no readings after warm-up".into() };
    };
    let level = if g.growth_percent <= GROWTH_BOUND { Level::Pass } else { Level::Warning };
    let detail = format!(
        "{:.0} after warm-up, {:.0} at the end ({:+.1}%), at most {:.0}; bound +{GROWTH_BOUND}%",
        g.first, g.last, g.growth_percent, g.max
    );
    Verdict { what: what.into(), level, detail }
}

/// Whether every complete window's p99, per kind, is within `P99_FACTOR`
/// of the first window's; the kinds and windows beyond it are named.
pub fn p99_verdict(windows: &[WindowStat]) -> Verdict {
    let what = format!("each window's p99 within {P99_FACTOR}x the first window's");
    let Some(first) = windows.first() else {
        return Verdict { what, level: Level::Warning, detail: "no windows".into() };
    };
    let mut beyond = Vec::new();
    let mut worst: f64 = 0.0;
    for (i, window) in windows.iter().enumerate().skip(1) {
        for stat in window.kinds.iter().filter(|s| s.requests > 0) {
            let base = first.kind(stat.kind).p99_ms;
            if base <= 0.0 {
                continue;
            }
            let ratio = stat.p99_ms / base;
            worst = worst.max(ratio);
            if ratio > P99_FACTOR {
                beyond.push(format!("{} in window {} ({ratio:.2}x)", stat.kind.name(), i + 1));
            }
        }
    }
    let level = if beyond.is_empty() { Level::Pass } else { Level::Warning };
    let detail = match beyond.is_empty() {
        true => format!("largest ratio {worst:.2}x"),
        false => format!("beyond: {}", beyond.join(", ")),
    };
    Verdict { what, level, detail }
}

/// Whether the WAL stopped growing: its largest size in the second half of
/// the readings after warm-up is within 10% of its largest before.
pub fn wal_verdict(readings: &[(f64, f64)], warmup_s: f64) -> Verdict {
    let after: Vec<&(f64, f64)> = readings.iter().filter(|(t, _)| *t >= warmup_s).collect();
    let what = "SQLite WAL bounded (second half's max within 10% of the first half's)".to_owned();
    if after.len() < 2 {
        return Verdict { what, level: Level::Warning, detail: "too few readings after warm-up".into() };
    }
    let (early, late) = after.split_at(after.len() / 2);
    let max = |part: &[&(f64, f64)]| part.iter().map(|(_, v)| *v).fold(0.0, f64::max);
    let (early, late) = (max(early), max(late));
    let level = if late <= early * 1.1 { Level::Pass } else { Level::Warning };
    let detail = format!("max {:.1} MiB (first half {:.1} MiB)", late.max(early) / MIB, early / MIB);
    Verdict { what, level, detail }
}

pub const MIB: f64 = 1024.0 * 1024.0;

/// The one verdict that fails a run: no request failed or read wrongly.
pub fn errors_verdict(failed: u64, first: Option<&String>) -> Verdict {
    let level = if failed == 0 { Level::Pass } else { Level::Fail };
    let detail = match first {
        Some(first) => format!("{failed} failed; first: {first}"),
        None => format!("{failed} failed"),
    };
    Verdict { what: "0 errors and 0 wrong reads".into(), level, detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::stats::{Kind, KindStat};

    #[test]
    fn growth_starts_at_the_first_reading_after_warm_up() {
        let readings = [(0.0, 10.0), (5.0, 100.0), (10.0, 130.0), (15.0, 105.0)];
        let g = growth(&readings, 5.0).unwrap();
        assert_eq!((g.first, g.last, g.max), (100.0, 105.0, 130.0));
        assert!((g.growth_percent - 5.0).abs() < 1e-9);
        assert_eq!(growth_verdict("rss", Some(g)).level, Level::Pass);
        let grown = growth(&readings[..3], 5.0);
        assert_eq!(growth_verdict("rss", grown).level, Level::Warning);
        assert!(growth(&readings, 20.0).is_none());
    }

    fn window(p99: &[(Kind, f64)]) -> WindowStat {
        let kinds = Kind::ALL
            .iter()
            .map(|&kind| {
                let p99_ms = p99.iter().find(|(k, _)| *k == kind).map_or(0.0, |(_, v)| *v);
                KindStat { kind, requests: u64::from(p99_ms > 0.0), errors: 0, skipped: 0, p50_ms: 0.0, p99_ms }
            })
            .collect();
        WindowStat { start_s: 0.0, end_s: 1.0, kinds }
    }

    #[test]
    fn p99_beyond_twice_the_first_window_is_a_warning() {
        let first = window(&[(Kind::Checkpoint, 4.0), (Kind::Restore, 2.0)]);
        let steady = window(&[(Kind::Checkpoint, 7.9), (Kind::Restore, 1.0)]);
        assert_eq!(p99_verdict(&[first.clone(), steady.clone()]).level, Level::Pass);
        let slow = window(&[(Kind::Checkpoint, 4.0), (Kind::Restore, 4.5)]);
        let verdict = p99_verdict(&[first, steady, slow]);
        assert_eq!(verdict.level, Level::Warning);
        assert!(verdict.detail.contains("restore in window 3"), "{}", verdict.detail);
    }

    #[test]
    fn the_wal_is_bounded_when_it_stops_growing_and_errors_fail() {
        let flat = [(0.0, 1.0), (10.0, 4.0 * MIB), (20.0, 4.0 * MIB), (30.0, 4.1 * MIB), (40.0, 4.0 * MIB)];
        assert_eq!(wal_verdict(&flat, 10.0).level, Level::Pass);
        let climbing = [(10.0, 4.0 * MIB), (20.0, 6.0 * MIB), (30.0, 8.0 * MIB), (40.0, 10.0 * MIB)];
        let verdict = wal_verdict(&climbing, 10.0);
        assert_eq!(verdict.level, Level::Warning);
        assert!(verdict.detail.starts_with("max 10.0 MiB"), "{}", verdict.detail);
        assert_eq!(errors_verdict(0, None).level, Level::Pass);
        assert_eq!(errors_verdict(2, Some(&"restore: wrong page".to_owned())).level, Level::Fail);
    }
}
