//! The results: one `Row` per measured point with every figure, the targets
//! set for stepwell checked against them, and the outputs written from them:
//! `results.json` (everything), `results.md` (the tables a person reads).

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::load::Measured;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Sqlite => "SQLite",
            Backend::Postgres => "Postgres",
        }
    }
}

/// Who wrote the rows: stepwell, or a baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum System {
    Stepwell,
    /// Baseline (a): sqlx, one INSERT per transaction.
    Direct,
    /// Baseline (b): pgbench with the same insert (or, for W3, the same pair of statements).
    Pgbench,
    /// The floor: a tonic server answering the same services with fixed OK answers, no store.
    Floor,
}

impl System {
    pub fn name(self) -> &'static str {
        match self {
            System::Stepwell => "stepwell",
            System::Direct => "direct (a)",
            System::Pgbench => "pgbench (b)",
            System::Floor => "floor (tonic no-op)",
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub samples: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(histogram: &Histogram<u64>) -> Latency {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Latency {
            samples: histogram.len(),
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// One measured point.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Unique: backend/system/series/callers (and rate).
    pub id: String,
    /// Groups comparable points, e.g. "w1-1kb" across concurrencies.
    pub series: String,
    /// For people, e.g. "W1 append 1 KB".
    pub workload: String,
    pub backend: Backend,
    pub system: System,
    pub callers: usize,
    /// "closed" or "fixed N/s".
    pub pace: String,
    /// The measurement window.
    pub seconds: f64,
    /// Calls completed in the window.
    pub ops: u64,
    pub throughput_per_s: f64,
    pub latency: Latency,
    pub errors: u64,
    pub check_failures: u64,
    pub first_problem: Option<String>,
    /// The sidecar's CPU per op (for "direct" SQLite rows: this process's,
    /// where sqlx and SQLite run).
    pub server_cpu_us_per_op: Option<f64>,
    /// The sidecar's context switches per op, all its threads (for floor rows: the no-op server's).
    pub context_switches_per_op: Option<f64>,
    /// Stepwell rows: throughput over the floor's at the same workload and callers.
    pub floor_ratio: Option<f64>,
    /// The Postgres server processes' CPU per op.
    pub postgres_cpu_us_per_op: Option<f64>,
    /// The load generator's CPU (this process, plus pgbench), % of one core.
    pub load_cpu_pct: Option<f64>,
    /// How busy all the machine's CPUs were, %.
    pub machine_busy_pct: Option<f64>,
    /// Store bytes / checkpoints stored, for rows that append.
    pub disk_bytes_per_checkpoint: Option<f64>,
    pub notes: Vec<String>,
    /// Workload-specific evidence (e.g. WAL bytes before and after).
    pub extra: Map<String, Value>,
}

/// What identifies a point, before it is measured.
#[derive(Debug, Clone)]
pub struct Point {
    pub series: &'static str,
    pub workload: String,
    pub backend: Backend,
    pub system: System,
    pub callers: usize,
    pub pace: String,
}

impl Point {
    pub fn id(&self) -> String {
        let pace = if self.pace == "closed" { String::new() } else { format!("/{}", self.pace.replace(' ', "-")) };
        format!(
            "{}/{}/{}/c{}{pace}",
            self.backend.name().to_lowercase(),
            format!("{:?}", self.system).to_lowercase(),
            self.series,
            self.callers
        )
    }

    /// The row for this point from what was measured; `server_in_process`
    /// says the store ran inside the load generator (direct SQLite).
    pub fn row(&self, measured: &Measured, server_in_process: bool) -> Row {
        let usage = &measured.usage;
        let per_op =
            |cpu: Option<f64>| cpu.filter(|_| measured.completed > 0).map(|s| s * 1e6 / measured.completed as f64);
        let load_pct = Some(100.0 * usage.load_cpu / usage.seconds.max(1e-9));
        let mut extra = Map::new();
        if usage.sidecar_threads_exited > 0 {
            extra.insert("sidecar_threads_exited_in_window".into(), usage.sidecar_threads_exited.into());
        }
        if let Some(lag) = &measured.send_lag {
            extra.insert("send_lag_p99_ms".into(), (lag.value_at_quantile(0.99) as f64 / 1000.0).into());
            extra.insert("send_lag_max_ms".into(), (lag.max() as f64 / 1000.0).into());
        }
        Row {
            id: self.id(),
            series: self.series.into(),
            workload: self.workload.clone(),
            backend: self.backend,
            system: self.system,
            callers: self.callers,
            pace: self.pace.clone(),
            seconds: usage.seconds,
            ops: measured.completed,
            throughput_per_s: measured.throughput(),
            latency: Latency::of(&measured.latency),
            errors: measured.errors,
            check_failures: measured.check_failures,
            first_problem: measured.first_problem.clone(),
            server_cpu_us_per_op: if server_in_process {
                per_op(Some(usage.load_cpu))
            } else {
                per_op(usage.sidecar_cpu)
            },
            context_switches_per_op: usage
                .sidecar_switches
                .filter(|_| measured.completed > 0)
                .map(|n| n as f64 / measured.completed as f64),
            floor_ratio: None,
            postgres_cpu_us_per_op: per_op(usage.postgres_cpu),
            load_cpu_pct: load_pct,
            machine_busy_pct: usage.machine_busy_pct,
            disk_bytes_per_checkpoint: None,
            notes: if usage.sidecar_threads_exited > 0 {
                vec![format!(
                    "{} sidecar threads exited in the window; their context switches are not counted",
                    usage.sidecar_threads_exited
                )]
            } else {
                Vec::new()
            },
            extra,
        }
    }

    /// A row for a point that could not be measured at all.
    pub fn failed(&self, why: String) -> Row {
        let mut row = self.row(&Measured::empty(), false);
        row.errors = 1;
        row.first_problem = Some(why);
        row
    }
}

impl Row {
    pub fn problems(&self) -> u64 {
        self.errors + self.check_failures
    }
}

/// One target and how the run compares with it.
#[derive(Debug, Clone, Serialize)]
pub struct TargetCheck {
    pub target: String,
    pub measured: String,
    /// None when the run did not measure what the target needs.
    pub met: Option<bool>,
}

/// Everything a run produced.
#[derive(Debug, Serialize)]
pub struct Results {
    pub meta: Map<String, Value>,
    pub rows: Vec<Row>,
    pub targets: Vec<TargetCheck>,
}

fn find<'a>(rows: &'a [Row], backend: Backend, system: System, series: &str, callers: usize) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.backend == backend && r.system == system && r.series == series && r.callers == callers && r.pace == "closed"
    })
}

