//! Fuzz target `state`: raw bytes as the `state` of a Checkpoint request,
//! checked by `stepwell::api::validate::state` under one of a few size
//! limits. It must never panic, must stay fast on deep nesting, and must
//! agree with serde_json: a JSON document within the size and depth limits
//! is accepted, and an accepted one is within them.
//!
//! Input: byte 0 picks the limit (bits 0-1) and how many times the rest is
//! repeated to make the document (bits 2-4), so a short input can grow into
//! a long or deeply nested one; the rest is the document.

#![no_main]

use libfuzzer_sys::fuzz_target;
use stepwell::api::validate;

/// The size limits tried: tiny, small, and the default `--state-bytes-max`.
const LIMITS: [usize; 4] = [1, 64, 4096, 1 << 20];
/// How many copies of the input body make the document.
const REPEATS: [usize; 8] = [1, 1, 1, 1, 2, 16, 256, 4096];
/// No document grows past this, so one run stays within the time limit.
const DOCUMENT_MAX: usize = 2 << 20;
/// The contract's nesting limit (`limits::STATE_DEPTH_MAX`).
const DEPTH_MAX: usize = stepwell::domain::limits::STATE_DEPTH_MAX;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let max = LIMITS[usize::from(mode & 0b11)];
    let repeats = REPEATS[usize::from((mode >> 2) & 0b111)];
    let document: Vec<u8> = body.iter().copied().cycle().take((body.len() * repeats).min(DOCUMENT_MAX)).collect();

    let accepted = validate::state(&document, max).is_ok();

    if accepted {
        assert!(document.len() <= max, "a state over its limit was accepted");
        assert!(std::str::from_utf8(&document).is_ok(), "a state that is not UTF-8 was accepted");
    }
    if document.len() <= max {
        // serde_json's own nesting limit (128) keeps this parse bounded.
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&document) {
            let depth = depth(&value);
            assert_eq!(accepted, depth <= DEPTH_MAX, "JSON nested {depth} deep was judged wrongly");
        }
    }
});

/// How deep arrays and objects nest in `value`.
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}
