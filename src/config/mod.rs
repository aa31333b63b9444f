//! Every setting of stepwell in one place: the command line, its `STEPWELL_*`
//! environment variables, their defaults, and the limits the contract fixes.
//!
//! Each flag has its type, parsed by clap's typed parsers; what no single
//! flag can check (one limit against another) is checked by the section it
//! belongs to. Every mistake in a configuration is reported at once rather
//! than one per run. The environment is a source passed in (`Env`), so only
//! `Env::process` reads the process's variables, and tests read none.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::ValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::domain::clock::Clock;
use crate::domain::limits;
use crate::observe::telemetry::LogFormat;
pub use crate::store::Database;
use crate::store::Options as StoreOptions;

pub mod commands;
pub mod env;
pub mod moving;
pub mod values;

use commands::{AuthCommand, Healthcheck, KeysCommand, ProtoArgs, RecordsCommand, TurnsCommand};
use env::{Env, with_env};
use moving::{ExportArgs, ImportArgs, MigrateArgs};
use values::{
    AdminListen, Listen, Retention, admin_listen, age_or_off, count, millis, octal_mode, retention, seconds, size,
};

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
    command: Option<Command>,
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
    Healthcheck(Healthcheck),
    /// Manage the credentials of --auth-file.
    #[command(subcommand)]
    Auth(AuthCommand),
    /// List, show and delete the turns of a running sidecar.
    #[command(subcommand)]
    Turns(TurnsCommand),
    /// Read and release the idempotency keys of a running sidecar.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// List and delete the records (RecordService) of a running sidecar.
    #[command(subcommand)]
    Records(RecordsCommand),
    /// Copy every checkpoint, turn and idempotency key from one store to
    /// another (SQLite to Postgres or back), with the sidecars stopped.
    Migrate(MigrateArgs),
    /// Write every record of a store as NDJSON, for backups and moves.
    Export(ExportArgs),
    /// Load records written by `stepwell export` into a store.
    Import(ImportArgs),
    /// Write the contract's .proto files and a buf.yaml to a directory.
    Proto(ProtoArgs),
}

const DAY_SECONDS: u64 = 24 * 3600;

