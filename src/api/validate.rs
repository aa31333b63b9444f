//! Checks of request fields against the contract and the configured limits.
//! Each check names the field it rejects; nothing reaches the store unchecked.
//! Page tokens are made and read here too, since they are request fields.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::domain::error::{Error, InvalidReason, Result};
use crate::domain::limits;
use crate::domain::model::{Cursor, UnixNanos};
use crate::domain::records::{Part, RecordCursor, RelatedCursor};

/// The namespace of requests that leave it empty.
pub const DEFAULT_NAMESPACE: &str = "default";

/// `namespace`: empty means "default"; otherwise `[a-z0-9][a-z0-9._-]{0,62}`.
pub fn namespace(value: String) -> Result<String> {
    if value.is_empty() {
        return Ok(DEFAULT_NAMESPACE.to_owned());
    }
    let bytes = value.as_bytes();
    let first_ok = bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit();
    let rest_ok =
        bytes[1..].iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'));
    if bytes.len() > limits::NAMESPACE_BYTES_MAX {
        return Err(too_long("namespace", limits::NAMESPACE_BYTES_MAX));
    }
    if !first_ok || !rest_ok {
        return Err(Error::invalid("namespace", InvalidReason::Malformed, "must match [a-z0-9][a-z0-9._-]{0,62}"));
    }
    Ok(value)
}

/// Whether a field must be given: a required field may not be empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Required,
    Optional,
}
pub use Presence::{Optional, Required};

/// An identifier: at most `max` bytes, no control characters, and not empty
/// when `Required`.
pub fn id(field: &str, value: String, max: usize, presence: Presence) -> Result<String> {
    if presence == Required && value.is_empty() {
        return Err(required_field(field));
    }
    if value.len() > max {
        return Err(too_long(field, max));
    }
    if value.chars().any(char::is_control) {
        return Err(Error::invalid(field, InvalidReason::Malformed, "must not contain control characters"));
    }
    Ok(value)
}

/// `phase`: 1..=128 bytes of `[A-Za-z0-9._:/-]`.
pub fn phase(field: &str, value: String, presence: Presence) -> Result<String> {
    if presence == Required && value.is_empty() {
        return Err(required_field(field));
    }
    if value.len() > limits::PHASE_BYTES_MAX {
        return Err(too_long(field, limits::PHASE_BYTES_MAX));
    }
    if !value.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'/' | b'-')) {
        return Err(Error::invalid(field, InvalidReason::Malformed, "must match [A-Za-z0-9._:/-]+"));
    }
    Ok(value)
}

/// `state`: a UTF-8 JSON document of at most `max` bytes, nested at most
/// `STATE_DEPTH_MAX` deep.
pub fn state(value: &[u8], max: usize) -> Result<()> {
    bytes("state", value, max)?;
    if json_depth(value) > limits::STATE_DEPTH_MAX {
        return Err(Error::invalid(
            "state",
            InvalidReason::NotJson,
            format!("JSON nests deeper than {} levels", limits::STATE_DEPTH_MAX),
        ));
    }
    // serde_json skips the bytes of strings it is asked to ignore without
    // checking their UTF-8, so the whole document is checked first.
    let text = std::str::from_utf8(value)
        .map_err(|e| Error::invalid("state", InvalidReason::NotJson, format!("must be UTF-8: {e}")))?;
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .map(|_| ())
        .map_err(|e| Error::invalid("state", InvalidReason::NotJson, format!("must be a UTF-8 JSON document: {e}")))
}

/// The deepest nesting of arrays and objects, counting brackets outside
/// strings. Run before parsing so a deep document costs one linear scan.
fn json_depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A timestamp as nanoseconds since the epoch: required, with nanos in
/// 0..1e9, and within what 64-bit nanoseconds hold (years 1678 to 2262).
pub fn timestamp(field: &str, value: Option<prost_types::Timestamp>) -> Result<UnixNanos> {
    let value = value.ok_or_else(|| required_field(field))?;
    optional_timestamp(field, Some(value)).map(|t| t.expect("present"))
}

