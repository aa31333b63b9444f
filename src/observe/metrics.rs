//! The sidecar's metrics, rendered in the Prometheus text format by the admin
//! listener (`/metrics`). Each sidecar holds its own registry (a Prometheus
//! recorder that is never installed globally), registers every family at
//! start so that an idle sidecar's scrape already lists them, and keeps a
//! handle per series: recording is an atomic operation on that handle, with
//! no lookup by name on the request path. With the admin listener off the
//! handles are no-ops.
//!
//! Names follow the Prometheus conventions (units in the name, `_total` on
//! counters) and, for requests, the OpenTelemetry semantic conventions for
//! RPC servers. No label takes a caller-chosen value (namespace, turn, key)
//! unless `--metrics-namespace-labels` asks for the namespace, and then only
//! for calls the sidecar admitted and for at most
//! `--metrics-namespace-labels-max` namespaces, so that no caller can grow
//! the scrape without bound (series are never dropped). Gauges that
//! describe a state (queue depth, store health, pool, file sizes) are read
//! when scraped rather than kept up to date on every request.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tonic::Code;

use super::activity::Activity;
use crate::domain::memory::search::Scan;
use crate::domain::rpc::Rpc;

const METADATA: Metadata<'static> = Metadata::new("stepwell", Level::INFO, Some(module_path!()));

/// Request durations, in seconds: 0.5 ms to 30 s.
const SECONDS_BUCKETS: &[f64] =
    &[0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
/// Writes per batch: powers of two up to the largest `--batch-max`.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0];

pub const RPC_DURATION: &str = "rpc_server_call_duration_seconds";

/// The namespace label of the requests of every namespace past
/// `--metrics-namespace-labels-max`; no namespace can be named so, since
/// namespaces begin with a letter or a digit.
pub const OTHER_NAMESPACES: &str = "_other";

/// The namespaces that have a label value of their own, first come first
/// labelled, up to `max`.
struct NamespaceLabels {
    max: usize,
    labelled: Mutex<HashSet<String>>,
}

impl NamespaceLabels {
    /// The label value of `namespace`: itself while there is room, else `_other`.
    fn value<'a>(&self, namespace: &'a str) -> Cow<'a, str> {
        let mut labelled = self.labelled.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if labelled.contains(namespace) {
            return Cow::Borrowed(namespace);
        }
        if labelled.len() < self.max {
            labelled.insert(namespace.to_owned());
            return Cow::Borrowed(namespace);
        }
        Cow::Borrowed(OTHER_NAMESPACES)
    }
}

/// Begin's outcomes, as `stepwell_idempotency_begins_total{outcome}` names them.
#[derive(Debug, Clone, Copy)]
pub enum BeginOutcome {
    Acquired,
    Completed,
    InProgress,
    Failed,
}

/// How a sweep of expired idempotency keys ended.
#[derive(Debug, Clone, Copy)]
pub enum Sweep {
    /// Deleted fewer than its batch: nothing expired is left.
    Drained,
    /// Deleted a whole batch: more may be waiting.
    Full,
    Failed,
}

/// The bound under which a TLS handshake was closed to make room for a new
/// connection, as `stepwell_tls_handshakes_shed_total{limit}` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeShed {
    /// `--tls-handshakes-per-address-max`: the address's own oldest.
    Address,
    /// `--tls-handshakes-max`: the oldest of all.
    Total,
}

/// What a scrape reads of the sidecar's state at that moment.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub queue_depth: usize,
    /// Awaits of this sidecar waiting for a settlement.
    pub awaits: usize,
    pub queue_bytes: usize,
    pub store_up: bool,
    pub breaker_open: bool,
    pub store: StoreState,
}

/// The store's own figures, by backend.
#[derive(Debug, Clone, Default)]
pub enum StoreState {
    #[default]
    Unknown,
    Sqlite {
        database_bytes: u64,
        wal_bytes: u64,
    },
    Postgres {
        in_use: u32,
        idle: u32,
        waiting: u32,
        max: u32,
    },
}

