//! Every setting of stepwell in one place: the command line, its `STEPWELL_*`
//! environment variables, their defaults, and the limits the contract fixes.
//!
//! Flags are taken as text by clap and checked here, so that every mistake in
//! a configuration is reported at once rather than one per run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::clock::Clock;

/// Limits fixed by the contract (shared/API.md); clients rely on them.
pub mod limits {
    /// `turn_id`: 1..=256 bytes.
    pub const TURN_ID_BYTES_MAX: usize = 256;
    /// `session_id`: 0..=256 bytes.
    pub const SESSION_ID_BYTES_MAX: usize = 256;
    /// `phase`: 1..=128 bytes.
    pub const PHASE_BYTES_MAX: usize = 128;
    /// `workflow_version`: 0..=128 bytes.
    pub const WORKFLOW_VERSION_BYTES_MAX: usize = 128;
    /// Idempotency `key`: 1..=512 bytes.
    pub const KEY_BYTES_MAX: usize = 512;
    /// Idempotency `fingerprint`: 0..=256 bytes.
    pub const FINGERPRINT_BYTES_MAX: usize = 256;
    /// The `error` of a Release: 0..=16 KiB.
    pub const ERROR_BYTES_MAX: usize = 16 * 1024;
    /// `namespace`: 1..=63 bytes of `[a-z0-9][a-z0-9._-]*`.
    pub const NAMESPACE_BYTES_MAX: usize = 63;
    /// JSON state may nest arrays and objects this deep, and no deeper.
    pub const STATE_DEPTH_MAX: usize = 64;
    /// Room a request needs beyond its state bytes (ids, timestamps, framing).
    pub const MESSAGE_OVERHEAD_BYTES: usize = 64 * 1024;
}

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "stepwell",
    version,
    about = "Durable-execution sidecar: checkpoint logs and idempotency records over gRPC.",
    long_about = "Durable-execution sidecar: checkpoint logs and idempotency records over gRPC.\n\n\
                  With no subcommand, stepwell serves on 127.0.0.1:50051 with sqlite://stepwell.db."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// What the binary does.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the gRPC API (the default).
    Serve(Box<ServeArgs>),
    /// Ask a running sidecar whether it serves: exit 0 when SERVING, 1 otherwise.
    ///
    /// Calls grpc.health.v1.Health/Check, for container health checks (the
    /// image has no shell). Why it is not SERVING is printed to stderr.
    Healthcheck(HealthcheckArgs),
}

/// Flags of `stepwell healthcheck`.
#[derive(Debug, Clone, Args)]
pub struct HealthcheckArgs {
    /// Sidecar to ask: HOST:PORT, or unix:/path/to.sock. A wildcard address
    /// such as 0.0.0.0 asks the loopback address, so the serve address works.
    #[arg(long, env = "STEPWELL_LISTEN", default_value = "127.0.0.1:50051")]
    pub target: String,

    /// Service whose status to ask for; empty means the whole server.
    #[arg(long, default_value = "")]
    pub service: String,

    /// How long connecting and answering may take together, in milliseconds.
    #[arg(long, default_value = "3000")]
    pub timeout_ms: String,
}

/// The checked flags of `stepwell healthcheck`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healthcheck {
    pub target: Listen,
    pub service: String,
    pub timeout: Duration,
}

impl Healthcheck {
    /// Checks every flag, and reports every mistake at once.
    pub fn from_args(args: &HealthcheckArgs) -> Result<Healthcheck, ConfigErrors> {
        let mut errors = ConfigErrors(Vec::new());
        let target = errors.take("target", args.target.parse::<Listen>());
        let timeout = errors.take("timeout-ms", number::<u64>(&args.timeout_ms, 1, 600_000).map(Duration::from_millis));
        match (target, timeout) {
            (Some(target), Some(timeout)) if errors.0.is_empty() => {
                Ok(Healthcheck { target, service: args.service.clone(), timeout })
            }
            _ => Err(errors),
        }
    }
}