/// Like `timestamp`, but absent is allowed.
pub fn optional_timestamp(field: &str, value: Option<prost_types::Timestamp>) -> Result<Option<UnixNanos>> {
    let Some(value) = value else { return Ok(None) };
    let out_of_range = || {
        Error::invalid(
            field,
            InvalidReason::OutOfRange,
            "must lie between 1678-01-01 and 2262-04-11 UTC with nanos in 0..1e9",
        )
    };
    if !(0..1_000_000_000).contains(&value.nanos) {
        return Err(out_of_range());
    }
    value
        .seconds
        .checked_mul(1_000_000_000)
        .and_then(|ns| ns.checked_add(i64::from(value.nanos)))
        .map(Some)
        .ok_or_else(out_of_range)
}

/// A duration in nanoseconds: unset means `default`; otherwise more than
/// zero and at most `max`.
pub fn duration(
    field: &str,
    value: Option<prost_types::Duration>,
    default: std::time::Duration,
    max: std::time::Duration,
) -> Result<i64> {
    let as_nanos = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
    let Some(value) = value else { return Ok(as_nanos(default)) };
    let out_of_range = || {
        Error::invalid(
            field,
            InvalidReason::OutOfRange,
            format!("must be more than 0 and at most {}s", max.as_secs_f64()),
        )
    };
    if !(0..1_000_000_000).contains(&value.nanos) || value.seconds < 0 {
        return Err(out_of_range());
    }
    let nanos = value.seconds.checked_mul(1_000_000_000).and_then(|s| s.checked_add(i64::from(value.nanos)));
    match nanos {
        Some(n) if n > 0 && n <= as_nanos(max) => Ok(n),
        _ => Err(out_of_range()),
    }
}

/// Bytes of at most `max`.
pub fn bytes(field: &str, value: &[u8], max: usize) -> Result<()> {
    if value.len() > max {
        return Err(too_long(field, max));
    }
    Ok(())
}

/// A lease token: tokens start at 1, so 0 means the field was not set.
pub fn lease_token(value: u64) -> Result<u64> {
    if value == 0 {
        return Err(required_field("lease_token"));
    }
    Ok(value)
}

/// A page size: 0 means `default`; otherwise 1..=`max`.
pub fn page_size(value: i32, default: u32, max: u32) -> Result<u32> {
    match value {
        0 => Ok(default),
        n if n > 0 && n as u32 <= max => Ok(n as u32),
        _ => Err(Error::invalid("page_size", InvalidReason::OutOfRange, format!("must be 0 (default) or 1..={max}"))),
    }
}

/// A record's text field (`scope`, `id`, `parent_id`, a ref): at most
/// `max` bytes of UTF-8 without NUL, which no store's text holds.
pub fn record_text(field: &str, value: String, max: usize, presence: Presence) -> Result<String> {
    if presence == Required && value.is_empty() {
        return Err(required_field(field));
    }
    if value.len() > max {
        return Err(too_long(field, max));
    }
    if value.contains('\0') {
        return Err(Error::invalid(field, InvalidReason::Malformed, "must not contain NUL"));
    }
    Ok(value)
}

/// A record `kind`: 1..=64 bytes of `[a-z0-9._-]` (or empty, where optional).
pub fn kind(field: &str, value: String, presence: Presence) -> Result<String> {
    if presence == Required && value.is_empty() {
        return Err(required_field(field));
    }
    if value.len() > limits::RECORD_KIND_BYTES_MAX {
        return Err(too_long(field, limits::RECORD_KIND_BYTES_MAX));
    }
    if !value.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')) {
        return Err(Error::invalid(field, InvalidReason::Malformed, "must match [a-z0-9._-]+"));
    }
    Ok(value)
}