/// Every series the sidecar records; cheap to share (`Arc`).
pub struct Metrics {
    recorder: Option<PrometheusRecorder>,
    handle: Option<PrometheusHandle>,
    namespace_labels: Option<NamespaceLabels>,
    /// Request durations of answered (not refused) requests without a
    /// namespace label, by method and code, registered on first use.
    rpc: Vec<[OnceLock<Histogram>; 17]>,
    pub batch_writes: Histogram,
    pub queue_wait: Histogram,
    pub commit_duration: Histogram,
    pub batches_failed: Counter,
    begins: [Counter; 4],
    pub takeovers: Counter,
    pub lease_lost: Counter,
    pub records_purged: Counter,
    sweeps: [Counter; 3],
    sweep_last_success: Gauge,
    pub checkpoints_appended: Counter,
    pub checkpoints_duplicate: Counter,
    pub checkpoint_conflicts: Counter,
    pub turns_deleted: Counter,
    pub checkpoints_deleted: Counter,
    pub records_written: Counter,
    pub memory_items_written: Counter,
    memory_searches: [Counter; 3],
    pub records_removed: Counter,
    pub record_turns_expired: Counter,
    turns_expired: [Counter; 2],
    pub checkpoints_expired: Counter,
    pub retention_failures: Counter,
    tls_handshakes_shed: [Counter; 2],
    queue_depth: Gauge,
    queue_bytes: Gauge,
    waits: WaitMetrics,
    store_up: Gauge,
    breaker_open: Gauge,
    store: Vec<Gauge>,
    /// The last hour, minute by minute, for the console's charts.
    pub activity: Activity,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").field("enabled", &self.enabled()).finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics that record nothing (the admin listener is off).
    pub fn off() -> Arc<Metrics> {
        Arc::new(Metrics::build(None, None, "", 0.0))
    }

    /// A registry of its own, every family registered; `namespace_labels`
    /// is how many namespaces may label request metrics (`None`: none),
    /// `backend` is `sqlite` or `postgres`, `started_at` the Unix time the
    /// process started.
    pub fn new(namespace_labels: Option<usize>, backend: &'static str, started_at: f64) -> Arc<Metrics> {
        let builder = PrometheusBuilder::new()
            .set_buckets(SECONDS_BUCKETS)
            .and_then(|builder| {
                builder.set_buckets_for_metric(Matcher::Full("stepwell_batch_writes".into()), BATCH_BUCKETS)
            })
            .expect("the buckets are not empty");
        let recorder = builder.build_recorder();
        let metrics = Metrics::build(Some(recorder), namespace_labels, backend, started_at);
        Arc::new(metrics)
    }

