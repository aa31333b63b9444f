//! `stepwell-bench memory`: the sidecar's memory as a figure. For each store
//! (a fresh SQLite file, a fresh Postgres database) and round it starts a
//! fresh sidecar twice and reads its resident memory, peak, threads and file
//! descriptors from `/proc`:
//!
//! - `connections`: idle after start, then with `--connections` HTTP/2
//!   connections open, each of which made one Health check and then idles;
//! - `awaits`: idle after start, then with the waits created and the
//!   connections that will carry the Awaits open, then with `--awaits`
//!   Awaits pending, `--awaits-per-connection` on each connection, on
//!   waits nobody signals, each asking to wait longer than the run.
//!
//! A reading is taken once the sidecar itself shows the load (its sockets
//! and established connections, or its `stepwell_awaits_pending` gauge) and
//! its resident memory has held still; the run fails unless every
//! connection and every Await was open at that moment, so a figure is never
//! that of a smaller load. A fresh sidecar per phase keeps one phase's heap
//! out of the next one's figure. Writes results.json and results.md; started
//! by `bench/memory/run`.

mod load;
mod probe;
mod report;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use crate::sidecar::{Address, Sidecar};
use crate::stores::PgServer;
use probe::Probe;

/// The subcommand that runs this benchmark: `stepwell-bench memory ...`.
pub const SUBCOMMAND: &str = "memory";

/// Measures the sidecar's memory idle, with many idle connections and with many pending Awaits.
#[derive(Debug, Parser)]
#[command(name = "stepwell-bench memory")]
pub struct Args {
    /// The stepwell binary to run as the sidecar.
    #[arg(long)]
    stepwell: PathBuf,
    /// Idle HTTP/2 connections to hold open at once.
    #[arg(long, default_value_t = 10_000)]
    connections: usize,
    /// Awaits to hold pending at once.
    #[arg(long, default_value_t = 10_000)]
    awaits: usize,
    /// Awaits on one connection: at most the sidecar's --connection-requests-max
    /// (default 64) and --connection-streams-max (default 100), which it
    /// raises to this if need be.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..))]
    awaits_per_connection: u16,
    /// Which stores to measure.
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    backends: Vec<Backend>,
    /// A Postgres server to create the databases on (as a superuser).
    #[arg(long, env = "STEPWELL_TEST_POSTGRES_URL")]
    postgres_url: Option<String>,
    /// How many times each store's two phases run, one after the other.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    rounds: u16,
    /// A sidecar flag to set or override, as NAME=VALUE without the dashes
    /// (e.g. awaits-max=100); may be given many times.
    #[arg(long = "sidecar-flag", value_name = "NAME=VALUE")]
    sidecar_flags: Vec<String>,
    /// The sidecar's open-file limit (RLIMIT_NOFILE); by default it inherits
    /// the harness's, which the harness raises to its hard limit.
    #[arg(long)]
    sidecar_nofile: Option<u64>,
    /// How long the sidecar may take to show the load, and then its memory
    /// to hold still, in seconds.
    #[arg(long, default_value_t = 180)]
    settle_seconds: u64,
    /// Where results.json and results.md go.
    #[arg(long)]
    out: PathBuf,
    /// The command line to record in the report (bench/memory/run passes its own).
    #[arg(long)]
    command: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// What the benchmark loads a sidecar with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Connections,
    Awaits,
}

/// One sidecar's readings: idle, with the waits and connections but no
/// Awaits (awaits only), and under the load; and what went wrong.
#[derive(Debug, Serialize)]
pub struct Run {
    pub backend: Backend,
    pub phase: Phase,
    pub round: u16,
    /// The load to hold: connections, or pending Awaits.
    pub count: usize,
    /// The connections that carried it.
    pub connections: usize,
    /// The machine's 1-, 5- and 15-minute load averages at the run's start.
    pub load: String,
    pub idle: Option<Probe>,
    pub before: Option<Probe>,
    pub loaded: Option<Probe>,
    /// Whether the loaded reading's resident memory held still before it was taken.
    pub settled: bool,
    pub problems: Vec<String>,
}

/// What every run shares.
struct Context {
    args: Args,
    flags: Vec<(String, String)>,
    dir: PathBuf,
    pg: Option<PgServer>,
    limit: Duration,
}

pub async fn main(argv: &[String]) -> ExitCode {
    let args = Args::parse_from(std::iter::once(format!("stepwell-bench {SUBCOMMAND}")).chain(argv.iter().cloned()));
    match run(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(why) => {
            eprintln!("stepwell-bench memory: {why}");
            ExitCode::from(2)
        }
    }
}

