//! `serve`: binds the services to a listener and runs them until shutdown,
//! in three movements. Start: the listener answers at once, with health
//! NOT_SERVING, while the store opens and migrates (`start_store`); health
//! turns SERVING only then. Health: a monitor keeps it true to the store
//! afterwards and works the store's breaker. Drain: on shutdown health turns
//! NOT_SERVING, new connections are refused, and in-flight RPCs drain for up
//! to the configured grace before the store closes.
//!
//! Crash-only: the writer tasks, the sweeper and the monitor run as long as
//! the sidecar serves. If one of them panics or stops while serving, `serve`
//! turns health NOT_SERVING, logs why, drains, and returns
//! `ServeError::TaskFailed`, so the process exits 70 and its orchestrator
//! restarts it: a sidecar never goes on serving with a dead writer.
//!
//! The admin listener (`admin`) is bound first, beside the gRPC listener,
//! and answers until the drain has ended; the metrics it serves and the
//! traces (`traces`, when an OTLP endpoint is set) reach the admission
//! layer, the services and the writer from here.
//!
//! With `--auth-file`, the principals are loaded before anything else (a
//! file that cannot be used stops the start), SIGHUP reloads them while
//! serving, and reflection is off unless `--reflection-with-auth`.

pub mod admin;
mod monitor;
pub mod retention;
mod sweeper;
mod waits;

use monitor::{monitor, set_health};
use sweeper::{TurnSweep, sweep};

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::server::HealthReporter;
use tower::layer::util::{Identity, Stack};
use tower::util::MapRequestLayer;

use crate::api::admission::Admission;
use crate::api::{Shared, services};
use crate::auth::{self, Authenticator};
use crate::config;
use crate::config::sections::Config;
use crate::config::values::Listen;
use crate::domain::clock;
use crate::net::listener::{Listener, SocketFile};
use crate::net::preface;
use crate::net::tls::{self, ServerTls};
use crate::net::unix_authority;
use crate::observe::metrics::Metrics;
use crate::observe::traces::{self, Traces};
use crate::store::Database;
use crate::store::writer::Writer;
use crate::store::{self, Handle, Store};