/// Flags of `stepwell serve`. Each is also read from its environment variable.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to serve on: HOST:PORT, or unix:/path/to.sock for a Unix socket.
    #[arg(long, env = "STEPWELL_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: Listen,

    /// Store to use: sqlite://PATH (created if missing), or
    /// postgres://USER:PASSWORD@HOST:PORT/DATABASE for a store shared by many sidecars.
    #[arg(
        long = "database-url",
        value_name = "URL",
        env = "STEPWELL_DATABASE_URL",
        default_value = "sqlite://stepwell.db"
    )]
    pub database: Database,

    /// Largest checkpoint state accepted, in bytes.
    #[arg(long, env = "STEPWELL_STATE_BYTES_MAX", default_value = "1048576", value_parser = size(1, 64 << 20))]
    pub state_bytes_max: usize,

    /// Largest request message accepted, in bytes. Must leave 64 KiB beyond
    /// --state-bytes-max for the other fields.
    #[arg(long, env = "STEPWELL_MESSAGE_BYTES_MAX", default_value = "4194304",
          value_parser = size(1024, limits::MESSAGE_BYTES_LIMIT as u64))]
    pub message_bytes_max: usize,

    /// Largest idempotency result accepted by Complete, in bytes.
    #[arg(long, env = "STEPWELL_RESULT_BYTES_MAX", default_value = "1048576", value_parser = size(1, 64 << 20))]
    pub result_bytes_max: usize,

    /// Largest record accepted by PutRecords (its payload, metadata and
    /// refs together), in bytes. A request must also fit --message-bytes-max.
    #[arg(long, env = "STEPWELL_RECORD_BYTES_MAX", default_value = "4194304", value_parser = size(1, 256 << 20))]
    pub record_bytes_max: usize,

    /// Largest metadata of a record, and of a ListRecords or DeleteRecords
    /// metadata filter, in bytes.
    #[arg(long, env = "STEPWELL_RECORD_METADATA_BYTES_MAX", default_value = "65536", value_parser = size(2, 16 << 20))]
    pub record_metadata_bytes_max: usize,

    /// Most records one PutRecords may carry.
    #[arg(long, env = "STEPWELL_RECORDS_PER_REQUEST_MAX", default_value = "1000", value_parser = count(1, 100_000))]
    pub records_per_request_max: u32,

    /// Lease given by Begin and Extend when the request sets none, in seconds.
    #[arg(long = "lease-default-seconds", value_name = "SECONDS", env = "STEPWELL_LEASE_DEFAULT_SECONDS", default_value = "30",
          value_parser = seconds(1, DAY_SECONDS))]
    pub lease_default: Duration,

    /// Longest lease a request may ask for, in seconds.
    #[arg(long = "lease-max-seconds", value_name = "SECONDS", env = "STEPWELL_LEASE_MAX_SECONDS", default_value = "3600",
          value_parser = seconds(1, DAY_SECONDS))]
    pub lease_max: Duration,

    /// How long a finished idempotency key is kept when Begin sets no
    /// retention, in seconds (default 7 days).
    #[arg(long = "retention-default-seconds", value_name = "SECONDS", env = "STEPWELL_RETENTION_DEFAULT_SECONDS", default_value = "604800",
          value_parser = seconds(1, 3650 * DAY_SECONDS))]
    pub retention_default: Duration,

    /// Longest retention a request may ask for, in seconds (default 90 days).
    #[arg(long = "retention-max-seconds", value_name = "SECONDS", env = "STEPWELL_RETENTION_MAX_SECONDS", default_value = "7776000",
          value_parser = seconds(1, 3650 * DAY_SECONDS))]
    pub retention_max: Duration,

    /// How often the sweeper purges idempotency keys past their retention, in seconds.
    #[arg(long = "sweep-interval-seconds", value_name = "SECONDS", env = "STEPWELL_SWEEP_INTERVAL_SECONDS", default_value = "60",
          value_parser = seconds(1, DAY_SECONDS))]
    pub sweep_interval: Duration,

    /// Most records one sweeper pass deletes (one short transaction each).
    #[arg(long, env = "STEPWELL_SWEEP_BATCH_MAX", default_value = "1000", value_parser = count(1, 1_000_000))]
    pub sweep_batch_max: u32,

    /// Delete terminal turns whose newest checkpoint is older than this
    /// (90s, 30m, 12h, 30d), or off to keep them forever.
    #[arg(long = "turn-retention", env = "STEPWELL_TURN_RETENTION", value_name = "AGE|off", default_value = "off",
          value_parser = retention)]
    pub turn_retention: Retention,

    /// DANGEROUS: also delete OPEN turns not written for this long, runs a
    /// worker may still resume; off (the default) keeps them.
    #[arg(long = "open-turn-retention", env = "STEPWELL_OPEN_TURN_RETENTION", value_name = "AGE|off",
          default_value = "off", value_parser = retention)]
    pub open_turn_retention: Retention,

    /// Delete every record of a turn (RecordService) when none of them was
    /// written for this long (90s, 30m, 12h, 30d), or off to keep them forever.
    #[arg(long = "record-retention", env = "STEPWELL_RECORD_RETENTION", value_name = "AGE|off",
          default_value = "off", value_parser = retention)]
    pub record_retention: Retention,

    /// A TOML file of per-namespace retention that overrides the three
    /// flags above ([namespaces.NAME] turn_retention = "90d",
    /// open_turn_retention = "off", record_retention = "30d").
    #[arg(long = "retention-file", env = "STEPWELL_RETENTION_FILE", value_name = "PATH")]
    pub retention_file: Option<PathBuf>,

    /// Most bytes of checkpoints (or turn summaries) one Restore (or
    /// ListTurns) page holds; the rest follows through next_page_token. A
    /// page always holds at least one checkpoint, so a checkpoint larger
    /// than this comes alone. The default leaves 64 KiB of the 4 MiB that
    /// gRPC clients accept by default; above --message-bytes-max less 64 KiB
    /// it is lowered to that.
    #[arg(long, env = "STEPWELL_RESPONSE_BYTES_MAX", default_value = "4128768", value_parser = size(1024, 256 << 20))]
    pub response_bytes_max: usize,

    /// Page size used when a request asks for 0.
    #[arg(long, env = "STEPWELL_PAGE_SIZE_DEFAULT", default_value = "1000", value_parser = count(1, 100_000))]
    pub page_size_default: u32,

    /// Largest page size a request may ask for.
    #[arg(long, env = "STEPWELL_PAGE_SIZE_MAX", default_value = "10000", value_parser = count(1, 100_000))]
    pub page_size_max: u32,

    /// Most database connections: Postgres's pool, or SQLite's readers (SQLite
    /// writes always use one connection).
    #[arg(long, env = "STEPWELL_POOL_MAX", default_value = "16", value_parser = count(1, 1024))]
    pub pool_max: u32,

    /// How long a request waits for a database connection from the pool, in
    /// milliseconds (default 5000 on SQLite, 2000 on Postgres, so requests
    /// fail fast while a shared database is away).
    #[arg(long = "pool-acquire-timeout-ms", value_name = "MS", env = "STEPWELL_POOL_ACQUIRE_TIMEOUT_MS", value_parser = millis(1, 600_000))]
    pub pool_acquire_timeout: Option<Duration>,

    /// How long an SQLite connection waits for another's lock on the file
    /// (sidecars sharing one file), in milliseconds.
    #[arg(long = "sqlite-busy-timeout-ms", value_name = "MS", env = "STEPWELL_SQLITE_BUSY_TIMEOUT_MS", default_value = "5000",
          value_parser = millis(1, 600_000))]
    pub sqlite_busy_timeout: Duration,

    /// How long a starting sidecar waits for another's schema migration of
    /// the same store (SQLite's lock file beside the database, Postgres's
    /// migration lock), in milliseconds; then start-up fails, naming the lock.
    #[arg(long = "migration-lock-timeout-ms", value_name = "MS", env = "STEPWELL_MIGRATION_LOCK_TIMEOUT_MS", default_value = "60000",
          value_parser = millis(1, 3_600_000))]
    pub migration_lock_timeout: Duration,

    /// Longest a Postgres statement may run (its `statement_timeout`), in
    /// milliseconds. A request whose statement runs past it gets UNAVAILABLE,
    /// and its transaction is rolled back. Below --request-timeout-ms, so
    /// the store's answer arrives first.
    #[arg(long = "postgres-statement-timeout-ms", value_name = "MS", env = "STEPWELL_POSTGRES_STATEMENT_TIMEOUT_MS",
          default_value = "20000", value_parser = millis(1, 3_600_000))]
    pub postgres_statement_timeout: Duration,

    /// Longest a Postgres statement waits for a lock (row, table and
    /// advisory locks; its `lock_timeout`), in milliseconds. A request that
    /// waits past it gets UNAVAILABLE, and its transaction is rolled back.
    #[arg(long = "postgres-lock-timeout-ms", value_name = "MS", env = "STEPWELL_POSTGRES_LOCK_TIMEOUT_MS",
          default_value = "5000", value_parser = millis(1, 3_600_000))]
    pub postgres_lock_timeout: Duration,

    /// Most write requests waiting to be committed; more are refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "STEPWELL_WRITE_QUEUE_MAX", default_value = "10000", value_parser = size(1, 1_000_000))]
    pub write_queue_max: usize,

    /// Most bytes the write requests waiting to be committed may hold
    /// (states, results, errors, ids), counted until each is answered; more
    /// are refused with RESOURCE_EXHAUSTED. At least --message-bytes-max, so
    /// the largest request can always queue alone.
    #[arg(long, env = "STEPWELL_WRITE_QUEUE_BYTES_MAX", default_value = "67108864", value_parser = size(1024, 1 << 40))]
    pub write_queue_bytes_max: usize,

    /// Most write requests one transaction commits (group commit).
    #[arg(long, env = "STEPWELL_WRITE_BATCH_MAX", default_value = "256", value_parser = size(1, 1024))]
    pub write_batch_max: usize,

    /// Transactions a Postgres store commits side by side (SQLite always
    /// commits one at a time).
    #[arg(long, env = "STEPWELL_WRITE_CONCURRENCY", default_value = "4", value_parser = size(1, 64))]
    pub write_concurrency: usize,

    /// Most checkpoints one transaction of a DeleteTurn deletes: a larger
    /// turn is deleted in chunks of this many, with other writes committed
    /// between them.
    #[arg(long, env = "STEPWELL_DELETE_CHUNK_ROWS", default_value = "1000", value_parser = count(1, 100_000))]
    pub delete_chunk_rows: u32,

    /// Most requests in the stepwell services at once, across all connections;
    /// more are shed at once with RESOURCE_EXHAUSTED (health and reflection
    /// are never shed).
    #[arg(long, env = "STEPWELL_MAX_CONCURRENT_REQUESTS", default_value = "1024", value_parser = size(1, 1_000_000))]
    pub max_concurrent_requests: usize,

    // Connections and streams: what one connection may hold, and how long
    // a request, its body and a silent peer are waited for.
    /// HTTP/2 streams one connection may have open at once; the connection
    /// advertises it, and a peer that opens more has them refused.
    #[arg(long, env = "STEPWELL_CONNECTION_STREAMS_MAX", default_value = "100", value_parser = count(1, 100_000))]
    pub connection_streams_max: u32,

    /// Requests of one connection in the services at once, so that one
    /// connection cannot take the whole --max-concurrent-requests; its further
    /// requests wait for one of its own to finish.
    #[arg(long, env = "STEPWELL_CONNECTION_REQUESTS_MAX", default_value = "64", value_parser = size(1, 1_000_000))]
    pub connection_requests_max: usize,

    /// Longest a request may take, in milliseconds, body read and handler
    /// together; past it the caller gets DEADLINE_EXCEEDED (a write may or
    /// may not have been stored, as with the caller's own deadline).
    #[arg(long = "request-timeout-ms", value_name = "MS", env = "STEPWELL_REQUEST_TIMEOUT_MS", default_value = "30000",
          value_parser = millis(10, 3_600_000))]
    pub request_timeout: Duration,

    /// Longest a request's body may take to arrive, in milliseconds, from its
    /// headers; a body that stalls is answered DEADLINE_EXCEEDED and stores nothing.
    #[arg(long = "body-read-timeout-ms", value_name = "MS", env = "STEPWELL_BODY_READ_TIMEOUT_MS", default_value = "10000",
          value_parser = millis(10, 600_000))]
    pub body_read_timeout: Duration,

    /// Longest a new connection may take to send the HTTP/2 preface that
    /// opens it (after its TLS handshake), in milliseconds; then it is closed.
    #[arg(long = "connection-preface-timeout-ms", value_name = "MS", env = "STEPWELL_CONNECTION_PREFACE_TIMEOUT_MS",
          default_value = "10000", value_parser = millis(10, 600_000))]
    pub connection_preface_timeout: Duration,

    /// Bytes of request bodies being read, across all connections, at once;
    /// a body that would pass it is shed with RESOURCE_EXHAUSTED. At least
    /// --message-bytes-max.
    #[arg(long, env = "STEPWELL_BODY_BUFFER_BYTES_MAX", default_value = "268435456", value_parser = size(1024, 1 << 40))]
    pub body_buffer_bytes_max: usize,

    /// How often an HTTP/2 ping checks that a connection's peer still answers, in milliseconds.
    #[arg(long = "http2-keepalive-interval-ms", value_name = "MS", env = "STEPWELL_HTTP2_KEEPALIVE_INTERVAL_MS",
          default_value = "60000", value_parser = millis(10, 86_400_000))]
    pub http2_keepalive_interval: Duration,

    /// How long a ping waits for its answer before the connection is closed, in milliseconds.
    #[arg(long = "http2-keepalive-timeout-ms", value_name = "MS", env = "STEPWELL_HTTP2_KEEPALIVE_TIMEOUT_MS",
          default_value = "20000", value_parser = millis(10, 600_000))]
    pub http2_keepalive_timeout: Duration,

    /// Idle time before TCP keepalive probes start on a TCP connection, in milliseconds.
    #[arg(long = "tcp-keepalive-ms", value_name = "MS", env = "STEPWELL_TCP_KEEPALIVE_MS", default_value = "60000",
          value_parser = millis(1000, 86_400_000))]
    pub tcp_keepalive: Duration,

    /// Largest size the SQLite file may grow to, in bytes; 0 for no cap. A
    /// write that would pass it gets RESOURCE_EXHAUSTED (STORE_FULL), as on a
    /// full disk; reads go on, and writes resume once turns are deleted.
    #[arg(long, env = "STEPWELL_SQLITE_BYTES_MAX", default_value = "0")]
    pub sqlite_bytes_max: u64,

    /// How often health re-checks the store, in milliseconds; a failed request
    /// also triggers a check at once.
    #[arg(long = "health-check-interval-ms", value_name = "MS", env = "STEPWELL_HEALTH_CHECK_INTERVAL_MS", default_value = "1000",
          value_parser = millis(10, 60_000))]
    pub health_check_interval: Duration,

    /// How long one health check of the store may take before the store
    /// counts as down, in milliseconds.
    #[arg(long = "health-check-timeout-ms", value_name = "MS", env = "STEPWELL_HEALTH_CHECK_TIMEOUT_MS", default_value = "1000",
          value_parser = millis(10, 60_000))]
    pub health_check_timeout: Duration,

    /// How many health checks in a row may run past --health-check-timeout-ms
    /// before the store counts as down. A check that merely ran late may be a
    /// busy machine rather than the store; a check the store refused counts
    /// at once.
    #[arg(long = "health-check-timeouts-max", value_name = "N", env = "STEPWELL_HEALTH_CHECK_TIMEOUTS_MAX", default_value = "3",
          value_parser = count(1, 100))]
    pub health_check_timeouts_max: u32,

    /// Longest wait between tries to reach a shared store that is not up yet
    /// at start-up, in milliseconds (the wait doubles from 100 ms up to this).
    #[arg(long = "store-retry-max-ms", value_name = "MS", env = "STEPWELL_STORE_RETRY_MAX_MS", default_value = "5000",
          value_parser = millis(100, 600_000))]
    pub store_retry_max: Duration,

    /// UNSAFE: serve on a Postgres with fsync=off or synchronous_commit=off,
    /// which can lose writes stepwell has acknowledged. For throwaway
    /// development databases only.
    #[arg(long, env = "STEPWELL_UNSAFE_ACCEPT_NONDURABLE_POSTGRES")]
    pub unsafe_accept_nondurable_postgres: bool,

    /// How long shutdown waits for in-flight requests, in seconds.
    #[arg(long = "shutdown-grace-seconds", value_name = "SECONDS", env = "STEPWELL_SHUTDOWN_GRACE_SECONDS", default_value = "30",
          value_parser = seconds(0, 3600))]
    pub shutdown_grace: Duration,

    /// Principals, their secrets' SHA-256 hashes or certificate identities,
    /// and their grants per namespace (a TOML file; README, "Security").
    /// Turns authentication on; SIGHUP reloads it.
    #[arg(long = "auth-file", env = "STEPWELL_AUTH_FILE", value_name = "PATH")]
    pub auth_file: Option<PathBuf>,

    /// Serve gRPC reflection while authentication is on (it is off then,
    /// since it describes the API to any caller).
    #[arg(long, env = "STEPWELL_REFLECTION_WITH_AUTH")]
    pub reflection_with_auth: bool,

    /// Serve TLS with this certificate chain (PEM); needs --tls-key. SIGHUP reloads it.
    #[arg(long = "tls-cert", env = "STEPWELL_TLS_CERT", value_name = "PATH")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM).
    #[arg(long = "tls-key", env = "STEPWELL_TLS_KEY", value_name = "PATH")]
    pub tls_key: Option<PathBuf>,

    /// Require client certificates signed by these CAs (PEM): mutual TLS.
    /// A certificate's URI or DNS name can be granted roles in --auth-file.
    #[arg(long = "tls-client-ca", env = "STEPWELL_TLS_CLIENT_CA", value_name = "PATH")]
    pub tls_client_ca: Option<PathBuf>,

    /// Longest a client may take over its TLS handshake, in milliseconds;
    /// then its connection is closed.
    #[arg(long = "tls-handshake-timeout-ms", value_name = "MS", env = "STEPWELL_TLS_HANDSHAKE_TIMEOUT_MS",
          default_value = "10000", value_parser = millis(10, 600_000))]
    pub tls_handshake_timeout: Duration,

    /// TLS handshakes under way at once, from all clients; a new connection
    /// that finds this many closes the oldest of them, so stalled handshakes
    /// never keep a new caller out.
    #[arg(long, env = "STEPWELL_TLS_HANDSHAKES_MAX", default_value = "256", value_parser = size(1, 100_000))]
    pub tls_handshakes_max: usize,

    /// TLS handshakes under way at once from one IP address; a new connection
    /// from an address that has this many closes that address's oldest, so
    /// one address cannot push out the handshakes of others.
    #[arg(long, env = "STEPWELL_TLS_HANDSHAKES_PER_ADDRESS_MAX", default_value = "32", value_parser = size(1, 100_000))]
    pub tls_handshakes_per_address_max: usize,

    /// UNSAFE: serve a TCP address beyond loopback without TLS and
    /// authentication, so anyone who reaches it can read and delete every
    /// namespace. A warning is logged at every start.
    #[arg(long, env = "STEPWELL_INSECURE_ALLOW_NETWORK")]
    pub insecure_allow_network: bool,

    /// Permissions of a Unix socket file, in octal (only its owner by default).
    #[arg(long = "unix-socket-mode", env = "STEPWELL_UNIX_SOCKET_MODE", value_name = "OCTAL", default_value = "600",
          value_parser = octal_mode)]
    pub unix_socket_mode: u32,

    /// Address of the admin HTTP listener (/metrics in the Prometheus text
    /// format, /healthz, /readyz): HOST:PORT, or off. It serves plain HTTP
    /// without authentication, so beyond loopback it needs --insecure-allow-network.
    #[arg(long = "admin-listen", env = "STEPWELL_ADMIN_LISTEN", value_name = "ADDR|off", default_value = "127.0.0.1:9464",
          value_parser = admin_listen)]
    pub admin_listen: AdminListen,

    /// Label request metrics with their namespace. Each namespace then adds
    /// its own series (about 20 per method and status code seen); only
    /// calls the sidecar admitted are labelled, and at most
    /// --metrics-namespace-labels-max namespaces.
    #[arg(long, env = "STEPWELL_METRICS_NAMESPACE_LABELS")]
    pub metrics_namespace_labels: bool,

    /// With --metrics-namespace-labels, the most namespaces that get a label
    /// value of their own; the requests of every namespace after them are
    /// counted under namespace="_other".
    #[arg(long = "metrics-namespace-labels-max", env = "STEPWELL_METRICS_NAMESPACE_LABELS_MAX", value_name = "N",
          default_value = "100", value_parser = count(1, 10_000))]
    pub metrics_namespace_labels_max: u32,

    /// Where traces are exported over OTLP/gRPC, e.g. http://127.0.0.1:4317;
    /// tracing is off without it (README, "Operating stepwell").
    #[arg(long = "otlp-endpoint", env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL", hide = true)]
    pub otlp_endpoint: Option<String>,

    /// Where traces are exported over OTLP/gRPC, ahead of --otlp-endpoint.
    #[arg(long = "otlp-traces-endpoint", env = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", value_name = "URL", hide = true)]
    pub otlp_traces_endpoint: Option<String>,

    /// `none` keeps tracing off whatever the endpoint; `otlp` (the default) exports.
    #[arg(
        long = "otel-traces-exporter",
        env = "OTEL_TRACES_EXPORTER",
        value_name = "otlp|none",
        default_value = "otlp",
        hide = true
    )]
    pub otel_traces_exporter: String,

    /// The `service.name` spans carry.
    #[arg(
        long = "otel-service-name",
        env = "OTEL_SERVICE_NAME",
        value_name = "NAME",
        default_value = "stepwell",
        hide = true
    )]
    pub otel_service_name: String,

    /// Log format.
    #[arg(long, env = "STEPWELL_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Which log events to keep: a level (error, warn, info, debug, trace) or
    /// per-module directives such as stepwell=debug,info.
    #[arg(long = "log", value_name = "FILTER", env = "STEPWELL_LOG", default_value = "info")]
    pub log_filter: String,
}