    fn build(
        recorder: Option<PrometheusRecorder>,
        namespace_labels: Option<usize>,
        backend: &'static str,
        started_at: f64,
    ) -> Metrics {
        let handle = recorder.as_ref().map(PrometheusRecorder::handle);
        let r = Registrar { recorder: recorder.as_ref() };
        r.describe_all();
        let begins = ["acquired", "completed", "in_progress", "failed"]
            .map(|outcome| r.counter("stepwell_idempotency_begins_total", &[("outcome", outcome)]));
        let sweeps =
            ["drained", "full", "failed"].map(|result| r.counter("stepwell_sweeps_total", &[("result", result)]));
        let store = r.store_gauges(backend);
        if recorder.is_some() {
            r.info(backend, started_at);
        }
        let metrics = Metrics {
            namespace_labels: namespace_labels.map(|max| NamespaceLabels { max, labelled: Mutex::default() }),
            rpc: (0..Rpc::ALL.len()).map(|_| std::array::from_fn(|_| OnceLock::new())).collect(),
            batch_writes: r.histogram("stepwell_batch_writes", &[]),
            queue_wait: r.histogram("stepwell_write_queue_wait_seconds", &[]),
            commit_duration: r.histogram("stepwell_batch_commit_duration_seconds", &[("backend", backend)]),
            batches_failed: r.counter("stepwell_batches_failed_total", &[("backend", backend)]),
            begins,
            takeovers: r.counter("stepwell_idempotency_takeovers_total", &[]),
            lease_lost: r.counter("stepwell_idempotency_lease_lost_total", &[]),
            records_purged: r.counter("stepwell_idempotency_records_purged_total", &[]),
            sweeps,
            sweep_last_success: r.gauge("stepwell_sweep_last_success_timestamp_seconds", &[]),
            checkpoints_appended: r.counter("stepwell_checkpoints_appended_total", &[]),
            checkpoints_duplicate: r.counter("stepwell_checkpoints_duplicate_total", &[]),
            checkpoint_conflicts: r.counter("stepwell_checkpoint_conflicts_total", &[]),
            turns_deleted: r.counter("stepwell_turns_deleted_total", &[]),
            checkpoints_deleted: r.counter("stepwell_checkpoints_deleted_total", &[]),
            records_written: r.counter("stepwell_records_written_total", &[]),
            memory_items_written: r.counter("stepwell_memory_items_written_total", &[]),
            memory_searches: [Scan::Ordered, Scan::Exact, Scan::Index]
                .map(|scan| r.counter("stepwell_memory_searches_total", &[("scan", scan.label())])),
            records_removed: r.counter("stepwell_records_deleted_total", &[]),
            record_turns_expired: r.counter("stepwell_record_turns_expired_total", &[]),
            turns_expired: ["terminal", "open"]
                .map(|status| r.counter("stepwell_turns_expired_total", &[("status", status)])),
            checkpoints_expired: r.counter("stepwell_checkpoints_expired_total", &[]),
            retention_failures: r.counter("stepwell_turn_retention_failures_total", &[]),
            tls_handshakes_shed: ["address", "total"]
                .map(|limit| r.counter("stepwell_tls_handshakes_shed_total", &[("limit", limit)])),
            queue_depth: r.gauge("stepwell_write_queue_depth", &[]),
            waits: WaitMetrics::register(&r),
            queue_bytes: r.gauge("stepwell_write_queue_bytes", &[]),
            store_up: r.gauge("stepwell_store_up", &[]),
            breaker_open: r.gauge("stepwell_store_breaker_open", &[]),
            store,
            activity: Activity::default(),
            recorder,
            handle,
        };
        // Every request family is listed from the start: each method's OK series.
        for rpc in Rpc::ALL {
            let _ = metrics.rpc_duration(rpc, Code::Ok, None, None);
        }
        metrics
    }

    /// Whether anything is recorded: what costs more than a handle's
    /// atomic operation (such as reading a clock) can be skipped otherwise.
    pub fn enabled(&self) -> bool {
        self.recorder.is_some()
    }

    /// Whether request metrics carry the namespace.
    pub fn namespace_labels(&self) -> bool {
        self.namespace_labels.is_some() && self.enabled()
    }

    /// The duration histogram of one method's requests answered with
    /// `code`; `refusal` names why admission refused it, if it did.
    pub fn rpc_duration(
        &self,
        rpc: Rpc,
        code: Code,
        refusal: Option<&'static str>,
        namespace: Option<&str>,
    ) -> Histogram {
        let Some(recorder) = &self.recorder else { return Histogram::noop() };
        let namespace = match (&self.namespace_labels, namespace) {
            (Some(labels), Some(namespace)) => Some(labels.value(namespace)),
            _ => None,
        };
        if refusal.is_none() && namespace.is_none() {
            let slot = &self.rpc[rpc as usize][(code as usize).min(16)];
            return slot
                .get_or_init(|| recorder.register_histogram(&rpc_key(rpc, code, None, None), &METADATA))
                .clone();
        }
        recorder.register_histogram(&rpc_key(rpc, code, refusal, namespace.as_deref()), &METADATA)
    }

    /// A SearchItems answered, by how the store found its page.
    pub fn memory_search(&self, scan: Scan) {
        let at = match scan {
            Scan::Ordered => 0,
            Scan::Exact => 1,
            Scan::Index => 2,
        };
        self.memory_searches[at].increment(1);
    }

    /// Turn retention deleted a terminal (or open) turn.
    pub fn turns_expired(&self, terminal: bool) {
        self.turns_expired[usize::from(!terminal)].increment(1);
    }

    /// A TLS handshake under way was closed to make room under `limit`.
    pub fn tls_handshake_shed(&self, limit: HandshakeShed) {
        self.tls_handshakes_shed[limit as usize].increment(1);
    }

