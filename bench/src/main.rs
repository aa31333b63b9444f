//! `stepwell-bench`: the benchmark harness of stepwell. It starts sidecars
//! from a built binary on fresh SQLite files and Postgres databases, drives
//! them with the workloads of `workloads` through the generated gRPC
//! clients, runs the direct-SQL and pgbench baselines on the same stores and
//! settings, and writes `results.json`, `results.md` and `throughput.svg`.
//!
//! `stepwell-bench floor-server --listen ADDR` serves the floor baseline
//! instead (see `floor`); the harness starts it as a child of its own.
//! `stepwell-bench memory ...` measures the sidecar's memory instead (see
//! `memory`; `bench/memory/run` runs it). `stepwell-bench soak ...` holds
//! a mixed load at half the sidecar's peak for a long time and reports its
//! resources and latency over time instead (see `soak`; `bench/soak/run`).
//!
//! It is normally run by `bench/run`, which builds it, starts a throwaway
//! Postgres and passes its URL in `STEPWELL_TEST_POSTGRES_URL`. Exit status:
//! 0 when every point ran without an error or a failed check, 1 otherwise,
//! 2 when the run could not start, 130 when interrupted (every sidecar and
//! pgbench is killed and the temporary directory removed).

mod direct;
mod floor;
mod load;
mod machine;
mod memory;
mod meter;
mod payload;
mod pgbench;
mod plot;
mod report;
mod shape;
mod sidecar;
mod soak;
mod stores;
mod suite;
mod workloads;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use serde_json::{Map, Value, json};

use report::{Backend, Results};
use stores::PgServer;
use suite::{Mode, Settings, Suite};

/// Benchmarks stepwell against direct SQL and pgbench on SQLite and Postgres.
#[derive(Debug, Parser)]
#[command(name = "stepwell-bench")]
struct Args {
    /// smoke (every workload ~1 s, checks only), quick (~3–4 min) or full (3 rounds, ~27 min).
    #[arg(long, value_enum, default_value = "quick")]
    mode: Mode,
    /// Where results.json, results.md and throughput.svg go.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// The stepwell binary to run as the sidecar.
    #[arg(long)]
    stepwell: PathBuf,
    /// A Postgres server to create the benchmark databases on (as a superuser).
    #[arg(long, env = "STEPWELL_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// The directory of pgbench and pg_test_fsync.
    #[arg(long)]
    pg_bindir: Option<PathBuf>,
    /// Which stores to measure.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backends: Vec<BackendArg>,
    /// HTTP/2 connections from the load generator to a sidecar (callers share them).
    #[arg(long, default_value_t = 4)]
    channels: usize,
    /// One HTTP/2 connection per caller instead of --channels shared ones.
    #[arg(long)]
    channel_per_caller: bool,
    /// The load generator's tokio runtime.
    #[arg(long, value_enum, default_value = "multi")]
    client_runtime: shape::Runtime,
    /// Worker threads of the multi-threaded runtime (default: one per core).
    #[arg(long)]
    client_workers: Option<usize>,
    /// The client's HTTP/2 initial stream and connection window, in bytes (default: tonic's).
    #[arg(long)]
    http2_window: Option<u32>,
    /// The client's HTTP/2 adaptive flow-control window.
    #[arg(long)]
    http2_adaptive_window: bool,
    /// The client's HTTP/2 keepalive ping interval, in milliseconds (default: no pings).
    #[arg(long)]
    http2_keepalive_ms: Option<u64>,
    /// Leave Nagle's algorithm on for the client's TCP connections.
    #[arg(long)]
    no_tcp_nodelay: bool,
    /// How W1's JSON states are made: copied from prebuilt documents, or serialised with serde_json per call.
    #[arg(long, value_enum, default_value = "prebuilt")]
    requests: shape::Requests,
    /// How closed-loop callers are scheduled: a task each, or all in one task (join_all).
    #[arg(long, value_enum, default_value = "spawned")]
    callers: shape::Callers,
    /// Baseline (a)'s writer on SQLite: sqlx (its worker thread) or rusqlite (synchronous, in the caller's thread).
    #[arg(long, value_enum, default_value = "sqlx")]
    direct_sqlite: shape::DirectSqlite,
    /// Only run the points whose id contains one of these (comma-separated,
    /// e.g. "sqlite/stepwell/w1-1kb,w3"); one ending in `$` must end the id
    /// (e.g. "w1-1kb/c1$" is not "w1-1kb/c16").
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// How many times each point and its baselines run, interleaved round
    /// by round; rows show the median and the spread (default: 3 for full, 1
    /// for smoke and quick).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: Option<u16>,
    /// The command line to record in the report (bench/run passes its own).
    #[arg(long)]
    command: Option<String>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    Sqlite,
    Postgres,
}