impl ServeArgs {
    /// Every flag at its default, whatever the process's environment holds.
    pub fn defaults() -> ServeArgs {
        match parse(["stepwell"], &Env::default()) {
            Ok(Command::Serve(args)) => *args,
            other => panic!("the defaults parse as `serve`: {other:?}"),
        }
    }
}

/// Parses a command line against `env`. With no subcommand, stepwell serves.
/// Every flag with a bad value is reported at once, in one error.
pub fn parse<I, T>(argv: I, env: &Env) -> Result<Command, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let mut argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let mut command = with_env(Cli::command(), env);
    let mut mistakes = Vec::new();
    let mut relaxed = Vec::new();
    loop {
        match command.try_get_matches_from_mut(&argv) {
            Ok(matches) if matches.subcommand().is_none() => argv.push("serve".into()),
            Ok(matches) if mistakes.is_empty() => {
                let cli = Cli::from_arg_matches(&matches)?;
                return Ok(cli.command.expect("a subcommand was matched"));
            }
            Ok(_) => return Err(command.error(ErrorKind::ValueValidation, mistakes.join("\n  "))),
            Err(error) => {
                // The flag as clap shows it, "--name <NAME>": its first word is the flag.
                let Some(ContextValue::String(shown)) = error.get(ContextKind::InvalidArg) else {
                    return Err(error);
                };
                let flag = shown.split_whitespace().next().unwrap_or_default().to_owned();
                if !matches!(error.kind(), ErrorKind::ValueValidation | ErrorKind::InvalidValue) {
                    return Err(error);
                }
                // A database URL may hold a password, so its value is never repeated.
                let mistake = match std::error::Error::source(&error) {
                    Some(reason) if flag == "--database-url" => format!("invalid value for '{shown}': {reason}"),
                    _ => error
                        .render()
                        .to_string()
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .trim_start_matches("error: ")
                        .to_owned(),
                };
                mistakes.push(mistake);
                // Let this flag take any text, so the next pass finds the next
                // mistake; a flag relaxed already cannot fail again, so a
                // repeat means clap failed otherwise, and that error stands.
                if relaxed.contains(&flag) {
                    return Err(error);
                }
                command = relax(command, &flag);
                relaxed.push(flag);
            }
        }
    }
}

