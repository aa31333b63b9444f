//! What stepwell's two test binaries share, the integration suite
//! (tests/it) and the fault suite (tests/faults): the store a test runs on
//! and the one place that picks the backend (`backend`), a private Postgres
//! cluster for tests that stop it (`pg_cluster`), running sidecars, in
//! process or as the real binary (`sidecar`), dialling them and following
//! their health (`channel`, `health`), the request builders and readers
//! (`requests`) and the checks of rich error details (`errors`), and the
//! one seeded random generator (`rng`); certificates made in the test and
//! the client side of TLS (`tls`); scraping the admin listener (`admin`).
//!
//! The real binary's path is the test binary's to give (cargo tells only
//! the stepwell package's own tests where it is), so `SidecarProcess`
//! takes it as an argument.

pub mod admin;
pub mod backend;
pub mod channel;
pub mod errors;
pub mod health;
pub mod pg_bouncer;
pub mod pg_cluster;
pub mod requests;
pub mod rng;
pub mod sidecar;
pub mod tls;

use std::time::Duration;

use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::memory_service_client::MemoryServiceClient;
use stepwell::api::pb::record_service_client::RecordServiceClient;
use stepwell::api::pb::wait_service_client::WaitServiceClient;
use tonic::transport::Channel;

/// The generated CheckpointService client every test uses.
pub type Client = CheckpointServiceClient<Channel>;

/// The generated IdempotencyService client.
pub type IdempotencyClient = IdempotencyServiceClient<Channel>;

/// The generated RecordService client.
pub type RecordClient = RecordServiceClient<Channel>;

/// The generated MemoryService client.
pub type MemoryClient = MemoryServiceClient<Channel>;

/// The generated WaitService client.
pub type WaitClient = WaitServiceClient<Channel>;

/// A test setting from the environment (a profile, a seed, a compiler):
/// the one place the test binaries read it, since the sidecar's lints
/// forbid reading the environment anywhere but its config.
#[allow(clippy::disallowed_methods)]
pub fn setting(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A guard against a hung test, not a synchronisation: every wait is for a
/// condition, and a passing test never comes near this.
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);