/// Runs every phase on every store, writes the report, and answers whether
/// every run held its whole load.
async fn run(args: Args) -> Result<bool, String> {
    let flags = sidecar_flags(&args)?;
    let nofile = raise_nofile(fds_needed(&args))?;
    if !args.stepwell.is_file() {
        return Err(format!("no sidecar binary at {}", args.stepwell.display()));
    }
    let pg = PgServer::if_wanted(args.backends.contains(&Backend::Postgres), args.postgres_url.as_deref()).await?;
    let temp = tempfile::Builder::new().prefix("stepwell-memory.").tempdir().map_err(|e| e.to_string())?;
    let limit = Duration::from_secs(args.settle_seconds);
    let context = Context { args, flags, dir: temp.path().to_owned(), pg, limit };
    let mut runs = Vec::new();
    for round in 1..=context.args.rounds {
        for &backend in &context.args.backends {
            for phase in [Phase::Connections, Phase::Awaits] {
                let run = context.measure(backend, phase, round).await;
                report::log_run(&run);
                runs.push(run);
            }
        }
    }
    let command = context.args.command.clone().unwrap_or_else(|| std::env::args().collect::<Vec<_>>().join(" "));
    let setup = report::Setup { command, flags: &context.flags, nofile, sidecar_nofile: context.args.sidecar_nofile };
    let text = report::write(&context.args.out, &setup, &runs)?;
    println!("{text}");
    let problems: usize = runs.iter().map(|r| r.problems.len()).sum();
    if problems > 0 {
        eprintln!(
            "stepwell-bench memory: {problems} failed checks (see above); results in {}",
            context.args.out.display()
        );
    }
    Ok(problems == 0)
}

/// The flags each sidecar gets beyond --listen and --database-url: the
/// limits a run of this size needs (each at least its default), then the
/// caller's --sidecar-flag settings over them.
fn sidecar_flags(args: &Args) -> Result<Vec<(String, String)>, String> {
    let per = usize::from(args.awaits_per_connection);
    let mut flags: Vec<(String, String)> = vec![
        ("connection-streams-max".into(), per.max(100).to_string()),
        ("connection-requests-max".into(), per.max(64).to_string()),
        ("awaits-max".into(), args.awaits.max(16_384).to_string()),
        // Longer than any run: an Await that answers spoils the figure.
        ("await-timeout-max-ms".into(), "3600000".into()),
    ];
    for setting in &args.sidecar_flags {
        let (name, value) =
            setting.split_once('=').ok_or_else(|| format!("--sidecar-flag {setting}: not NAME=VALUE"))?;
        match flags.iter_mut().find(|(n, _)| n == name) {
            Some(flag) => flag.1 = value.to_owned(),
            None => flags.push((name.to_owned(), value.to_owned())),
        }
    }
    Ok(flags)
}

/// File descriptors the harness and a sidecar each need: one a connection,
/// and room for the rest (an idle sidecar holds about 20, its SQLite
/// readers up to 3 each).
fn fds_needed(args: &Args) -> u64 {
    let carriers = args.awaits.div_ceil(usize::from(args.awaits_per_connection));
    (args.connections.max(carriers) + 256) as u64
}

/// Raises this process's soft open-file limit to its hard limit (sidecars
/// inherit it) and answers it; fails if even the hard limit is below `needed`.
fn raise_nofile(needed: u64) -> Result<u64, String> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(format!("getrlimit: {}", std::io::Error::last_os_error()));
        }
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(format!("setrlimit: {}", std::io::Error::last_os_error()));
        }
    }
    if limit.rlim_max < needed {
        return Err(format!("this run needs {needed} open files; the hard limit (ulimit -Hn) is {}", limit.rlim_max));
    }
    Ok(limit.rlim_max)
}

impl Context {
    /// One phase on a fresh sidecar and store; every failure becomes one of the run's problems.
    async fn measure(&self, backend: Backend, phase: Phase, round: u16) -> Run {
        let count = match phase {
            Phase::Connections => self.args.connections,
            Phase::Awaits => self.args.awaits,
        };
        let mut run = Run {
            backend,
            phase,
            round,
            count,
            connections: 0,
            load: loadavg(),
            idle: None,
            before: None,
            loaded: None,
            settled: false,
            problems: Vec::new(),
        };
        let label = format!("{}-{}-r{round}", report::store_name(backend), report::phase_name(phase));
        if let Err(why) = self.with_sidecar(backend, &label, &mut run).await {
            run.problems.push(why);
        }
        run
    }