/// Lets the flag `flag` (as `--name`) take any text, in every subcommand at any depth.
fn relax(command: clap::Command, flag: &str) -> clap::Command {
    command
        .mut_args(|arg| match arg.get_long() {
            Some(long) if flag == format!("--{long}") => arg.value_parser(ValueParser::os_string()),
            _ => arg,
        })
        .mut_subcommands(|sub| relax(sub, flag))
}

/// Limits a request is checked against.
#[derive(Debug, Clone)]
pub struct Limits {
    pub state_bytes_max: usize,
    pub result_bytes_max: usize,
    /// Most bytes of one record (payload, metadata and refs).
    pub record_bytes_max: usize,
    pub record_metadata_bytes_max: usize,
    pub records_per_request_max: u32,
    pub message_bytes_max: usize,
    /// Most bytes of checkpoints or turn summaries in one page.
    pub response_bytes_max: usize,
    pub page_size_default: u32,
    pub page_size_max: u32,
    pub lease_default: Duration,
    pub lease_max: Duration,
    pub retention_default: Duration,
    pub retention_max: Duration,
    /// Requests in the stepwell services at once; more are shed.
    pub max_concurrent_requests: usize,
}

/// What one connection may hold, and how long its requests and its peer are
/// waited for (`--connection-*`, `--*-timeout-ms`, `--*-keepalive-*`).
#[derive(Debug, Clone)]
pub struct Connections {
    pub streams_max: u32,
    pub requests_max: usize,
    pub request_timeout: Duration,
    pub body_read_timeout: Duration,
    pub body_buffer_bytes_max: usize,
    pub preface_timeout: Duration,
    pub http2_keepalive_interval: Duration,
    pub http2_keepalive_timeout: Duration,
    pub tcp_keepalive: Duration,
    pub tls_handshakes: Handshakes,
}