/// Flags of `stepwell serve`. Each is also read from its environment variable.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to serve on: HOST:PORT, or unix:/path/to.sock for a Unix socket.
    #[arg(long, env = "STEPWELL_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: String,

    /// Store to use: sqlite://PATH (created if missing), or
    /// postgres://USER:PASSWORD@HOST:PORT/DATABASE for a store shared by many sidecars.
    #[arg(long, env = "STEPWELL_DATABASE_URL", default_value = "sqlite://stepwell.db")]
    pub database_url: String,

    /// Largest checkpoint state accepted, in bytes.
    #[arg(long, env = "STEPWELL_STATE_BYTES_MAX", default_value = "1048576")]
    pub state_bytes_max: String,

    /// Largest request message accepted, in bytes. Must leave 64 KiB beyond
    /// --state-bytes-max for the other fields.
    #[arg(long, env = "STEPWELL_MESSAGE_BYTES_MAX", default_value = "4194304")]
    pub message_bytes_max: String,

    /// Largest idempotency result accepted by Complete, in bytes.
    #[arg(long, env = "STEPWELL_RESULT_BYTES_MAX", default_value = "1048576")]
    pub result_bytes_max: String,

    /// Lease given by Begin and Extend when the request sets none, in seconds.
    #[arg(long, env = "STEPWELL_LEASE_DEFAULT_SECONDS", default_value = "30")]
    pub lease_default_seconds: String,

    /// Longest lease a request may ask for, in seconds.
    #[arg(long, env = "STEPWELL_LEASE_MAX_SECONDS", default_value = "3600")]
    pub lease_max_seconds: String,

    /// How long a finished idempotency record is kept when Begin sets no
    /// retention, in seconds (default 7 days).
    #[arg(long, env = "STEPWELL_RETENTION_DEFAULT_SECONDS", default_value = "604800")]
    pub retention_default_seconds: String,

    /// Longest retention a request may ask for, in seconds (default 90 days).
    #[arg(long, env = "STEPWELL_RETENTION_MAX_SECONDS", default_value = "7776000")]
    pub retention_max_seconds: String,

    /// How often the sweeper purges idempotency records past their retention, in seconds.
    #[arg(long, env = "STEPWELL_SWEEP_INTERVAL_SECONDS", default_value = "60")]
    pub sweep_interval_seconds: String,

    /// Most records one sweeper pass deletes (one short transaction each).
    #[arg(long, env = "STEPWELL_SWEEP_BATCH_MAX", default_value = "1000")]
    pub sweep_batch_max: String,

    /// Page size used when a request asks for 0.
    #[arg(long, env = "STEPWELL_PAGE_SIZE_DEFAULT", default_value = "1000")]
    pub page_size_default: String,

    /// Largest page size a request may ask for.
    #[arg(long, env = "STEPWELL_PAGE_SIZE_MAX", default_value = "10000")]
    pub page_size_max: String,

    /// Most database connections: Postgres's pool, or SQLite's readers (SQLite
    /// writes always use one connection).
    #[arg(long, env = "STEPWELL_POOL_MAX", default_value = "16")]
    pub pool_max: String,

    /// Most write requests waiting to be committed; more are refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "STEPWELL_WRITE_QUEUE_MAX", default_value = "10000")]
    pub write_queue_max: String,

    /// Most write requests one transaction commits (group commit).
    #[arg(long, env = "STEPWELL_WRITE_BATCH_MAX", default_value = "256")]
    pub write_batch_max: String,

    /// Transactions a Postgres store commits side by side (SQLite always
    /// commits one at a time).
    #[arg(long, env = "STEPWELL_WRITE_CONCURRENCY", default_value = "4")]
    pub write_concurrency: String,

    /// Most requests in the stepwell services at once, across all connections;
    /// more are shed at once with RESOURCE_EXHAUSTED (health and reflection
    /// are never shed).
    #[arg(long, env = "STEPWELL_MAX_CONCURRENT_REQUESTS", default_value = "1024")]
    pub max_concurrent_requests: String,

    /// Largest size the SQLite file may grow to, in bytes; 0 for no cap. A
    /// write that would pass it gets RESOURCE_EXHAUSTED (STORE_FULL), as on a
    /// full disk; reads go on, and writes resume once turns are deleted.
    #[arg(long, env = "STEPWELL_SQLITE_BYTES_MAX", default_value = "0")]
    pub sqlite_bytes_max: String,

    /// How often health re-checks the store, in milliseconds; a failed request
    /// also triggers a check at once.
    #[arg(long, env = "STEPWELL_HEALTH_CHECK_INTERVAL_MS", default_value = "1000")]
    pub health_check_interval_ms: String,

    /// UNSAFE: serve on a Postgres with fsync=off or synchronous_commit=off,
    /// which can lose writes stepwell has acknowledged. For throwaway
    /// development databases only.
    #[arg(long, env = "STEPWELL_UNSAFE_ACCEPT_NONDURABLE_POSTGRES")]
    pub unsafe_accept_nondurable_postgres: bool,

    /// How long shutdown waits for in-flight requests, in seconds.
    #[arg(long, env = "STEPWELL_SHUTDOWN_GRACE_SECONDS", default_value = "30")]
    pub shutdown_grace_seconds: String,

    /// Log format: text or json. The level is set by STEPWELL_LOG (e.g. info, debug).
    #[arg(long, env = "STEPWELL_LOG_FORMAT", default_value = "text")]
    pub log_format: String,
}

