//! Fuzz target `request`: raw bytes as a stepwell client could send them.
//! The first byte picks one of the nine RPCs of CheckpointService and
//! IdempotencyService, the rest is decoded with prost as the server's codec
//! does, and the decoded request goes to the real handler over a real SQLite
//! store (opened once per process; see `stepwell_fuzz::Harness`).
//!
//! Bytes that do not decode are the codec's INVALID_ARGUMENT and end the
//! input. A handler may refuse a request only with a code the contract
//! allows for a bad request or a record's state; any other code (INTERNAL,
//! UNKNOWN, UNAVAILABLE from the healthy local store, ...) or any panic is a
//! finding.

#![no_main]

use libfuzzer_sys::fuzz_target;
use stepwell_fuzz::{ALLOWED_CODES, harness, rpc_from_selector};

// The store opens (and migrates) before the first input, outside its time limit.
fuzz_target!(init: { harness(); }, |data: &[u8]| run(data));

fn run(data: &[u8]) {
    let Some((&selector, body)) = data.split_first() else { return };
    let rpc = rpc_from_selector(selector);
    let Some(answer) = harness().call(rpc, body) else { return };
    if let Err(status) = answer {
        assert!(
            ALLOWED_CODES.contains(&status.code()),
            "{} answered {:?}: {}",
            rpc.as_str(),
            status.code(),
            status.message()
        );
    }
}
