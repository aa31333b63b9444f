//! A Unix socket's `:authority`. gRPC clients built on the C core (Python,
//! Ruby, PHP, C++) send, for a `unix:` target, the socket's path
//! percent-encoded as the request's `:authority`, which is not a valid
//! authority; the HTTP/2 server refuses such a request with RST_STREAM
//! (PROTOCOL_ERROR) before stepwell sees it, so generated stubs on their
//! default options could not reach a sidecar on a Unix socket.
//!
//! On a Unix socket the authority names nothing (stepwell never reads it),
//! so each accepted Unix stream (after TLS, if any) is read through
//! `UnixAuthority`, which follows the client's HTTP/2 frames and rewrites
//! only header blocks whose `:authority` the server would refuse: the value
//! becomes a valid one of the same length (`hpack`), every other byte is
//! passed on as it came. A connection whose frames or header blocks are not
//! valid is passed on unchanged from there, for the server to refuse as
//! before. TCP listeners are not wrapped: there an authority is the
//! client's to get right.

mod hpack;

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The bytes of the HTTP/2 client connection preface.
const PREFACE_BYTES: usize = 24;
/// The bytes of an HTTP/2 frame's header.
const FRAME_HEADER_BYTES: usize = 9;
/// Frame types and flags (RFC 9113, section 6).
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The bytes of a HEADERS frame's priority fields.
const PRIORITY_BYTES: usize = 5;
/// The largest frame payload every HTTP/2 server accepts (the least
/// `SETTINGS_MAX_FRAME_SIZE`): a rewritten block is framed within it.
const FRAME_PAYLOAD_MAX: usize = 16_384;
/// The most bytes of one header block's frames held while they arrive,
/// far above the server's own header list limit; a larger block is passed
/// on unchanged, for the server to refuse.
const BLOCK_BYTES_MAX: usize = 1 << 20;
/// How much is read from the socket at once.
const READ_BYTES: usize = 16 * 1024;

/// The streams `accepted` yields, each read through `UnixAuthority`.
pub fn relaxed<IO>(accepted: impl Stream<Item = io::Result<IO>>) -> impl Stream<Item = io::Result<UnixAuthority<IO>>> {
    accepted.map(|accepted| accepted.map(UnixAuthority::new))
}

/// An accepted Unix stream whose invalid `:authority` values the server
/// never sees.
pub struct UnixAuthority<IO> {
    io: IO,
    frames: Frames,
    /// Bytes read and rewritten, not yet handed to the server; from `handed` on.
    ready: Vec<u8>,
    handed: usize,
    scratch: Box<[u8]>,
    ended: bool,
}

impl<IO> UnixAuthority<IO> {
    pub fn new(io: IO) -> UnixAuthority<IO> {
        UnixAuthority {
            io,
            frames: Frames::default(),
            ready: Vec::new(),
            handed: 0,
            scratch: vec![0; READ_BYTES].into_boxed_slice(),
            ended: false,
        }
    }
}

impl<IO: Connected> Connected for UnixAuthority<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> IO::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for UnixAuthority<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.handed < this.ready.len() || buf.remaining() == 0 {
                let count = buf.remaining().min(this.ready.len() - this.handed);
                buf.put_slice(&this.ready[this.handed..this.handed + count]);
                this.handed += count;
                if this.handed == this.ready.len() {
                    this.ready.clear();
                    this.handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.ended {
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.scratch);
            ready!(Pin::new(&mut this.io).poll_read(cx, &mut read))?;
            if read.filled().is_empty() {
                // What the client left unfinished reaches the server as it was.
                this.frames.end(&mut this.ready);
                this.ended = true;
            } else {
                this.frames.feed(read.filled(), &mut this.ready);
            }
        }
    }
}

write_through!(UnixAuthority, io, AsyncWrite + Unpin);

/// Where the client's byte stream is.
#[derive(Debug)]
enum State {
    /// In the connection preface, this many bytes before its end.
    Preface(usize),
    /// In a frame's header, of which these bytes have come.
    Head(Vec<u8>),
    /// In a frame's payload that passes as it is, this many bytes before its end.
    Pass(usize),
    /// In a payload of a header block's frame, this many bytes before its end.
    Collect(usize),
    /// Past something not valid: everything passes as it is.
    Through,
}