/// The series of the floor row a stepwell series compares with: W1 over a
/// Unix socket compares with the (TCP) floor of W1.
fn floor_series(series: &str) -> &str {
    series.strip_suffix("-unix").unwrap_or(series)
}

/// Sets each stepwell row's `floor_ratio` from the floor row of the same
/// backend, workload series and callers, when the run measured one.
pub fn relate_to_floor(rows: &mut [Row]) {
    let floors: Vec<(Backend, String, usize, f64)> = rows
        .iter()
        .filter(|r| r.system == System::Floor && r.pace == "closed" && r.throughput_per_s > 0.0)
        .map(|r| (r.backend, r.series.clone(), r.callers, r.throughput_per_s))
        .collect();
    for row in rows.iter_mut().filter(|r| r.system == System::Stepwell && r.pace == "closed") {
        row.floor_ratio = floors
            .iter()
            .find(|(b, s, c, _)| *b == row.backend && s == floor_series(&row.series) && *c == row.callers)
            .map(|(_, _, _, floor)| row.throughput_per_s / floor);
    }
}

/// Checks the targets set for stepwell against the rows.
pub fn check_targets(rows: &[Row]) -> Vec<TargetCheck> {
    use Backend::*;
    use System::*;
    let mut checks = Vec::new();
    let mut add = |target: String, figures: Option<(String, bool)>| {
        let (measured, met) = match figures {
            Some((text, met)) => (text, Some(met)),
            None => ("not measured in this run".into(), None),
        };
        checks.push(TargetCheck { target, measured, met });
    };
    let w1 = |b, s, c| find(rows, b, s, "w1-1kb", c);
    let ratio = |b, c, baseline| {
        let (ours, theirs) = (w1(b, Stepwell, c)?, w1(b, baseline, c)?);
        Some((ours.throughput_per_s, theirs.throughput_per_s, ours.throughput_per_s / theirs.throughput_per_s))
    };

    add(
        "SQLite, W1 1 KB, 64 callers: throughput ≥ 6× baseline (a)".into(),
        ratio(Sqlite, 64, Direct)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {x:.2}×"), x >= 6.0)),
    );
    add(
        "SQLite, W1 1 KB, 64 callers: p99 ≤ 10 ms".into(),
        w1(Sqlite, Stepwell, 64).map(|r| (format!("p99 {:.2} ms", r.latency.p99_ms), r.latency.p99_ms <= 10.0)),
    );
    add(
        "SQLite, 1 caller: p50 ≤ 0.4 ms".into(),
        w1(Sqlite, Stepwell, 1).map(|r| (format!("p50 {:.3} ms", r.latency.p50_ms), r.latency.p50_ms <= 0.4)),
    );
    add(
        "SQLite, 1 caller: throughput ≥ 0.9× baseline (a)".into(),
        ratio(Sqlite, 1, Direct).map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {x:.2}×"), x >= 0.9)),
    );
    add(
        "SQLite, 256 callers: p99 ≤ 25 ms".into(),
        w1(Sqlite, Stepwell, 256).map(|r| (format!("p99 {:.2} ms", r.latency.p99_ms), r.latency.p99_ms <= 25.0)),
    );
    add(
        "SQLite, 256 callers: p99 ≥ 10× lower than baseline (a)'s".into(),
        w1(Sqlite, Stepwell, 256).zip(w1(Sqlite, Direct, 256)).map(|(ours, theirs)| {
            let x = theirs.latency.p99_ms / ours.latency.p99_ms;
            (format!("{:.2} ms vs {:.2} ms = {x:.1}× lower", ours.latency.p99_ms, theirs.latency.p99_ms), x >= 10.0)
        }),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: throughput ≥ 1.5× pgbench at 64 clients".into(),
        ratio(Postgres, 64, Pgbench)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {x:.2}×"), x >= 1.5)),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: p99 ≤ half of pgbench's".into(),
        w1(Postgres, Stepwell, 64).zip(w1(Postgres, Pgbench, 64)).map(|(ours, theirs)| {
            let x = ours.latency.p99_ms / theirs.latency.p99_ms;
            (format!("{:.2} ms vs {:.2} ms = {x:.2}×", ours.latency.p99_ms, theirs.latency.p99_ms), x <= 0.5)
        }),
    );
    add(
        "SQLite, W1 1 KB, 64 callers: throughput ≥ 0.4× the floor (tonic no-op)".into(),
        w1(Sqlite, Stepwell, 64)
            .and_then(|r| Some((r.throughput_per_s, r.floor_ratio?)))
            .map(|(ours, x)| (format!("{ours:.0}/s = {x:.2}× the floor"), x >= 0.4)),
    );
    for (callers, most) in [(1, 4.0), (64, 0.5)] {
        add(
            format!(
                "SQLite, W1 1 KB, {callers} caller{}: sidecar context switches ≤ {most} per checkpoint",
                if callers == 1 { "" } else { "s" }
            ),
            w1(Sqlite, Stepwell, callers).and_then(|r| {
                let switches = r.context_switches_per_op?;
                Some((format!("{switches:.2} per checkpoint"), switches <= most))
            }),
        );
    }
    add(
        "Postgres, W3 pairs, 64 callers: throughput ≥ 1.0× pgbench's pair script at 64 clients".into(),
        find(rows, Postgres, Stepwell, "w3-pairs", 64).zip(find(rows, Postgres, Pgbench, "w3-pairs", 64)).map(
            |(ours, theirs)| {
                let x = ours.throughput_per_s / theirs.throughput_per_s;
                (format!("{:.0}/s vs {:.0}/s = {x:.2}×", ours.throughput_per_s, theirs.throughput_per_s), x >= 1.0)
            },
        ),
    );
    for backend in [Sqlite, Postgres] {
        let name = backend.name();
        add(
            format!("{name}, W2 restore, 16 callers: throughput ≥ 0.8× the direct read"),
            find(rows, backend, Stepwell, "w2-restore", 16).zip(find(rows, backend, Direct, "w2-restore", 16)).map(
                |(ours, theirs)| {
                    let x = ours.throughput_per_s / theirs.throughput_per_s;
                    (format!("{:.0}/s vs {:.0}/s = {x:.2}×", ours.throughput_per_s, theirs.throughput_per_s), x >= 0.8)
                },
            ),
        );
        add(
            format!("{name}, W2 restore, 1 caller: p50 ≤ 1.5× the direct read's"),
            find(rows, backend, Stepwell, "w2-restore", 1).zip(find(rows, backend, Direct, "w2-restore", 1)).map(
                |(ours, theirs)| {
                    let x = ours.latency.p50_ms / theirs.latency.p50_ms;
                    (format!("{:.3} ms vs {:.3} ms = {x:.2}×", ours.latency.p50_ms, theirs.latency.p50_ms), x <= 1.5)
                },
            ),
        );
        add(
            format!("{name}, W2 restore of 100 × 1 KB, 16 callers: p50 ≤ 1 ms"),
            find(rows, backend, Stepwell, "w2-restore", 16)
                .map(|r| (format!("p50 {:.3} ms", r.latency.p50_ms), r.latency.p50_ms <= 1.0)),
        );
        add(
            format!("{name}, W3 Begin→Complete, 64 callers: ≥ 10k pairs/s"),
            find(rows, backend, Stepwell, "w3-pairs", 64)
                .map(|r| (format!("{:.0} pairs/s", r.throughput_per_s), r.throughput_per_s >= 10_000.0)),
        );
        add(
            format!("{name}, W3 repeated Begin on completed keys, 64 callers: ≥ 20k/s, writing nothing"),
            find(rows, backend, Stepwell, "w3-repeat", 64).map(|r| {
                let wrote_nothing = r.extra.get("wrote_nothing").and_then(Value::as_bool).unwrap_or(false);
                let evidence = r.extra.get("write_evidence").and_then(Value::as_str).unwrap_or("no evidence");
                (format!("{:.0}/s; {evidence}", r.throughput_per_s), r.throughput_per_s >= 20_000.0 && wrote_nothing)
            }),
        );
        add(
            format!("{name}, W1 1 KB, 64 callers: sidecar CPU ≤ 40 µs per checkpoint"),
            w1(backend, Stepwell, 64).and_then(|r| {
                let cpu = r.server_cpu_us_per_op?;
                let postgres = r.postgres_cpu_us_per_op.map_or(String::new(), |pg| format!(" (+ Postgres {pg:.1} µs)"));
                Some((format!("{cpu:.1} µs{postgres}"), cpu <= 40.0))
            }),
        );
        add(
            format!("{name}, W1 1 KB, 64 callers: disk ≤ 1.5 KB per 1 KB checkpoint"),
            w1(backend, Stepwell, 64).and_then(|r| {
                let bytes = r.disk_bytes_per_checkpoint?;
                Some((format!("{bytes:.0} B"), bytes <= 1536.0))
            }),
        );
    }
    checks
}