/// How long a TLS handshake may take, and how many may be under way at
/// once, in all and from one IP address (`--tls-handshake*`).
#[derive(Debug, Clone, Copy)]
pub struct Handshakes {
    pub timeout: Duration,
    pub max: usize,
    pub per_address_max: usize,
}

/// How writes are grouped into transactions.
pub use crate::store::writer::WriterConfig as Writes;

/// The background purge of idempotency keys past their retention.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub interval: Duration,
    pub batch_max: u32,
    /// Which turns the sweeper deletes.
    pub turns: TurnRetention,
}

/// How long turns are kept: terminal turns and open ones, each `None` for
/// forever, and the namespaces with rules of their own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnRetention {
    pub terminal: Option<Duration>,
    pub open: Option<Duration>,
    /// The records of a turn none of whose records was written for this long.
    pub records: Option<Duration>,
    pub namespaces: std::collections::BTreeMap<String, NamespaceRetention>,
}

/// One namespace's turn retention, in place of the flags'.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NamespaceRetention {
    pub terminal: Option<Duration>,
    pub open: Option<Duration>,
    pub records: Option<Duration>,
}

impl TurnRetention {
    /// Whether any turn can ever be deleted.
    pub fn is_on(&self) -> bool {
        self.terminal.is_some()
            || self.open.is_some()
            || self.records.is_some()
            || self
                .namespaces
                .values()
                .any(|rule| rule.terminal.is_some() || rule.open.is_some() || rule.records.is_some())
    }
}