impl Default for ServeArgs {
    /// The defaults, overridden by any `STEPWELL_*` environment variables.
    fn default() -> Self {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            args: ServeArgs,
        }
        // Parsing an empty command line can only fail on a bad environment
        // variable value, and all values are text, so it cannot fail.
        Only::try_parse_from(["stepwell"]).map(|o| o.args).unwrap_or_else(|e| e.exit())
    }
}

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl FromStr for Listen {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a socket path, e.g. unix:/run/stepwell.sock".into());
            }
            return Ok(Listen::Unix(PathBuf::from(path)));
        }
        s.parse::<SocketAddr>()
            .map(Listen::Tcp)
            .map_err(|_| format!("{s:?} is neither HOST:PORT (e.g. 127.0.0.1:50051) nor unix:/path"))
    }
}

pub use crate::store::Database;

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

/// Limits a request is checked against.
#[derive(Debug, Clone)]
pub struct Limits {
    pub state_bytes_max: usize,
    pub result_bytes_max: usize,
    pub message_bytes_max: usize,
    pub page_size_default: u32,
    pub page_size_max: u32,
    pub lease_default: Duration,
    pub lease_max: Duration,
    pub retention_default: Duration,
    pub retention_max: Duration,
}

/// How writes are grouped into transactions.
pub use crate::store::writer::WriterConfig as Writes;

/// The background purge of idempotency records past their retention.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub interval: Duration,
    pub batch_max: u32,
}

/// The checked configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub database: Database,
    pub limits: Limits,
    pub sweep: Sweep,
    pub writes: Writes,
    /// The offset tests move to travel in time; not a flag.
    pub clock: Clock,
    pub pool_max: u32,
    pub max_concurrent_requests: usize,
    /// The SQLite file's size cap, if any.
    pub sqlite_bytes_max: Option<u64>,
    pub health_check_interval: Duration,
    /// Serve even on a Postgres that may lose acknowledged writes.
    pub unsafe_accept_nondurable_postgres: bool,
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
}

impl Config {
    /// What the store is opened with.
    pub fn store_options(&self) -> crate::store::Options {
        let sqlite = matches!(self.database, Database::Sqlite { .. });
        crate::store::Options {
            database: self.database.clone(),
            pool_max: self.pool_max,
            acquire_timeout: Duration::from_secs(if sqlite { 5 } else { 2 }),
            sqlite_busy_timeout: Duration::from_secs(5),
            sqlite_bytes_max: self.sqlite_bytes_max,
            unsafe_accept_nondurable_postgres: self.unsafe_accept_nondurable_postgres,
            clock: self.clock.clone(),
        }
    }

    /// A configuration for the given store with every other setting at its default.
    pub fn for_database(database: Database) -> Config {
        let mut config = Config::from_args(&ServeArgs::default()).expect("the defaults are valid");
        config.database = database;
        config
    }