    /// Starts a sidecar on a fresh store, runs the phase on it, and stops
    /// it and removes the store whatever happened.
    async fn with_sidecar(&self, backend: Backend, label: &str, run: &mut Run) -> Result<(), String> {
        let (url, database) = match (backend, &self.pg) {
            (Backend::Sqlite, _) => (format!("sqlite://{}", self.dir.join(format!("{label}.db")).display()), None),
            (Backend::Postgres, Some(pg)) => {
                let database = pg.fresh_database(label).await?;
                (database.url.clone(), Some(database))
            }
            (Backend::Postgres, None) => return Err("no Postgres server".into()),
        };
        let outcome = match self.start(&url, &self.dir.join(format!("{label}.log"))).await {
            Ok(mut sidecar) => {
                let measured = self.phase(&mut sidecar, run).await;
                let stopped = sidecar.stop().await;
                measured.and(stopped)
            }
            Err(why) => Err(why),
        };
        if let (Some(pg), Some(database)) = (&self.pg, database) {
            pg.drop_database(&database).await?;
        }
        outcome
    }

    async fn start(&self, url: &str, log: &Path) -> Result<Sidecar, String> {
        let addr =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?;
        let mut command = tokio::process::Command::new(&self.args.stepwell);
        command.arg("serve");
        for (name, value) in &self.flags {
            command.arg(format!("--{name}")).arg(value);
        }
        if let Some(nofile) = self.args.sidecar_nofile {
            let limit = libc::rlimit { rlim_cur: nofile, rlim_max: nofile };
            // SAFETY: setrlimit is async-signal-safe, and the closure touches
            // nothing but its own copy of `limit`.
            unsafe {
                command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                    0 => Ok(()),
                    _ => Err(std::io::Error::last_os_error()),
                });
            }
        }
        Sidecar::start_with(&self.args.stepwell, url, log, Address::Tcp(addr), command).await
    }

    async fn phase(&self, sidecar: &mut Sidecar, run: &mut Run) -> Result<(), String> {
        let Address::Tcp(addr) = *sidecar.address() else { return Err("the sidecar is not on TCP".into()) };
        let pid = sidecar.pid().ok_or("the sidecar has exited")?;
        // The harness's readiness check made a connection; the idle figure waits for it to close.
        let (idle, _) =
            self.when(pid, addr, "the readiness check's connection to close", |p| p.established == 0).await?;
        run.idle = Some(idle);
        match run.phase {
            Phase::Connections => self.connections(sidecar, addr, run).await,
            Phase::Awaits => self.awaits(sidecar, addr, run).await,
        }
    }

    /// Polls the sidecar until `shows` holds of it, then until its memory
    /// holds still, and answers that reading and whether memory settled;
    /// fails if `shows` never holds within the limit, or no longer holds at
    /// the reading.
    async fn when(
        &self,
        pid: u32,
        addr: SocketAddr,
        what: &str,
        shows: impl Fn(&Probe) -> bool,
    ) -> Result<(Probe, bool), String> {
        let deadline = Instant::now() + self.limit;
        loop {
            let probe = probe::read(pid, addr.port())?;
            if shows(&probe) {
                break;
            }
            if Instant::now() >= deadline {
                return Err(format!("waited {:?} for {what}; last reading {probe:?}", self.limit));
            }
            // Polling the process's counters: it signals nothing else.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (probe, settled) = probe::settled(pid, addr.port(), self.limit).await?;
        if !shows(&probe) {
            return Err(format!("{what} no longer held once memory settled: {probe:?}"));
        }
        Ok((probe, settled))
    }

    /// Opens the connections, reads the sidecar once it holds every one of
    /// them (as many more sockets than idle, and as many established on its
    /// port), and closes them.
    async fn connections(&self, sidecar: &mut Sidecar, addr: SocketAddr, run: &mut Run) -> Result<(), String> {
        let pid = sidecar.pid().ok_or("the sidecar has exited")?;
        let (n, idle) = (run.count, run.idle.unwrap_or_default());
        let channels = load::connections(addr, n).await?;
        run.connections = channels.len();
        let what = format!("{n} accepted connections");
        let holds = |p: &Probe| p.established as usize == n && p.sockets >= idle.sockets + n as u64;
        let (probe, settled) = self.when(pid, addr, &what, holds).await?;
        (run.loaded, run.settled) = (Some(probe), settled);
        drop(channels);
        Ok(())
    }

    /// Creates the waits over the carrying connections, reads the sidecar,
    /// starts the Awaits, and reads it again once its gauge counts every one
    /// of them pending and none has answered.
    async fn awaits(&self, sidecar: &mut Sidecar, addr: SocketAddr, run: &mut Run) -> Result<(), String> {
        let pid = sidecar.pid().ok_or("the sidecar has exited")?;
        let admin = sidecar.admin().ok_or("the sidecar's admin listener is off; the gauge is needed")?.to_owned();
        let (n, per) = (run.count, usize::from(self.args.awaits_per_connection));
        let channels = load::connections(addr, n.div_ceil(per)).await?;
        run.connections = channels.len();
        load::create_waits(&channels, n).await?;
        let m = channels.len() as u64;
        run.before = Some(self.when(pid, addr, "the carrying connections", |p| p.established == m).await?.0);
        let timeout = Duration::from_millis(self.flag("await-timeout-max-ms").unwrap_or(300_000));
        let mut awaits = load::start_awaits(&channels, per, n, timeout);
        let measured = self.pending_reading(pid, addr, &admin, &awaits, run).await;
        awaits.tasks.abort_all();
        (run.loaded, run.settled) = measured.map(|(probe, settled)| (Some(probe), settled))?;
        while awaits.tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// The reading under `awaits`: once the gauge counts every one pending,
    /// with the carrying connections still open; fails unless, after the
    /// reading too, the gauge counts them all and none has answered.
    async fn pending_reading(
        &self,
        pid: u32,
        addr: SocketAddr,
        admin: &str,
        awaits: &load::Awaits,
        run: &Run,
    ) -> Result<(Probe, bool), String> {
        let (n, m) = (run.count, run.connections as u64);
        self.until_pending(admin, n, awaits).await?;
        let reading = self.when(pid, addr, "the carrying connections", |p| p.established == m).await?;
        let pending = load::awaits_pending(admin).await?;
        let answered = awaits.answered.load(std::sync::atomic::Ordering::SeqCst);
        if pending != n as u64 || answered != 0 {
            let first = awaits.first_answer.lock().expect("not poisoned").clone().unwrap_or_default();
            return Err(format!(
                "at the reading {pending} of {n} Awaits were pending and {answered} had answered {first}"
            ));
        }
        Ok(reading)
    }

    /// Polls the gauge until it counts `n` Awaits pending; fails if one
    /// answers first, or the limit passes.
    async fn until_pending(&self, admin: &str, n: usize, awaits: &load::Awaits) -> Result<(), String> {
        let deadline = Instant::now() + self.limit;
        loop {
            let pending = load::awaits_pending(admin).await?;
            let answered = awaits.answered.load(std::sync::atomic::Ordering::SeqCst);
            if answered > 0 {
                let first = awaits.first_answer.lock().expect("not poisoned").clone().unwrap_or_default();
                return Err(format!(
                    "{answered} of {n} Awaits answered while they should wait ({first}); {pending} pending"
                ));
            }
            if pending == n as u64 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("waited {:?} for {n} pending Awaits; the sidecar counts {pending}", self.limit));
            }
            // Polling the sidecar's gauge: nothing else says the Awaits arrived.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn flag(&self, name: &str) -> Option<u64> {
        self.flags.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.parse().ok())
    }
}

/// The machine's load averages, as /proc/loadavg has them.
fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let base = ["memory", "--stepwell", "stepwell", "--out", "out"];
        Args::parse_from(base.iter().chain(extra).copied())
    }

    #[test]
    fn the_flags_cover_the_load_and_the_caller_overrides_them() {
        let flags = sidecar_flags(&args(&["--awaits", "20000", "--awaits-per-connection", "128"])).unwrap();
        let value = |name: &str| flags.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!(value("awaits-max"), Some("20000"));
        assert_eq!(value("connection-requests-max"), Some("128"));
        assert_eq!(value("connection-streams-max"), Some("128"));
        let flags = sidecar_flags(&args(&["--sidecar-flag", "awaits-max=100", "--sidecar-flag", "log=warn"])).unwrap();
        let value = |name: &str| flags.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
        assert_eq!((value("awaits-max"), value("log")), (Some("100"), Some("warn")));
        assert_eq!((value("connection-streams-max"), value("connection-requests-max")), (Some("100"), Some("64")));
        assert!(sidecar_flags(&args(&["--sidecar-flag", "awaits-max"])).is_err());
    }
}