/// The client's frames, read as they arrive.
#[derive(Debug)]
struct Frames {
    state: State,
    /// The frames of the header block being read, as they came.
    block: Vec<u8>,
    /// Whether the frame being collected ends its header block.
    last: bool,
    table: hpack::Reader,
}

impl Default for Frames {
    fn default() -> Frames {
        Frames { state: State::Preface(PREFACE_BYTES), block: Vec::new(), last: false, table: hpack::Reader::default() }
    }
}

impl Frames {
    /// Takes the next bytes from the client, and appends to `out` what the
    /// server is to read of them so far.
    fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        while !input.is_empty() {
            self.state = match std::mem::replace(&mut self.state, State::Through) {
                State::Through => {
                    out.extend_from_slice(take(&mut input, usize::MAX));
                    State::Through
                }
                State::Preface(left) => {
                    let now = take(&mut input, left);
                    out.extend_from_slice(now);
                    if now.len() == left { State::Head(Vec::new()) } else { State::Preface(left - now.len()) }
                }
                State::Pass(left) => {
                    let now = take(&mut input, left);
                    out.extend_from_slice(now);
                    if now.len() == left { State::Head(Vec::new()) } else { State::Pass(left - now.len()) }
                }
                State::Head(mut head) => {
                    head.extend_from_slice(take(&mut input, FRAME_HEADER_BYTES - head.len()));
                    if head.len() < FRAME_HEADER_BYTES { State::Head(head) } else { self.frame(&head, out) }
                }
                State::Collect(left) => {
                    let now = take(&mut input, left);
                    self.block.extend_from_slice(now);
                    if now.len() < left { State::Collect(left - now.len()) } else { self.collected(out) }
                }
            };
        }
    }

    /// What follows a frame's header: its payload passed on, or collected
    /// when it carries a header block.
    fn frame(&mut self, head: &[u8], out: &mut Vec<u8>) -> State {
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let in_block = !self.block.is_empty();
        match (in_block, kind) {
            (true, CONTINUATION) | (false, HEADERS) if self.block.len() + head.len() + length <= BLOCK_BYTES_MAX => {}
            (false, kind) if kind != HEADERS && kind != CONTINUATION => {
                out.extend_from_slice(head);
                return if length == 0 { State::Head(Vec::new()) } else { State::Pass(length) };
            }
            // A block broken off by another frame, a CONTINUATION of no
            // block, or a block too large: the server will refuse them.
            _ => {
                out.append(&mut self.block);
                out.extend_from_slice(head);
                return State::Through;
            }
        }
        self.block.extend_from_slice(head);
        self.last = flags & END_HEADERS != 0;
        if length == 0 { self.collected(out) } else { State::Collect(length) }
    }

    /// A header block frame is in: at the block's end, the block goes on,
    /// rewritten if its `:authority` needs it.
    fn collected(&mut self, out: &mut Vec<u8>) -> State {
        if !self.last {
            return State::Head(Vec::new());
        }
        let frames = std::mem::take(&mut self.block);
        match rewrite(&frames, &mut self.table) {
            Ok(Some(rewritten)) => out.extend_from_slice(&rewritten),
            Ok(None) => out.extend_from_slice(&frames),
            Err(hpack::Malformed) => {
                out.extend_from_slice(&frames);
                return State::Through;
            }
        }
        State::Head(Vec::new())
    }

    /// The client closed its side: what it left unfinished goes on as it was.
    fn end(&mut self, out: &mut Vec<u8>) {
        out.append(&mut self.block);
        if let State::Head(head) = &self.state {
            out.extend_from_slice(head);
        }
        self.state = State::Through;
    }
}

/// The first `left` bytes of `input` (or all it has), taken off it.
fn take<'a>(input: &mut &'a [u8], left: usize) -> &'a [u8] {
    let (now, rest) = input.split_at(left.min(input.len()));
    *input = rest;
    now
}

/// The HEADERS frame that opens a block, as far as its rewriting needs it.
struct Opening {
    flags: u8,
    stream: [u8; 4],
    priority: Option<[u8; PRIORITY_BYTES]>,
}

