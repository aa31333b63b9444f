//! How hard a fault run pushes, and what it reports. The CI profile (the
//! default) keeps the whole suite within minutes; `STEPWELL_FAULT_PROFILE=long`
//! runs ten times the kill cycles and five times the outages, and 1,000
//! power cuts per power-loss test. Random choices
//! come from one seed (`fault_rng`), printed with every report and replayed
//! with `STEPWELL_FAULT_SEED`. Each test prints one report line, and appends
//! it as JSON to the file `STEPWELL_FAULT_REPORT` names, if set.

use std::io::Write;
use std::time::Duration;

use stepwell_test_support::backend::backend;
use stepwell_test_support::rng::Rng;

/// The numbers a profile fixes.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub name: &'static str,
    /// SIGKILL-and-restart cycles per backend.
    pub kill_cycles: usize,
    /// Postgres stop-immediate-and-start cycles.
    pub outages: usize,
    /// Lost-reply rounds of the ambiguous-commit test.
    pub ambiguous_rounds: usize,
    /// Concurrent writers under every fault.
    pub writers: usize,
    /// Power cuts of each power-loss test (`power_loss`).
    pub power_cycles: usize,
}

impl Profile {
    pub fn from_env() -> Profile {
        match stepwell_test_support::setting("STEPWELL_FAULT_PROFILE").as_deref() {
            Some("long") => Profile {
                name: "long",
                kill_cycles: 1000,
                outages: 50,
                ambiguous_rounds: 200,
                writers: 32,
                power_cycles: 1000,
            },
            Some("ci") | None => Profile {
                name: "ci",
                kill_cycles: 100,
                outages: 10,
                ambiguous_rounds: 20,
                writers: 32,
                power_cycles: 30,
            },
            Some(other) => panic!("STEPWELL_FAULT_PROFILE={other:?}: use ci or long"),
        }
    }
}

/// A fault run's generator: from `STEPWELL_FAULT_SEED`, or else from the
/// clock; its seed goes into the run's report.
pub fn fault_rng() -> Rng {
    Rng::from_env("STEPWELL_FAULT_SEED")
}

/// Quantiles of a set of durations, in milliseconds.
pub fn quantiles(samples: &[Duration]) -> (f64, f64, f64) {
    let mut sorted: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted.get(((sorted.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    (at(0.5), at(0.99), sorted.last().copied().unwrap_or(0.0))
}

/// Prints a test's report line, and appends it to `STEPWELL_FAULT_REPORT`.
pub fn report(test: &str, fields: serde_json::Value) {
    let backend = format!("{:?}", backend()).to_lowercase();
    let profile = Profile::from_env().name;
    println!("fault report [{test}, {backend}, {profile} profile]: {fields}");
    if let Some(path) = stepwell_test_support::setting("STEPWELL_FAULT_REPORT") {
        let line = serde_json::json!({ "test": test, "backend": backend, "profile": profile, "figures": fields });
        let mut file =
            std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("open the fault report file");
        writeln!(file, "{line}").expect("append to the fault report");
    }
}
