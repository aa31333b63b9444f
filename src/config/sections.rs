//! The configuration the server runs with, in typed sections (limits,
//! connections, sweep, health, security, observability, the store's
//! options and the writer's), made from the serve flags by
//! `Config::from_args`. Here are the checks no single flag can make, one
//! flag against another, each mistake reported with its flag and all of
//! them at once.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::Errors;
use super::retention::{TurnRetention, turn_retention};
use super::serve::ServeArgs;
pub use super::values::ConsoleMode;
use super::values::{AdminListen, Listen, PoolerArg, PostgresProfileArg};
use crate::domain::clock::Clock;
use crate::domain::limits;
use crate::observe::telemetry::LogFormat;
use crate::store::Options as StoreOptions;
use crate::store::writer::WriterConfig;
use crate::store::{Database, Pooler, PostgresMode, PostgresProfile};

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
    pub wait_payload_bytes_max: usize,
    pub wait_metadata_bytes_max: usize,
    pub waits_per_turn_max: u32,
    /// Memory (`--memory-*`): a value's bytes, a vector's numbers, an
    /// item's vectors, a request's items, a search's results, a path's labels.
    pub memory: MemoryLimits,
    /// Longest an Await waits for its wait before answering it pending.
    pub await_timeout_max: Duration,
    /// Awaits waiting at once; more are refused.
    pub awaits_max: usize,
}

/// What memory requests may carry (`--memory-*`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryLimits {
    pub value_bytes_max: usize,
    pub dims_max: usize,
    pub vectors_per_item_max: usize,
    pub items_per_request_max: usize,
    pub search_results_max: u32,
    pub path_depth_max: usize,
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

/// The background purge of idempotency keys past their retention.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub interval: Duration,
    pub batch_max: u32,
    /// Which turns the sweeper deletes.
    pub turns: TurnRetention,
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

/// The web console on the admin listener.
#[derive(Debug, Clone)]
pub struct Console {
    pub mode: ConsoleMode,
    pub session_ttl: Duration,
    pub sessions_max: usize,
    /// An open turn without a checkpoint for longer than this is stalled.
    pub stalled_after: Duration,
}