/// Why serving stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("could not open the store: {0}")]
    Store(#[from] store::Error),
    /// The store's settings are wrong (URL, TLS, login, database name):
    /// reported at once, not retried, since waiting cannot fix them.
    #[error("the store's settings are wrong: {error}; {fix}", fix = .kind.fix())]
    StoreSettings { kind: store::Misconfigured, error: store::Error },
    #[error("gRPC transport failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("could not build server reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// A TLS file given at start-up does not load: a configuration error.
    #[error("TLS: {0}")]
    Tls(#[from] tls::FileError),
    /// The auth file could not be read or is not valid: a configuration error.
    #[error("{0}")]
    AuthFile(#[from] auth::FileError),
    #[error("could not listen for the admin listener (--admin-listen {address}): {source}")]
    Admin { address: std::net::SocketAddr, source: std::io::Error },
    /// The OTLP exporter could not be built from its settings.
    #[error("{0}")]
    Traces(#[from] traces::StartError),
    #[error("could not install the SIGHUP handler that reloads TLS files and the auth file: {0}")]
    Signal(std::io::Error),
    /// A task the sidecar cannot serve without (a writer, the sweeper, the
    /// health monitor) panicked or stopped: a bug, not a setting (exit 70).
    #[error("the {task} task {how}; stopped serving so that the sidecar is restarted")]
    TaskFailed { task: &'static str, how: String },
}

impl ServeError {
    /// Whether the operator must change the configuration (exit 64).
    pub fn is_configuration(&self) -> bool {
        // A store that would lose acknowledged writes is a setting to fix too.
        matches!(
            self,
            ServeError::StoreSettings { .. }
                | ServeError::Store(store::Error::NotDurable(_))
                | ServeError::Tls(_)
                | ServeError::AuthFile(_)
                | ServeError::Traces(_)
        )
    }

    /// Whether stepwell itself failed (exit 70): a task it cannot serve
    /// without panicked or stopped.
    pub fn is_internal(&self) -> bool {
        matches!(self, ServeError::TaskFailed { .. })
    }
}

/// What health reports on: the server as a whole ("") and each service.
const SERVICES: [&str; 4] = ["", services::NAMES[0], services::NAMES[1], services::NAMES[2]];

/// Serves the API on `listener` until `shutdown` completes, then drains.
pub async fn serve(
    listener: Listener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Loaded { tls, admin_tls, authenticator, hangup } = load_security(&config)?;
    warn_if_exposed(&config);
    let Observed { metrics, traces, admin_listener } = observe(&config).await?;
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::NotServing).await;
    let shared = Shared::with_authenticator(config.limits.clone(), authenticator.clone(), metrics.clone());
    let router = router(&config, &shared, health_service, &metrics, &traces)?;

    // Shutdown starts on the caller's signal, when the store cannot open, or
    // when a task it needs fails; `stopping` tells every task that it has.
    let (stopping_tx, stopping) = watch::channel(false);
    let (ended_tx, ended) = watch::channel(false);
    let admin_serving = admin_serving(&config, &shared, &metrics, admin_tls.clone());
    let admin =
        admin_listener.map(|l| tokio::spawn(admin::serve(l, shared.clone(), (stopping.clone(), ended), admin_serving)));
    let failed = Arc::new(Notify::new());
    let signal = drain_signal(shutdown, failed.clone(), stopping_tx, health.clone());

    let stopping_for_start = stopping.clone();
    let server_ended = Notify::new();
    let description = listener.describe();
    let reloader = hangup
        .map(|hangup| tokio::spawn(reload_on_hangup(hangup, [tls.clone(), admin_tls.clone()], authenticator.clone())));
    // Held to the end: dropping it removes the socket file if it is still ours.
    let (server, socket_file) = serve_on(listener, router, tls, &config.connections, &metrics, signal);
    let observers = (metrics.clone(), traces.clone());
    let start =
        run_store(&config, &shared, &health, stopping_for_start, observers, (&failed, &server_ended), &description);
    let serving = async {
        let result = drain(server, stopping, config.shutdown_grace).await;
        server_ended.notify_one();
        result
    };
    let (served, (mut started, mut task_failed)) = tokio::join!(serving, start);

    task_failed = task_failed.or(close_store(&mut started).await);
    if let Some(reloader) = reloader {
        reloader.abort();
    }
    ended_tx.send_replace(true);
    stop_observers(admin, traces).await;
    drop(socket_file);
    if let Some(error) = task_failed {
        return Err(error);
    }
    served?;
    started?;
    tracing::info!("stopped");
    Ok(())
}

/// Opens the store, then supervises the tasks it needs while serving:
/// what started, and the task that failed if one did. Either failure
/// notifies `failed`, which starts the drain.
async fn run_store(
    config: &Config,
    shared: &Arc<Shared>,
    health: &HealthReporter,
    stopping: watch::Receiver<bool>,
    observers: (Arc<Metrics>, Option<Arc<Traces>>),
    (failed, server_ended): (&Notify, &Notify),
    description: &str,
) -> (Result<Option<Started>, ServeError>, Option<ServeError>) {
    let mut started = start_store(config, shared, health, stopping.clone(), observers).await;
    match &started {
        Ok(Some(_)) => {
            let workers = tokio::runtime::Handle::current().metrics().num_workers();
            tracing::info!(listen = %description, store = %config.store.database.describe(), workers, "serving");
        }
        Ok(None) => {}
        Err(error) => {
            tracing::error!(%error, "could not open the store");
            failed.notify_one();
        }
    }
    let task_failed = match &mut started {
        Ok(Some(Started { tasks, .. })) => supervise(tasks, stopping, server_ended).await,
        _ => None,
    };
    if let Some(error) = &task_failed {
        tracing::error!(%error, "a task the sidecar needs has failed: NOT_SERVING, draining, then exiting");
        failed.notify_one();
    }
    (started, task_failed)
}

/// Stops the store's tasks and closes it, once requests have drained and
/// so the writers are idle. A batch or sweeper pass cut short is one
/// transaction, rolled back and never acknowledged. A task that had
/// panicked meanwhile is the failure returned.
async fn close_store(started: &mut Result<Option<Started>, ServeError>) -> Option<ServeError> {
    let Ok(Some(Started { store, tasks })) = started.as_mut().map(Option::take) else { return None };
    let task_failed = stop_tasks(tasks).await;
    store.backend().close().await;
    task_failed
}

/// Waits for the admin listener to end, and exports the spans left.
async fn stop_observers(admin: Option<JoinHandle<()>>, traces: Option<Arc<Traces>>) {
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    if let Some(traces) = traces {
        // Exporting what is left blocks until the collector answers.
        let _ = tokio::task::spawn_blocking(move || traces.shutdown()).await;
    }
}

/// What the admin listener serves beside its endpoints: the console, and
/// its TLS if it has any.
fn admin_serving(
    config: &Config,
    shared: &Arc<Shared>,
    metrics: &Arc<Metrics>,
    tls: Option<Arc<ServerTls>>,
) -> admin::Serving {
    let settings = crate::console::Settings::new(&config.observability.console, tls.is_some());
    let handshakes = config.connections.tls_handshakes;
    admin::Serving {
        console: crate::console::routes(shared.clone(), settings),
        tls: tls.map(|tls| (tls, handshakes, metrics.clone())),
    }
}

/// What the sidecar is observed through: its metrics, its traces if an
/// OTLP endpoint is set, and the admin listener if it is on.
struct Observed {
    metrics: Arc<Metrics>,
    traces: Option<Arc<Traces>>,
    admin_listener: Option<tokio::net::TcpListener>,
}

/// Binds the admin listener and starts the trace exporter, as configured.
/// Metrics are only recorded when the admin listener can serve them.
async fn observe(config: &Config) -> Result<Observed, ServeError> {
    let observability = &config.observability;
    let backend = match config.store.database {
        Database::Sqlite { .. } => "sqlite",
        Database::Postgres { .. } => "postgres",
    };
    let (metrics, admin_listener) = match observability.admin_listen {
        Some(address) => {
            let listener = admin::bind(address).await.map_err(|source| ServeError::Admin { address, source })?;
            let bound = listener.local_addr().map_or_else(|_| address.to_string(), |a| a.to_string());
            tracing::info!(admin_address = %bound, "admin listening: /metrics, /healthz, /readyz");
            let started_at = clock::system_now() as f64 / 1e9;
            (Metrics::new(observability.namespace_labels, backend, started_at), Some(listener))
        }
        None => (Metrics::off(), None),
    };
    let traces = match &observability.otlp_endpoint {
        Some(endpoint) => {
            tracing::info!(endpoint, service = observability.service_name, "exporting traces over OTLP");
            Some(Traces::start(endpoint, &observability.service_name, backend)?)
        }
        None => None,
    };
    Ok(Observed { metrics, traces, admin_listener })
}

/// The layer that hands each request its connection's proven identity.
type PeerLayer = MapRequestLayer<fn(Request) -> Request>;
type Request = tonic::codegen::http::Request<tonic::body::Body>;

/// The services behind their admission limits, health and reflection; each
/// request carries its TLS client's identity (`auth::PeerIdentity`).
/// Health is always open; reflection describes the API to any caller, so
/// it is off while authentication is on unless the operator asks for it.
fn router(
    config: &Config,
    shared: &Arc<Shared>,
    health: HealthServer<impl Health>,
    metrics: &Arc<Metrics>,
    traces: &Option<Arc<Traces>>,
) -> Result<Router<Stack<PeerLayer, Identity>>, ServeError> {
    let message_max = config.limits.message_bytes_max;
    let connections = &config.connections;
    let concurrency = config.limits.max_concurrent_requests;
    let admission = Admission::new(shared.clone(), concurrency, connections, metrics.clone(), traces.clone());
    let peer: PeerLayer = MapRequestLayer::new(tls::attach_peer_identity);
    let security = &config.security;
    let reflect = security.auth_file.is_none() || security.reflection_with_auth;
    // Per connection: the HTTP/2 stream limit and keepalive, and its share of
    // the global limit, which its further requests wait for.
    let router = Server::builder()
        .max_concurrent_streams(connections.streams_max)
        .http2_keepalive_interval(Some(connections.http2_keepalive_interval))
        .http2_keepalive_timeout(Some(connections.http2_keepalive_timeout))
        .concurrency_limit_per_connection(connections.requests_max)
        .layer(peer)
        .add_service(health)
        .add_optional_service(reflect.then(|| services::reflection().build_v1()).transpose()?)
        .add_optional_service(reflect.then(|| services::reflection().build_v1alpha()).transpose()?);
    Ok(services::mount(router, shared, &admission, message_max))
}

/// Logs, at every start, that the operator chose to serve a network-facing
/// TCP port without the protection `config` would otherwise demand.
fn warn_if_exposed(config: &Config) {
    if let Listen::Tcp(address) = &config.listen
        && !address.ip().is_loopback()
        && config.security.insecure_allow_network
    {
        tracing::warn!(
            listen = %address,
            tls = config.security.tls.is_some(),
            auth = config.security.auth_file.is_some(),
            "--insecure-allow-network: serving beyond loopback without TLS and authentication required; \
             anyone who reaches this port may be able to read and delete every namespace"
        );
    }
}

/// What `--tls-*` and `--auth-file` load at start-up, and the SIGHUP that reloads them.
struct Loaded {
    tls: Option<Arc<ServerTls>>,
    /// The admin listener's, with `--admin-tls`.
    admin_tls: Option<Arc<ServerTls>>,
    authenticator: Option<Arc<Authenticator>>,
    hangup: Option<tokio::signal::unix::Signal>,
}

/// Loads the TLS files and the auth file; a file that does not load is a
/// configuration error. The SIGHUP handler is installed before anything
/// answers, so a SIGHUP sent once health says SERVING never meets the
/// default action (exit).
fn load_security(config: &Config) -> Result<Loaded, ServeError> {
    let tls = match &config.security.tls {
        Some(files) => Some(ServerTls::load(files)?),
        None => None,
    };
    let admin_tls = match &config.observability.admin_tls {
        Some(files) if config.observability.admin_listen.is_some() => Some(ServerTls::load_for_http(files)?),
        _ => None,
    };
    let authenticator = match &config.security.auth_file {
        Some(path) => Some(Arc::new(Authenticator::load(path)?)),
        None => None,
    };
    let hangup = match (&tls, &admin_tls, &authenticator) {
        (None, None, None) => None,
        _ => Some(tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).map_err(ServeError::Signal)?),
    };
    Ok(Loaded { tls, admin_tls, authenticator, hangup })
}

/// The server running until drained.
type Serving = Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;

/// The router served on the listener, through TLS when it is configured,
/// until `signal`; and the Unix socket file, if any, to remove at the end.
/// TCP connections get TCP keepalive (tonic applies its own TCP settings
/// only to listeners it binds itself), and every connection its preface deadline.
fn serve_on(
    listener: Listener,
    router: Router<Stack<PeerLayer, Identity>>,
    tls: Option<Arc<ServerTls>>,
    connections: &config::sections::Connections,
    metrics: &Arc<Metrics>,
    signal: impl Future<Output = ()> + Send + 'static,
) -> (Serving, Option<SocketFile>) {
    let (keepalive, preface) = (connections.tcp_keepalive, connections.preface_timeout);
    let tcp = |l| TcpIncoming::from(l).with_nodelay(Some(true)).with_keepalive(Some(keepalive));
    let handshakes = connections.tls_handshakes;
    match (listener, tls) {
        (Listener::Tcp(l), None) => {
            (Box::pin(router.serve_with_incoming_shutdown(preface::deadlined(tcp(l), preface), signal)), None)
        }
        (Listener::Tcp(l), Some(tls)) => {
            let incoming = preface::deadlined(tls::incoming(tcp(l), tls, handshakes, metrics.clone()), preface);
            (Box::pin(router.serve_with_incoming_shutdown(incoming, signal)), None)
        }
        // On a Unix socket, an `:authority` the HTTP/2 server would refuse is replaced first.
        (Listener::Unix(l, file), None) => {
            let incoming = preface::deadlined(unix_authority::relaxed(UnixListenerStream::new(l)), preface);
            (Box::pin(router.serve_with_incoming_shutdown(incoming, signal)), Some(file))
        }
        (Listener::Unix(l, file), Some(tls)) => {
            let incoming = preface::deadlined(
                unix_authority::relaxed(tls::incoming(UnixListenerStream::new(l), tls, handshakes, metrics.clone())),
                preface,
            );
            (Box::pin(router.serve_with_incoming_shutdown(incoming, signal)), Some(file))
        }
    }
}

/// Reloads the TLS certificate, key and client CAs, and the auth file, on
/// every SIGHUP until aborted. A file that does not load keeps what is in
/// force, and the log says why.
async fn reload_on_hangup(
    mut hangup: tokio::signal::unix::Signal,
    tls: [Option<Arc<ServerTls>>; 2],
    authenticator: Option<Arc<Authenticator>>,
) {
    while hangup.recv().await.is_some() {
        for tls in tls.iter().flatten() {
            match tls.reload() {
                Ok(()) => tracing::info!("SIGHUP: reloaded the TLS certificate and client CAs"),
                Err(error) => tracing::warn!(%error, "SIGHUP: TLS files did not load; keeping the ones in use"),
            }
        }
        if let Some(authenticator) = &authenticator {
            let path = authenticator.path().display().to_string();
            match authenticator.reload() {
                Ok(principals) => tracing::info!(path, principals, "SIGHUP: reloaded the auth file"),
                Err(error) => {
                    tracing::error!(%error, "SIGHUP: kept the principals in force: the auth file could not be reloaded")
                }
            }
        }
    }
}

/// Completes when serving should stop taking requests, on the caller's
/// signal, or when the store could not open or a task it needs failed
/// (`failed`), after turning health NOT_SERVING.
async fn drain_signal(
    shutdown: impl Future<Output = ()>,
    failed: Arc<Notify>,
    stopping: watch::Sender<bool>,
    mut health: HealthReporter,
) {
    tokio::select! {
        () = shutdown => tracing::info!("shutting down: draining in-flight requests"),
        () = failed.notified() => {}
    }
    stopping.send_replace(true);
    set_health(&health, ServingStatus::NotServing).await;
    // Clearing the statuses ends open Watch streams, which would otherwise
    // hold the drain open until the grace runs out.
    for service in SERVICES {
        health.clear_service_status(service).await;
    }
}

/// Serves until in-flight requests have drained after the stop, or the grace
/// runs out.
async fn drain(
    server: impl Future<Output = Result<(), tonic::transport::Error>>,
    mut stopping: watch::Receiver<bool>,
    grace: Duration,
) -> Result<(), tonic::transport::Error> {
    tokio::select! {
        result = server => result,
        _ = async { stopping.wait_for(|s| *s).await.ok(); tokio::time::sleep(grace).await } => {
            tracing::warn!(?grace, "shutdown grace ran out with requests still in flight");
            Ok(())
        }
    }
}

/// The opened store and the tasks that work on it.
struct Started {
    store: Handle,
    tasks: Vec<Task>,
}

/// A task the sidecar cannot serve without, by name for the log.
struct Task {
    name: &'static str,
    handle: JoinHandle<()>,
}

/// Waits while serving for a task to end, which none should until shutdown
/// begins: then returns why it ended. `None` once shutdown has begun (the
/// monitor ends then) or the server has ended.
async fn supervise(tasks: &mut Vec<Task>, mut stopping: watch::Receiver<bool>, served: &Notify) -> Option<ServeError> {
    let (result, index) = tokio::select! {
        (result, index, _) = futures::future::select_all(tasks.iter_mut().map(|task| &mut task.handle)) => {
            (result, index)
        }
        _ = stopping.wait_for(|s| *s) => return None,
        () = served.notified() => return None,
    };
    // Its handle has given its result; it is no longer one to stop.
    let Task { name, .. } = tasks.swap_remove(index);
    if *stopping.borrow() {
        return None;
    }
    Some(why_ended(name, result))
}

/// Stops the tasks after the drain; one that had panicked meanwhile is
/// still a failure.
async fn stop_tasks(tasks: Vec<Task>) -> Option<ServeError> {
    let mut failed = None;
    for Task { name, handle } in tasks {
        if handle.is_finished() {
            if let Err(error) = handle.await
                && error.is_panic()
            {
                failed = failed.or(Some(why_ended(name, Err(error))));
            }
        } else {
            handle.abort();
        }
    }
    failed
}

/// Why a task ended, for the error `serve` returns.
fn why_ended(task: &'static str, ended: Result<(), tokio::task::JoinError>) -> ServeError {
    let how = match ended {
        Ok(()) => "stopped".to_owned(),
        Err(error) if error.is_panic() => {
            let payload = error.into_panic();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "no message".to_owned());
            format!("panicked: {message}")
        }
        Err(error) => format!("was cancelled: {error}"),
    };
    ServeError::TaskFailed { task, how }
}

/// Opens the store, starts its writers, sweeper, wait timers and poll and
/// health monitor, hands
/// it to the services and turns health SERVING; `None` when shutdown began first.
async fn start_store(
    config: &Config,
    shared: &Arc<Shared>,
    health: &HealthReporter,
    stopping: watch::Receiver<bool>,
    (metrics, traces): (Arc<Metrics>, Option<Arc<Traces>>),
) -> Result<Option<Started>, ServeError> {
    let Some(store) = open_store(config, stopping.clone()).await? else { return Ok(None) };
    let store = Handle::new(store);
    let (writer, writers) = Writer::start(store.clone(), &config.writes, metrics.clone(), traces);
    let mut tasks: Vec<Task> = writers.into_iter().map(|handle| Task { name: "writer", handle }).collect();
    let turns = TurnSweep { store: store.clone(), writer: writer.clone(), clock: config.store.clock.clone() };
    let sweeper = tokio::spawn(sweep(store.backend().clone(), config.sweep.clone(), metrics.clone(), turns));
    tasks.push(Task { name: "sweeper", handle: sweeper });
    let timers = waits::timers(store.clone(), writer.clone(), config.store.clock.clone(), metrics);
    tasks.push(Task { name: "wait timers", handle: tokio::spawn(timers) });
    tasks.push(Task { name: "wait poll", handle: tokio::spawn(waits::poll(store.clone())) });
    let (backend, hub) = (store.backend().clone(), store.hub().clone());
    tasks.push(Task { name: "wait listener", handle: tokio::spawn(async move { backend.listen(hub).await }) });
    let monitor = tokio::spawn(monitor(store.clone(), shared.clone(), health.clone(), config.health.clone(), stopping));
    tasks.push(Task { name: "health monitor", handle: monitor });
    shared.set_store(store.clone(), writer);
    set_health(health, ServingStatus::Serving).await;
    Ok(Some(Started { store, tasks }))
}

/// Opens the store. A shared store (Postgres) that cannot be reached yet is
/// retried with backoff while health says NOT_SERVING, until it answers or
/// shutdown begins (then `None`); a refusal such as the durability guard, a
/// wrong setting (a TLS failure, a refused login, a missing database), and
/// any failure of a local file, is final.
async fn open_store(
    config: &Config,
    mut stopping: watch::Receiver<bool>,
) -> Result<Option<Arc<dyn Store>>, ServeError> {
    let retry = matches!(config.store.database, Database::Postgres { .. });
    let mut backoff = config.health.retry_first;
    loop {
        let error = tokio::select! {
            opened = store::open(&config.store) => match opened {
                Ok(store) => return Ok(Some(store)),
                Err(error) => error,
            },
            _ = stopping.wait_for(|s| *s) => return Ok(None),
        };
        if let Some(kind) = error.misconfigured() {
            return Err(ServeError::StoreSettings { kind, error });
        }
        if !retry || !matches!(error, store::Error::Database(_)) {
            return Err(error.into());
        }
        tracing::warn!(%error, ?backoff, "the store is unreachable; retrying");
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stopping.wait_for(|s| *s) => return Ok(None),
        }
        backoff = (backoff * 2).min(config.health.retry_max);
    }
}
