//! `stepwell-bench soak`: the sidecar under a steady mixed load for a long
//! time, on a fresh SQLite file and on a fresh Postgres database, with
//! short turn, record and idempotency retention so that the sweeper's
//! purges run all along.
//!
//! For each store it starts a sidecar, probes the peak throughput of the
//! mixed workload (`mix`) for `--probe-seconds` with as many requests in
//! flight as the probe allows, then sends the same mix at half that rate
//! for `--duration-seconds`, open loop (`drive`). Every read checks what it
//! reads. Meanwhile it samples the sidecar's memory, descriptors, WAL,
//! metrics and Postgres tables (`sample`). Writes results.json, results.md
//! and soak.svg (`report`, `plot`); exits 1 on any error or wrong read,
//! never on the timing and growth verdicts, which are printed. Started by
//! `bench/soak/run`.

mod drive;
mod mix;
mod ops;
mod plot;
mod report;
mod sample;
mod stats;
mod verdict;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

use crate::sidecar::{Address, Sidecar};
use crate::stores::PgServer;
use drive::Watched;
use report::Soaked;

/// The subcommand that runs this benchmark: `stepwell-bench soak ...`.
pub const SUBCOMMAND: &str = "soak";

/// Runs the sidecar under a steady mixed load at half its peak, and reports its resources and latency over time.
#[derive(Debug, Parser)]
#[command(name = "stepwell-bench soak")]
pub struct Args {
    /// The stepwell binary to run as the sidecar.
    #[arg(long)]
    stepwell: PathBuf,
    /// Which stores to soak, one after the other.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backends: Vec<Backend>,
    /// A Postgres server to create the database on (as a superuser).
    #[arg(long, env = "STEPWELL_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// How long the soak runs on each store, after the probe.
    #[arg(long, default_value_t = 1800)]
    duration_seconds: u64,
    /// How long the peak probe runs.
    #[arg(long, default_value_t = 20)]
    probe_seconds: u64,
    /// Requests in flight during the probe.
    #[arg(long, default_value_t = 256)]
    probe_in_flight: usize,
    /// The soak's rate as a share of the probed peak.
    #[arg(long, default_value_t = 0.5)]
    share: f64,
    /// The latency windows' length.
    #[arg(long, default_value_t = 300)]
    window_seconds: u64,
    /// Readings before this (from the soak's start) are warm-up: growth counts from the first after it.
    #[arg(long, default_value_t = 120)]
    warmup_seconds: u64,
    /// How often the sidecar is read.
    #[arg(long, default_value_t = 5)]
    sample_seconds: u64,
    /// Turn, record and idempotency retention of the sidecar.
    #[arg(long, default_value_t = 60)]
    retention_seconds: u64,
    /// The sidecar's sweeper interval.
    #[arg(long, default_value_t = 10)]
    sweep_seconds: u64,
    /// HTTP/2 connections to the sidecar.
    #[arg(long, default_value_t = 4)]
    channels: usize,
    /// Where results.json, results.md and soak.svg go.
    #[arg(long)]
    out: PathBuf,
    /// The command line to record in the report (bench/soak/run passes its own).
    #[arg(long)]
    command: Option<String>,
}

/// The stores a soak runs on: the harness's own.
pub use crate::report::Backend;

impl Args {
    /// The sidecar flags beyond --listen and --database-url.
    fn sidecar_flags(&self) -> Vec<(String, String)> {
        let retention = self.retention_seconds.to_string();
        vec![
            ("turn-retention".into(), format!("{retention}s")),
            ("record-retention".into(), format!("{retention}s")),
            ("retention-default-seconds".into(), retention),
            ("sweep-interval-seconds".into(), self.sweep_seconds.to_string()),
        ]
    }
}

pub async fn main(argv: &[String]) -> ExitCode {
    let args = Args::parse_from(std::iter::once(format!("stepwell-bench {SUBCOMMAND}")).chain(argv.iter().cloned()));
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("stepwell-bench soak: {why}");
            ExitCode::from(2)
        }
    }
}

/// Soaks every store, writes the report, and answers whether no request failed.
async fn run(args: Args) -> Result<bool, String> {
    if !args.stepwell.is_file() {
        return Err(format!("no sidecar binary at {}", args.stepwell.display()));
    }
    let pg = PgServer::if_wanted(args.backends.contains(&Backend::Postgres), args.postgres_url.as_deref()).await?;
    let temp = tempfile::Builder::new().prefix("stepwell-soak.").tempdir().map_err(|e| e.to_string())?;
    let started_at = report::now_utc();
    let mut soaks = Vec::new();
    for &backend in &args.backends {
        eprintln!("==> soak on {}", backend.name());
        let soaked = soak(&args, backend, temp.path(), pg.as_ref()).await;
        report::log(&soaked);
        soaks.push(soaked);
    }
    let meta = report::meta(&args, temp.path(), &started_at, pg.as_ref());
    let text = report::write(&args.out, &meta, &soaks, plot::svg)?;
    println!("{text}");
    let failed: u64 = soaks.iter().map(Soaked::failures).sum();
    if failed > 0 {
        eprintln!("stepwell-bench soak: {failed} failed requests or checks; results in {}", args.out.display());
    }
    Ok(failed == 0)
}