/// The retention file: `[namespaces.NAME]` tables of ages or "off"; a key
/// left out keeps the flag's value for that namespace.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionFile {
    #[serde(default)]
    namespaces: std::collections::BTreeMap<String, RetentionEntry>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RetentionEntry {
    turn_retention: Option<String>,
    open_turn_retention: Option<String>,
    record_retention: Option<String>,
}

/// The turn retention of the flags and, if named, the file.
fn turn_retention(args: &ServeArgs, errors: &mut ConfigErrors) -> TurnRetention {
    let mut retention = TurnRetention {
        terminal: args.turn_retention.0,
        open: args.open_turn_retention.0,
        records: args.record_retention.0,
        namespaces: Default::default(),
    };
    let Some(path) = &args.retention_file else { return retention };
    let mut fail = |message: String| errors.add("retention-file", format!("{}: {message}", path.display()));
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            fail(format!("cannot be read: {error}"));
            return retention;
        }
    };
    let file: RetentionFile = match toml::from_str(&text) {
        Ok(file) => file,
        Err(error) => {
            fail(format!("is not valid: {error}"));
            return retention;
        }
    };
    for (namespace, entry) in file.namespaces {
        let rule = |value: &Option<String>, default: Option<Duration>| match value {
            None => Ok(default),
            Some(text) => age_or_off(text).map_err(|why| format!("[namespaces.{namespace}]: {why}")),
        };
        let rules = (
            rule(&entry.turn_retention, retention.terminal),
            rule(&entry.open_turn_retention, retention.open),
            rule(&entry.record_retention, retention.records),
        );
        match rules {
            (Ok(terminal), Ok(open), Ok(records)) => {
                retention.namespaces.insert(namespace, NamespaceRetention { terminal, open, records });
            }
            (Err(why), _, _) | (_, Err(why), _) | (_, _, Err(why)) => fail(why),
        }
    }
    retention
}

/// How the sidecar keeps its health true to the store.
#[derive(Debug, Clone)]
pub struct Health {
    /// How often the store is pinged.
    pub check_interval: Duration,
    /// How long a ping may take before it counts as late.
    pub check_timeout: Duration,
    /// How many late pings in a row make the store count as down.
    pub check_timeouts_max: u32,
    /// The first wait before trying again to reach a shared store at start-up.
    pub retry_first: Duration,
    /// The longest such wait; each one doubles up to it.
    pub retry_max: Duration,
}

/// TLS on the gRPC listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// The certificate chain and its key (PEM), reloaded on SIGHUP.
    pub cert: PathBuf,
    pub key: PathBuf,
    /// CAs whose client certificates are required: mutual TLS.
    pub client_ca: Option<PathBuf>,
}

/// Who may call, and over what.
#[derive(Debug, Clone)]
pub struct Security {
    /// The principals file; `None` serves without authentication.
    pub auth_file: Option<PathBuf>,
    /// Reflection stays on while authentication is on.
    pub reflection_with_auth: bool,
    pub tls: Option<Tls>,
    /// The operator accepted a network-facing port without TLS and authentication.
    pub insecure_allow_network: bool,
    /// Permissions of a Unix socket file.
    pub unix_socket_mode: u32,
}

