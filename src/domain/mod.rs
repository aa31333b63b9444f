//! The domain: what stepwell stores and the rules it keeps, in types free of
//! protobuf, SQL and I/O. Every other layer builds on these words.

pub mod clock;
pub mod console;
pub mod error;
pub mod keys;
pub mod limits;
pub mod memory;
pub mod model;
pub mod percent;
pub mod records;
pub mod rpc;
pub mod waits;