/// A `content_type` of at most `max` bytes of printable ASCII: a record's
/// (`limits::CONTENT_TYPE_BYTES_MAX`) or a Signal's
/// (`limits::WAIT_CONTENT_TYPE_BYTES_MAX`).
pub fn content_type(field: &str, value: String, max: usize) -> Result<String> {
    if value.len() > max {
        return Err(too_long(field, max));
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::invalid(field, InvalidReason::Malformed, "must be printable ASCII"));
    }
    Ok(value)
}

/// A JSON object of at most `max` bytes, nested at most `STATE_DEPTH_MAX`
/// deep, with no NUL in its strings (which Postgres's jsonb refuses); empty
/// means none. Answered as the text sent.
pub fn json_object(field: &str, value: Vec<u8>, max: usize) -> Result<Option<String>> {
    if value.is_empty() {
        return Ok(None);
    }
    bytes(field, &value, max)?;
    if json_depth(&value) > limits::STATE_DEPTH_MAX {
        return Err(Error::invalid(
            field,
            InvalidReason::NotJson,
            format!("JSON nests deeper than {} levels", limits::STATE_DEPTH_MAX),
        ));
    }
    let text = String::from_utf8(value)
        .map_err(|e| Error::invalid(field, InvalidReason::NotJson, format!("must be UTF-8: {e}")))?;
    let parsed: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Error::invalid(field, InvalidReason::NotJson, format!("must be a JSON object: {e}")))?;
    if !parsed.is_object() {
        return Err(Error::invalid(field, InvalidReason::NotJson, "must be a JSON object"));
    }
    if holds_nul(&parsed) {
        return Err(Error::invalid(field, InvalidReason::NotJson, "must not contain NUL (\\u0000) in a string"));
    }
    if let Some(why) = numbers(text.as_bytes()).find_map(number_refused) {
        return Err(Error::invalid(field, InvalidReason::NotJson, why));
    }
    Ok(Some(text))
}

/// The number tokens of a valid JSON text: what starts with `-` or a digit
/// outside strings, up to the first byte no number holds.
fn numbers(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let (mut i, mut in_string, mut escaped) = (0, false, false);
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let b = bytes[i];
            if in_string {
                match (escaped, b) {
                    (true, _) => escaped = false,
                    (false, b'\\') => escaped = true,
                    (false, b'"') => in_string = false,
                    _ => {}
                }
                i += 1;
                continue;
            }
            if b == b'"' {
                in_string = true;
            } else if b == b'-' || b.is_ascii_digit() {
                let start = i;
                while i < bytes.len() && matches!(bytes[i], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E') {
                    i += 1;
                }
                return Some(&bytes[start..i]);
            }
            i += 1;
        }
        None
    })
}

/// Most significant digits of a non-integer number in metadata: as many as
/// the shortest form of any double has (what JSON encoders write for a
/// float), so SQLite's containment, which compares doubles, agrees with
/// Postgres's exact decimals on every number a program's floats produce.
const NUMBER_DIGITS_MAX: usize = 17;
/// Largest decimal exponent of a non-integer number in metadata, either
/// way: a double's range, subnormals included. (Postgres prints jsonb numbers in full, so such a
/// number lists back longer than it was sent: `1e-300` as 302 characters.)
const NUMBER_EXPONENT_MAX: i64 = 324;

