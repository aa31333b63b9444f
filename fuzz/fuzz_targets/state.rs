//! Fuzz target `state`: raw bytes as the `state` of a Checkpoint request,
//! checked by `stepwell::api::validate::state` under one of a few size
//! limits. It must never panic, must stay fast on deep nesting, and must
//! agree with serde_json: a JSON document within the size and depth limits
//! is accepted, and an accepted one is within them.
//!
//! Input: byte 0 picks the limit (bits 0-1) and how many times the rest is
//! repeated to make the document (bits 2-4), so a short input can grow into
//! a long or deeply nested one; the rest is the document.
//!
//! The body is `stepwell_fuzz::state`, which the integration suite also
//! replays over the seeds on every test run.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| stepwell_fuzz::state(data));
