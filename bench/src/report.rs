//! The results: one `Row` per measured point with every figure (the median
//! of its rounds, each round's own figures kept beside it), the targets set
//! for stepwell checked against them, and the outputs written from them:
//! `results.json` (everything), `results.md` (the tables a person reads).
//! A ratio of stepwell to a baseline is taken round by round (stepwell's
//! round i over the baseline's round i) and shown as the median ratio and
//! its range.

use std::fmt::Write as _;

use hdrhistogram::Histogram;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::load::Measured;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
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
#[derive(Debug, Clone, Default, Serialize)]
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
    /// Stepwell rows: throughput over the floor's at the same workload and
    /// callers, round by round.
    pub floor_ratio: Option<Ratio>,
    /// The Postgres server processes' CPU per op.
    pub postgres_cpu_us_per_op: Option<f64>,
    /// The load generator's CPU (this process, plus pgbench), % of one core.
    pub load_cpu_pct: Option<f64>,
    /// How busy all the machine's CPUs were, %.
    pub machine_busy_pct: Option<f64>,
    /// Store bytes / checkpoints stored, for rows that append.
    pub disk_bytes_per_checkpoint: Option<f64>,
    pub notes: Vec<String>,
    /// Workload-specific evidence (e.g. WAL bytes before and after), of
    /// the round whose throughput is the median (each round's in `round_figures`).
    pub extra: Map<String, Value>,
    /// How many rounds the figures above are the median of.
    pub rounds: usize,
    /// The lowest and highest throughput of the rounds.
    pub throughput_min_per_s: f64,
    pub throughput_max_per_s: f64,
    /// Each round's own figures, in the order they ran.
    pub round_figures: Vec<RoundFigures>,
}

/// The figures of one round of a point.
#[derive(Debug, Clone, Serialize)]
pub struct RoundFigures {
    pub seconds: f64,
    pub ops: u64,
    pub throughput_per_s: f64,
    pub latency: Latency,
    pub errors: u64,
    pub check_failures: u64,
    pub first_problem: Option<String>,
    pub server_cpu_us_per_op: Option<f64>,
    pub context_switches_per_op: Option<f64>,
    pub postgres_cpu_us_per_op: Option<f64>,
    pub load_cpu_pct: Option<f64>,
    pub machine_busy_pct: Option<f64>,
    pub disk_bytes_per_checkpoint: Option<f64>,
    pub extra: Map<String, Value>,
}

impl RoundFigures {
    fn of(row: &Row) -> RoundFigures {
        RoundFigures {
            seconds: row.seconds,
            ops: row.ops,
            throughput_per_s: row.throughput_per_s,
            latency: row.latency.clone(),
            errors: row.errors,
            check_failures: row.check_failures,
            first_problem: row.first_problem.clone(),
            server_cpu_us_per_op: row.server_cpu_us_per_op,
            context_switches_per_op: row.context_switches_per_op,
            postgres_cpu_us_per_op: row.postgres_cpu_us_per_op,
            load_cpu_pct: row.load_cpu_pct,
            machine_busy_pct: row.machine_busy_pct,
            disk_bytes_per_checkpoint: row.disk_bytes_per_checkpoint,
            extra: row.extra.clone(),
        }
    }
}

/// The median of `values` (of the middle two when their number is even);
/// None when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 { sorted[middle] } else { (sorted[middle - 1] + sorted[middle]) / 2.0 })
}

/// The median of the figures some rounds have; None when no round has it.
fn median_of(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    median(&values.into_iter().flatten().collect::<Vec<_>>())
}

/// A ratio taken round by round: its median and range over the rounds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratio {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    /// Rounds paired (those where both sides had a figure).
    pub rounds: usize,
}

impl Ratio {
    /// The ratio of each pair (ours, theirs), paired by round; pairs with
    /// a zero or missing denominator are left out.
    pub fn of_pairs(pairs: impl IntoIterator<Item = (f64, f64)>) -> Option<Ratio> {
        let ratios: Vec<f64> = pairs
            .into_iter()
            .filter(|(ours, theirs)| *theirs > 0.0 && ours.is_finite() && theirs.is_finite())
            .map(|(ours, theirs)| ours / theirs)
            .collect();
        Some(Ratio {
            median: median(&ratios)?,
            min: ratios.iter().copied().fold(f64::INFINITY, f64::min),
            max: ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            rounds: ratios.len(),
        })
    }

