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

#![no_main]

use libfuzzer_sys::fuzz_target;
use stepwell::api::validate;
use stepwell::domain::model::Cursor;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let newest_first = mode & 1 == 1;
    let token = String::from_utf8_lossy(rest);

    if let Ok(Some(cursor)) = validate::restore_cursor(&token, newest_first) {
        assert_eq!(validate::restore_token(cursor, newest_first), token, "a restore token that was not issued");
    }
    if let Ok(Some(after)) = validate::turns_after(&token) {
        assert_eq!(validate::turns_token(&after), token, "a turns token that was not issued");
    }
    if token.is_empty() {
        assert!(matches!(validate::restore_cursor(&token, newest_first), Ok(None)), "no token is the first page");
        assert!(matches!(validate::turns_after(&token), Ok(None)), "no token is the first page");
    }

    if let (Some(timestamp), Some(seq)) = (be_i64(rest, 0), be_i64(rest, 8)) {
        let cursor = Cursor { timestamp, seq };
        let issued = validate::restore_token(cursor, newest_first);
        assert_eq!(
            validate::restore_cursor(&issued, newest_first).ok(),
            Some(Some(cursor)),
            "a restore token lost its place"
        );
        assert!(validate::restore_cursor(&issued, !newest_first).is_err(), "a restore token changed direction");
        assert!(validate::turns_after(&issued).is_err(), "a restore token read as a turns token");
    }
    let issued = validate::turns_token(&token);
    assert_eq!(
        validate::turns_after(&issued).ok(),
        Some(Some(token.clone().into_owned())),
        "a turns token lost its place"
    );
    assert!(validate::restore_cursor(&issued, newest_first).is_err(), "a turns token read as a restore token");
});

/// The big-endian i64 at `at`, if `bytes` reach that far.
fn be_i64(bytes: &[u8], at: usize) -> Option<i64> {
    bytes.get(at..at + 8).map(|b| i64::from_be_bytes(b.try_into().expect("8 bytes")))
}
