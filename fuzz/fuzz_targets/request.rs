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
//!
//! The body is `stepwell_fuzz::request`, which the integration suite also
//! replays over the seeds on every test run.

#![no_main]

use libfuzzer_sys::fuzz_target;

// The store opens (and migrates) before the first input, outside its time limit.
fuzz_target!(init: { stepwell_fuzz::harness(); }, |data: &[u8]| stepwell_fuzz::request(data));
