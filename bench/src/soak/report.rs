//! The soak's report: each store's figures (`Soaked`) with their verdicts,
//! the run's settings and machine, written as results.json, results.md (a
//! section a store: latency per window and kind, requests and errors per
//! window, memory, descriptors and WAL after warm-up, Postgres tables, the
//! verdicts) and soak.svg.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::drive::{Driven, Sampled};
use super::sample::{PgTable, Sample};
use super::stats::{Kind, WindowStat, Windows};
use super::verdict::{self, Growth, Level, Verdict};
use super::{Args, Backend};
use crate::stores::PgServer;

/// One store's soak.
#[derive(Debug, Serialize)]
pub struct Soaked {
    pub backend: Backend,
    pub peak_per_s: f64,
    pub rate_per_s: f64,
    pub sent: u64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub windows: Vec<WindowStat>,
    pub failed: u64,
    pub failures: Vec<String>,
    pub rss_kib: Option<Growth>,
    pub fds: Option<Growth>,
    pub wal_bytes: Option<Growth>,
    pub pg_tables: Vec<TableGrowth>,
    pub pg_final: Option<Vec<PgTable>>,
    pub verdicts: Vec<Verdict>,
    /// Why the soak could not run, or its sidecar not stop, or a reading failed.
    pub problems: Vec<String>,
    pub samples: Vec<Sample>,
}

/// A Postgres table's dead tuples and size after warm-up.
#[derive(Debug, Serialize)]
pub struct TableGrowth {
    pub table: String,
    pub live_last: i64,
    pub dead: Option<Growth>,
    pub bytes: Option<Growth>,
}

impl Soaked {
    pub fn new(backend: Backend) -> Soaked {
        Soaked {
            backend,
            peak_per_s: 0.0,
            rate_per_s: 0.0,
            sent: 0,
            duration_s: 0.0,
            warmup_s: 0.0,
            windows: Vec::new(),
            failed: 0,
            failures: Vec::new(),
            rss_kib: None,
            fds: None,
            wal_bytes: None,
            pg_tables: Vec::new(),
            pg_final: None,
            verdicts: Vec::new(),
            problems: Vec::new(),
            samples: Vec::new(),
        }
    }

    pub fn with_problem(mut self, why: String) -> Soaked {
        self.problems.push(why);
        self
    }

    /// Failed requests and checks, and problems that kept the soak from running.
    pub fn failures(&self) -> u64 {
        self.failed + self.problems.iter().filter(|p| !p.starts_with("reading ")).count() as u64
    }

    pub fn note_failures(&mut self, windows: &Windows, phase: &str) {
        self.failed += windows.failed;
        self.failures.extend(windows.failures.iter().map(|f| format!("{phase}: {f}")));
    }

    /// Takes in the soak's requests and readings and judges them.
    pub fn finish(&mut self, args: &Args, driven: Driven, sampled: Sampled, duration: Duration) {
        self.note_failures(&driven.windows, "soak");
        self.windows = driven.windows.stats(duration);
        (self.sent, self.duration_s) = (driven.sent, duration.as_secs_f64());
        self.warmup_s = args.warmup_seconds as f64;
        let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
            sampled.samples.iter().filter_map(|s| Some((s.t_s, f(s)?))).collect()
        };
        let (rss, fds) = (series(&|s| Some(s.rss_kib as f64)), series(&|s| Some(s.fds as f64)));
        let wal = series(&|s| s.wal_bytes.map(|b| b as f64));
        (self.rss_kib, self.fds) = (verdict::growth(&rss, self.warmup_s), verdict::growth(&fds, self.warmup_s));
        self.wal_bytes = verdict::growth(&wal, self.warmup_s);
        self.pg_tables = table_growth(&sampled.samples, self.warmup_s);
        self.verdicts = vec![
            verdict::growth_verdict("RSS growth after warm-up (KiB)", self.rss_kib),
            verdict::growth_verdict("open fds growth after warm-up", self.fds),
            verdict::p99_verdict(&self.windows),
        ];
        if self.backend == Backend::Sqlite {
            self.verdicts.push(verdict::wal_verdict(&wal, self.warmup_s));
        }
        self.problems.extend(sampled.problems.iter().map(|p| format!("reading {p}")));
        self.samples = sampled.samples;
        self.verdicts.push(verdict::errors_verdict(self.failures(), self.failures.first()));
    }
}