/// A whole header block's frames (a HEADERS and its CONTINUATIONs) with
/// each `:authority` the server would refuse replaced, or `None` when
/// there is none; the table follows the block either way.
fn rewrite(frames: &[u8], table: &mut hpack::Reader) -> Result<Option<Vec<u8>>, hpack::Malformed> {
    let (opening, fragment) = fragment(frames)?;
    let edits = table.block(&fragment)?;
    if edits.is_empty() {
        return Ok(None);
    }
    let mut block = Vec::with_capacity(fragment.len() + 16);
    let mut at = 0;
    for edit in edits {
        block.extend_from_slice(&fragment[at..edit.range.start]);
        block.extend_from_slice(&edit.literal);
        at = edit.range.end;
    }
    block.extend_from_slice(&fragment[at..]);
    Ok(Some(framed(&opening, &block)))
}

/// The opening frame's fields and the block's fragments joined, without
/// padding or priority fields.
fn fragment(frames: &[u8]) -> Result<(Opening, Vec<u8>), hpack::Malformed> {
    let mut opening: Option<Opening> = None;
    let mut fragment = Vec::with_capacity(frames.len());
    let mut at = 0;
    while at < frames.len() {
        let head = frames.get(at..at + FRAME_HEADER_BYTES).ok_or(hpack::Malformed)?;
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let (flags, stream) = (head[4], [head[5] & 0x7f, head[6], head[7], head[8]]);
        let mut payload =
            frames.get(at + FRAME_HEADER_BYTES..at + FRAME_HEADER_BYTES + length).ok_or(hpack::Malformed)?;
        at += FRAME_HEADER_BYTES + length;
        match &opening {
            Some(opened) if opened.stream != stream => return Err(hpack::Malformed),
            Some(_) => {}
            None => {
                if flags & PADDED != 0 {
                    let (&pad, rest) = payload.split_first().ok_or(hpack::Malformed)?;
                    let unpadded = rest.len().checked_sub(usize::from(pad)).ok_or(hpack::Malformed)?;
                    payload = &rest[..unpadded];
                }
                let mut priority = None;
                if flags & PRIORITY != 0 {
                    let (fields, rest) = payload.split_at_checked(PRIORITY_BYTES).ok_or(hpack::Malformed)?;
                    priority = Some(fields.try_into().map_err(|_| hpack::Malformed)?);
                    payload = rest;
                }
                opening = Some(Opening { flags, stream, priority });
            }
        }
        fragment.extend_from_slice(payload);
    }
    Ok((opening.ok_or(hpack::Malformed)?, fragment))
}