    pub fn begin(&self, outcome: BeginOutcome) {
        self.begins[outcome as usize].increment(1);
    }

    /// An Await woke to a wait settled at `settled_at` (Unix nanoseconds).
    pub fn wait_woken(&self, settled_at: i64) {
        if self.enabled() {
            let late = crate::domain::clock::system_now().saturating_sub(settled_at).max(0);
            self.waits.wake.record(late as f64 / 1e9);
        }
    }

    /// This sidecar committed a settlement: by a request (Signal,
    /// CancelWait), a timer or an expiry; a timer's or expiry's `late`
    /// is how long after its due time it fired, in nanoseconds.
    pub fn wait_settled(&self, by: WaitSettledBy, late: i64) {
        self.waits.settlements[by as usize].increment(1);
        if by != WaitSettledBy::Request {
            self.waits.timer_lag.record(late.max(0) as f64 / 1e9);
        }
    }

    /// A sweep ended; `at` is the Unix time it did.
    pub fn sweep(&self, sweep: Sweep, at: f64) {
        self.sweeps[sweep as usize].increment(1);
        if !matches!(sweep, Sweep::Failed) {
            self.sweep_last_success.set(at);
        }
    }

    /// The text a scrape answers, with the state gauges read from `state`.
    pub fn render(&self, state: &State) -> String {
        let Some(handle) = &self.handle else { return String::new() };
        self.queue_depth.set(state.queue_depth as f64);
        self.waits.awaits.set(state.awaits as f64);
        self.queue_bytes.set(state.queue_bytes as f64);
        self.store_up.set(f64::from(u8::from(state.store_up)));
        self.breaker_open.set(f64::from(u8::from(state.breaker_open)));
        let figures: Vec<f64> = match state.store {
            StoreState::Sqlite { database_bytes, wal_bytes } => vec![database_bytes as f64, wal_bytes as f64],
            StoreState::Postgres { in_use, idle, waiting, max } => {
                vec![in_use.into(), idle.into(), waiting.into(), max.into()]
            }
            StoreState::Unknown => Vec::new(),
        };
        for (gauge, figure) in self.store.iter().zip(figures) {
            gauge.set(figure);
        }
        handle.run_upkeep();
        handle.render()
    }

    /// Folds recorded histogram samples into their buckets; the admin
    /// listener runs it every few seconds so that samples between scrapes
    /// do not pile up.
    pub fn upkeep(&self) {
        if let Some(handle) = &self.handle {
            handle.run_upkeep();
        }
    }
}

fn rpc_key(rpc: Rpc, code: Code, refusal: Option<&'static str>, namespace: Option<&str>) -> Key {
    let mut labels = vec![
        Label::from_static_parts("rpc_system", "grpc"),
        Label::from_static_parts("rpc_service", rpc.service()),
        Label::from_static_parts("rpc_method", rpc.as_str()),
        Label::new("rpc_grpc_status_code", (code as i32).to_string()),
    ];
    if let Some(refusal) = refusal {
        labels.push(Label::from_static_parts("refusal", refusal));
    }
    if let Some(namespace) = namespace {
        labels.push(Label::new("namespace", namespace.to_owned()));
    }
    Key::from_parts(RPC_DURATION, labels)
}

/// Registers series in a recorder, or hands out no-ops without one.
struct Registrar<'a> {
    recorder: Option<&'a PrometheusRecorder>,
}