    /// `figure` of `ours` over that of `theirs`, round i over round i.
    pub fn between(ours: &Row, theirs: &Row, figure: impl Fn(&RoundFigures) -> f64) -> Option<Ratio> {
        let pairs = rounds_of(ours).into_iter().zip(rounds_of(theirs)).map(|(o, t)| (figure(&o), figure(&t)));
        Ratio::of_pairs(pairs)
    }

    /// "0.92× [0.81–1.04]", or "0.92×" from a single round.
    pub fn text(&self, decimals: usize) -> String {
        if self.rounds > 1 {
            format!("{:.decimals$}× [{:.decimals$}–{:.decimals$}]", self.median, self.min, self.max)
        } else {
            format!("{:.decimals$}×", self.median)
        }
    }
}

/// A row's rounds: its own figures when it was never combined.
fn rounds_of(row: &Row) -> Vec<RoundFigures> {
    if row.round_figures.is_empty() { vec![RoundFigures::of(row)] } else { row.round_figures.clone() }
}

/// Combines the rows of the same point (one per round, in the order they
/// ran) into one row each, in the order the points first ran: every figure
/// is the median of the rounds', errors and failed checks add up, notes are
/// gathered, `extra` is the median-throughput round's (with
/// `wrote_nothing` true only when every round wrote nothing), and each
/// round's figures are kept in `round_figures`.
pub fn combine_rounds(rows: Vec<Row>) -> Vec<Row> {
    let mut groups: Vec<Vec<Row>> = Vec::new();
    for row in rows {
        match groups.iter_mut().find(|g| g[0].id == row.id) {
            Some(group) => group.push(row),
            None => groups.push(vec![row]),
        }
    }
    groups.into_iter().map(combine).collect()
}