impl Args {
    /// The client shape the flags ask for.
    fn shape(&self) -> shape::Shape {
        shape::Shape {
            runtime: self.client_runtime,
            workers: self.client_workers,
            channels: self.channels.max(1),
            channel_per_caller: self.channel_per_caller,
            http2_window: self.http2_window,
            http2_adaptive_window: self.http2_adaptive_window,
            http2_keepalive_ms: self.http2_keepalive_ms,
            tcp_nodelay: !self.no_tcp_nodelay,
            requests: self.requests,
            callers: self.callers,
            direct_sqlite: self.direct_sqlite,
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(floor::SUBCOMMAND) {
        // The floor server keeps a multi-threaded runtime of default size,
        // whatever shape the load generator's client has.
        let runtime = shape::Shape::default().build_runtime().expect("a tokio runtime");
        let served = match floor::listen_address(&argv[2..]) {
            Ok(listen) => runtime.block_on(floor::serve(listen)),
            Err(why) => Err(why),
        };
        return served.map_or_else(|why| fail(&why), |()| ExitCode::SUCCESS);
    }
    // The memory benchmark's load has a multi-threaded runtime of default size.
    if argv.get(1).map(String::as_str) == Some(memory::SUBCOMMAND) {
        let runtime = shape::Shape::default().build_runtime().expect("a tokio runtime");
        return runtime.block_on(until_interrupted(memory::main(&argv[2..])));
    }
    // So has the soak's.
    if argv.get(1).map(String::as_str) == Some(soak::SUBCOMMAND) {
        let runtime = shape::Shape::default().build_runtime().expect("a tokio runtime");
        return runtime.block_on(until_interrupted(soak::main(&argv[2..])));
    }
    let args = Args::parse();
    shape::set(args.shape());
    match shape::get().build_runtime() {
        Ok(runtime) => runtime.block_on(until_interrupted(run(args))),
        Err(e) => fail(&format!("cannot start the client's runtime: {e}")),
    }
}

/// `work`'s exit code, or 130 once SIGINT or SIGTERM arrives (dropping
/// `work`, which kills its sidecars and pgbench and removes its temporary
/// directory).
async fn until_interrupted(work: impl Future<Output = ExitCode>) -> ExitCode {
    let interrupted = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    tokio::select! {
        code = work => code,
        _ = interrupted => {
            eprintln!("stepwell-bench: interrupted; stopping sidecars and removing temporary files");
            ExitCode::from(130)
        }
    }
}

async fn run(args: Args) -> ExitCode {
    let started_at = SystemTime::now();
    let started = Instant::now();
    let backends: Vec<Backend> = args
        .backends
        .iter()
        .map(|b| match b {
            BackendArg::Sqlite => Backend::Sqlite,
            BackendArg::Postgres => Backend::Postgres,
        })
        .collect();
    let temp = match tempfile::Builder::new().prefix("stepwell-bench.").tempdir() {
        Ok(dir) => dir,
        Err(e) => return fail(&format!("cannot create a temporary directory: {e}")),
    };
    let pg = if backends.contains(&Backend::Postgres) {
        let Some(url) = &args.postgres_url else {
            return fail("Postgres rows need --postgres-url or STEPWELL_TEST_POSTGRES_URL (bench/run starts one)");
        };
        match PgServer::connect(url).await {
            Ok(pg) => Some(pg),
            Err(e) => return fail(&e),
        }
    } else {
        None
    };
    if !args.stepwell.is_file() {
        return fail(&format!("no sidecar binary at {}", args.stepwell.display()));
    }

    let mut meta = Map::new();
    let machine = machine::describe(temp.path());
    meta.insert("mode".into(), json!(args.mode));
    let command = args.command.clone().unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    meta.insert("command".into(), command.into());
    let unix = started_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    meta.insert("started_at".into(), report::utc(unix).into());
    meta.insert("machine_summary".into(), machine::summary(&machine).into());
    meta.insert("machine".into(), machine.into());
    meta.insert("git".into(), git_revision().into());
    meta.insert(
        "sidecar".into(),
        json!({
            "binary": args.stepwell.display().to_string(),
            "version": machine::sidecar_version(&args.stepwell),
            "flags": "defaults, except --listen and --database-url; STEPWELL_LOG=warn",
            "environment": machine::sidecar_environment(),
        }),
    );
    meta.insert(
        "load_generator".into(),
        json!({
            "shape": shape::get(),
            "tokio_worker_threads": match shape::get().runtime {
                shape::Runtime::CurrentThread => 1,
                shape::Runtime::Multi => shape::get()
                    .workers
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(0, |n| n.get())),
            },
        }),
    );
    meta.insert(
        "sqlite".into(),
        "journal_mode=WAL, synchronous=FULL (stepwell's backend and baseline (a) alike)".into(),
    );
    if let Some(pg) = &pg {
        let settings: Map<String, Value> =
            pg.settings.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        meta.insert(
            "postgres".into(),
            json!({
                "settings": settings,
                "server_cpu_metered": pg.postmaster.is_some(),
            }),
        );
    }
    if args.mode == Mode::Full
        && let Some(bindir) = &args.pg_bindir
    {
        eprintln!("measuring the disk's sync rate (pg_test_fsync, ~5 s)");
        meta.insert("pg_test_fsync_one_8kB_write".into(), machine::fsync_rates(bindir, temp.path()));
    }

    let settings = Settings {
        mode: args.mode,
        stepwell: args.stepwell.clone(),
        pg_bindir: args.pg_bindir.clone(),
        backends,
        only: args.only.clone(),
        rounds: args.rounds.map(usize::from),
    };
    let mut suite = Suite::new(settings, temp.path(), pg);
    meta.insert("plan".into(), json!(suite.plan()));
    suite.run().await;

    let took = started.elapsed().as_secs();
    meta.insert("took".into(), format!("{}m {:02}s", took / 60, took % 60).into());
    meta.insert("took_seconds".into(), took.into());
    let targets = report::check_targets(&suite.rows);
    let results = Results { meta, rows: std::mem::take(&mut suite.rows), targets };
    if let Err(e) = write_outputs(&args.out, &results) {
        return fail(&format!("cannot write the results to {}: {e}", args.out.display()));
    }
    println!("{}", report::markdown(&results));
    let problems: u64 = results.rows.iter().map(|r| r.problems()).sum();
    if problems > 0 || results.rows.is_empty() {
        eprintln!(
            "stepwell-bench: {problems} errors or failed checks (see the problems column); results in {}",
            args.out.display()
        );
        return ExitCode::from(1);
    }
    eprintln!("stepwell-bench: results in {}", args.out.display());
    ExitCode::SUCCESS
}

fn write_outputs(out: &Path, results: &Results) -> std::io::Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("results.json"), serde_json::to_string_pretty(results)? + "\n")?;
    std::fs::write(out.join("results.md"), report::markdown(results))?;
    let meta = |key: &str| results.meta.get(key).and_then(Value::as_str).unwrap_or("?").to_owned();
    let subtitle = format!("{} mode, {} — {}", meta("mode"), meta("started_at"), meta("machine_summary"));
    std::fs::write(out.join("throughput.svg"), plot::svg(&results.rows, &subtitle))
}

/// The commit the sidecar was built from, marked when the tree had changes.
fn git_revision() -> String {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match (git(&["rev-parse", "--short", "HEAD"]), git(&["status", "--porcelain", "--untracked-files=no"])) {
        (Some(rev), Some(changes)) if !changes.is_empty() => format!("{rev} (with uncommitted changes)"),
        (Some(rev), _) => rev,
        _ => "unknown".into(),
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!("stepwell-bench: {why}");
    ExitCode::from(2)
}