/// What the sidecar tells its operators beyond logs.
#[derive(Debug, Clone)]
pub struct Observability {
    /// Where /metrics, /healthz and /readyz are served; `None` serves none.
    pub admin_listen: Option<SocketAddr>,
    /// Request metrics carry the namespace as a label: at most this many
    /// namespaces each, the rest under `_other`; `None` labels none.
    pub namespace_labels: Option<usize>,
    /// Where traces go over OTLP/gRPC; `None` traces nothing.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the sidecar's spans.
    pub service_name: String,
}

/// The checked configuration the server runs with.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: Listen,
    pub store: StoreOptions,
    pub limits: Limits,
    pub writes: Writes,
    pub sweep: Sweep,
    pub health: Health,
    pub security: Security,
    pub connections: Connections,
    pub observability: Observability,
    pub shutdown_grace: Duration,
    pub log_format: LogFormat,
    pub log_filter: String,
}

impl Config {
    /// A configuration for the given store with every other setting at its default.
    pub fn for_database(database: Database) -> Config {
        let mut args = ServeArgs::defaults();
        args.database = database;
        Config::from_args(&args).expect("the defaults are valid")
    }

    /// Checks what no single flag can, section by section, and reports every
    /// mistake at once.
    pub fn from_args(args: &ServeArgs) -> Result<Config, ConfigErrors> {
        let mut errors = ConfigErrors(Vec::new());
        let config = Config {
            listen: args.listen.clone(),
            store: store_options(args, &mut errors),
            limits: limits(args, &mut errors),
            writes: writes(args, &mut errors),
            sweep: Sweep {
                interval: args.sweep_interval,
                batch_max: args.sweep_batch_max,
                turns: turn_retention(args, &mut errors),
            },
            health: Health {
                check_interval: args.health_check_interval,
                check_timeout: args.health_check_timeout,
                check_timeouts_max: args.health_check_timeouts_max,
                retry_first: Duration::from_millis(100),
                retry_max: args.store_retry_max,
            },
            security: security(args, &mut errors),
            connections: Connections {
                body_buffer_bytes_max: args.body_buffer_bytes_max,
                streams_max: args.connection_streams_max,
                requests_max: args.connection_requests_max,
                request_timeout: args.request_timeout,
                body_read_timeout: args.body_read_timeout,
                preface_timeout: args.connection_preface_timeout,
                http2_keepalive_interval: args.http2_keepalive_interval,
                http2_keepalive_timeout: args.http2_keepalive_timeout,
                tcp_keepalive: args.tcp_keepalive,
                tls_handshakes: Handshakes {
                    timeout: args.tls_handshake_timeout,
                    max: args.tls_handshakes_max,
                    per_address_max: args.tls_handshakes_per_address_max,
                },
            },
            observability: observability(args, &mut errors),
            shutdown_grace: args.shutdown_grace,
            log_format: args.log_format,
            log_filter: args.log_filter.clone(),
        };
        if let Err(error) = tracing_subscriber::EnvFilter::try_new(&args.log_filter) {
            errors.add("log", format!("{:?} is not a log filter: {error}", args.log_filter));
        }
        if errors.0.is_empty() { Ok(config) } else { Err(errors) }
    }
}

/// TLS comes as a certificate with its key; a TCP port beyond loopback
/// needs TLS and authentication, or the operator's word that it may go without.
fn security(args: &ServeArgs, errors: &mut ConfigErrors) -> Security {
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => {
            Some(Tls { cert: cert.clone(), key: key.clone(), client_ca: args.tls_client_ca.clone() })
        }
        (None, None) => None,
        (Some(_), None) => {
            errors.add("tls-cert", "needs --tls-key, the certificate's private key".to_owned());
            None
        }
        (None, Some(_)) => {
            errors.add("tls-key", "needs --tls-cert, the certificate it belongs to".to_owned());
            None
        }
    };
    if args.tls_client_ca.is_some() && args.tls_cert.is_none() {
        errors.add(
            "tls-client-ca",
            "needs --tls-cert and --tls-key: client certificates are asked for over TLS".to_owned(),
        );
    }
    if let Listen::Tcp(address) = &args.listen
        && !address.ip().is_loopback()
        && !(args.tls_cert.is_some() && args.auth_file.is_some())
        && !args.insecure_allow_network
    {
        errors.add(
            "listen",
            format!(
                "{address} is reachable beyond this host, and without TLS and authentication anyone who reaches it \
                 could read and delete every namespace. Add --tls-cert, --tls-key and --auth-file (README, \
                 \"Security\"), listen on 127.0.0.1 or a unix: socket, or pass --insecure-allow-network to accept the risk"
            ),
        );
    }
    Security {
        auth_file: args.auth_file.clone(),
        reflection_with_auth: args.reflection_with_auth,
        tls,
        insecure_allow_network: args.insecure_allow_network,
        unix_socket_mode: args.unix_socket_mode,
    }
}