fn cell(value: Option<f64>, decimals: usize) -> String {
    value.map_or("–".into(), |v| format!("{v:.decimals$}"))
}

/// Milliseconds with three significant digits, so small and large latencies both read well.
fn ms(value: f64) -> String {
    match value {
        v if v < 1.0 => format!("{v:.3}"),
        v if v < 10.0 => format!("{v:.2}"),
        v if v < 100.0 => format!("{v:.1}"),
        v => format!("{v:.0}"),
    }
}

/// The results as markdown: the rows, the targets, the checks.
pub fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let meta = |key: &str| results.meta.get(key).and_then(Value::as_str).unwrap_or("?").to_owned();
    let _ = writeln!(out, "## stepwell benchmark: {} mode\n", meta("mode"));
    let _ = writeln!(
        out,
        "`{}` — started {}, {} — {}. Sidecar, Postgres and load generator share the same CPUs.\n",
        meta("command"),
        meta("started_at"),
        meta("took"),
        meta("machine_summary"),
    );
    out.push_str(
        "| Workload | Store | System | Callers | Pace | ops/s | × floor | p50 ms | p99 ms | p99.9 ms | max ms \
         | server CPU µs/op | server ctx sw/op | Postgres CPU µs/op | disk B/ckpt | load-gen CPU % | machine busy % \
         | problems |\n",
    );
    out.push_str("|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for r in &results.rows {
        let problems = match &r.first_problem {
            Some(first) => format!("{} errors, {} checks: {}", r.errors, r.check_failures, first.replace('|', "/")),
            None => "0".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            if r.system == System::Floor { "none" } else { r.backend.name() },
            r.system.name(),
            r.callers,
            r.pace,
            r.throughput_per_s,
            cell(r.floor_ratio, 2),
            ms(r.latency.p50_ms),
            ms(r.latency.p99_ms),
            ms(r.latency.p999_ms),
            ms(r.latency.max_ms),
            cell(r.server_cpu_us_per_op, 1),
            cell(r.context_switches_per_op, 2),
            cell(r.postgres_cpu_us_per_op, 1),
            cell(r.disk_bytes_per_checkpoint, 0),
            cell(r.load_cpu_pct, 0),
            cell(r.machine_busy_pct, 0),
            problems,
        );
    }
    out.push_str("\n### Targets\n\n| Target | Measured | Met |\n|---|---|---|\n");
    for t in &results.targets {
        let met = match t.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "–",
        };
        let _ = writeln!(out, "| {} | {} | {met} |", t.target, t.measured);
    }
    let mut notes: Vec<String> = Vec::new();
    for r in &results.rows {
        for note in &r.notes {
            let line = format!("- {} {} {}: {note}", r.backend.name(), r.system.name(), r.workload);
            if !notes.contains(&line) {
                notes.push(line);
            }
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(out, "\n### Notes\n\n{}", notes.join("\n"));
    }
    out
}

