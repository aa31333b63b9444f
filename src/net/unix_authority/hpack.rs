//! Just enough of HPACK (RFC 7541) to find the `:authority` values of a
//! client's header blocks and replace the ones the HTTP/2 server would
//! refuse, without changing what any other field decodes to.
//!
//! The reader follows the client's dynamic table as the server's decoder
//! does, but keeps of each entry only what indexing needs: its size and
//! whether its name is `:authority`. A replaced value has the same length
//! as the one it replaces, so every entry keeps its size and the server's
//! table evicts exactly as the client's does: a later reference to the
//! entry by its index then reaches the replacement, which is valid too.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::OnceLock;

use tonic::codegen::http::uri::Authority;

/// The header table size a server's decoder starts with and never raises
/// here (the server advertises no other `SETTINGS_HEADER_TABLE_SIZE`).
const TABLE_SIZE: usize = 4096;

/// What an entry adds to the table's size beside its name and value.
const ENTRY_OVERHEAD: usize = 32;

/// The largest integer a representation may carry: far beyond any length
/// or index a header block of the server's limits holds.
const INTEGER_MAX: usize = 1 << 24;

/// The name lengths of the static table (RFC 7541, Appendix A), by index
/// less one; index 1 is `:authority`.
const STATIC_NAME_BYTES: [u8; 61] = [
    10, 7, 7, 5, 5, 7, 7, 7, 7, 7, 7, 7, 7, 7, 14, 15, 15, 13, 6, 27, 3, 5, 13, 13, 19, 16, 16, 14, 16, 13, 12, 6, 4,
    4, 6, 7, 4, 4, 8, 17, 13, 8, 19, 13, 4, 8, 12, 18, 19, 5, 7, 7, 11, 6, 10, 25, 17, 10, 4, 3, 16,
];

/// The bit lengths of the Huffman code of RFC 7541, Appendix B, by symbol
/// (256 is EOS). The code is canonical, so the lengths define it.
const HUFFMAN_BITS: [u8; 257] = [
    13, 23, 28, 28, 28, 28, 28, 28, 28, 24, 30, 28, 28, 30, 28, 28, 28, 28, 28, 28, 28, 28, 30, 28, 28, 28, 28, 28, 28,
    28, 28, 28, 6, 10, 10, 12, 13, 6, 8, 11, 10, 10, 8, 11, 8, 6, 6, 6, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 7, 8, 15, 6, 12,
    10, 13, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 8, 7, 8, 13, 19, 13, 14, 6, 15, 5, 6,
    5, 6, 5, 6, 6, 6, 5, 7, 7, 6, 6, 6, 5, 6, 7, 6, 5, 5, 6, 7, 7, 7, 7, 7, 15, 11, 14, 13, 28, 20, 22, 20, 20, 22, 22,
    22, 23, 22, 23, 23, 23, 23, 23, 24, 23, 24, 24, 22, 23, 24, 23, 23, 23, 23, 21, 22, 23, 22, 23, 23, 24, 22, 21, 20,
    22, 22, 23, 23, 21, 23, 22, 22, 24, 21, 22, 23, 23, 21, 21, 22, 21, 23, 22, 23, 23, 20, 22, 22, 22, 23, 22, 22, 23,
    26, 26, 20, 19, 22, 23, 22, 25, 26, 26, 26, 27, 27, 26, 24, 25, 19, 21, 26, 27, 27, 26, 27, 24, 21, 21, 26, 26, 28,
    27, 27, 27, 20, 24, 20, 21, 22, 21, 21, 23, 22, 22, 25, 25, 24, 24, 26, 23, 26, 27, 26, 26, 27, 27, 27, 27, 27, 28,
    27, 27, 27, 27, 27, 26, 30,
];

/// The longest code of `HUFFMAN_BITS`.
const HUFFMAN_BITS_MAX: usize = 30;

/// A header block that is not valid HPACK: the server's decoder will find
/// that out itself, from the same bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Malformed;

