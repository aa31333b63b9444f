//! stepwell: a durable-execution sidecar. It serves, over gRPC, a checkpoint
//! log per turn (run) and an idempotency record per side-effecting operation,
//! and stores both in SQLite or Postgres, so a run survives a crash and never
//! repeats a completed effect.
//!
//! The parts, from the wire inwards:
//! - `api`: the tonic services, request checks and the one error-to-status table;
//! - `model` and `error`: the domain vocabulary, free of protobuf and SQL;
//! - `idempotency`: the lease and fencing rules every backend follows;
//! - `records`: addressed records within a turn (RecordService), and what a batch of puts means;
//! - `clock`: the one clock per store that leases are computed on;
//! - `store`: the one `Store` trait and its backends, the only code with SQL;
//! - `config`: every flag, environment variable and limit;
//! - `probe`: the health client behind `stepwell healthcheck`;
//! - `retention`: turn retention, the sweeper's deletion of old turns;
//! - `cli`: the operator commands on a running sidecar (`turns`, `keys`);
//! - `moving`: copying a store to another (`migrate`, `export`, `import`);
//! - `contract`: the .proto files the binary carries (`stepwell proto`);
//! - `telemetry`: logging;
//! - `metrics`: the Prometheus metrics, and `traces`: OpenTelemetry spans;
//! - `admin`: the admin HTTP listener (/metrics, /healthz, /readyz);
//! - `tls`: TLS and mutual TLS on the listener, reloaded on SIGHUP;
//! - `listener`: the TCP port or Unix socket file served on;
//! - `preface`: the deadline a new connection has to open itself;
//! - `unix_authority`: a Unix socket's `:authority`, which HTTP/2 clients
//!   may send in a form the server would refuse;
//! - `server`: `serve`, which wires the parts to a listener.

#![forbid(unsafe_code)]

pub mod admin;
pub mod api;
pub mod auth;
pub mod cli;
pub mod clock;
pub mod config;
pub mod contract;
pub mod error;
pub mod idempotency;
pub mod listener;
pub mod metrics;
pub mod model;
pub mod moving;
pub mod probe;
pub mod records;
pub mod retention;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod traces;

mod preface;
mod server;
mod unix_authority;

pub use listener::Listener;
pub use server::{ServeError, serve};