    /// Checks every flag, and reports every mistake at once.
    pub fn from_args(args: &ServeArgs) -> Result<Config, ConfigErrors> {
        let mut errors = ConfigErrors(Vec::new());
        let listen = errors.take("listen", args.listen.parse::<Listen>());
        let database = errors.take("database-url", args.database_url.parse::<Database>());
        let state_bytes_max = errors.take("state-bytes-max", number::<usize>(&args.state_bytes_max, 1, 64 << 20));
        let result_bytes_max = errors.take("result-bytes-max", number::<usize>(&args.result_bytes_max, 1, 64 << 20));
        let message_bytes_max =
            errors.take("message-bytes-max", number::<usize>(&args.message_bytes_max, 1024, 256 << 20));
        if let (Some(state), Some(result), Some(message)) = (state_bytes_max, result_bytes_max, message_bytes_max) {
            let needed = state.max(result) + limits::MESSAGE_OVERHEAD_BYTES;
            if message < needed {
                errors.add(
                    "message-bytes-max",
                    format!("{message} leaves no room for a full state or result; use at least {needed}"),
                );
            }
        }
        let day = 24 * 3600;
        let lease_default = errors.take("lease-default-seconds", seconds(&args.lease_default_seconds, day));
        let lease_max = errors.take("lease-max-seconds", seconds(&args.lease_max_seconds, day));
        if let (Some(default), Some(max)) = (lease_default, lease_max)
            && default > max
        {
            errors.add("lease-default-seconds", format!("{default:?} is above --lease-max-seconds {max:?}"));
        }
        let retention_default =
            errors.take("retention-default-seconds", seconds(&args.retention_default_seconds, 3650 * day));
        let retention_max = errors.take("retention-max-seconds", seconds(&args.retention_max_seconds, 3650 * day));
        if let (Some(default), Some(max)) = (retention_default, retention_max)
            && default > max
        {
            errors.add("retention-default-seconds", format!("{default:?} is above --retention-max-seconds {max:?}"));
        }
        let sweep_interval = errors.take("sweep-interval-seconds", seconds(&args.sweep_interval_seconds, day));
        let sweep_batch_max = errors.take("sweep-batch-max", number::<u32>(&args.sweep_batch_max, 1, 1_000_000));
        let page_size_max = errors.take("page-size-max", number::<u32>(&args.page_size_max, 1, 100_000));
        let page_size_default = errors.take("page-size-default", number::<u32>(&args.page_size_default, 1, 100_000));
        if let (Some(default), Some(max)) = (page_size_default, page_size_max)
            && default > max
        {
            errors.add("page-size-default", format!("{default} is above --page-size-max {max}"));
        }
        let pool_max = errors.take("pool-max", number::<u32>(&args.pool_max, 1, 1024));
        let write_queue_max = errors.take("write-queue-max", number::<usize>(&args.write_queue_max, 1, 1_000_000));
        let write_batch_max = errors.take("write-batch-max", number::<usize>(&args.write_batch_max, 1, 1024));
        let write_concurrency = errors.take("write-concurrency", number::<usize>(&args.write_concurrency, 1, 64));
        let max_concurrent_requests =
            errors.take("max-concurrent-requests", number::<usize>(&args.max_concurrent_requests, 1, 1_000_000));
        let sqlite_bytes_max = errors
            .take("sqlite-bytes-max", number::<u64>(&args.sqlite_bytes_max, 0, u64::MAX))
            .map(|bytes| (bytes > 0).then_some(bytes));
        if let (Some(Some(_)), Some(Database::Postgres { .. })) = (sqlite_bytes_max, &database) {
            errors.add("sqlite-bytes-max", "applies only to a sqlite:// store".to_owned());
        }
        let health_check_interval = errors
            .take("health-check-interval-ms", number::<u64>(&args.health_check_interval_ms, 10, 60_000))
            .map(Duration::from_millis);
        let grace = errors.take("shutdown-grace-seconds", number::<u64>(&args.shutdown_grace_seconds, 0, 3600));
        let log_format = errors.take(
            "log-format",
            match args.log_format.as_str() {
                "text" => Ok(LogFormat::Text),
                "json" => Ok(LogFormat::Json),
                other => Err(format!("{other:?} is not one of text, json")),
            },
        );

        let limits = match (
            state_bytes_max,
            result_bytes_max,
            message_bytes_max,
            page_size_default,
            page_size_max,
            lease_default,
            lease_max,
            retention_default,
            retention_max,
        ) {
            (
                Some(state_bytes_max),
                Some(result_bytes_max),
                Some(message_bytes_max),
                Some(page_size_default),
                Some(page_size_max),
                Some(lease_default),
                Some(lease_max),
                Some(retention_default),
                Some(retention_max),
            ) => Some(Limits {
                state_bytes_max,
                result_bytes_max,
                message_bytes_max,
                page_size_default,
                page_size_max,
                lease_default,
                lease_max,
                retention_default,
                retention_max,
            }),
            _ => None,
        };
        let writes = match (write_queue_max, write_batch_max, write_concurrency, &database) {
            (Some(queue_max), Some(batch_max), Some(concurrency), Some(database)) => Some(Writes {
                queue_max,
                batch_max,
                // SQLite admits one writer; more tasks would only queue on its lock.
                concurrency: if matches!(database, Database::Sqlite { .. }) { 1 } else { concurrency },
            }),
            _ => None,
        };
        match (
            listen,
            database,
            limits,
            writes,
            sweep_interval,
            sweep_batch_max,
            pool_max,
            (max_concurrent_requests, sqlite_bytes_max),
            health_check_interval,
            grace,
            log_format,
        ) {
            (
                Some(listen),
                Some(database),
                Some(limits),
                Some(writes),
                Some(interval),
                Some(batch_max),
                Some(pool_max),
                (Some(max_concurrent_requests), Some(sqlite_bytes_max)),
                Some(health_check_interval),
                Some(grace),
                Some(log_format),
            ) if errors.0.is_empty() => Ok(Config {
                listen,
                database,
                limits,
                sweep: Sweep { interval, batch_max },
                writes,
                clock: Clock::system(),
                pool_max,
                max_concurrent_requests,
                sqlite_bytes_max,
                health_check_interval,
                unsafe_accept_nondurable_postgres: args.unsafe_accept_nondurable_postgres,
                shutdown_grace: Duration::from_secs(grace),
                log_format,
            }),
            _ => Err(errors),
        }
    }
}