/// Why a number of metadata (or of a filter) is refused: an integer must
/// fit 64 bits; any other number must have at most 17 significant digits
/// and lie within a double's range. Such numbers compare alike on both
/// backends, and none can fail a Postgres statement.
fn number_refused(token: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(token).ok()?;
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if exponent.is_none() && frac.is_empty() {
        let fits = text.parse::<i64>().is_ok() || text.parse::<u64>().is_ok();
        return (!fits).then(|| format!("the integer {text} does not fit 64 bits"));
    }
    let exponent: i64 = match exponent.map(|e| e.trim_start_matches('+').parse::<i64>()) {
        None => 0,
        Some(Ok(e)) if e.abs() <= 2 * NUMBER_EXPONENT_MAX => e,
        // Postgres refuses even a zero with an exponent like -99999.
        Some(_) => return Some(format!("the number {text} has an exponent beyond ±{}", 2 * NUMBER_EXPONENT_MAX)),
    };
    let digits: String = format!("{int}{frac}");
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return None; // zero, however written
    }
    let leading_zeros = digits.len() - significant.len();
    let significant = significant.trim_end_matches('0');
    if significant.len() > NUMBER_DIGITS_MAX {
        return Some(format!("the number {text} has more than {NUMBER_DIGITS_MAX} significant digits"));
    }
    // The decimal exponent of the first significant digit.
    let scale = exponent.saturating_add(int.len() as i64).saturating_sub(leading_zeros as i64 + 1);
    if scale.abs() > NUMBER_EXPONENT_MAX {
        return Some(format!("the number {text} is beyond 1e±{NUMBER_EXPONENT_MAX}"));
    }
    None
}

fn holds_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(holds_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// Room a ListRecords page keeps for its page token beyond its entries: the
/// longest cursor (an id, a turn and a scope at their limits, each with a
/// length) in base64, rounded up.
pub const RECORDS_TOKEN_BYTES_MAX: usize = 4096;

/// The same for a listing with `split_entries`, whose token may also name
/// where an entry was cut (its part and a related record's id).
pub const RECORDS_CUT_TOKEN_BYTES_MAX: usize = 5120;

/// The page token that resumes a record listing after `cursor`, or within
/// it after `within` when its entry was cut: each field as its length (4
/// bytes) and bytes; a cut's part as one byte before its id.
pub fn records_token(cursor: &RecordCursor, within: Option<&RelatedCursor>) -> String {
    let mut raw = vec![if within.is_some() { RECORDS_CUT_TOKEN } else { RECORDS_TOKEN }];
    let mut field = |field: &str| {
        raw.extend_from_slice(&(field.len() as u32).to_be_bytes());
        raw.extend_from_slice(field.as_bytes());
    };
    for value in [&cursor.id, &cursor.turn_id, &cursor.scope] {
        field(value);
    }
    if let Some(within) = within {
        field(&within.after);
        raw.push(match within.part {
            Part::Children => 0,
            Part::Refs => 1,
        });
    }
    URL_SAFE_NO_PAD.encode(raw)
}

/// Reads a record listing page token: where the listing goes on, and where
/// within a cut entry. A cut entry's token is only for a listing with
/// `split_entries`.
pub fn records_after(token: &str, split_entries: bool) -> Result<(Option<RecordCursor>, Option<RelatedCursor>)> {
    if token.is_empty() {
        return Ok((None, None));
    }
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad_token())?;
    let (cut, mut rest) = match raw.split_first() {
        Some((&RECORDS_TOKEN, rest)) => (false, rest),
        Some((&RECORDS_CUT_TOKEN, rest)) if split_entries => (true, rest),
        _ => return Err(bad_token()),
    };
    let mut field = || -> Result<String> {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or_else(bad_token)?;
        let len = u32::from_be_bytes(*len) as usize;
        let (bytes, tail) = (tail.get(..len).ok_or_else(bad_token)?, &tail[len..]);
        rest = tail;
        String::from_utf8(bytes.to_vec()).map_err(|_| bad_token())
    };
    let cursor = RecordCursor { id: field()?, turn_id: field()?, scope: field()? };
    let within = if cut { Some(field()?) } else { None };
    let within = match (within, rest) {
        (None, []) => None,
        (Some(after), [0]) => Some(RelatedCursor { part: Part::Children, after }),
        (Some(after), [1]) => Some(RelatedCursor { part: Part::Refs, after }),
        _ => return Err(bad_token()),
    };
    Ok((Some(cursor), within))
}

