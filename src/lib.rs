//! stepwell: a durable-execution sidecar. It serves, over gRPC, a checkpoint
//! log per turn (run) and an idempotency key per side-effecting operation,
//! and stores both in SQLite or Postgres, so a run survives a crash and never
//! repeats a completed effect.
//!
//! The layers, from the ground up; each imports only the ones below it:
//! - `domain`: the vocabulary, free of protobuf, SQL and I/O: checkpoints and
//!   turns, records, idempotency keys and their lease rules, the clock, the
//!   contract's limits, the RPCs and roles, and the domain error;
//! - `observe`: logging, Prometheus metrics and OpenTelemetry spans;
//! - `store`: the one `Store` trait and its SQLite and Postgres backends,
//!   the only code with SQL or a database driver;
//! - `config`: every flag and environment variable, parsed and checked;
//! - `auth`: who is calling and what they may do;
//! - `net`: the listener (TCP or Unix socket), TLS, and the guards a new
//!   connection passes before gRPC sees it;
//! - `api`: the tonic services, request checks and the one error-to-status
//!   table, the only code (with `ops`' gRPC client side) that knows protobuf;
//! - `console`: the web console the admin listener serves: pages over the
//!   store's reads, sign-in and sessions, and the admin actions through the
//!   writer;
//! - `server`: `serve`, which wires the parts to a listener, the admin
//!   listener, the store's health monitor and the retention sweeper;
//! - `ops`: what never runs while serving: the operator commands, moving a
//!   store, the health probe, and the contract the binary carries.

#![forbid(unsafe_code)]

pub mod api;
pub mod auth;
pub mod config;
pub mod console;
pub mod domain;
pub mod net;
pub mod observe;
pub mod ops;
pub mod server;
pub mod store;

pub use net::listener::Listener;
pub use server::{ServeError, serve};
