//! The gRPC face of stepwell: the generated protobuf types (`pb`), the
//! service implementations that convert between protobuf and the domain, the
//! request checks, and the one error-to-status table. Only `api` knows
//! protobuf types.

pub mod admission;
pub mod checkpoint;
pub mod codec;
pub mod idempotency;
pub mod status;
pub mod validate;

use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;
use tonic::{Response, Status};

use crate::config::Limits;
use crate::error::{Error, Result};
use crate::model::UnixNanos;
use crate::store::writer::Writer;
use crate::store::{Handle, Store};

/// The generated protobuf types, servers and clients of `stepwell.v1`.
pub mod pb {
    #![allow(missing_docs, clippy::all)]
    tonic::include_proto!("stepwell.v1");

    /// The encoded descriptors of the contract, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/stepwell_descriptor.bin"));
}

/// The opened store: reads through its handle, writes through its writer.
struct Opened {
    store: Handle,
    writer: Writer,
}

/// What every service shares: the store, once it is open, the limits, and a
/// signal that a request found the store unavailable.
pub struct Shared {
    opened: OnceLock<Opened>,
    limits: Limits,
    store_trouble: Notify,
}

impl Shared {
    /// Services start before the store is open; they answer UNAVAILABLE until then.
    pub fn new(limits: Limits) -> Arc<Shared> {
        Arc::new(Shared { opened: OnceLock::new(), limits, store_trouble: Notify::new() })
    }

    /// Completes when a request has found the store unavailable since the last call.
    pub async fn store_trouble(&self) {
        self.store_trouble.notified().await
    }

    /// Every handler's answer passes here: errors become statuses through the
    /// one table, and a store failure wakes the health monitor at once.
    pub fn answer<T>(&self, result: Result<T>) -> Result<Response<T>, Status> {
        // A request the open breaker refused tells the monitor nothing new.
        if let Err(Error::Unavailable(source)) = &result
            && !source.is_down()
        {
            self.store_trouble.notify_one();
        }
        result.map(Response::new).map_err(Status::from)
    }

    /// Makes the opened store available to the services.
    pub fn set_store(&self, store: Handle, writer: Writer) {
        // Only serve() sets the store, once; a second set would be a bug.
        assert!(self.opened.set(Opened { store, writer }).is_ok(), "the store is set once");
    }

    fn opened(&self) -> Result<&Opened> {
        self.opened.get().ok_or(Error::NotReady("the store is not open yet"))
    }

    /// Every write goes through the writer, once the store is open.
    pub fn writer(&self) -> Result<&Writer> {
        Ok(&self.opened()?.writer)
    }

    /// The store, for reads, once it is open and while it answers.
    pub fn store(&self) -> Result<&dyn Store> {
        Ok(self.opened()?.store.reads()?)
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

/// A protobuf timestamp from nanoseconds since the epoch.
pub fn timestamp(nanos: UnixNanos) -> prost_types::Timestamp {
    prost_types::Timestamp { seconds: nanos.div_euclid(1_000_000_000), nanos: nanos.rem_euclid(1_000_000_000) as i32 }
}