fn combine(group: Vec<Row>) -> Row {
    let figures: Vec<RoundFigures> = group.iter().flat_map(rounds_of).collect();
    let each = |f: fn(&RoundFigures) -> f64| figures.iter().map(f).collect::<Vec<f64>>();
    let some = |f: fn(&RoundFigures) -> Option<f64>| median_of(figures.iter().map(f));
    let throughputs = each(|r| r.throughput_per_s);
    let throughput = median(&throughputs).unwrap_or(0.0);
    // The round nearest the median throughput lends its evidence.
    let middle = (0..figures.len())
        .min_by(|&a, &b| (throughputs[a] - throughput).abs().total_cmp(&(throughputs[b] - throughput).abs()))
        .unwrap_or(0);
    let mut notes: Vec<String> = Vec::new();
    for note in group.iter().flat_map(|r| &r.notes) {
        if !notes.contains(note) {
            notes.push(note.clone());
        }
    }
    let mut row = group.into_iter().next().expect("a group has a row");
    row.notes = notes;
    let at = |f: fn(&Latency) -> f64| median(&figures.iter().map(|r| f(&r.latency)).collect::<Vec<_>>()).unwrap_or(0.0);
    row.latency = Latency {
        samples: median(&each(|r| r.latency.samples as f64)).unwrap_or(0.0).round() as u64,
        mean_ms: at(|l| l.mean_ms),
        p50_ms: at(|l| l.p50_ms),
        p90_ms: at(|l| l.p90_ms),
        p99_ms: at(|l| l.p99_ms),
        p999_ms: at(|l| l.p999_ms),
        max_ms: at(|l| l.max_ms),
    };
    row.seconds = median(&each(|r| r.seconds)).unwrap_or(0.0);
    row.ops = median(&each(|r| r.ops as f64)).unwrap_or(0.0).round() as u64;
    row.throughput_per_s = throughput;
    row.throughput_min_per_s = throughputs.iter().copied().fold(f64::INFINITY, f64::min);
    row.throughput_max_per_s = throughputs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    row.errors = figures.iter().map(|r| r.errors).sum();
    row.check_failures = figures.iter().map(|r| r.check_failures).sum();
    row.first_problem = figures.iter().find_map(|r| r.first_problem.clone());
    row.server_cpu_us_per_op = some(|r| r.server_cpu_us_per_op);
    row.context_switches_per_op = some(|r| r.context_switches_per_op);
    row.postgres_cpu_us_per_op = some(|r| r.postgres_cpu_us_per_op);
    row.load_cpu_pct = some(|r| r.load_cpu_pct);
    row.machine_busy_pct = some(|r| r.machine_busy_pct);
    row.disk_bytes_per_checkpoint = some(|r| r.disk_bytes_per_checkpoint);
    row.extra = figures[middle].extra.clone();
    let flags: Vec<bool> =
        figures.iter().filter_map(|r| r.extra.get("wrote_nothing").and_then(Value::as_bool)).collect();
    if !flags.is_empty() {
        row.extra.insert("wrote_nothing".into(), Value::Bool(flags.iter().all(|&w| w)));
    }
    row.rounds = figures.len();
    row.round_figures = figures;
    row
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
            rounds: 1,
            throughput_min_per_s: measured.throughput(),
            throughput_max_per_s: measured.throughput(),
            round_figures: Vec::new(),
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
/// backend, workload series and callers, when the run measured one, round
/// by round.
pub fn relate_to_floor(rows: &mut [Row]) {
    let floors: Vec<Row> = rows
        .iter()
        .filter(|r| r.system == System::Floor && r.pace == "closed" && r.throughput_per_s > 0.0)
        .cloned()
        .collect();
    for row in rows.iter_mut().filter(|r| r.system == System::Stepwell && r.pace == "closed") {
        row.floor_ratio = floors
            .iter()
            .find(|f| f.backend == row.backend && f.series == floor_series(&row.series) && f.callers == row.callers)
            .and_then(|floor| Ratio::between(row, floor, |r| r.throughput_per_s));
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
        let x = Ratio::between(ours, theirs, |r| r.throughput_per_s)?;
        Some((ours.throughput_per_s, theirs.throughput_per_s, x))
    };

    add(
        "SQLite, W1 1 KB, 64 callers: throughput ≥ 6× baseline (a)".into(),
        ratio(Sqlite, 64, Direct)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {}", x.text(2)), x.median >= 6.0)),
    );
    add(
        "SQLite, W1 1 KB, 64 callers: p99 ≤ ¼ of baseline (a)'s".into(),
        w1(Sqlite, Stepwell, 64).zip(w1(Sqlite, Direct, 64)).and_then(|(ours, theirs)| {
            let x = Ratio::between(ours, theirs, |r| r.latency.p99_ms)?;
            let text = format!("{:.2} ms vs {:.2} ms = {}", ours.latency.p99_ms, theirs.latency.p99_ms, x.text(2));
            Some((text, x.median <= 0.25))
        }),
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
        ratio(Sqlite, 1, Direct)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {}", x.text(2)), x.median >= 0.9)),
    );
    add(
        "SQLite, 256 callers: p99 ≤ 25 ms".into(),
        w1(Sqlite, Stepwell, 256).map(|r| (format!("p99 {:.2} ms", r.latency.p99_ms), r.latency.p99_ms <= 25.0)),
    );
    add(
        "SQLite, 256 callers: p99 ≥ 10× lower than baseline (a)'s".into(),
        w1(Sqlite, Stepwell, 256).zip(w1(Sqlite, Direct, 256)).and_then(|(ours, theirs)| {
            let x = Ratio::between(theirs, ours, |r| r.latency.p99_ms)?;
            let text =
                format!("{:.2} ms vs {:.2} ms = {} lower", ours.latency.p99_ms, theirs.latency.p99_ms, x.text(1));
            Some((text, x.median >= 10.0))
        }),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: throughput ≥ 1.5× pgbench at 64 clients".into(),
        ratio(Postgres, 64, Pgbench)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {}", x.text(2)), x.median >= 1.5)),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: throughput ≥ 1.0× pgbench at 64 clients".into(),
        ratio(Postgres, 64, Pgbench)
            .map(|(ours, theirs, x)| (format!("{ours:.0}/s vs {theirs:.0}/s = {}", x.text(2)), x.median >= 1.0)),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: Postgres CPU per row ≤ ½ of pgbench's".into(),
        w1(Postgres, Stepwell, 64).zip(w1(Postgres, Pgbench, 64)).and_then(|(ours, theirs)| {
            let x = Ratio::between(ours, theirs, |r| r.postgres_cpu_us_per_op.unwrap_or(f64::NAN))?;
            let (cpu, theirs) = (ours.postgres_cpu_us_per_op?, theirs.postgres_cpu_us_per_op?);
            Some((format!("{cpu:.1} µs vs {theirs:.1} µs = {}", x.text(2)), x.median <= 0.5))
        }),
    );
    add(
        "Postgres, W1 1 KB, 64 callers: p99 ≤ half of pgbench's".into(),
        w1(Postgres, Stepwell, 64).zip(w1(Postgres, Pgbench, 64)).and_then(|(ours, theirs)| {
            let x = Ratio::between(ours, theirs, |r| r.latency.p99_ms)?;
            let text = format!("{:.2} ms vs {:.2} ms = {}", ours.latency.p99_ms, theirs.latency.p99_ms, x.text(2));
            Some((text, x.median <= 0.5))
        }),
    );
    add(
        "SQLite, W1 1 KB, 64 callers: throughput ≥ 0.4× the floor (tonic no-op)".into(),
        w1(Sqlite, Stepwell, 64)
            .and_then(|r| Some((r.throughput_per_s, r.floor_ratio?)))
            .map(|(ours, x)| (format!("{ours:.0}/s = {} the floor", x.text(2)), x.median >= 0.4)),
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
        find(rows, Postgres, Stepwell, "w3-pairs", 64)
            .zip(find(rows, Postgres, Pgbench, "w3-pairs", 64))
            .and_then(|(ours, theirs)| throughput_ratio(ours, theirs, 1.0)),
    );
    for backend in [Sqlite, Postgres] {
        let name = backend.name();
        add(
            format!("{name}, W2 restore, 16 callers: throughput ≥ 0.8× the direct read"),
            find(rows, backend, Stepwell, "w2-restore", 16)
                .zip(find(rows, backend, Direct, "w2-restore", 16))
                .and_then(|(ours, theirs)| throughput_ratio(ours, theirs, 0.8)),
        );
        add(
            format!("{name}, W2 restore, 1 caller: p50 ≤ 1.5× the direct read's"),
            find(rows, backend, Stepwell, "w2-restore", 1).zip(find(rows, backend, Direct, "w2-restore", 1)).and_then(
                |(ours, theirs)| {
                    let x = Ratio::between(ours, theirs, |r| r.latency.p50_ms)?;
                    let (p50, theirs) = (ours.latency.p50_ms, theirs.latency.p50_ms);
                    Some((format!("{p50:.3} ms vs {theirs:.3} ms = {}", x.text(2)), x.median <= 1.5))
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

/// "ours/s vs theirs/s = median× [min–max]", met when the median ratio is at least `least`.
fn throughput_ratio(ours: &Row, theirs: &Row, least: f64) -> Option<(String, bool)> {
    let x = Ratio::between(ours, theirs, |r| r.throughput_per_s)?;
    let text = format!("{:.0}/s vs {:.0}/s = {}", ours.throughput_per_s, theirs.throughput_per_s, x.text(2));
    Some((text, x.median >= least))
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
        "| Workload | Store | System | Callers | Pace | rounds | ops/s | ops/s [min–max] | × floor | p50 ms | p99 ms | p99.9 ms | max ms \
         | server CPU µs/op | server ctx sw/op | Postgres CPU µs/op | disk B/ckpt | load-gen CPU % | machine busy % \
         | problems |\n",
    );
    out.push_str("|---|---|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n");
    for r in &results.rows {
        let problems = match &r.first_problem {
            Some(first) => format!("{} errors, {} checks: {}", r.errors, r.check_failures, first.replace('|', "/")),
            None => "0".into(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.0} | [{:.0}–{:.0}] | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            if r.system == System::Floor { "none" } else { r.backend.name() },
            r.system.name(),
            r.callers,
            r.pace,
            r.rounds,
            r.throughput_per_s,
            r.throughput_min_per_s,
            r.throughput_max_per_s,
            r.floor_ratio.map_or("–".into(), |x| x.text(2)),
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
    let (year, month, day) = stepwell::domain::clock::civil_from_days((unix_seconds / 86_400) as i64);
    let seconds_of_day = unix_seconds % 86_400;
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
        let ratios: Vec<Option<f64>> = rows.iter().map(|r| r.floor_ratio.map(|x| x.median)).collect();
        assert_eq!(ratios, [Some(0.4), Some(0.5), None, None, None]);
        assert_eq!(rows[0].context_switches_per_op, Some(3.0));
        let checks = check_targets(&rows);
        let floor = checks.iter().find(|c| c.target.contains("the floor")).unwrap();
        assert_eq!(floor.met, Some(true), "{floor:?}");
        let table = markdown(&Results { meta: Map::new(), rows, targets: checks });
        assert!(table.contains("| none | floor (tonic no-op) | 64 |"), "{table}");
        assert!(table.contains("| 1 | 4000 | [4000–4000] | 0.40× |"), "{table}");
    }

    #[test]
    fn medians_of_odd_and_even_counts() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[f64::NAN]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[5.0]), Some(5.0));
    }

    #[test]
    fn ratios_pair_rounds_and_skip_zero_denominators() {
        let x = Ratio::of_pairs([(1.0, 2.0), (3.0, 2.0), (2.0, 2.0), (5.0, 0.0)]).unwrap();
        assert_eq!(x, Ratio { median: 1.0, min: 0.5, max: 1.5, rounds: 3 });
        assert_eq!(x.text(2), "1.00× [0.50–1.50]");
        assert_eq!(Ratio::of_pairs([(1.0, 4.0)]).unwrap().text(2), "0.25×");
        assert_eq!(Ratio::of_pairs([(1.0, 0.0)]), None);
    }

    fn rounds_of_rows(system: System, ops: &[u64]) -> Vec<Row> {
        ops.iter()
            .map(|&n| {
                let mut row = measured_row(system, "w1-1kb", 64, n);
                row.latency.p99_ms = n as f64 / 100.0;
                row
            })
            .collect()
    }

    #[test]
    fn combines_rounds_into_medians_and_spreads() {
        // Rounds interleaved as the suite runs them: stepwell, floor; stepwell, floor; ...
        let ours = rounds_of_rows(System::Stepwell, &[100, 300, 200]);
        let floors = rounds_of_rows(System::Floor, &[100, 600, 150]);
        let mut rows: Vec<Row> = ours.into_iter().zip(floors).flat_map(|(o, f)| [o, f]).collect();
        rows[2].errors = 2;
        rows[2].first_problem = Some("second round failed".into());
        let mut rows = combine_rounds(rows);
        assert_eq!(rows.len(), 2);
        let ours = &rows[0];
        assert_eq!((ours.system, ours.rounds, ours.round_figures.len()), (System::Stepwell, 3, 3));
        assert_eq!(ours.throughput_per_s, 200.0);
        assert_eq!((ours.throughput_min_per_s, ours.throughput_max_per_s), (100.0, 300.0));
        assert_eq!(ours.latency.p99_ms, 2.0);
        assert_eq!(ours.context_switches_per_op, Some(3.0));
        assert_eq!(ours.errors, 2);
        assert_eq!(ours.first_problem.as_deref(), Some("second round failed"));
        let raw: Vec<f64> = ours.round_figures.iter().map(|r| r.throughput_per_s).collect();
        assert_eq!(raw, [100.0, 300.0, 200.0]);
        assert_eq!(rows[1].throughput_per_s, 150.0);

        // Round by round: 100/100, 300/600, 200/150; not 200/150 of the medians.
        relate_to_floor(&mut rows);
        let x = rows[0].floor_ratio.unwrap();
        assert_eq!((x.median, x.min, x.rounds), (1.0, 0.5, 3));
        assert!((x.max - 4.0 / 3.0).abs() < 1e-9);
        let table = markdown(&Results { meta: Map::new(), rows, targets: Vec::new() });
        assert!(table.contains("| 3 | 200 | [100–300] | 1.00× [0.50–1.33] |"), "{table}");
    }

    #[test]
    fn targets_take_ratios_round_by_round() {
        let ours = rounds_of_rows(System::Stepwell, &[600, 900, 1200]);
        let direct = rounds_of_rows(System::Direct, &[100, 300, 200]);
        let rows = combine_rounds(ours.into_iter().chain(direct).collect());
        let checks = check_targets(&rows);
        let six = checks.iter().find(|c| c.target.contains("≥ 6× baseline (a)")).unwrap();
        // 6, 3, 6: median 6 and met, where the medians' ratio 900/200 = 4.5 would not be.
        assert_eq!(six.measured, "900/s vs 200/s = 6.00× [3.00–6.00]");
        assert_eq!(six.met, Some(true));
    }

    #[test]
    fn targets_without_rows_are_not_measured() {
        let checks = check_targets(&[]);
        assert!(!checks.is_empty());
        assert!(checks.iter().all(|c| c.met.is_none()));
    }
}