fn table_growth(samples: &[Sample], warmup_s: f64) -> Vec<TableGrowth> {
    let Some(last) = samples.iter().rev().find_map(|s| s.pg_tables.as_ref()) else { return Vec::new() };
    last.iter()
        .map(|table| {
            let series = |f: fn(&PgTable) -> i64| -> Vec<(f64, f64)> {
                let of = |s: &Sample| s.pg_tables.as_ref()?.iter().find(|t| t.table == table.table).map(f);
                samples.iter().filter_map(|s| Some((s.t_s, of(s)? as f64))).collect()
            };
            TableGrowth {
                table: table.table.clone(),
                live_last: table.live_tuples,
                dead: verdict::growth(&series(|t| t.dead_tuples), warmup_s),
                bytes: verdict::growth(&series(|t| t.total_bytes), warmup_s),
            }
        })
        .collect()
}

/// The one-line summary of a soak, as it finishes.
pub fn log(soaked: &Soaked) {
    let rss = soaked.rss_kib.map_or("-".into(), |g| format!("{:+.1}%", g.growth_percent));
    eprintln!(
        "    {}: {} sent at {:.0}/s, {} failed, RSS {rss} after warm-up; {}",
        soaked.backend.name(),
        soaked.sent,
        soaked.rate_per_s,
        soaked.failures(),
        soaked.failures.first().or(soaked.problems.first()).map_or("", String::as_str)
    );
}

/// The time now, as the bench reports write it.
pub fn now_utc() -> String {
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    crate::report::utc(unix)
}

/// The run's settings and machine.
pub fn meta(args: &Args, dir: &Path, started_at: &str, pg: Option<&PgServer>) -> Map<String, Value> {
    let machine = crate::machine::describe(dir);
    let mut meta = Map::new();
    let command = args.command.clone().unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    meta.insert("command".into(), command.into());
    meta.insert("started_at".into(), started_at.into());
    meta.insert("finished_at".into(), now_utc().into());
    meta.insert("machine_summary".into(), crate::machine::summary(&machine).into());
    meta.insert("machine".into(), machine.into());
    meta.insert("git".into(), crate::git_revision().into());
    let flags: Vec<String> = args.sidecar_flags().iter().map(|(n, v)| format!("--{n} {v}")).collect();
    meta.insert(
        "sidecar".into(),
        json!({
            "binary": args.stepwell.display().to_string(),
            "version": crate::machine::sidecar_version(&args.stepwell),
            "flags": flags.join(" "),
            "environment": crate::machine::sidecar_environment(),
        }),
    );
    meta.insert(
        "soak".into(),
        json!({
            "probe_seconds": args.probe_seconds, "probe_in_flight": args.probe_in_flight,
            "share_of_peak": args.share, "duration_seconds": args.duration_seconds,
            "window_seconds": args.window_seconds, "warmup_seconds": args.warmup_seconds,
            "sample_seconds": args.sample_seconds, "channels": args.channels,
            "mix_per_40_requests": "16 checkpoints (turns of 8, the last terminal), 8 restores, 4 begin+complete, \
                2 begins of completed keys, 4 put records (4 records), 2 list records, 2 create+signal+await, \
                1 create with a 1 s timer+await, 1 delete turn",
        }),
    );
    if let Some(pg) = pg {
        let settings: Map<String, Value> =
            pg.settings.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        meta.insert("postgres".into(), json!({ "settings": settings }));
    }
    meta
}

/// Writes results.json, results.md and soak.svg (drawn by `svg`, the
/// plot's) into `out`; answers the Markdown.
pub fn write(
    out: &Path,
    meta: &Map<String, Value>,
    soaks: &[Soaked],
    svg: impl Fn(&[Soaked], &str) -> String,
) -> Result<String, String> {
    std::fs::create_dir_all(out).map_err(|e| format!("create {}: {e}", out.display()))?;
    let json = json!({ "meta": meta, "soaks": soaks });
    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())? + "\n";
    let markdown = markdown(meta, soaks);
    let subtitle = format!("{} — {}", text_of(meta, "started_at"), text_of(meta, "machine_summary"));
    for (name, body) in [("results.json", text), ("results.md", markdown.clone()), ("soak.svg", svg(soaks, &subtitle))]
    {
        std::fs::write(out.join(name), body).map_err(|e| format!("write {name}: {e}"))?;
    }
    Ok(markdown)
}

fn text_of(meta: &Map<String, Value>, key: &str) -> String {
    meta.get(key).and_then(Value::as_str).unwrap_or("?").to_owned()
}

