//! The network edge: the port or socket file served on, TLS with its
//! handshake limits, and the guards a connection passes before gRPC reads
//! it (the preface deadline, a Unix socket's `:authority`).

#[macro_use]
mod write_through;

pub mod listener;
pub(crate) mod preface;
pub mod tls;
pub(crate) mod unix_authority;