impl Registrar<'_> {
    fn key(name: &'static str, labels: &[(&'static str, &'static str)]) -> Key {
        Key::from_parts(name, labels.iter().map(|(k, v)| Label::from_static_parts(k, v)).collect::<Vec<_>>())
    }

    fn counter(&self, name: &'static str, labels: &[(&'static str, &'static str)]) -> Counter {
        self.recorder.map_or_else(Counter::noop, |r| r.register_counter(&Self::key(name, labels), &METADATA))
    }

    fn gauge(&self, name: &'static str, labels: &[(&'static str, &'static str)]) -> Gauge {
        self.recorder.map_or_else(Gauge::noop, |r| r.register_gauge(&Self::key(name, labels), &METADATA))
    }

    fn histogram(&self, name: &'static str, labels: &[(&'static str, &'static str)]) -> Histogram {
        self.recorder.map_or_else(Histogram::noop, |r| r.register_histogram(&Self::key(name, labels), &METADATA))
    }

    /// The gauges of the store's own figures, which depend on its backend.
    fn store_gauges(&self, backend: &str) -> Vec<Gauge> {
        match backend {
            "sqlite" => {
                ["database", "wal"].map(|file| self.gauge("stepwell_sqlite_file_bytes", &[("file", file)])).to_vec()
            }
            "postgres" => vec![
                self.gauge("stepwell_postgres_pool_connections", &[("state", "in_use")]),
                self.gauge("stepwell_postgres_pool_connections", &[("state", "idle")]),
                self.gauge("stepwell_postgres_pool_waiting_requests", &[]),
                self.gauge("stepwell_postgres_pool_max_connections", &[]),
            ],
            _ => Vec::new(),
        }
    }

    /// The build's version and backend, and when the process started.
    fn info(&self, backend: &'static str, started_at: f64) {
        self.gauge("stepwell_build_info", &[("version", env!("CARGO_PKG_VERSION")), ("backend", backend)]).set(1.0);
        self.gauge("process_start_time_seconds", &[]).set(started_at);
    }

    /// The HELP line of every family.
    fn describe_all(&self) {
        let Some(r) = self.recorder else { return };
        let help = |text: &'static str| SharedString::const_str(text);
        for &(name, unit, text) in HISTOGRAMS {
            r.describe_histogram(name.into(), unit, help(text));
        }
        for &(name, text) in COUNTERS {
            r.describe_counter(name.into(), None, help(text));
        }
        for &(name, unit, text) in GAUGES {
            r.describe_gauge(name.into(), unit, help(text));
        }
    }
}

/// The waits' series: pending Awaits, wake latency, timer lag, settlements.
struct WaitMetrics {
    awaits: Gauge,
    wake: Histogram,
    timer_lag: Histogram,
    settlements: [Counter; 3],
}

impl WaitMetrics {
    fn register(r: &Registrar<'_>) -> WaitMetrics {
        WaitMetrics {
            awaits: r.gauge("stepwell_awaits_pending", &[]),
            wake: r.histogram("stepwell_wait_wake_seconds", &[]),
            timer_lag: r.histogram("stepwell_wait_timer_lag_seconds", &[]),
            settlements: ["request", "timer", "expiry"]
                .map(|by| r.counter("stepwell_wait_settlements_total", &[("by", by)])),
        }
    }
}

/// What settled a wait, as `stepwell_wait_settlements_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitSettledBy {
    Request,
    Timer,
    Expiry,
}

/// Every histogram family: name, unit and HELP text.
const HISTOGRAMS: &[(&str, Option<Unit>, &str)] = &[
    (
        RPC_DURATION,
        Some(Unit::Seconds),
        "Duration of gRPC requests served, by service, method, status code and, for requests refused before their handler, the refusal.",
    ),
    (
        "stepwell_write_queue_wait_seconds",
        Some(Unit::Seconds),
        "Time a write waited in the group-commit queue before its batch began.",
    ),
    (
        "stepwell_batch_commit_duration_seconds",
        Some(Unit::Seconds),
        "Time a batch took to commit in the store, by backend.",
    ),
    ("stepwell_batch_writes", Some(Unit::Count), "Writes committed together in one batch (one transaction)."),
    (
        "stepwell_wait_wake_seconds",
        Some(Unit::Seconds),
        "Time from a wait's settlement (its commit, by the settling sidecar's clock) to an Await answering with it.",
    ),
    (
        "stepwell_wait_timer_lag_seconds",
        Some(Unit::Seconds),
        "How late this sidecar settled a wait whose timer or expiry fell due: its settlement less its due time.",
    ),
];