fn markdown(meta: &Map<String, Value>, soaks: &[Soaked]) -> String {
    let mut md = String::from("# stepwell soak\n\n");
    let flags = meta.get("sidecar").and_then(|s| s.get("flags")).and_then(Value::as_str).unwrap_or("?");
    let _ = writeln!(md, "Command: `{}`, started {}.  ", text_of(meta, "command"), text_of(meta, "started_at"));
    let _ = writeln!(md, "Machine: {}; commit {}.  ", text_of(meta, "machine_summary"), text_of(meta, "git"));
    let _ = writeln!(md, "Sidecar flags beyond the defaults: `{flags}`.\n");
    for soaked in soaks {
        section(&mut md, soaked);
    }
    md
}

fn section(md: &mut String, s: &Soaked) {
    let _ = writeln!(md, "## {}\n", s.backend.name());
    let _ = writeln!(
        md,
        "Peak probe {:.0} requests/s; soak at {:.0}/s for {:.0} s ({} requests sent), warm-up {:.0} s.\n",
        s.peak_per_s, s.rate_per_s, s.duration_s, s.sent, s.warmup_s
    );
    latency_table(md, &s.windows);
    resource_table(md, s);
    let _ = writeln!(md, "Verdicts:\n");
    for v in &s.verdicts {
        let level = match v.level {
            Level::Pass => "PASS",
            Level::Warning => "WARNING",
            Level::Fail => "FAIL",
        };
        let _ = writeln!(md, "- **{level}** {}: {}", v.what, v.detail);
    }
    for f in &s.failures {
        let _ = writeln!(md, "- failed: {f}");
    }
    for p in &s.problems {
        let _ = writeln!(md, "- problem: {p}");
    }
    md.push('\n');
}

fn latency_table(md: &mut String, windows: &[WindowStat]) {
    let spans: Vec<String> = windows.iter().map(|w| format!("{:.0}–{:.0} s", w.start_s, w.end_s)).collect();
    let _ = writeln!(md, "Latency, p50 / p99 in ms, by request kind and window (by due time):\n");
    let _ = writeln!(md, "| kind | {} | requests | errors |", spans.join(" | "));
    let _ = writeln!(md, "|---|{}---:|---:|", "---:|".repeat(windows.len()));
    for kind in Kind::ALL {
        let cells: Vec<String> = windows
            .iter()
            .map(|w| w.kind(kind))
            .map(|k| if k.requests > k.errors { format!("{:.1} / {:.1}", k.p50_ms, k.p99_ms) } else { "–".into() })
            .collect();
        let requests: u64 = windows.iter().map(|w| w.kind(kind).requests).sum();
        let errors: u64 = windows.iter().map(|w| w.kind(kind).errors).sum();
        let _ = writeln!(md, "| {} | {} | {requests} | {errors} |", kind.name(), cells.join(" | "));
    }
    let _ = writeln!(md, "\n| window | requests | errors | requests/s |\n|---|---:|---:|---:|");
    for (span, w) in spans.iter().zip(windows) {
        let rate = w.requests() as f64 / (w.end_s - w.start_s).max(1e-9);
        let _ = writeln!(md, "| {span} | {} | {} | {rate:.0} |", w.requests(), w.errors());
    }
    md.push('\n');
}

fn resource_table(md: &mut String, s: &Soaked) {
    let _ = writeln!(md, "| after warm-up | first | last | max | growth |\n|---|---:|---:|---:|---:|");
    let mib = 1024.0;
    let rows = [("RSS, MiB", s.rss_kib, mib), ("open fds", s.fds, 1.0), ("SQLite WAL, MiB", s.wal_bytes, verdict::MIB)];
    for (name, growth, unit) in rows {
        if let Some(g) = growth {
            let (first, last, max) = (g.first / unit, g.last / unit, g.max / unit);
            let _ = writeln!(md, "| {name} | {first:.1} | {last:.1} | {max:.1} | {:+.1}% |", g.growth_percent);
        }
    }
    md.push('\n');
    if s.pg_tables.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "| Postgres table | live tuples (last) | dead tuples first → last (max) | size MiB first → last (max) |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|");
    for t in &s.pg_tables {
        let dead = t.dead.map_or("–".into(), |g| format!("{:.0} → {:.0} ({:.0})", g.first, g.last, g.max));
        let bytes = t.bytes.map_or("–".into(), |g| {
            format!("{:.2} → {:.2} ({:.2})", g.first / verdict::MIB, g.last / verdict::MIB, g.max / verdict::MIB)
        });
        let _ = writeln!(md, "| {} | {} | {dead} | {bytes} |", t.table, t.live_last);
    }
    md.push('\n');
}
