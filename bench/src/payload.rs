//! What the workloads send: JSON checkpoint states of an exact size, and the
//! deterministic "randomness" that picks keys and retries.
//!
//! Everything a request holds is a pure function of (caller, index), so a
//! duplicate retry can rebuild an earlier request byte for byte instead of
//! remembering it, and a run can be repeated exactly. The filler is
//! pseudo-random alphanumeric text: LZ-style compression (Postgres TOAST)
//! gains little on it, so sizes on disk are not flattered by repetition.

/// A 64-bit mix (splitmix64's finaliser): consecutive inputs give unrelated outputs.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A number in `0..n` chosen by (caller, k), the same every time.
pub fn pick(caller: usize, k: u64, n: u64) -> u64 {
    mix(mix(caller as u64) ^ k) % n.max(1)
}

/// A few distinct JSON documents of exactly `size` bytes, used in rotation.
pub struct Payloads {
    documents: Vec<Vec<u8>>,
}

impl Payloads {
    /// How many distinct documents rotate: enough that consecutive requests
    /// differ, few enough to stay in cache.
    const DISTINCT: usize = 16;

    pub fn new(size: usize) -> Payloads {
        Payloads { documents: (0..Self::DISTINCT).map(|seed| json_document(size, seed as u64)).collect() }
    }

    /// The document for request `index` of `caller`: the same on every call.
    pub fn get(&self, caller: usize, index: u64) -> &[u8] {
        &self.documents[(index as usize).wrapping_add(caller) % self.documents.len()]
    }
}

/// A JSON object of exactly `size` bytes (at least 64) shaped like an agent's
/// step state: a few small fields and a long text field padded to the size.
pub fn json_document(size: usize, seed: u64) -> Vec<u8> {
    let size = size.max(64);
    let head = format!(r#"{{"step":{seed},"tool":"search","status":"ok","notes":""#);
    let tail = r#""}"#;
    let filler_len = size - head.len() - tail.len();
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";
    let mut state = mix(seed);
    let filler = (0..filler_len).map(|_| {
        state = mix(state);
        ALPHABET[(state % ALPHABET.len() as u64) as usize]
    });
    let mut document = Vec::with_capacity(size);
    document.extend_from_slice(head.as_bytes());
    document.extend(filler);
    document.extend_from_slice(tail.as_bytes());
    document
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_json_of_the_exact_size() {
        for size in [64, 200, 1024, 20 * 1024] {
            let document = json_document(size, 7);
            assert_eq!(document.len(), size);
            serde_json::from_slice::<serde_json::Value>(&document).expect("valid JSON");
        }
    }

    #[test]
    fn picks_are_repeatable_and_in_range() {
        assert_eq!(pick(3, 99, 10), pick(3, 99, 10));
        assert!((0..1000).all(|k| pick(1, k, 7) < 7));
        let distinct: std::collections::HashSet<_> = (0..100).map(|k| pick(0, k, 1 << 40)).collect();
        assert_eq!(distinct.len(), 100);
    }
}
