//! The integration suite of stepwell: one test binary that drives the gRPC
//! API end to end, against in-process servers and the real binary, each on
//! a fresh store of its own. `harness` hides how a server is started and
//! `support` holds the request builders and assertions; every other module
//! covers one part of the contract in shared/API.md.

mod backend;
mod harness;
mod pg_cluster;
mod support;

mod admission;
mod checkpoint;
mod durability;
mod group_commit;
mod idempotency;
mod idempotency_model;
mod lifecycle;
mod namespace;
mod postgres_only;
mod restore;
mod shared_store;
mod turns;
mod validation;
