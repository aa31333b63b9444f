//! The flags of `stepwell serve`, the default command: each with its help,
//! its environment variable, its default and the bounds of its value. What
//! one flag cannot check on its own (a limit against another) is checked
//! when `sections` turns these flags into the configuration the server runs
//! with.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::env::Env;
use super::values::{
    AdminListen, ConsoleMode, DimsList, Listen, PoolerArg, PostgresProfileArg, Retention, admin_listen, count,
    dims_list, millis, octal_mode, retention, seconds, size,
};
use super::{Command, parse};
use crate::domain::limits;
use crate::observe::telemetry::LogFormat;
use crate::store::Database;

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

    /// Largest payload a Signal may carry, in bytes.
    #[arg(long, env = "STEPWELL_WAIT_PAYLOAD_BYTES_MAX", default_value = "1048576", value_parser = size(0, 64 << 20))]
    pub wait_payload_bytes_max: usize,

    /// Largest metadata (a JSON object) a CreateWait may carry, in bytes.
    #[arg(long, env = "STEPWELL_WAIT_METADATA_BYTES_MAX", default_value = "65536", value_parser = size(2, 16 << 20))]
    pub wait_metadata_bytes_max: usize,

    /// Most waits one turn may hold, pending or settled; a CreateWait (or a
    /// Signal or CancelWait creating a wait) beyond it is RESOURCE_EXHAUSTED.
    #[arg(long, env = "STEPWELL_WAITS_PER_TURN_MAX", default_value = "1000", value_parser = count(1, 1_000_000))]
    pub waits_per_turn_max: u32,

    /// Largest value (a JSON object) of a memory item, and of a search's
    /// filter, in bytes. A PutItems must also fit --message-bytes-max.
    #[arg(long, env = "STEPWELL_MEMORY_VALUE_BYTES_MAX", default_value = "1048576", value_parser = size(2, 64 << 20))]
    pub memory_value_bytes_max: usize,

    /// Most numbers in one memory vector (an embedding's dimensions), and in
    /// a search's query vector.
    #[arg(long, env = "STEPWELL_MEMORY_DIMS_MAX", default_value = "4096", value_parser = count(1, 65_536))]
    pub memory_dims_max: u32,

    /// Most vectors (embedded fields) one memory item may carry in a put.
    #[arg(long, env = "STEPWELL_MEMORY_VECTORS_PER_ITEM_MAX", default_value = "64", value_parser = count(1, 4096))]
    pub memory_vectors_per_item_max: u32,

    /// Most writes one PutItems, and most addresses one GetItems, may carry.
    #[arg(long, env = "STEPWELL_MEMORY_ITEMS_PER_REQUEST_MAX", default_value = "1000", value_parser = count(1, 100_000))]
    pub memory_items_per_request_max: u32,

    /// Most results one SearchItems or ListPaths may ask for (its limit).
    #[arg(long, env = "STEPWELL_MEMORY_SEARCH_RESULTS_MAX", default_value = "1000", value_parser = count(1, 100_000))]
    pub memory_search_results_max: u32,

    /// Most labels in a memory item's path.
    #[arg(long, env = "STEPWELL_MEMORY_PATH_DEPTH_MAX", default_value = "16", value_parser = count(1, 256))]
    pub memory_path_depth_max: u32,

    /// Longest an Await may ask to wait before it answers with the wait
    /// still pending, in milliseconds; it waits 60 s (or this, if shorter)
    /// when it asks for no timeout.
    #[arg(long = "await-timeout-max-ms", value_name = "MS", env = "STEPWELL_AWAIT_TIMEOUT_MAX_MS",
          default_value = "300000", value_parser = millis(1, 3_600_000))]
    pub await_timeout_max: Duration,

    /// Most Awaits waiting at once on this sidecar, across all connections;
    /// more are refused at once with RESOURCE_EXHAUSTED. Awaits hold these
    /// places, not those of --max-concurrent-requests.
    #[arg(long, env = "STEPWELL_AWAITS_MAX", default_value = "16384", value_parser = size(1, 1_000_000))]
    pub awaits_max: usize,

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

    /// Which of Postgres's features a Postgres store uses: standard (all),
    /// or portable (only what distributed SQL engines with Postgres's
    /// protocol keep: no session advisory lock, the migrations lock a row;
    /// no ctid; plain jsonb_ops; fencing tokens from a counter row, not a
    /// sequence). Every sidecar of a store uses the same profile; see
    /// docs/guides/distributed-sql.md.
    #[arg(long = "postgres-profile", env = "STEPWELL_POSTGRES_PROFILE", value_enum, default_value = "standard")]
    pub postgres_profile: PostgresProfileArg,

    /// What stands between the sidecar and Postgres: none, or a pooler in
    /// transaction mode (PgBouncer's pool_mode = transaction), behind which
    /// every read and write is a transaction that sets the connection's
    /// settings for itself, no statement is kept by name, and the startup
    /// packet carries neither extra_float_digits nor options.
    #[arg(long = "postgres-pooler", env = "STEPWELL_POSTGRES_POOLER", value_enum, default_value = "none")]
    pub postgres_pooler: PoolerArg,

    /// A direct Postgres URL (not through a pooler) on which the sidecar
    /// LISTENs for other sidecars' settlements of waits. Without one, a
    /// sidecar behind a pooler finds them by polling, within a second.
    #[arg(
        long = "postgres-listen-url",
        value_name = "URL",
        env = "STEPWELL_POSTGRES_LISTEN_URL",
        hide_env_values = true
    )]
    pub postgres_listen_url: Option<String>,

    /// The vector lengths that memory searches on a Postgres store with
    /// pgvector find through an approximate index (HNSW, cosine; one per
    /// length, up to 2000), comma-separated, or none. The sidecar creates
    /// the extension when the server has it and the role may; without it
    /// every search is exact. See docs/guides/memory.md.
    #[arg(long = "postgres-vector-index-dims", value_name = "DIMS", env = "STEPWELL_POSTGRES_VECTOR_INDEX_DIMS",
          default_value = "384,512,768,1024,1536", value_parser = dims_list)]
    pub postgres_vector_index_dims: DimsList,

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

    /// Threads of the runtime that serves requests (default: one per core).
    /// The committer and the store's threads are apart from these. One
    /// thread saves a lone caller's request a handoff between threads; many
    /// callers' reads and encoding then share one core.
    #[arg(long, env = "STEPWELL_WORKER_THREADS", value_parser = size(1, 256))]
    pub worker_threads: Option<usize>,

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

    /// UNSAFE: run the SQLite store with synchronous=NORMAL instead of FULL,
    /// so commits are acknowledged before the WAL is synced: a power loss
    /// or an OS crash can lose writes stepwell has acknowledged. For the
    /// fault suite's proof that its power-loss test can fail.
    #[arg(long, env = "STEPWELL_UNSAFE_SQLITE_SYNCHRONOUS_NORMAL")]
    pub unsafe_sqlite_synchronous_normal: bool,

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
    /// format, /healthz, /readyz, and the web console with --console):
    /// HOST:PORT, or off. Beyond loopback it needs TLS and authentication
    /// (--admin-tls and --auth-file), or --insecure-allow-network.
    #[arg(long = "admin-listen", env = "STEPWELL_ADMIN_LISTEN", value_name = "ADDR|off", default_value = "127.0.0.1:9464",
          value_parser = admin_listen)]
    pub admin_listen: AdminListen,

    /// Serve the admin listener (metrics, probes and the console) over TLS,
    /// with --admin-tls-cert and --admin-tls-key, or else the server's
    /// --tls-cert and --tls-key. No client certificate is asked for.
    #[arg(long = "admin-tls", env = "STEPWELL_ADMIN_TLS")]
    pub admin_tls: bool,

    /// With --admin-tls: the admin listener's own certificate chain (PEM);
    /// needs --admin-tls-key. SIGHUP reloads it.
    #[arg(long = "admin-tls-cert", env = "STEPWELL_ADMIN_TLS_CERT", value_name = "PATH")]
    pub admin_tls_cert: Option<PathBuf>,

    /// The private key of --admin-tls-cert (PEM).
    #[arg(long = "admin-tls-key", env = "STEPWELL_ADMIN_TLS_KEY", value_name = "PATH")]
    pub admin_tls_key: Option<PathBuf>,

    /// The web console on the admin listener, at /: off, read (pages only)
    /// or admin (pages, and actions for a principal with the admin role:
    /// release a key, signal or cancel a wait, delete a turn). With
    /// --auth-file a person signs in with a bearer token.
    #[arg(long = "console", env = "STEPWELL_CONSOLE", value_enum, default_value = "read")]
    pub console: ConsoleMode,

    /// How long a console session lasts after sign-in, in seconds.
    #[arg(long = "console-session-ttl-seconds", value_name = "SECONDS", env = "STEPWELL_CONSOLE_SESSION_TTL_SECONDS",
          default_value = "28800", value_parser = seconds(60, 30 * DAY_SECONDS))]
    pub console_session_ttl: Duration,

    /// Most console sessions open at once; a new one ends the session that
    /// expires first.
    #[arg(long = "console-sessions-max", env = "STEPWELL_CONSOLE_SESSIONS_MAX", default_value = "1000",
          value_parser = count(1, 1_000_000))]
    pub console_sessions_max: u32,

    /// The console calls an open turn stalled when its last checkpoint is
    /// older than this, in seconds.
    #[arg(long = "console-stalled-after-seconds", value_name = "SECONDS", env = "STEPWELL_CONSOLE_STALLED_AFTER_SECONDS",
          default_value = "300", value_parser = seconds(1, 30 * DAY_SECONDS))]
    pub console_stalled_after: Duration,

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
