//! Baseline (b): `pgbench` running the same single-row insert against
//! stepwell's checkpoint table in a fresh database: a custom script whose
//! keys come from `\set` random numbers (each client on its own turn, as in
//! W1), with the 1 KB JSON payload bound as a parameter on every
//! transaction, run as `pgbench -n -M prepared -c C -j 2 -T secs`.
//!
//! For W3, the same pair of statements a Begin→Complete costs, against
//! stepwell's idempotency table: an insert-or-select of a new key (taking
//! its lease token from stepwell's sequence, kept with `\gset`), then an
//! update recording its result under that token; each statement commits on
//! its own, as Begin and Complete do, and one pgbench transaction is the
//! pair.
//!
//! Figures come from its per-transaction log (`-l`): every transaction's
//! latency and completion time, so the same warm-up is cut and the same
//! percentiles (p50 to max) are read as for the other rows. Its own summary
//! (tps, failed transactions) is kept beside them.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::process::Command;

use crate::load::{Measured, Window, new_histogram};
use crate::meter::Meters;

/// One transaction: the row stepwell's Checkpoint would store.
const SCRIPT: &str = r"\set ts random(1, 9000000000000000000)
\set step random(0, 99)
INSERT INTO checkpoints
  (namespace, turn_id, phase, ts_ns, session_id, state, terminal, workflow_version, recorded_at_ns)
  VALUES ('bench', 'pgbench-' || :client_id::text, 'step-' || :step::text, :ts, '',
          convert_to(:payload, 'UTF8'), false, '', 0)
  ON CONFLICT (namespace, turn_id, phase, ts_ns) DO NOTHING;
";

/// One W3 pair: Begin's insert-or-select of a new key, then Complete's update.
pub const PAIR_SCRIPT: &str = r"\set k random(1, 9000000000000000000)
WITH inserted AS (
  INSERT INTO idempotency
    (namespace, key, held, fingerprint, attempt, lease_token, lease_expires_at_ns, result, error,
     retention_ns, created_at_ns, updated_at_ns, purge_after_ns)
    VALUES ('bench', 'pgbench-' || :client_id::text || '-' || :k::text, 1, '\x', 1, nextval('lease_tokens'),
            0, '\x', '\x', 0, 0, 0, 0)
    ON CONFLICT (namespace, key) DO NOTHING
    RETURNING lease_token)
SELECT lease_token FROM inserted
UNION ALL
SELECT lease_token FROM idempotency WHERE namespace = 'bench' AND key = 'pgbench-' || :client_id::text || '-' || :k::text
LIMIT 1 \gset
UPDATE idempotency SET held = 2, result = convert_to(:result, 'UTF8'), updated_at_ns = 1
  WHERE namespace = 'bench' AND key = 'pgbench-' || :client_id::text || '-' || :k::text
    AND lease_token = :lease_token;
";

/// The W1 insert script and its 1 KB payload, as `run` takes them.
pub fn insert(payload: &str) -> (&'static str, Vec<(&'static str, String)>) {
    (SCRIPT, vec![("payload", payload.to_owned())])
}

/// What pgbench printed about its run, beside what its log measured.
#[derive(Debug, Default, serde::Serialize)]
pub struct Summary {
    pub command: String,
    /// "tps = ... (without initial connection time)", over its whole run.
    pub tps: Option<f64>,
    pub latency_average_ms: Option<f64>,
    pub failed_transactions: Option<u64>,
}

