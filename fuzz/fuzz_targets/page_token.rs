//! Fuzz target `page_token`: raw bytes as the `page_token` of a Restore or a
//! ListTurns request, read by `stepwell::api::validate::restore_cursor` and
//! `turns_after`. Neither may panic; a token either reader accepts must be
//! the very token stepwell would have issued for that position, and every
//! token stepwell issues must read back to its position, in its direction
//! only.
//!
//! Input: bit 0 of byte 0 is Restore's `newest_first`; the rest is the token
//! (as UTF-8, which protobuf strings are) and, read as two big-endian i64s,
//! a cursor to issue a token for.
//!
//! The body is `stepwell_fuzz::page_token`, which the integration suite also
//! replays over the seeds on every test run.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| stepwell_fuzz::page_token(data));