/// One string of a block to write anew: the bytes at `range` (a string
/// literal, its length prefix included) become `literal`.
#[derive(Debug, PartialEq, Eq)]
pub struct Edit {
    pub range: Range<usize>,
    pub literal: Vec<u8>,
}

/// An entry of the dynamic table, as far as indexing needs it.
#[derive(Debug, Clone, Copy)]
struct Entry {
    name_bytes: usize,
    size: usize,
    authority: bool,
}

/// The client's dynamic table, followed block by block.
#[derive(Debug)]
pub struct Reader {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
}

impl Default for Reader {
    fn default() -> Reader {
        Reader { entries: VecDeque::new(), size: 0, max: TABLE_SIZE }
    }
}

impl Reader {
    /// Reads one whole header block, updating the table as the server's
    /// decoder will, and returns the `:authority` values to replace.
    pub fn block(&mut self, block: &[u8]) -> Result<Vec<Edit>, Malformed> {
        let mut edits = Vec::new();
        let mut at = 0;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                let index = integer(block, &mut at, 7)?;
                self.name(index)?;
            } else if first & 0xc0 == 0x40 {
                let entry = self.literal(block, &mut at, 6, &mut edits)?;
                self.insert(entry);
            } else if first & 0xe0 == 0x20 {
                let max = integer(block, &mut at, 5)?;
                if max > TABLE_SIZE {
                    return Err(Malformed);
                }
                self.max = max;
                self.evict(0);
            } else {
                self.literal(block, &mut at, 4, &mut edits)?;
            }
        }
        Ok(edits)
    }

    /// A literal field: its name (by index, or a string), then its value.
    /// A value of `:authority` the server would refuse is replaced.
    fn literal(&self, block: &[u8], at: &mut usize, prefix: u8, edits: &mut Vec<Edit>) -> Result<Entry, Malformed> {
        let index = integer(block, at, prefix)?;
        let (name_bytes, authority) = if index == 0 {
            let name = string(block, at)?;
            (name.text.len(), name.text == b":authority")
        } else {
            self.name(index)?
        };
        let value = string(block, at)?;
        if authority && !value.text.is_empty() && Authority::try_from(value.text.as_slice()).is_err() {
            edits.push(Edit { range: value.range, literal: literal(&stand_in(&value.text)) });
        }
        Ok(Entry { name_bytes, size: name_bytes + value.text.len() + ENTRY_OVERHEAD, authority })
    }

    /// The length of the name at `index`, and whether it is `:authority`.
    fn name(&self, index: usize) -> Result<(usize, bool), Malformed> {
        match index {
            0 => Err(Malformed),
            1..=61 => Ok((usize::from(STATIC_NAME_BYTES[index - 1]), index == 1)),
            _ => self.entries.get(index - 62).map(|entry| (entry.name_bytes, entry.authority)).ok_or(Malformed),
        }
    }

    fn insert(&mut self, entry: Entry) {
        self.evict(entry.size);
        if entry.size <= self.max {
            self.size += entry.size;
            self.entries.push_front(entry);
        }
    }

    /// Drops the oldest entries until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max {
            let Some(oldest) = self.entries.pop_back() else { break };
            self.size -= oldest.size;
        }
    }
}

/// An authority the server accepts, of the same length as `value`: its
/// letters, digits and `.`, `_`, `~` and `-` kept, every other byte a `-`,
/// so a log still shows what the client sent.
fn stand_in(value: &[u8]) -> Vec<u8> {
    value.iter().map(|&b| if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~') { b } else { b'-' }).collect()
}

/// `text` as a string literal without Huffman coding.
fn literal(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + 4);
    encode_integer(text.len(), 7, 0, &mut out);
    out.extend_from_slice(text);
    out
}