/// Every counter family: name and HELP text.
const COUNTERS: &[(&str, &str)] = &[
    (
        "stepwell_batches_failed_total",
        "Batches the store did not commit; each of their callers was answered UNAVAILABLE.",
    ),
    ("stepwell_idempotency_begins_total", "Begin requests answered, by outcome."),
    ("stepwell_idempotency_takeovers_total", "Begins that acquired a key whose previous lease had expired."),
    ("stepwell_idempotency_lease_lost_total", "Complete, Release and Extend requests refused with LEASE_LOST."),
    ("stepwell_idempotency_records_purged_total", "Idempotency keys past their retention deleted by the sweeper."),
    (
        "stepwell_sweeps_total",
        "Sweeps of expired idempotency keys, by result: full means a whole batch was deleted and more may wait.",
    ),
    ("stepwell_checkpoints_appended_total", "Checkpoints stored."),
    (
        "stepwell_checkpoints_duplicate_total",
        "Checkpoint requests answered inserted=false: the same checkpoint was already stored.",
    ),
    ("stepwell_checkpoint_conflicts_total", "Checkpoint requests refused with CHECKPOINT_CONFLICT."),
    ("stepwell_turns_deleted_total", "DeleteTurn requests that deleted a turn."),
    ("stepwell_checkpoints_deleted_total", "Checkpoints deleted by DeleteTurn."),
    ("stepwell_records_written_total", "Records written by PutRecords (upserted or inserted if absent)."),
    ("stepwell_memory_items_written_total", "Memory items put or deleted by PutItems."),
    (
        "stepwell_memory_searches_total",
        "SearchItems answered, by how the store found the page: ordered (no query vector), exact (every item \
         under the prefix scored) or index (pgvector's approximate index's candidates, scored exactly).",
    ),
    ("stepwell_records_deleted_total", "Records deleted by DeleteRecords and by record retention."),
    ("stepwell_record_turns_expired_total", "Turns whose records record retention deleted."),
    ("stepwell_turns_expired_total", "Turns deleted by turn retention, by status (terminal, open)."),
    ("stepwell_checkpoints_expired_total", "Checkpoints of the turns deleted by turn retention."),
    (
        "stepwell_turn_retention_failures_total",
        "Turn retention passes that failed (the log says why); the next interval tries again.",
    ),
    (
        "stepwell_tls_handshakes_shed_total",
        "TLS handshakes under way closed to make room for a new connection, by the limit reached (address, total).",
    ),
    (
        "stepwell_wait_settlements_total",
        "Waits this sidecar settled, by what settled them (request, timer, expiry); a settlement lost to another sidecar is not counted.",
    ),
];

/// Every gauge family: name, unit and HELP text.
const GAUGES: &[(&str, Option<Unit>, &str)] = &[
    ("stepwell_awaits_pending", Some(Unit::Count), "Awaits of this sidecar waiting for their wait to be settled."),
    ("stepwell_write_queue_depth", Some(Unit::Count), "Writes waiting for or in a batch."),
    ("stepwell_write_queue_bytes", Some(Unit::Bytes), "Bytes held by writes waiting for or in a batch."),
    ("stepwell_store_up", None, "1 while the store answers its health check, 0 otherwise."),
    (
        "stepwell_store_breaker_open",
        None,
        "1 while the store's breaker is open: writes are refused UNAVAILABLE at once.",
    ),
    (
        "stepwell_postgres_pool_connections",
        Some(Unit::Count),
        "Connections of the Postgres pool, by state (in_use, idle).",
    ),
    (
        "stepwell_postgres_pool_waiting_requests",
        Some(Unit::Count),
        "Requests waiting for a connection of the Postgres pool, none being idle.",
    ),
    (
        "stepwell_postgres_pool_max_connections",
        Some(Unit::Count),
        "Most connections the Postgres pool opens (--pool-max).",
    ),
    ("stepwell_sqlite_file_bytes", Some(Unit::Bytes), "Size of the SQLite database file and of its write-ahead log."),
    (
        "stepwell_sweep_last_success_timestamp_seconds",
        Some(Unit::Seconds),
        "Unix time the last sweep of expired idempotency keys ended without error.",
    ),
    ("stepwell_build_info", None, "Always 1; the labels name the version and the store's backend."),
    ("process_start_time_seconds", Some(Unit::Seconds), "Unix time the process started."),
];
