//! Everything that never runs while serving: the operator commands on a
//! running sidecar, moving a store to another, the health probe behind
//! `stepwell healthcheck`, and the contract the binary carries.

pub mod cli;
pub mod contract;
pub mod moving;
pub mod probe;