/// Runs pgbench from `bindir` against the database at `url` with `clients`
/// clients through `window`, in working directory `dir`, running `script`
/// with the variables `defines` (`-D name=value`); meters the Postgres
/// server through `meters` and counts pgbench's CPU as load.
pub async fn run(
    bindir: &Path,
    url: &str,
    clients: usize,
    window: Window,
    meters: Meters,
    dir: &Path,
    (script_text, defines): (&str, Vec<(&str, String)>),
) -> Result<(Measured, Summary), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let script = dir.join("script.sql");
    std::fs::write(&script, script_text).map_err(|e| e.to_string())?;
    // One more second than the window, so pgbench is still running when the window closes.
    let seconds = (window.warmup + window.measure).as_secs_f64().ceil() as u64 + 1;
    let threads = clients.min(2);
    let mut args: Vec<String> = vec![
        "-n".into(),
        "-M".into(),
        "prepared".into(),
        "-c".into(),
        clients.to_string(),
        "-j".into(),
        threads.to_string(),
        "-T".into(),
        seconds.to_string(),
        "-f".into(),
        script.display().to_string(),
        "-l".into(),
        "--log-prefix".into(),
        dir.join("txn").display().to_string(),
    ];
    for (name, value) in defines {
        args.extend(["-D".into(), format!("{name}={value}")]);
    }
    args.push(url.into());
    let binary = bindir.join("pgbench");
    let output_path = dir.join("pgbench.out");
    let output = std::fs::File::create(&output_path).map_err(|e| e.to_string())?;
    let launched_at = SystemTime::now();
    let launched = Instant::now();
    let mut child = Command::new(&binary)
        .args(&args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(output.try_clone().map_err(|e| e.to_string())?)
        .stderr(output)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {}: {e}", binary.display()))?;

    let meters = Meters { external_load: child.id(), ..meters };
    tokio::time::sleep_until((launched + window.warmup).into()).await;
    let opened = meters.snapshot();
    tokio::time::sleep_until((launched + window.warmup + window.measure).into()).await;
    let usage = opened.until(&meters.snapshot());
    let status = tokio::time::timeout(Duration::from_secs(seconds + 60), child.wait())
        .await
        .map_err(|_| "pgbench did not finish".to_string())?
        .map_err(|e| e.to_string())?;
    let printed = std::fs::read_to_string(&output_path).unwrap_or_default();

    let from = launched_at.duration_since(UNIX_EPOCH).map_err(|e| e.to_string())? + window.warmup;
    let until = from + window.measure;
    let mut measured = read_logs(dir, (from, until))?;
    measured.usage = usage;
    let summary = Summary {
        command: format!("{} {}", binary.display(), redact_payload(&args).join(" ")),
        tps: number_after(&printed, "tps = "),
        latency_average_ms: number_after(&printed, "latency average = "),
        failed_transactions: number_after(&printed, "number of failed transactions: ").map(|n| n as u64),
    };
    if !status.success() || summary.failed_transactions.unwrap_or(0) > 0 {
        measured.errors += 1;
        measured.first_problem = Some(format!("pgbench exited with {status}: {}", printed.trim()));
    }
    Ok((measured, summary))
}

/// The arguments as a person would read them: the payload shown as its size.
fn redact_payload(args: &[String]) -> Vec<String> {
    args.iter()
        .map(|arg| match arg.strip_prefix("payload=") {
            Some(payload) => format!("'payload=<{} bytes of JSON>'", payload.len()),
            None => arg.clone(),
        })
        .collect()
}

/// The number printed right after `label` in pgbench's output.
fn number_after(text: &str, label: &str) -> Option<f64> {
    let rest = &text[text.find(label)? + label.len()..];
    rest.split_whitespace().next()?.parse().ok()
}

/// Reads every per-transaction log in `dir` (one per pgbench thread):
/// `client_id transaction_no time_us script_no epoch_s epoch_us`, where the
/// epoch is the completion time. Latency is recorded for transactions that
/// started in `window` (as Unix time), throughput counts those that
/// completed in it.
fn read_logs(dir: &Path, window: (Duration, Duration)) -> Result<Measured, String> {
    let mut latency = new_histogram();
    let mut completed = 0;
    let logs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("txn.")))
        .collect();
    if logs.is_empty() {
        return Err(format!("pgbench wrote no transaction log in {}", dir.display()));
    }
    for log in logs {
        let text = std::fs::read_to_string(&log).map_err(|e| e.to_string())?;
        for line in text.lines() {
            let fields: Vec<u64> = line.split_whitespace().filter_map(|f| f.parse().ok()).collect();
            let [_, _, micros, _, seconds, sub_micros, ..] = fields[..] else {
                return Err(format!("unexpected pgbench log line {line:?} in {}", log.display()));
            };
            let end = Duration::from_secs(seconds) + Duration::from_micros(sub_micros);
            let start = end.saturating_sub(Duration::from_micros(micros));
            if start >= window.0 && start < window.1 {
                latency.saturating_record(micros.max(1));
            }
            if end >= window.0 && end < window.1 {
                completed += 1;
            }
        }
    }
    Ok(Measured { latency, completed, ..Measured::empty() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_pgbench_output_and_logs() {
        let printed = "latency average = 1.234 ms\ntps = 812.5 (without initial connection time)\n\
                       number of failed transactions: 0 (0.000%)\n";
        assert_eq!(number_after(printed, "tps = "), Some(812.5));
        assert_eq!(number_after(printed, "latency average = "), Some(1.234));
        assert_eq!(number_after(printed, "number of failed transactions: "), Some(0.0));

        let dir = tempfile::tempdir().unwrap();
        // Completed at 100.5 s after 2 ms, at 101.5 s after 4 ms, at 103 s after 1 ms.
        std::fs::write(dir.path().join("txn.1"), "0 1 2000 0 100 500000\n0 2 4000 0 101 500000\n").unwrap();
        std::fs::write(dir.path().join("txn.1.1"), "1 1 1000 0 103 0\n").unwrap();
        let measured = read_logs(dir.path(), (Duration::from_secs(100), Duration::from_secs(102))).unwrap();
        assert_eq!(measured.completed, 2);
        assert_eq!(measured.latency.len(), 2);
        assert_eq!(measured.latency.max(), measured.latency.highest_equivalent(4000));
    }
}
