//! The load generator's client shape: how its gRPC client is built and
//! driven (runtime, connections, HTTP/2 and TCP settings, how requests are
//! made, how callers are scheduled), and which direct writer baseline (a)
//! uses on SQLite.
//!
//! Two load generators with the same workload can disagree by a factor of
//! two or three when their clients are shaped differently, or when their
//! baselines are. Each knob is a flag of `stepwell-bench`, so a run can take
//! the shape a user's client has and say which one it measured. The shape
//! is fixed for a whole run, so it is set once at start-up and read by every
//! point from here rather than passed through each of them.

use std::sync::OnceLock;
use std::time::Duration;

use serde::Serialize;

/// The runtime the load generator's callers run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// tokio's multi-threaded runtime (`--client-workers` threads).
    Multi,
    /// tokio's current-thread runtime: every caller on one thread.
    CurrentThread,
}

/// How a W1 request's JSON state is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Requests {
    /// Copied from a few documents made before the run.
    Prebuilt,
    /// Serialised with serde_json from a `serde_json::Value` on every call,
    /// as an application encoding its state does.
    Serde,
}

/// How the closed loop schedules its callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Callers {
    /// Each caller is a task of its own (`tokio::spawn`).
    Spawned,
    /// All callers are futures of one task (`join_all`), so they never run
    /// on two threads at once.
    OneTask,
}

/// Which direct writer baseline (a) uses on SQLite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum DirectSqlite {
    /// sqlx, one pooled connection: every statement is a message to sqlx's
    /// SQLite worker thread and an answer back.
    Sqlx,
    /// rusqlite, one connection owned by a writer thread: one hop there
    /// and one back per insert, where sqlx makes one per statement.
    Rusqlite,
}

/// The whole client shape of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    pub runtime: Runtime,
    /// Worker threads of the multi-threaded runtime (None: one per core).
    pub workers: Option<usize>,
    /// HTTP/2 connections per sidecar, shared round-robin by the callers.
    pub channels: usize,
    /// One HTTP/2 connection per caller instead of `channels` shared ones.
    pub channel_per_caller: bool,
    /// HTTP/2 initial stream and connection window, in bytes (None: tonic's).
    pub http2_window: Option<u32>,
    pub http2_adaptive_window: bool,
    /// HTTP/2 keepalive ping interval in milliseconds (None: no pings).
    pub http2_keepalive_ms: Option<u64>,
    pub tcp_nodelay: bool,
    pub requests: Requests,
    pub callers: Callers,
    pub direct_sqlite: DirectSqlite,
}

impl Default for Shape {
    /// The shape `bench/` has always measured with.
    fn default() -> Shape {
        Shape {
            runtime: Runtime::Multi,
            workers: None,
            channels: 4,
            channel_per_caller: false,
            http2_window: None,
            http2_adaptive_window: false,
            http2_keepalive_ms: None,
            tcp_nodelay: true,
            requests: Requests::Prebuilt,
            callers: Callers::Spawned,
            direct_sqlite: DirectSqlite::Sqlx,
        }
    }
}

impl Shape {
    /// How many connections `callers` callers get.
    pub fn connections(&self, callers: usize) -> usize {
        if self.channel_per_caller { callers.max(1) } else { callers.min(self.channels).max(1) }
    }

    /// Applies the HTTP/2 and TCP settings to an endpoint.
    pub fn endpoint(&self, endpoint: tonic::transport::Endpoint) -> tonic::transport::Endpoint {
        let mut endpoint = endpoint.tcp_nodelay(self.tcp_nodelay);
        if let Some(window) = self.http2_window {
            endpoint = endpoint.initial_stream_window_size(window).initial_connection_window_size(window);
        }
        if self.http2_adaptive_window {
            endpoint = endpoint.http2_adaptive_window(true);
        }
        if let Some(interval) = self.http2_keepalive_ms {
            endpoint = endpoint.http2_keep_alive_interval(Duration::from_millis(interval)).keep_alive_while_idle(true);
        }
        endpoint
    }

    /// The runtime the whole harness runs on.
    pub fn build_runtime(&self) -> std::io::Result<tokio::runtime::Runtime> {
        let mut builder = match self.runtime {
            Runtime::Multi => tokio::runtime::Builder::new_multi_thread(),
            Runtime::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        };
        if let (Runtime::Multi, Some(workers)) = (self.runtime, self.workers) {
            builder.worker_threads(workers.max(1));
        }
        builder.enable_all().build()
    }
}

static SHAPE: OnceLock<Shape> = OnceLock::new();

/// Sets the run's shape; only the first call counts.
pub fn set(shape: Shape) {
    let _ = SHAPE.set(shape);
}

/// The run's shape (the default one when none was set, as in unit tests).
pub fn get() -> &'static Shape {
    SHAPE.get_or_init(Shape::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_share_connections_or_get_one_each() {
        let shared = Shape::default();
        assert_eq!((shared.connections(1), shared.connections(64)), (1, 4));
        let own = Shape { channel_per_caller: true, ..Shape::default() };
        assert_eq!((own.connections(1), own.connections(64)), (1, 64));
    }

    #[test]
    fn runtimes_have_the_asked_flavour() {
        let current = Shape { runtime: Runtime::CurrentThread, ..Shape::default() }.build_runtime().unwrap();
        assert_eq!(current.handle().runtime_flavor(), tokio::runtime::RuntimeFlavor::CurrentThread);
        let multi = Shape { workers: Some(3), ..Shape::default() }.build_runtime().unwrap();
        assert_eq!(multi.metrics().num_workers(), 3);
    }
}