/// One store's soak on a fresh store and sidecar, which are removed
/// whatever happened; a failure to start or stop is a problem of the soak.
async fn soak(args: &Args, backend: Backend, dir: &std::path::Path, pg: Option<&PgServer>) -> Soaked {
    let mut soaked = Soaked::new(backend);
    let (url, database, sqlite) = match (backend, pg) {
        (Backend::Sqlite, _) => {
            let path = dir.join("soak.db");
            (format!("sqlite://{}", path.display()), None, Some(path))
        }
        (Backend::Postgres, Some(pg)) => match pg.fresh_database("soak").await {
            Ok(database) => (database.url.clone(), Some(database), None),
            Err(why) => return soaked.with_problem(why),
        },
        (Backend::Postgres, None) => return soaked.with_problem("no Postgres server".into()),
    };
    let postgres = database.as_ref().map(|d| d.url.clone());
    match start(args, &url, &dir.join(format!("{}.log", backend.name()))).await {
        Ok(sidecar) => {
            let outcome = load(args, &sidecar, sqlite, postgres, &mut soaked).await;
            let stopped = sidecar.stop().await;
            if let Err(why) = outcome.and(stopped) {
                soaked.problems.push(why);
            }
        }
        Err(why) => soaked.problems.push(why),
    }
    if let (Some(pg), Some(database)) = (pg, database)
        && let Err(why) = pg.drop_database(&database).await
    {
        soaked.problems.push(why);
    }
    soaked
}

async fn start(args: &Args, url: &str, log: &std::path::Path) -> Result<Sidecar, String> {
    let addr = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?;
    let mut command = tokio::process::Command::new(&args.stepwell);
    command.arg("serve");
    for (name, value) in args.sidecar_flags() {
        command.arg(format!("--{name}")).arg(value);
    }
    Sidecar::start_with(&args.stepwell, url, log, Address::Tcp(addr), command).await
}

/// The probe, then the soak with the sampler beside it.
async fn load(
    args: &Args,
    sidecar: &Sidecar,
    sqlite: Option<PathBuf>,
    postgres: Option<String>,
    soaked: &mut Soaked,
) -> Result<(), String> {
    let channels = sidecar.connect(args.channels).await?;
    let retention = Duration::from_secs(args.retention_seconds);
    let mix = Arc::new(mix::Mix::new(channels, retention));
    let probe = Duration::from_secs(args.probe_seconds);
    let probed = drive::drive(mix.clone(), None, probe, args.probe_in_flight, probe).await;
    soaked.peak_per_s = probed.throughput(probe);
    soaked.note_failures(&probed.windows, "probe");
    soaked.rate_per_s = soaked.peak_per_s * args.share;
    eprintln!("    peak {:.0} requests/s; soaking at {:.0}/s", soaked.peak_per_s, soaked.rate_per_s);
    if soaked.rate_per_s < 1.0 {
        return Err(format!("the probe's peak, {:.1} requests/s, is too low to soak at", soaked.peak_per_s));
    }
    let pid = sidecar.pid().ok_or("the sidecar has exited")?;
    let watched = Watched { pid, admin: sidecar.admin().map(str::to_owned), sqlite, postgres: postgres.clone() };
    let stop = Arc::new(tokio::sync::Notify::new());
    let every = Duration::from_secs(args.sample_seconds.max(1));
    let pg_every = (30 / args.sample_seconds.max(1)).max(1) as u32;
    let sampler = tokio::spawn(drive::sample(watched, every, pg_every, stop.clone()));
    let duration = Duration::from_secs(args.duration_seconds);
    let window = Duration::from_secs(args.window_seconds.max(1));
    // Twice what the rate's requests at a 1 s latency need, at least the probe's.
    let in_flight = ((soaked.rate_per_s * 2.0) as usize).max(args.probe_in_flight);
    let driven = drive::drive(mix, Some(soaked.rate_per_s), duration, in_flight, window).await;
    stop.notify_one();
    let sampled = sampler.await.map_err(|e| format!("the sampler: {e}"))?;
    if let Some(url) = &postgres {
        soaked.pg_final = Some(sample::pg_tables(url).await?);
    }
    soaked.finish(args, driven, sampled, duration);
    Ok(())
}
