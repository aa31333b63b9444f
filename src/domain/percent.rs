//! Percent-encoding as RFC 3986 defines it for a URI component: every byte
//! but the unreserved ASCII letters, digits and `-._~` becomes `%XX`. The
//! console's query strings and the ADK turn names are encoded this way.

/// `text` percent-encoded: every byte but ASCII letters, digits and `-._~`
/// as `%XX` (uppercase hex).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}