const RESTORE_TOKEN: u8 = b'r';
const TURNS_TOKEN: u8 = b't';
const RECORDS_TOKEN: u8 = b'g';
const RECORDS_CUT_TOKEN: u8 = b'e';
const WAITS_TOKEN: u8 = b'w';

/// The page token that resumes a restore after `cursor`.
pub fn restore_token(cursor: Cursor, newest_first: bool) -> String {
    let mut raw = Vec::with_capacity(18);
    raw.extend_from_slice(&[RESTORE_TOKEN, u8::from(newest_first)]);
    raw.extend_from_slice(&cursor.timestamp.to_be_bytes());
    raw.extend_from_slice(&cursor.seq.to_be_bytes());
    URL_SAFE_NO_PAD.encode(raw)
}

/// Reads a restore page token; it must have been made for the same direction.
pub fn restore_cursor(token: &str, newest_first: bool) -> Result<Option<Cursor>> {
    if token.is_empty() {
        return Ok(None);
    }
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad_token())?;
    match raw.as_slice() {
        [RESTORE_TOKEN, direction, rest @ ..] if *direction == u8::from(newest_first) && rest.len() == 16 => {
            let (timestamp, seq) = rest.split_at(8);
            Ok(Some(Cursor {
                timestamp: i64::from_be_bytes(timestamp.try_into().expect("8 bytes")),
                seq: i64::from_be_bytes(seq.try_into().expect("8 bytes")),
            }))
        }
        _ => Err(bad_token()),
    }
}

/// The page token that resumes a turn listing after `turn_id`.
pub fn turns_token(turn_id: &str) -> String {
    let mut raw = Vec::with_capacity(1 + turn_id.len());
    raw.push(TURNS_TOKEN);
    raw.extend_from_slice(turn_id.as_bytes());
    URL_SAFE_NO_PAD.encode(raw)
}

/// Reads a turn listing page token.
pub fn turns_after(token: &str) -> Result<Option<String>> {
    if token.is_empty() {
        return Ok(None);
    }
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad_token())?;
    match raw.split_first() {
        Some((&TURNS_TOKEN, turn_id)) => String::from_utf8(turn_id.to_vec()).map(Some).map_err(|_| bad_token()),
        _ => Err(bad_token()),
    }
}

/// A wait listing page token: the last wait's (turn_id, name), the turn led
/// by its length.
pub fn waits_token(turn_id: &str, name: &str) -> String {
    let mut raw = Vec::with_capacity(5 + turn_id.len() + name.len());
    raw.push(WAITS_TOKEN);
    raw.extend_from_slice(&(turn_id.len() as u32).to_be_bytes());
    raw.extend_from_slice(turn_id.as_bytes());
    raw.extend_from_slice(name.as_bytes());
    URL_SAFE_NO_PAD.encode(raw)
}

/// Reads a wait listing page token.
pub fn waits_after(token: &str) -> Result<Option<(String, String)>> {
    if token.is_empty() {
        return Ok(None);
    }
    let raw = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad_token())?;
    let Some((&WAITS_TOKEN, rest)) = raw.split_first() else { return Err(bad_token()) };
    let (length, rest) = rest.split_first_chunk::<4>().ok_or_else(bad_token)?;
    let length = u32::from_be_bytes(*length) as usize;
    if rest.len() < length {
        return Err(bad_token());
    }
    let (turn_id, name) = rest.split_at(length);
    let text = |bytes: &[u8]| String::from_utf8(bytes.to_vec()).map_err(|_| bad_token());
    Ok(Some((text(turn_id)?, text(name)?)))
}

fn bad_token() -> Error {
    Error::invalid("page_token", InvalidReason::BadPageToken, "is not a page token this request can continue from")
}

/// A wait handle that is not one stepwell made, or names what no request
/// could (its parts are checked as the fields they stand for).
pub fn malformed_handle() -> Error {
    Error::invalid("handle", InvalidReason::Malformed, "is not a wait handle")
}