/// What the sidecar tells its operators beyond logs.
#[derive(Debug, Clone)]
pub struct Observability {
    /// Where /metrics, /healthz, /readyz and the console are served; `None` serves none.
    pub admin_listen: Option<SocketAddr>,
    /// The admin listener's certificate and key when it serves TLS.
    pub admin_tls: Option<Tls>,
    pub console: Console,
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
    /// How writes are grouped into transactions.
    pub writes: WriterConfig,
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
    pub fn from_args(args: &ServeArgs) -> Result<Config, Errors> {
        let mut errors = Errors(Vec::new());
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
fn security(args: &ServeArgs, errors: &mut Errors) -> Security {
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

/// The admin listener follows the rule of `--listen`: beyond loopback it
/// needs TLS (`--admin-tls`) and authentication (`--auth-file`, which the
/// console's sign-in uses), or the operator's word. Tracing is on when an
/// OTLP endpoint is named and the exporter is not `none`.
fn observability(args: &ServeArgs, errors: &mut Errors) -> Observability {
    let admin_listen = match args.admin_listen {
        AdminListen::Off => None,
        AdminListen::Tcp(address) => Some(address),
    };
    let admin_tls = admin_tls(args, errors);
    if let Some(address) = admin_listen
        && !address.ip().is_loopback()
        && !(admin_tls.is_some() && args.auth_file.is_some())
        && !args.insecure_allow_network
    {
        errors.add(
            "admin-listen",
            format!(
                "{address} is reachable beyond this host, and without TLS and authentication anyone who reaches it \
                 could read the metrics and the console's pages. Add --admin-tls and --auth-file, listen on \
                 127.0.0.1 (a scraper in the same pod or host reaches it), or pass --insecure-allow-network to \
                 accept the risk"
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
        admin_tls,
        console: Console {
            mode: args.console,
            session_ttl: args.console_session_ttl,
            sessions_max: args.console_sessions_max as usize,
            stalled_after: args.console_stalled_after,
        },
        namespace_labels: args.metrics_namespace_labels.then_some(args.metrics_namespace_labels_max as usize),
        otlp_endpoint: endpoint.filter(|_| exporter != "none"),
        service_name: Some(args.otel_service_name.trim()).filter(|n| !n.is_empty()).unwrap_or("stepwell").to_owned(),
    }
}

/// The admin listener's certificate with `--admin-tls`: its own, or the server's.
fn admin_tls(args: &ServeArgs, errors: &mut Errors) -> Option<Tls> {
    let own = match (&args.admin_tls_cert, &args.admin_tls_key) {
        (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
        (None, None) => None,
        (Some(_), None) => {
            errors.add("admin-tls-cert", "needs --admin-tls-key, the certificate's private key".to_owned());
            return None;
        }
        (None, Some(_)) => {
            errors.add("admin-tls-key", "needs --admin-tls-cert, the certificate it belongs to".to_owned());
            return None;
        }
    };
    if !args.admin_tls {
        if own.is_some() {
            errors.add("admin-tls-cert", "applies only with --admin-tls".to_owned());
        }
        return None;
    }
    let server = args.tls_cert.clone().zip(args.tls_key.clone());
    match own.or(server) {
        Some((cert, key)) => Some(Tls { cert, key, client_ca: None }),
        None => {
            errors.add(
                "admin-tls",
                "needs a certificate: --admin-tls-cert and --admin-tls-key, or the server's --tls-cert and --tls-key"
                    .to_owned(),
            );
            None
        }
    }
}

/// The store's own options.
fn store_options(args: &ServeArgs, errors: &mut Errors) -> StoreOptions {
    let sqlite = matches!(args.database, Database::Sqlite { .. });
    if args.sqlite_bytes_max > 0 && !sqlite {
        errors.add("sqlite-bytes-max", "applies only to a sqlite:// store".to_owned());
    }
    let acquire_default = if sqlite { Duration::from_secs(5) } else { Duration::from_secs(2) };
    let postgres = postgres_mode(args, errors);
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
        unsafe_sqlite_synchronous_normal: args.unsafe_sqlite_synchronous_normal,
        clock: Clock::system(),
        postgres,
    }
}

/// How a Postgres store is reached; these flags name nothing on SQLite.
fn postgres_mode(args: &ServeArgs, errors: &mut Errors) -> PostgresMode {
    let sqlite = matches!(args.database, Database::Sqlite { .. });
    if sqlite && args.postgres_profile != PostgresProfileArg::Standard {
        errors.add("postgres-profile", "applies only to a postgres:// store".to_owned());
    }
    if sqlite && args.postgres_pooler != PoolerArg::None {
        errors.add("postgres-pooler", "applies only to a postgres:// store".to_owned());
    }
    if sqlite && args.postgres_vector_index_dims.0 != super::values::DEFAULT_VECTOR_INDEX_DIMS {
        errors.add("postgres-vector-index-dims", "applies only to a postgres:// store".to_owned());
    }
    if let Some(url) = &args.postgres_listen_url {
        if sqlite {
            errors.add("postgres-listen-url", "applies only to a postgres:// store".to_owned());
        } else if !matches!(url.parse(), Ok(Database::Postgres { .. })) {
            errors.add("postgres-listen-url", "must be a postgres:// URL".to_owned());
        }
    }
    PostgresMode {
        profile: match args.postgres_profile {
            PostgresProfileArg::Standard => PostgresProfile::Standard,
            PostgresProfileArg::Portable => PostgresProfile::Portable,
        },
        pooler: match args.postgres_pooler {
            PoolerArg::None => Pooler::None,
            PoolerArg::Transaction => Pooler::Transaction,
        },
        listen_url: args.postgres_listen_url.clone(),
        vector_index_dims: args.postgres_vector_index_dims.0.clone(),
    }
}

/// How writes are queued and batched: the queue's bytes hold at least the
/// largest request, which could never queue otherwise.
fn writes(args: &ServeArgs, errors: &mut Errors) -> WriterConfig {
    if args.write_queue_bytes_max < args.message_bytes_max {
        errors.add(
            "write-queue-bytes-max",
            format!(
                "{} is below --message-bytes-max {}: the largest request could never be queued",
                args.write_queue_bytes_max, args.message_bytes_max
            ),
        );
    }
    WriterConfig {
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
fn limits(args: &ServeArgs, errors: &mut Errors) -> Limits {
    check_limits(args, errors);
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
        wait_payload_bytes_max: args.wait_payload_bytes_max,
        wait_metadata_bytes_max: args.wait_metadata_bytes_max,
        waits_per_turn_max: args.waits_per_turn_max,
        memory: MemoryLimits {
            value_bytes_max: args.memory_value_bytes_max,
            dims_max: args.memory_dims_max as usize,
            vectors_per_item_max: args.memory_vectors_per_item_max as usize,
            items_per_request_max: args.memory_items_per_request_max as usize,
            search_results_max: args.memory_search_results_max,
            path_depth_max: args.memory_path_depth_max as usize,
        },
        await_timeout_max: args.await_timeout_max,
        awaits_max: args.awaits_max,
    }
}

/// Refuses limits that contradict each other: a default above its maximum,
/// a message too small for the largest state or result.
fn check_limits(args: &ServeArgs, errors: &mut Errors) {
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
}
