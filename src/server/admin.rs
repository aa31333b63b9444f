//! The admin HTTP listener (`--admin-listen`, 127.0.0.1:9464 by default):
//! what a scraper or a probe that cannot speak gRPC asks of the sidecar.
//!
//! - `/metrics`: every metric in the Prometheus text format; the gauges
//!   that describe a state (queue, store, pool, files) are read at the scrape.
//! - `/healthz`: 200 while the process serves (liveness).
//! - `/readyz`: 200 while the store is open and answers and the sidecar is
//!   not draining, 503 otherwise (readiness): the gRPC health check's verdict.
//!
//! It serves plain HTTP/1.1 without authentication, so the configuration
//! keeps it on loopback unless the operator says otherwise. It is bound
//! before the store opens, so a probe hears "not ready" rather than nothing,
//! and it answers until the drain has ended.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api::Shared;

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

/// Serves the admin endpoints on `listener` until `ended` turns true;
/// `stopping` turning true makes `/readyz` answer 503.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    stopping: watch::Receiver<bool>,
    mut ended: watch::Receiver<bool>,
) {
    let app = Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Admin { shared: shared.clone(), stopping });
    let upkeep = async {
        let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            interval.tick().await;
            shared.metrics().upkeep();
        }
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        let _ = ended.wait_for(|ended| *ended).await;
    });
    tokio::select! {
        served = server => {
            if let Err(error) = served {
                tracing::warn!(%error, "the admin listener stopped");
            }
        }
        () = upkeep => {}
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