/// Appends `value` as an HPACK integer with a `prefix`-bit prefix, the
/// first byte's other bits being `flags`.
fn encode_integer(mut value: usize, prefix: u8, flags: u8, out: &mut Vec<u8>) {
    let limit = (1usize << prefix) - 1;
    if value < limit {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | limit as u8);
    value -= limit;
    while value >= 0x80 {
        out.push((value & 0x7f) as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Reads an HPACK integer with a `prefix`-bit prefix at `at`.
fn integer(block: &[u8], at: &mut usize, prefix: u8) -> Result<usize, Malformed> {
    let limit = (1usize << prefix) - 1;
    let mut value = usize::from(*block.get(*at).ok_or(Malformed)?) & limit;
    *at += 1;
    if value < limit {
        return Ok(value);
    }
    let mut shift = 0;
    loop {
        let byte = *block.get(*at).ok_or(Malformed)?;
        *at += 1;
        value += usize::from(byte & 0x7f) << shift;
        if value > INTEGER_MAX {
            return Err(Malformed);
        }
        if byte & 0x80 == 0 {
            return Ok(value);
        }
        shift += 7;
    }
}

/// A string literal of a block: where it lies (prefix included) and what it decodes to.
struct Text {
    range: Range<usize>,
    text: Vec<u8>,
}

fn string(block: &[u8], at: &mut usize) -> Result<Text, Malformed> {
    let start = *at;
    let huffman = block.get(start).ok_or(Malformed)? & 0x80 != 0;
    let length = integer(block, at, 7)?;
    let end = at.checked_add(length).filter(|&end| end <= block.len()).ok_or(Malformed)?;
    let bytes = &block[*at..end];
    *at = end;
    let text = if huffman { huffman_decode(bytes)? } else { bytes.to_vec() };
    Ok(Text { range: start..end, text })
}

/// The canonical code's decoding tables: per bit length, the first code
/// and how many codes have it, and the symbols in code order.
struct Canonical {
    first: [u32; HUFFMAN_BITS_MAX + 1],
    count: [u32; HUFFMAN_BITS_MAX + 1],
    offset: [usize; HUFFMAN_BITS_MAX + 1],
    symbols: Vec<u16>,
}

fn canonical() -> &'static Canonical {
    static TABLES: OnceLock<Canonical> = OnceLock::new();
    TABLES.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..=256).collect();
        symbols.sort_by_key(|&symbol| (HUFFMAN_BITS[usize::from(symbol)], symbol));
        let mut count = [0u32; HUFFMAN_BITS_MAX + 1];
        for bits in HUFFMAN_BITS {
            count[usize::from(bits)] += 1;
        }
        let (mut first, mut offset) = ([0u32; HUFFMAN_BITS_MAX + 1], [0usize; HUFFMAN_BITS_MAX + 1]);
        for bits in 1..=HUFFMAN_BITS_MAX {
            first[bits] = (first[bits - 1] + count[bits - 1]) << 1;
            offset[bits] = offset[bits - 1] + count[bits - 1] as usize;
        }
        Canonical { first, count, offset, symbols }
    })
}