/// The admin listener follows the rule of `--listen`, but it has neither
/// TLS nor authentication: beyond loopback only on the operator's word. Tracing is on when
/// an OTLP endpoint is named and the exporter is not `none`.
fn observability(args: &ServeArgs, errors: &mut ConfigErrors) -> Observability {
    let admin_listen = match args.admin_listen {
        AdminListen::Off => None,
        AdminListen::Tcp(address) => Some(address),
    };
    if let Some(address) = admin_listen
        && !address.ip().is_loopback()
        && !args.insecure_allow_network
    {
        errors.add(
            "admin-listen",
            format!(
                "{address} is reachable beyond this host, and the admin listener serves plain HTTP without \
                 authentication: anyone who reaches it could read the metrics. Listen on 127.0.0.1 (a scraper in \
                 the same pod or host reaches it), or pass --insecure-allow-network to accept the risk"
            ),
        );
    }
    let exporter = args.otel_traces_exporter.trim().to_ascii_lowercase();
    if !matches!(exporter.as_str(), "otlp" | "none" | "") {
        errors.add("otel-traces-exporter", format!("OTEL_TRACES_EXPORTER={exporter:?}: stepwell exports otlp or none"));
    }
    let endpoint = args.otlp_traces_endpoint.clone().or_else(|| args.otlp_endpoint.clone()).filter(|e| !e.is_empty());
    Observability {
        admin_listen,
        namespace_labels: args.metrics_namespace_labels.then_some(args.metrics_namespace_labels_max as usize),
        otlp_endpoint: endpoint.filter(|_| exporter != "none"),
        service_name: Some(args.otel_service_name.trim()).filter(|n| !n.is_empty()).unwrap_or("stepwell").to_owned(),
    }
}

/// The store's own options.
fn store_options(args: &ServeArgs, errors: &mut ConfigErrors) -> StoreOptions {
    let sqlite = matches!(args.database, Database::Sqlite { .. });
    if args.sqlite_bytes_max > 0 && !sqlite {
        errors.add("sqlite-bytes-max", "applies only to a sqlite:// store".to_owned());
    }
    let acquire_default = if sqlite { Duration::from_secs(5) } else { Duration::from_secs(2) };
    StoreOptions {
        database: args.database.clone(),
        pool_max: args.pool_max,
        acquire_timeout: args.pool_acquire_timeout.unwrap_or(acquire_default),
        sqlite_busy_timeout: args.sqlite_busy_timeout,
        migration_lock_timeout: args.migration_lock_timeout,
        postgres_statement_timeout: args.postgres_statement_timeout,
        postgres_lock_timeout: args.postgres_lock_timeout,
        sqlite_bytes_max: (args.sqlite_bytes_max > 0).then_some(args.sqlite_bytes_max),
        unsafe_accept_nondurable_postgres: args.unsafe_accept_nondurable_postgres,
        clock: Clock::system(),
    }
}

/// How writes are queued and batched: the queue's bytes hold at least the
/// largest request, which could never queue otherwise.
fn writes(args: &ServeArgs, errors: &mut ConfigErrors) -> Writes {
    if args.write_queue_bytes_max < args.message_bytes_max {
        errors.add(
            "write-queue-bytes-max",
            format!(
                "{} is below --message-bytes-max {}: the largest request could never be queued",
                args.write_queue_bytes_max, args.message_bytes_max
            ),
        );
    }
    Writes {
        queue_max: args.write_queue_max,
        queue_bytes_max: args.write_queue_bytes_max,
        batch_max: args.write_batch_max,
        delete_chunk_rows: args.delete_chunk_rows,
        // SQLite admits one writer; more tasks would only queue on its lock.
        concurrency: match args.database {
            Database::Sqlite { .. } => 1,
            Database::Postgres { .. } => args.write_concurrency,
        },
    }
}

/// The request limits, each default within its maximum, and a message large
/// enough for the largest state or result.
fn limits(args: &ServeArgs, errors: &mut ConfigErrors) -> Limits {
    let needed = args.state_bytes_max.max(args.result_bytes_max) + limits::MESSAGE_OVERHEAD_BYTES;
    if args.message_bytes_max < needed {
        errors.add(
            "message-bytes-max",
            format!("{} leaves no room for a full state or result; use at least {needed}", args.message_bytes_max),
        );
    }
    if args.body_buffer_bytes_max < args.message_bytes_max {
        errors.add(
            "body-buffer-bytes-max",
            format!("{} is below --message-bytes-max {}", args.body_buffer_bytes_max, args.message_bytes_max),
        );
    }
    if args.lease_default > args.lease_max {
        errors.add(
            "lease-default-seconds",
            format!("{:?} is above --lease-max-seconds {:?}", args.lease_default, args.lease_max),
        );
    }
    if args.retention_default > args.retention_max {
        errors.add(
            "retention-default-seconds",
            format!("{:?} is above --retention-max-seconds {:?}", args.retention_default, args.retention_max),
        );
    }
    if args.page_size_default > args.page_size_max {
        errors.add(
            "page-size-default",
            format!("{} is above --page-size-max {}", args.page_size_default, args.page_size_max),
        );
    }
    Limits {
        state_bytes_max: args.state_bytes_max,
        result_bytes_max: args.result_bytes_max,
        record_bytes_max: args.record_bytes_max,
        record_metadata_bytes_max: args.record_metadata_bytes_max,
        records_per_request_max: args.records_per_request_max,
        message_bytes_max: args.message_bytes_max,
        page_size_default: args.page_size_default,
        page_size_max: args.page_size_max,
        // A page must fit a message with room for its framing.
        response_bytes_max: args
            .response_bytes_max
            .min(args.message_bytes_max.saturating_sub(limits::MESSAGE_OVERHEAD_BYTES).max(1024)),
        lease_default: args.lease_default,
        lease_max: args.lease_max,
        retention_default: args.retention_default,
        retention_max: args.retention_max,
        max_concurrent_requests: args.max_concurrent_requests,
    }
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
}

#[cfg(test)]
mod tests;