/// `block` as a HEADERS frame and as many CONTINUATION frames as it needs,
/// each within `FRAME_PAYLOAD_MAX`, with the opening frame's stream,
/// END_STREAM and priority.
fn framed(opening: &Opening, block: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(block.len() + 2 * FRAME_HEADER_BYTES + PRIORITY_BYTES);
    let priority: &[u8] = opening.priority.as_ref().map_or(&[], |fields| fields.as_slice());
    let first = block.len().min(FRAME_PAYLOAD_MAX - priority.len());
    let (mut now, mut rest) = block.split_at(first);
    let mut flags = opening.flags & END_STREAM | if priority.is_empty() { 0 } else { PRIORITY };
    let mut kind = HEADERS;
    loop {
        if rest.is_empty() {
            flags |= END_HEADERS;
        }
        let payload = if kind == HEADERS { priority.len() + now.len() } else { now.len() };
        out.extend_from_slice(&(payload as u32).to_be_bytes()[1..]);
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&opening.stream);
        if kind == HEADERS {
            out.extend_from_slice(priority);
        }
        out.extend_from_slice(now);
        if rest.is_empty() {
            return out;
        }
        (now, rest) = rest.split_at(rest.len().min(FRAME_PAYLOAD_MAX));
        (kind, flags) = (CONTINUATION, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFACE: &[u8; PREFACE_BYTES] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
        out.extend_from_slice(&[kind, flags]);
        out.extend_from_slice(&stream.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// `:method POST`, `:scheme http`, then `:authority` indexed into the table.
    fn block(authority: &[u8]) -> Vec<u8> {
        let mut block = vec![0x83, 0x86, 0x41, authority.len() as u8];
        block.extend_from_slice(authority);
        block
    }

    /// Feeds `input` in pieces of `step` bytes, as reads may cut it.
    fn through(input: &[u8], step: usize) -> Vec<u8> {
        let mut frames = Frames::default();
        let mut out = Vec::new();
        for piece in input.chunks(step) {
            frames.feed(piece, &mut out);
        }
        frames.end(&mut out);
        out
    }

    #[test]
    fn only_a_block_with_a_refused_authority_changes_however_the_reads_cut_it() {
        let settings = frame(0x4, 0, 0, &[]);
        let data = frame(0x0, END_STREAM, 1, b"\x00\x00\x00\x00\x00");
        let good =
            [PREFACE.as_slice(), &settings, &frame(HEADERS, END_HEADERS, 1, &block(b"localhost")), &data].concat();
        let bad_headers =
            frame(HEADERS, END_HEADERS | PADDED, 3, &[&[2u8][..], &block(b"%2Fx.sock"), &[0, 0]].concat());
        let bad = [good.as_slice(), &bad_headers, &frame(HEADERS, END_HEADERS, 5, &[0x83, 0x86, 0xbe])].concat();
        let fixed = [
            good.as_slice(),
            &frame(HEADERS, END_HEADERS, 3, &block(b"-2Fx.sock")),
            &frame(HEADERS, END_HEADERS, 5, &[0x83, 0x86, 0xbe]),
        ]
        .concat();
        for step in [1, 2, 7, 9, 10, 4096] {
            assert_eq!(through(&good, step), good, "step {step}");
            assert_eq!(through(&bad, step), fixed, "step {step}");
        }
    }

    #[test]
    fn a_block_split_over_continuations_is_joined_and_framed_again() {
        let whole = block(b"unix:%2Ftmp%2Fx.sock");
        let (head, tail) = whole.split_at(5);
        let priority = [0, 0, 0, 0, 15];
        let opening = frame(HEADERS, END_STREAM | PRIORITY, 1, &[priority.as_slice(), head].concat());
        let input = [PREFACE.as_slice(), &opening, &frame(CONTINUATION, END_HEADERS, 1, tail)].concat();
        let rewritten = [priority.as_slice(), &block(b"unix--2Ftmp-2Fx.sock")].concat();
        let expected =
            [PREFACE.as_slice(), &frame(HEADERS, END_STREAM | PRIORITY | END_HEADERS, 1, &rewritten)].concat();
        assert_eq!(through(&input, 3), expected);
    }

    #[test]
    fn what_is_not_valid_passes_unchanged_from_there_on() {
        let broken_off = [PREFACE.as_slice(), &frame(HEADERS, 0, 1, &block(b"%2F")), &frame(0x0, 0, 1, b"x")].concat();
        assert_eq!(through(&broken_off, 4), broken_off);
        let not_hpack = [
            PREFACE.as_slice(),
            &frame(HEADERS, END_HEADERS, 1, &[0x80]),
            &frame(HEADERS, END_HEADERS, 3, &block(b"%2F")),
        ]
        .concat();
        assert_eq!(through(&not_hpack, 4), not_hpack, "after a malformed block the table is unknown");
        let cut = [PREFACE.as_slice(), &frame(HEADERS, END_HEADERS, 1, &block(b"%2F"))[..12]].concat();
        assert_eq!(through(&cut, 5), cut);
    }

    #[test]
    fn a_long_block_is_framed_within_the_least_frame_size() {
        let opening = Opening { flags: END_STREAM | PADDED, stream: [0, 0, 0, 7], priority: None };
        let block = vec![0x82; FRAME_PAYLOAD_MAX * 2 + 10];
        let out = framed(&opening, &block);
        let expected = [
            frame(HEADERS, END_STREAM, 7, &block[..FRAME_PAYLOAD_MAX]),
            frame(CONTINUATION, 0, 7, &block[FRAME_PAYLOAD_MAX..2 * FRAME_PAYLOAD_MAX]),
            frame(CONTINUATION, END_HEADERS, 7, &block[2 * FRAME_PAYLOAD_MAX..]),
        ]
        .concat();
        assert_eq!(out, expected);
    }
}
