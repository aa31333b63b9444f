//! The integration suite of stepwell: one test binary that drives the gRPC
//! API end to end, against in-process sidecars and the real binary, each on
//! a fresh store of its own. How a sidecar is started, which store it runs
//! on, and the request builders and assertions come from the
//! `stepwell-test-support` crate (tests/support), which the fault suite
//! shares; every module here covers one part of the contract in
//! shared/API.md.

mod admission;
mod auth;
mod bounded_waits;
mod checkpoint;
mod connections;
mod console;
mod contention;
mod contract;
mod crash_only;
mod delete;
mod durability;
mod fuzz_seeds;
mod group_commit;
mod idempotency;
mod idempotency_model;
mod lifecycle;
mod memory;
mod metrics;
mod moving;
mod namespace;
mod operator_cli;
mod pgvector;
mod pooler;
mod postgres_only;
mod postgres_tls;
mod records;
mod response_size;
mod restore;
mod retention;
mod security;
mod shared_store;
mod tls_handshakes;
mod tracing;
mod turns;
mod validation;
mod waits;
mod write_queue;

/// The real binary, which cargo builds for this test binary; tests that
/// kill, signal or run it pass it to `SidecarProcess::builder`.
const STEPWELL: &str = env!("CARGO_BIN_EXE_stepwell");