fn number<T>(text: &str, min: T, max: T) -> Result<T, String>
where
    T: FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let value: T = text.trim().parse().map_err(|_| format!("{text:?} is not a whole number"))?;
    if value < min || value > max {
        return Err(format!("{value} is outside {min}..={max}"));
    }
    Ok(value)
}

/// A whole number of seconds in 1..=`max`.
fn seconds(text: &str, max: u64) -> Result<Duration, String> {
    number::<u64>(text, 1, max).map(Duration::from_secs)
}

/// Every mistake found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<String>);

impl std::fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for error in &self.0 {
            writeln!(f, "  {error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl ConfigErrors {
    fn add(&mut self, flag: &str, message: String) {
        self.0.push(format!("--{flag}: {message}"));
    }

    /// Keeps the value, or records why the flag was rejected.
    fn take<T>(&mut self, flag: &str, result: Result<T, String>) -> Option<T> {
        result.map_err(|message| self.add(flag, message)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_every_error_at_once() {
        let args = ServeArgs {
            listen: "nowhere".into(),
            database_url: "mysql://x".into(),
            state_bytes_max: "-1".into(),
            log_format: "xml".into(),
            ..ServeArgs::default()
        };
        let errors = Config::from_args(&args).unwrap_err().0;
        assert_eq!(errors.len(), 4, "{errors:?}");
        assert!(errors[0].starts_with("--listen"));
        assert!(errors[1].starts_with("--database-url"));
        assert!(errors[2].starts_with("--state-bytes-max"));
        assert!(errors[3].starts_with("--log-format"));
    }

    #[test]
    fn parses_listen_addresses() {
        assert_eq!("unix:/tmp/s.sock".parse(), Ok(Listen::Unix("/tmp/s.sock".into())));
        assert_eq!("127.0.0.1:1".parse(), Ok(Listen::Tcp("127.0.0.1:1".parse().unwrap())));
        assert!("unix:".parse::<Listen>().is_err());
    }

    #[test]
    fn checks_healthcheck_flags() {
        let args =
            HealthcheckArgs { target: "unix:/run/s.sock".into(), service: String::new(), timeout_ms: "250".into() };
        let checked = Healthcheck::from_args(&args).unwrap();
        assert_eq!(checked.target, Listen::Unix("/run/s.sock".into()));
        assert_eq!(checked.timeout, Duration::from_millis(250));
        let args = HealthcheckArgs { target: "nowhere".into(), service: String::new(), timeout_ms: "0".into() };
        let errors = Healthcheck::from_args(&args).unwrap_err().0;
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("--target") && errors[1].starts_with("--timeout-ms"), "{errors:?}");
    }

    #[test]
    fn message_limit_must_hold_a_full_state() {
        let args = ServeArgs { message_bytes_max: "1048576".into(), ..ServeArgs::default() };
        let errors = Config::from_args(&args).unwrap_err().0;
        assert!(errors[0].contains("no room"), "{errors:?}");
    }
}