fn required_field(field: &str) -> Error {
    Error::invalid(field, InvalidReason::Required, "is required")
}

fn too_long(field: &str, max: usize) -> Error {
    Error::invalid(field, InvalidReason::TooLong, format!("must be at most {max} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_numbers_compare_alike_on_both_backends_or_are_refused() {
        let ok = |text: &str| json_object("m", text.as_bytes().to_vec(), 1 << 16).is_ok();
        for good in [
            r#"{"a":1}"#,
            r#"{"a":-9223372036854775808,"b":18446744073709551615}"#,
            r#"{"a":1.5,"b":2.0,"c":0.000001,"d":1e20,"e":1.23456789012345e-5,"f":0e-40,"g":12e19}"#,
            r#"{"a":0.30000000000000004,"b":1e-300,"c":1.7976931348623157e308,"d":5e-324}"#,
            r#"{"s":"1e-20000 123456789012345678901234567890","n":[1,2,{"x":3}]}"#,
        ] {
            assert!(ok(good), "{good}");
        }
        for bad in [
            r#"{"a":18446744073709551616}"#,
            r#"{"a":1e-20000}"#,
            r#"{"a":1e309}"#,
            r#"{"a":[1.00000000000000001]}"#,
            r#"{"a":{"b":-1E-16384}}"#,
            r#"{"a":0.0e-99999}"#,
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn record_tokens_round_trip_and_refuse_what_they_did_not_make() {
        let cursor = RecordCursor { id: "c|\u{1f}é".into(), turn_id: "t".into(), scope: String::new() };
        assert_eq!(records_after(&records_token(&cursor, None), false).unwrap(), (Some(cursor.clone()), None));
        assert_eq!(records_after(&records_token(&cursor, None), true).unwrap(), (Some(cursor.clone()), None));
        let longest = RecordCursor { id: "x".repeat(1024), turn_id: "t".repeat(256), scope: "s".repeat(1024) };
        assert!(records_token(&longest, None).len() <= RECORDS_TOKEN_BYTES_MAX);
        assert!(records_after(&turns_token("t"), false).is_err());
        assert!(records_after("Zw", false).is_err());

        for part in [Part::Children, Part::Refs] {
            let within = RelatedCursor { part, after: "w\u{1f}1".into() };
            let token = records_token(&cursor, Some(&within));
            assert_eq!(records_after(&token, true).unwrap(), (Some(cursor.clone()), Some(within)));
            assert!(records_after(&token, false).is_err(), "a cut entry's token needs split_entries");
        }
        let longest_cut = RelatedCursor { part: Part::Refs, after: "r".repeat(1024) };
        assert!(records_token(&longest, Some(&longest_cut)).len() <= RECORDS_CUT_TOKEN_BYTES_MAX);
    }

    #[test]
    fn json_depth_ignores_brackets_in_strings() {
        assert_eq!(json_depth(br#"{"a":[1,{"b":"[[[{"}]}"#), 3);
        assert_eq!(json_depth(br#""\"[""#), 0);
    }

    #[test]
    fn restore_tokens_round_trip_and_keep_direction() {
        let cursor = Cursor { timestamp: -5, seq: 42 };
        let token = restore_token(cursor, true);
        assert_eq!(restore_cursor(&token, true).unwrap(), Some(cursor));
        assert!(restore_cursor(&token, false).is_err());
        assert!(restore_cursor("!!", false).is_err());
    }

    #[test]
    fn namespace_rules() {
        assert_eq!(namespace(String::new()).unwrap(), "default");
        assert!(namespace("a.b_c-9".into()).is_ok());
        assert!(namespace("-a".into()).is_err());
        assert!(namespace("A".into()).is_err());
        assert!(namespace("a".repeat(63)).is_ok());
        assert!(namespace("a".repeat(64)).is_err());
    }
}
