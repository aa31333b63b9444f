//! The memory benchmark's report: one table row per store and state (idle,
//! idle connections, waits created, pending Awaits), each figure the median
//! over rounds with its range, the cost of one connection or one Await over
//! the same sidecar's idle reading, the machine's load beside it, and every
//! problem. Written as results.md and, with every reading, results.json.

use std::path::Path;

use serde_json::json;

use super::probe::Probe;
use super::{Backend, Phase, Run};

/// What the report says of how the runs were made.
pub struct Setup<'a> {
    pub command: String,
    pub flags: &'a [(String, String)],
    /// The harness's open-file limit, which sidecars inherit.
    pub nofile: u64,
    pub sidecar_nofile: Option<u64>,
}

pub fn store_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    }
}

pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Connections => "connections",
        Phase::Awaits => "awaits",
    }
}

/// One line on stderr as each run ends.
pub fn log_run(run: &Run) {
    let mib = |p: Option<Probe>| p.map_or("-".into(), |p| format!("{:.1} MiB", p.rss_kib as f64 / 1024.0));
    eprintln!(
        "round {} {} {} x{}: idle {}, loaded {} ({} fds, {} threads), load {}{}",
        run.round,
        store_name(run.backend),
        phase_name(run.phase),
        run.count,
        mib(run.idle),
        mib(run.loaded),
        run.loaded.map_or(0, |p| p.fds),
        run.loaded.map_or(0, |p| p.threads),
        run.load,
        if run.problems.is_empty() { String::new() } else { format!("; PROBLEMS: {}", run.problems.join("; ")) }
    );
}

/// "median [min–max]" of `values`, or "-" when there are none.
fn spread(values: &[f64], digits: usize) -> String {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return "-".into();
    }
    v.sort_by(f64::total_cmp);
    let median = if v.len() % 2 == 1 { v[v.len() / 2] } else { (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0 };
    if v.len() == 1 {
        return format!("{median:.digits$}");
    }
    format!("{median:.digits$} [{:.digits$}–{:.digits$}]", v[0], v[v.len() - 1])
}

/// One row: readings `probes`, the cost of each unit over the same
/// sidecar's idle reading and over the row before, and the runs' loads.
fn row(store: &str, state: &str, probes: &[Probe], each: [&[f64]; 2], loads: &[f64]) -> String {
    let column = |f: &dyn Fn(&Probe) -> f64, digits| spread(&probes.iter().map(f).collect::<Vec<_>>(), digits);
    format!(
        "| {store} | {state} | {} | {} | {} | {} | {} | {} | {} |",
        column(&|p| p.rss_kib as f64 / 1024.0, 1),
        column(&|p| p.peak_rss_kib as f64 / 1024.0, 1),
        column(&|p| p.fds as f64, 0),
        column(&|p| p.threads as f64, 0),
        spread(each[0], 1),
        spread(each[1], 1),
        spread(loads, 2),
    )
}

/// KiB of resident memory each of `units` added from reading `from` to reading `to`.
fn each(from: Option<Probe>, to: Option<Probe>, units: usize) -> f64 {
    match (from, to) {
        (Some(from), Some(to)) => (to.rss_kib as f64 - from.rss_kib as f64) / units.max(1) as f64,
        _ => f64::NAN,
    }
}

/// The 1-minute load average at the start of `run`.
fn load(run: &Run) -> f64 {
    run.load.split_whitespace().next().and_then(|l| l.parse().ok()).unwrap_or(f64::NAN)
}