/// Decodes a Huffman-coded string; the padding must be at most 7 bits of
/// ones (a prefix of EOS), and EOS itself may not appear.
fn huffman_decode(bytes: &[u8]) -> Result<Vec<u8>, Malformed> {
    let tables = canonical();
    let mut out = Vec::with_capacity(bytes.len() * 8 / 5);
    let (mut code, mut bits, mut ones) = (0u32, 0usize, true);
    for byte in bytes {
        for shift in (0..8).rev() {
            let bit = u32::from(byte >> shift & 1);
            code = code << 1 | bit;
            bits += 1;
            ones &= bit == 1;
            if bits > HUFFMAN_BITS_MAX {
                return Err(Malformed);
            }
            let index = code.wrapping_sub(tables.first[bits]);
            if code >= tables.first[bits] && index < tables.count[bits] {
                let symbol = tables.symbols[tables.offset[bits] + index as usize];
                out.push(u8::try_from(symbol).map_err(|_| Malformed)?);
                (code, bits, ones) = (0, 0, true);
            }
        }
    }
    if bits > 7 || !ones {
        return Err(Malformed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "www.example.com", Huffman-coded (RFC 7541, C.4.1).
    const WWW_EXAMPLE_COM: [u8; 12] = [0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff];

    #[test]
    fn huffman_decodes_the_rfc_examples_and_refuses_bad_padding() {
        assert_eq!(huffman_decode(&WWW_EXAMPLE_COM).as_deref(), Ok(&b"www.example.com"[..]));
        // "no-cache" (RFC 7541, C.4.2).
        assert_eq!(huffman_decode(&[0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf]).as_deref(), Ok(&b"no-cache"[..]));
        assert_eq!(huffman_decode(&[0x00]), Err(Malformed), "padding of zeros after a '0'");
        assert_eq!(huffman_decode(&[0xff, 0xff, 0xff, 0xff]), Err(Malformed), "EOS");
    }

    #[test]
    fn integers_round_trip_across_their_prefix() {
        for (value, prefix) in [(10, 5), (1337, 5), (42, 8), (127, 7), (0, 4), (15, 4), (300_000, 6)] {
            let mut out = Vec::new();
            encode_integer(value, prefix, 0, &mut out);
            let mut at = 0;
            assert_eq!(integer(&out, &mut at, prefix), Ok(value));
            assert_eq!(at, out.len());
        }
    }

    /// A block that names `:authority` by the static index, indexed into
    /// the table, and then refers to that entry by its index.
    fn authority_block(value: &[u8]) -> Vec<u8> {
        let mut block = vec![0x83, 0x86, 0x41];
        block.extend(literal(value));
        block
    }

    #[test]
    fn a_percent_encoded_authority_is_replaced_by_one_of_its_length() {
        let mut reader = Reader::default();
        let block = authority_block(b"unix:%2Ftmp%2Fx.sock");
        let edits = reader.block(&block).expect("valid HPACK");
        assert_eq!(edits, vec![Edit { range: 3..block.len(), literal: literal(b"unix--2Ftmp-2Fx.sock") }]);
        assert_eq!(reader.entries.len(), 1);
        assert_eq!(reader.size, 10 + 20 + ENTRY_OVERHEAD);
        // The next block names the entry by index 62: nothing to replace there.
        assert_eq!(reader.block(&[0x83, 0x86, 0xbe]), Ok(Vec::new()));
        assert_eq!(reader.block(&[0x83, 0xbf]), Err(Malformed), "no entry 63");
    }

    #[test]
    fn a_valid_authority_and_other_fields_are_left_alone() {
        let mut reader = Reader::default();
        assert_eq!(reader.block(&authority_block(b"localhost:50051")), Ok(Vec::new()));
        let mut huffman = vec![0x41, 0x80 | WWW_EXAMPLE_COM.len() as u8];
        huffman.extend(WWW_EXAMPLE_COM);
        assert_eq!(reader.block(&huffman), Ok(Vec::new()));
        // A literal name `:authority`, without indexing, holding a path.
        let mut named = vec![0x00];
        named.extend(literal(b":authority"));
        named.extend(literal(b"/tmp/x.sock"));
        let edits = reader.block(&named).expect("valid HPACK");
        assert_eq!(edits.len(), 1);
        assert_eq!(edits[0].literal, literal(b"-tmp-x.sock"));
        assert_eq!(reader.entries.len(), 2, "without indexing adds no entry");
    }

    #[test]
    fn a_size_update_evicts_as_the_server_does() {
        let mut reader = Reader::default();
        reader.block(&authority_block(b"a")).expect("valid");
        reader.block(&authority_block(b"b")).expect("valid");
        assert_eq!(reader.entries.len(), 2);
        let mut update = Vec::new();
        encode_integer(50, 5, 0x20, &mut update);
        reader.block(&update).expect("valid");
        assert_eq!((reader.entries.len(), reader.size), (1, 10 + 1 + ENTRY_OVERHEAD));
        let mut too_big = Vec::new();
        encode_integer(TABLE_SIZE + 1, 5, 0x20, &mut too_big);
        assert_eq!(reader.block(&too_big), Err(Malformed));
    }
}
