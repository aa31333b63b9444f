//! The store's health monitor: it keeps gRPC health and the store's
//! breaker true to whether the store answers, pinging it on an interval
//! and at once when a request found it unavailable.

use std::sync::Arc;

use tokio::sync::watch;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::SERVICES;
use crate::api::Shared;
use crate::config;
use crate::store::Handle;

/// Keeps health true to the store: a ping every interval, and at once when a
/// request found the store unavailable. NOT_SERVING while pings fail, SERVING
/// again when one succeeds; the store's pool reconnects by itself. While
/// pings fail the store's breaker is open: requests hear UNAVAILABLE at once
/// instead of each waiting out a dead server. A ping the store refused opens
/// the breaker at once; a ping that only ran past its timeout does so when
/// `check_timeouts_max` run late in a row, since on a starved machine the
/// monitor itself can be the one late, and one late ping must not fail
/// every caller.
pub(super) async fn monitor(
    store: Handle,
    shared: Arc<Shared>,
    health: HealthReporter,
    config: config::sections::Health,
    mut stopping: watch::Receiver<bool>,
) {
    let mut serving = true;
    let mut late = 0;
    loop {
        tokio::select! {
            () = tokio::time::sleep(config.check_interval) => {}
            () = shared.store_trouble() => {}
            _ = stopping.wait_for(|s| *s) => return,
        }
        let pinged = tokio::time::timeout(config.check_timeout, store.backend().ping()).await;
        let ok = match pinged {
            Ok(Ok(())) => {
                late = 0;
                true
            }
            Ok(Err(_)) => false,
            Err(_) => {
                late += 1;
                tracing::debug!(late, "a health check of the store ran past its timeout");
                serving && late < config.check_timeouts_max
            }
        };
        store.set_up(ok);
        if ok != serving && !*stopping.borrow() {
            serving = ok;
            if ok {
                tracing::info!("the store answers again: SERVING");
                set_health(&health, ServingStatus::Serving).await;
            } else {
                tracing::warn!("the store does not answer: NOT_SERVING");
                set_health(&health, ServingStatus::NotServing).await;
            }
        }
    }
}

/// Sets every service's health, the server's own ("") included.
pub(super) async fn set_health(health: &HealthReporter, status: ServingStatus) {
    for service in SERVICES {
        health.set_service_status(service, status).await;
    }
}