/// The rows of one store: idle, then each phase's states.
fn store_rows(backend: Backend, runs: &[&Run]) -> Vec<String> {
    let store = store_name(backend);
    let idle: Vec<Probe> = runs.iter().filter_map(|r| r.idle).collect();
    let loads: Vec<f64> = runs.iter().map(|r| load(r)).collect();
    let mut rows = vec![row(store, "idle after start", &idle, [&[], &[]], &loads)];
    let of = |phase| runs.iter().filter(|r| r.phase == phase).copied().collect::<Vec<&Run>>();
    let readings = |runs: &[&Run], f: fn(&Run) -> Option<Probe>| runs.iter().filter_map(|r| f(r)).collect::<Vec<_>>();
    let conns = of(Phase::Connections);
    if let Some(first) = conns.first() {
        let state = format!("{} idle connections", first.count);
        let over_idle: Vec<f64> = conns.iter().map(|r| each(r.idle, r.loaded, r.count)).collect();
        let loads: Vec<f64> = conns.iter().map(|r| load(r)).collect();
        rows.push(row(store, &state, &readings(&conns, |r| r.loaded), [&over_idle, &[]], &loads));
    }
    let awaits = of(Phase::Awaits);
    if let Some(first) = awaits.first() {
        let loads: Vec<f64> = awaits.iter().map(|r| load(r)).collect();
        let state = format!("{} waits created, {} connections open", first.count, first.connections);
        rows.push(row(store, &state, &readings(&awaits, |r| r.before), [&[], &[]], &loads));
        let state = format!("{} pending Awaits on those connections", first.count);
        let over_idle: Vec<f64> = awaits.iter().map(|r| each(r.idle, r.loaded, r.count)).collect();
        let over_before: Vec<f64> = awaits.iter().map(|r| each(r.before, r.loaded, r.count)).collect();
        rows.push(row(store, &state, &readings(&awaits, |r| r.loaded), [&over_idle, &over_before], &loads));
    }
    rows
}

/// The report as Markdown.
pub fn markdown(setup: &Setup, runs: &[Run]) -> String {
    let rounds = runs.iter().map(|r| r.round).max().unwrap_or(0);
    let flags: Vec<String> = setup.flags.iter().map(|(n, v)| format!("--{n} {v}")).collect();
    let mut out = vec![
        format!("`{}`: {rounds} round(s); median [min–max] over rounds", setup.command),
        String::new(),
        format!("Sidecar flags beyond --listen and --database-url: `{}`.", flags.join(" ")),
        format!(
            "Open-file limit: {} for the load generator, {} for each sidecar.",
            setup.nofile,
            setup.sidecar_nofile.map_or("the same (inherited)".into(), |n| n.to_string())
        ),
        String::new(),
        "| store | state | RSS MiB | peak RSS MiB | fds | threads | KiB each over idle | KiB each over the row before | load (1 min) |".into(),
        "|---|---|---|---|---|---|---|---|---|".into(),
    ];
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let of: Vec<&Run> = runs.iter().filter(|r| r.backend == backend).collect();
        if !of.is_empty() {
            out.extend(store_rows(backend, &of));
        }
    }
    let unsettled = runs.iter().filter(|r| r.loaded.is_some() && !r.settled).count();
    if unsettled > 0 {
        out.push(format!("\n{unsettled} loaded reading(s) were taken before resident memory held still."));
    }
    let problems: Vec<String> = runs
        .iter()
        .flat_map(|r| {
            r.problems
                .iter()
                .map(move |p| format!("- round {} {} {}: {p}", r.round, store_name(r.backend), phase_name(r.phase)))
        })
        .collect();
    if !problems.is_empty() {
        out.push("\nProblems:".into());
        out.extend(problems);
    }
    out.join("\n") + "\n"
}

/// Writes results.md and results.json into `dir`, and answers the Markdown.
pub fn write(dir: &Path, setup: &Setup, runs: &[Run]) -> Result<String, String> {
    let text = markdown(setup, runs);
    let json = json!({
        "command": setup.command,
        "sidecar_flags": setup.flags.iter().map(|(n, v)| format!("--{n} {v}")).collect::<Vec<_>>(),
        "nofile": setup.nofile,
        "sidecar_nofile": setup.sidecar_nofile,
        "runs": runs,
    });
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(dir.join("results.md"), &text))
        .and_then(|()| std::fs::write(dir.join("results.json"), serde_json::to_string_pretty(&json)? + "\n"));
    written.map_err(|e| format!("cannot write the results to {}: {e}", dir.display()))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_is_the_median_and_the_range() {
        assert_eq!(spread(&[], 1), "-");
        assert_eq!(spread(&[2.0], 1), "2.0");
        assert_eq!(spread(&[3.0, 1.0, 2.0], 1), "2.0 [1.0–3.0]");
        assert_eq!(spread(&[4.0, 1.0, f64::NAN, 2.0, 3.0, 5.0], 0), "3 [1–5]");
    }
}
