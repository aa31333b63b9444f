//! The admin HTTP listener (`--admin-listen`, 127.0.0.1:9464 by default):
//! what a scraper or a probe that cannot speak gRPC asks of the sidecar.
//!
//! - `/metrics`: every metric in the Prometheus text format; the gauges
//!   that describe a state (queue, store, pool, files) are read at the scrape.
//! - `/healthz`: 200 while the process serves (liveness).
//! - `/readyz`: 200 while the store is open and answers and the sidecar is
//!   not draining, 503 otherwise (readiness): the gRPC health check's verdict.
//!
//! - `/` and below: the web console (`console`), unless `--console off`.
//!
//! It serves plain HTTP/1.1 by default, or TLS with `--admin-tls` (through
//! the same bounded handshakes as the gRPC listener, no client certificate
//! asked). Metrics and probes need no authentication, so the configuration
//! keeps it on loopback unless it has TLS and an auth file, or the operator
//! says otherwise. It is bound before the store opens, so a probe hears
//! "not ready" rather than nothing, and it answers until the drain has ended.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use futures::{Stream, StreamExt};
use tokio::net::TcpStream;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::server::Connected;

use crate::api::Shared;
use crate::config::sections::Handshakes;
use crate::net::tls::{self, ServerTls, TlsConn};
use crate::observe::metrics::Metrics;

/// The content type of the Prometheus text exposition format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often recorded histogram samples are folded into their buckets
/// between scrapes, so that they never pile up in memory.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Clone)]
struct Admin {
    shared: Arc<Shared>,
    stopping: watch::Receiver<bool>,
}

/// Binds the admin listener; an address that cannot be bound stops the start.
pub async fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(address).await
}

/// How the admin listener serves: its console, and its TLS if any.
pub struct Serving {
    pub console: Option<Router>,
    pub tls: Option<(Arc<ServerTls>, Handshakes, Arc<Metrics>)>,
}

/// Serves the admin endpoints on `listener` until `ended` turns true;
/// `stopping` turning true makes `/readyz` answer 503.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    (stopping, mut ended): (watch::Receiver<bool>, watch::Receiver<bool>),
    serving: Serving,
) {
    let mut app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Admin { shared: shared.clone(), stopping });
    if let Some(console) = serving.console {
        app = app.merge(console);
    }
    let upkeep = async {
        let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            interval.tick().await;
            shared.metrics().upkeep();
        }
    };
    let shutdown = async move {
        let _ = ended.wait_for(|ended| *ended).await;
    };
    let served = async {
        match serving.tls {
            None => axum::serve(listener, app).with_graceful_shutdown(shutdown).await,
            Some((tls, handshakes, metrics)) => {
                let listener = TlsListener::new(listener, tls, handshakes, metrics)?;
                axum::serve(listener, app).with_graceful_shutdown(shutdown).await
            }
        }
    };
    tokio::select! {
        served = served => {
            if let Err(error) = served {
                tracing::warn!(%error, "the admin listener stopped");
            }
        }
        () = upkeep => {}
    }
}

/// The admin listener's TLS connections, each through its handshake first.
struct TlsListener {
    local: SocketAddr,
    connections: Pin<Box<dyn Stream<Item = std::io::Result<TlsConn<TcpStream>>> + Send>>,
}

impl TlsListener {
    fn new(
        listener: TcpListener,
        tls: Arc<ServerTls>,
        handshakes: Handshakes,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<TlsListener> {
        let local = listener.local_addr()?;
        let accepted = TcpListenerStream::new(listener);
        Ok(TlsListener { local, connections: Box::pin(tls::incoming(accepted, tls, handshakes, metrics)) })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.connections.next().await {
                Some(Ok(conn)) => {
                    let remote = conn.connect_info().tcp.and_then(|tcp| tcp.remote_addr()).unwrap_or(self.local);
                    return (conn, remote);
                }
                // A failed handshake was the client's; accepting goes on.
                Some(Err(_)) => continue,
                // The handshakes' task ended: nothing more will come.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}

async fn metrics(State(admin): State<Admin>) -> impl IntoResponse {
    let state = admin.shared.metrics_state().await;
    ([(header::CONTENT_TYPE, PROMETHEUS_TEXT)], admin.shared.metrics().render(&state))
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(admin): State<Admin>) -> (StatusCode, &'static str) {
    if *admin.stopping.borrow() {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    } else if admin.shared.ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "the store is not open or does not answer\n")
    }
}