/// An RFC 3339 UTC time from Unix seconds.
pub fn utc(unix_seconds: u64) -> String {
    let days = (unix_seconds / 86_400) as i64;
    let seconds_of_day = unix_seconds % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        seconds_of_day / 3600,
        seconds_of_day / 60 % 60,
        seconds_of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_times() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(utc(951_825_600), "2000-02-29T12:00:00Z");
    }

    fn measured_row(system: System, series: &'static str, callers: usize, ops: u64) -> Row {
        let point =
            Point { series, workload: String::new(), backend: Backend::Sqlite, system, callers, pace: "closed".into() };
        let mut measured = Measured::empty();
        measured.completed = ops;
        measured.usage.seconds = 1.0;
        measured.usage.sidecar_switches = Some(ops * 3);
        point.row(&measured, false)
    }

    #[test]
    fn relates_stepwell_rows_to_the_floor() {
        let mut rows = vec![
            measured_row(System::Stepwell, "w1-1kb", 64, 4_000),
            measured_row(System::Stepwell, "w1-1kb-unix", 64, 5_000),
            measured_row(System::Stepwell, "w1-1kb", 1, 500),
            measured_row(System::Direct, "w1-1kb", 64, 1_000),
            measured_row(System::Floor, "w1-1kb", 64, 10_000),
        ];
        relate_to_floor(&mut rows);
        let ratios: Vec<Option<f64>> = rows.iter().map(|r| r.floor_ratio).collect();
        assert_eq!(ratios, [Some(0.4), Some(0.5), None, None, None]);
        assert_eq!(rows[0].context_switches_per_op, Some(3.0));
        let checks = check_targets(&rows);
        let floor = checks.iter().find(|c| c.target.contains("the floor")).unwrap();
        assert_eq!(floor.met, Some(true), "{floor:?}");
        let table = markdown(&Results { meta: Map::new(), rows, targets: checks });
        assert!(table.contains("| none | floor (tonic no-op) | 64 |"), "{table}");
        assert!(table.contains("| 4000 | 0.40 |"), "{table}");
    }

    #[test]
    fn targets_without_rows_are_not_measured() {
        let checks = check_targets(&[]);
        assert!(!checks.is_empty());
        assert!(checks.iter().all(|c| c.met.is_none()));
    }
}
