//! Connections and streams against careless and hostile peers: what one
//! connection may hold, and how long stepwell waits for a request, its body
//! and a silent peer. The hostile peers are raw HTTP/2 clients, written
//! here: one opens many streams and sends headers only, one stalls mid-body,
//! one breaks the advertised stream limit, one never answers a ping, one
//! never finishes its preface, one stalls inside a header block, many
//! without a token send large bodies and never finish them; and a Unix
//! socket's client sends the `:authority` gRPC's C core does. Each
//! test shows that the other callers are still served and that the
//! hostile peer's hold ends.

use std::time::Duration;

use bytes::Bytes;
use stepwell::api::pb::CheckpointRequest;
use stepwell::auth::token_sha256;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;
use tonic::codegen::http;

use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::channel::{Target, connect};
use stepwell_test_support::errors::assert_error;
use stepwell_test_support::requests::{T0, checkpoint};
use stepwell_test_support::sidecar::Sidecar;

const CHECKPOINT_PATH: &str = "/stepwell.v1.CheckpointService/Checkpoint";

/// A checkpoint that fails validation in its handler, touching no store:
/// INVALID_ARGUMENT when admitted, RESOURCE_EXHAUSTED when shed.
fn probe() -> CheckpointRequest {
    CheckpointRequest { turn_id: String::new(), ..checkpoint("probe", "started", T0, "{}") }
}

/// Asserts that `count` probes on a connection of their own are admitted.
async fn others_are_served(server: &Sidecar, count: usize) {
    let mut other =
        stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient::new(connect(server.target()).await);
    for _ in 0..count {
        let status = other.checkpoint(probe()).await.expect_err("the probe is never valid");
        assert_eq!(status.code(), Code::InvalidArgument, "another caller is admitted: {status:?}");
    }
}

fn tcp_address(server: &Sidecar) -> std::net::SocketAddr {
    match server.target() {
        Target::Tcp(address) => *address,
        Target::Unix(_) => panic!("these tests dial TCP"),
    }
}

/// A raw HTTP/2 client connection, its driver spawned once a ping has come
/// back (so the server's SETTINGS are in), with the stream limit the server
/// advertised.
struct Hostile {
    send: h2::client::SendRequest<Bytes>,
    ping: h2::PingPong,
    advertised_streams: usize,
}

impl Hostile {
    async fn connect(server: &Sidecar) -> Hostile {
        let tcp = TcpStream::connect(tcp_address(server)).await.expect("dial the sidecar");
        let (send, mut connection) = h2::client::handshake(tcp).await.expect("an HTTP/2 handshake");
        let mut ping = connection.ping_pong().expect("the ping handle");
        tokio::select! {
            ended = &mut connection => panic!("the connection ended before the first ping: {ended:?}"),
            pong = ping.ping(h2::Ping::opaque()) => { pong.expect("the first ping is answered"); }
        }
        let advertised_streams = connection.max_concurrent_send_streams();
        tokio::spawn(connection);
        Hostile { send, ping, advertised_streams }
    }

    /// Opens a Checkpoint stream and sends its headers, and no body yet.
    fn open(&self) -> (h2::client::ResponseFuture, h2::SendStream<Bytes>) {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://localhost{CHECKPOINT_PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a request");
        // A clone of its own per stream: each may queue while the server's
        // stream limit is reached, instead of refusing the next.
        self.send.clone().send_request(request, false).expect("a stream is opened or queued")
    }

    /// Returns once the server has read every frame sent before.
    async fn round_trip(&mut self) {
        tokio::time::timeout(WAIT_LIMIT, self.ping.ping(h2::Ping::opaque()))
            .await
            .expect("the ping is answered in time")
            .expect("the ping is answered");
    }
}

/// The gRPC status of a raw stream's answer, from its headers (trailers-only) or its trailers.
async fn grpc_status(response: h2::client::ResponseFuture) -> String {
    let response = tokio::time::timeout(WAIT_LIMIT, response)
        .await
        .expect("the stream is answered in time, not held open")
        .expect("the stream is answered, not reset");
    if let Some(status) = response.headers().get("grpc-status") {
        return status.to_str().expect("a status").to_owned();
    }
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body.trailers().await.expect("the trailers").expect("trailers with a status");
    trailers.get("grpc-status").expect("a status").to_str().expect("a status").to_owned()
}

#[tokio::test]
async fn streams_that_send_headers_only_hold_no_permit_and_the_stream_limit_is_advertised() {
    let server = Sidecar::builder().configure(|config| config.limits.max_concurrent_requests = 16).start().await;
    let mut hostile = Hostile::connect(&server).await;
    // 1,024 streams with headers and no body: the server lets in at most
    // its advertised limit; the rest wait in the peer.
    let streams: Vec<_> = (0..1024).map(|_| hostile.open()).collect();
    hostile.round_trip().await;

    others_are_served(&server, 3).await;
    let mut client = server.client();
    let write = client.checkpoint(checkpoint("served", "started", T0, "{}")).await;
    assert!(write.expect("another caller's write is served").into_inner().inserted);
    assert_eq!(hostile.advertised_streams, 100, "the default --connection-streams-max is advertised");
    drop(streams);
}

#[tokio::test]
async fn a_stalled_body_holds_no_permit_and_is_ended_after_the_body_read_timeout() {
    let server = Sidecar::builder()
        .configure(|config| {
            config.limits.max_concurrent_requests = 2;
            config.connections.body_read_timeout = Duration::from_millis(300);
        })
        .start()
        .await;
    let mut hostile = Hostile::connect(&server).await;
    // Four streams, each with the start of a 100-byte message and then nothing.
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let (response, mut body) = hostile.open();
        let mut half = vec![0u8, 0, 0, 0, 100];
        half.extend_from_slice(&[0x0a; 10]);
        body.send_data(Bytes::from(half), false).expect("half a body is sent");
        stalled.push((response, body));
    }
    hostile.round_trip().await;

    others_are_served(&server, 3).await;
    let mut client = server.client();
    let write = client.checkpoint(checkpoint("served", "started", T0, "{}")).await;
    assert!(write.expect("another caller's write is served").into_inner().inserted);

    // Each stalled stream is answered DEADLINE_EXCEEDED once its body is late.
    for (response, _body) in stalled {
        assert_eq!(grpc_status(response).await, (Code::DeadlineExceeded as i32).to_string());
    }
}

#[tokio::test]
async fn one_connection_cannot_take_the_whole_concurrency_limit() {
    let server = Sidecar::builder()
        .configure(|config| {
            config.limits.max_concurrent_requests = 4;
            config.connections.requests_max = 2;
        })
        .start()
        .await;
    let lock = server.store().hold_write_lock().await;
    // Six slow writes on one connection: two are admitted, the others wait
    // for them rather than taking the rest of the global limit.
    let greedy = connect(server.target()).await;
    let writes: Vec<_> = (0..6)
        .map(|i| {
            let mut client = stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient::new(greedy.clone());
            tokio::spawn(
                async move { client.checkpoint(checkpoint(&format!("greedy-{i}"), "started", T0, "{}")).await },
            )
        })
        .collect();
    others_are_served(&server, 3).await;

    lock.release().await;
    for write in writes {
        let response = write.await.expect("the write's task").expect("every write of the connection is served");
        assert!(response.into_inner().inserted);
    }
    others_are_served(&server, 1).await;
}

#[tokio::test]
async fn a_request_past_the_request_timeout_is_deadline_exceeded_not_a_hang() {
    let server = Sidecar::builder()
        .configure(|config| config.connections.request_timeout = Duration::from_millis(200))
        .start()
        .await;
    let mut client = server.client();
    let lock = server.store().hold_write_lock().await;
    // No deadline of the caller's own: the server's bounds the wait.
    let answer = tokio::time::timeout(WAIT_LIMIT, client.checkpoint(checkpoint("slow", "started", T0, "{}"))).await;
    let status = answer.expect("the request is answered, not left hanging").expect_err("it cannot commit in time");
    assert_error(&status, Code::DeadlineExceeded, "REQUEST_TIMEOUT");
    lock.release().await;
    client.checkpoint(checkpoint("slow", "started", T0, "{}")).await.expect("the retry is served");
}

/// HTTP/2 frames, written and read by hand for the peers `h2` will not play.
mod frames {
    use super::*;

    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const END_STREAM: u8 = 1;
    pub const END_HEADERS: u8 = 4;
    pub const ACK: u8 = 1;
    pub const REFUSED_STREAM: u32 = 7;

    pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).expect("a small frame").to_be_bytes();
        let mut frame = vec![length[1], length[2], length[3], kind, flags];
        frame.extend_from_slice(&stream.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    /// The client preface and an empty SETTINGS frame.
    pub fn preface() -> Vec<u8> {
        let mut bytes = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        bytes.extend(frame(SETTINGS, 0, 0, &[]));
        bytes
    }

    /// A Checkpoint request's header block in HPACK, literal and unindexed.
    pub fn checkpoint_headers() -> Vec<u8> {
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
        for (name_index, value) in [(4u8, CHECKPOINT_PATH), (1, "localhost")] {
            block.push(name_index); // :path, :authority
            block.push(u8::try_from(value.len()).expect("short"));
            block.extend_from_slice(value.as_bytes());
        }
        block.extend_from_slice(&[0x0f, 0x10, 16]); // content-type (static index 31)
        block.extend_from_slice(b"application/grpc");
        block.extend_from_slice(&[0x00, 2]);
        block.extend_from_slice(b"te");
        block.push(8);
        block.extend_from_slice(b"trailers");
        block
    }

    /// The next frame: its type, flags, stream and payload; `None` at the end of the connection.
    pub async fn read(tcp: &mut (impl AsyncReadExt + Unpin)) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut head = [0u8; 9];
        tcp.read_exact(&mut head).await.ok()?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        tcp.read_exact(&mut payload).await.ok()?;
        Some((head[3], head[4], stream, payload))
    }
}

#[tokio::test]
async fn a_peer_that_opens_more_streams_than_advertised_has_them_refused() {
    let server = Sidecar::builder().configure(|config| config.connections.streams_max = 4).start().await;
    let mut tcp = TcpStream::connect(tcp_address(&server)).await.expect("dial the sidecar");
    tcp.write_all(&frames::preface()).await.expect("the preface");
    // The stream limit holds once this peer acknowledges the server's settings.
    let refused = tokio::time::timeout(WAIT_LIMIT, async {
        let mut opened = false;
        loop {
            let (kind, flags, stream, payload) = frames::read(&mut tcp).await.expect("the server keeps the connection");
            match kind {
                frames::SETTINGS if flags & frames::ACK == 0 => {
                    tcp.write_all(&frames::frame(frames::SETTINGS, frames::ACK, 0, &[])).await.expect("ack");
                }
                // Our settings are acknowledged after the server's: open five streams of headers only.
                frames::SETTINGS if !opened => {
                    opened = true;
                    for stream in [1u32, 3, 5, 7, 9] {
                        let headers =
                            frames::frame(frames::HEADERS, frames::END_HEADERS, stream, &frames::checkpoint_headers());
                        tcp.write_all(&headers).await.expect("headers");
                    }
                }
                frames::RST_STREAM => {
                    break (stream, u32::from_be_bytes(payload[..4].try_into().expect("an error code")));
                }
                frames::GOAWAY => panic!("the server closed the connection instead of refusing one stream"),
                _ => {}
            }
        }
    })
    .await
    .expect("the stream over the limit is refused, not accepted");
    assert_eq!(refused, (9, frames::REFUSED_STREAM), "the fifth stream is refused");
    others_are_served(&server, 1).await;
}

#[tokio::test]
async fn a_peer_that_never_answers_a_ping_is_disconnected() {
    let server = Sidecar::builder()
        .configure(|config| {
            config.connections.http2_keepalive_interval = Duration::from_millis(100);
            config.connections.http2_keepalive_timeout = Duration::from_millis(100);
        })
        .start()
        .await;
    let mut tcp = TcpStream::connect(tcp_address(&server)).await.expect("dial the sidecar");
    tcp.write_all(&frames::preface()).await.expect("the preface");
    // Read and never answer: the server pings, waits, and hangs up.
    let pings = read_until_closed(&mut tcp).await;
    assert!(pings >= 1, "the server pinged before it hung up");
    others_are_served(&server, 1).await;
}

/// Reads until the server closes the connection; the number of pings it sent.
async fn read_until_closed(tcp: &mut TcpStream) -> usize {
    tokio::time::timeout(WAIT_LIMIT, async {
        let mut pings = 0;
        while let Some((kind, flags, _, _)) = frames::read(tcp).await {
            if kind == frames::PING && flags & frames::ACK == 0 {
                pings += 1;
            }
        }
        pings
    })
    .await
    .expect("the server closes the connection, not holds it")
}

#[tokio::test]
async fn a_connection_that_never_finishes_its_preface_is_closed() {
    let server = Sidecar::builder()
        .configure(|config| config.connections.preface_timeout = Duration::from_millis(200))
        .start()
        .await;
    let mut tcp = TcpStream::connect(tcp_address(&server)).await.expect("dial the sidecar");
    tcp.write_all(b"PRI * HTTP/2.0\r\n").await.expect("the start of the preface");
    read_until_closed(&mut tcp).await;
    others_are_served(&server, 1).await;
}

#[tokio::test]
async fn a_header_block_that_stalls_is_ended_by_the_keepalive() {
    let server = Sidecar::builder()
        .configure(|config| {
            config.connections.http2_keepalive_interval = Duration::from_millis(100);
            config.connections.http2_keepalive_timeout = Duration::from_millis(100);
        })
        .start()
        .await;
    let mut tcp = TcpStream::connect(tcp_address(&server)).await.expect("dial the sidecar");
    tcp.write_all(&frames::preface()).await.expect("the preface");
    // HEADERS without END_HEADERS: the peer owes a CONTINUATION, and may
    // send no other frame (no ping answer either) until it comes.
    let block = frames::checkpoint_headers();
    tcp.write_all(&frames::frame(frames::HEADERS, 0, 1, &block[..block.len() / 2])).await.expect("half a header block");
    read_until_closed(&mut tcp).await;
    others_are_served(&server, 1).await;
}

#[tokio::test]
async fn bodies_being_read_share_a_byte_budget_that_a_stalled_body_cannot_exceed() {
    const STATE_MAX: usize = 1024;
    const MESSAGE_MAX: usize = STATE_MAX + 64 * 1024;
    let server = Sidecar::builder()
        .configure(|config| {
            config.limits.state_bytes_max = STATE_MAX;
            config.limits.message_bytes_max = MESSAGE_MAX;
            config.connections.body_buffer_bytes_max = MESSAGE_MAX;
        })
        .start()
        .await;
    let mut hostile = Hostile::connect(&server).await;
    // Most of a message's bytes, and then nothing: they stay buffered.
    let (response, mut stalled) = hostile.open();
    let mut most = vec![0u8, 0, 1, 0, 0]; // a 65,536-byte message announced
    most.extend_from_slice(&vec![0x0a; 60 * 1024]);
    stalled.send_data(Bytes::from(most), false).expect("most of a body is sent");
    hostile.round_trip().await;

    // A request whose body does not fit beside them is shed.
    let mut client = server.client();
    let ten_kib = || CheckpointRequest { state: vec![b' '; 10 * 1024], ..probe() };
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let shed = loop {
        let status = client.checkpoint(ten_kib()).await.expect_err("the probe is never valid");
        if status.code() != Code::InvalidArgument {
            break status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the stalled body's bytes never counted");
        tokio::task::yield_now().await;
    };
    assert_error(&shed, Code::ResourceExhausted, "OVERLOADED");
    // A small one still fits.
    assert_eq!(client.checkpoint(probe()).await.expect_err("never valid").code(), Code::InvalidArgument);

    // Once the stalled stream is reset its bytes are given back.
    stalled.send_reset(h2::Reason::CANCEL);
    drop(response);
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let status = client.checkpoint(ten_kib()).await.expect_err("the probe is never valid");
        if status.code() == Code::InvalidArgument {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the reset body's bytes were never given back");
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn token_less_streams_are_refused_before_their_bodies_and_hold_none_of_the_budget() {
    const STATE_MAX: usize = 1024;
    const MESSAGE_MAX: usize = STATE_MAX + 64 * 1024;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let auth_file = dir.path().join("auth.toml");
    let grant = "grants = [{ namespace = \"default\", role = \"write\" }]";
    let principal =
        format!("[[principals]]\nid = \"good\"\ntoken_sha256 = \"{}\"\n{grant}\n", token_sha256("swt_good"));
    std::fs::write(&auth_file, principal).expect("write the auth file");
    let server = Sidecar::builder()
        .configure(|config| {
            config.limits.state_bytes_max = STATE_MAX;
            config.limits.message_bytes_max = MESSAGE_MAX;
            // Room for one large body at a time, and no body read timeout to end the streams.
            config.connections.body_buffer_bytes_max = MESSAGE_MAX;
            config.connections.body_read_timeout = WAIT_LIMIT * 4;
            config.security.auth_file = Some(auth_file);
        })
        .start()
        .await;
    let mut hostile = Hostile::connect(&server).await;
    // 32 streams without a token, each announcing a 65,536-byte message,
    // sending 30 KiB of it (all of them within the connection's window),
    // and never the rest.
    let mut stalled = Vec::new();
    for _ in 0..32 {
        let (response, mut body) = hostile.open();
        let mut part = vec![0u8, 0, 1, 0, 0];
        part.extend_from_slice(&[0x0a; 30 * 1024]);
        body.send_data(Bytes::from(part), false).expect("part of a body is sent");
        stalled.push((response, body));
    }
    hostile.round_trip().await;

    // A caller with a token is served meanwhile, with a body that would not
    // fit beside a single one of theirs.
    let mut good =
        stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient::new(connect(server.target()).await);
    let mut request = tonic::Request::new(CheckpointRequest { state: vec![b' '; 40 * 1024], ..probe() });
    request.metadata_mut().insert("authorization", "Bearer swt_good".parse().expect("a header"));
    let status = good.checkpoint(request).await.expect_err("the probe is never valid");
    assert_eq!(status.code(), Code::InvalidArgument, "the good caller is admitted: {status:?}");

    // Each stream is answered UNAUTHENTICATED with its body unfinished.
    for (response, _body) in stalled {
        assert_eq!(grpc_status(response).await, (Code::Unauthenticated as i32).to_string());
    }
}

/// A Health/Check request's header block as gRPC's C core sends it for a
/// `unix:` target: `:authority` is the socket's path, percent-encoded. Each
/// literal is indexed, so the client's dynamic table holds (newest first)
/// te, content-type, :authority and :path.
fn health_check_from_c_core() -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    for (first, value) in [(0x44, "/grpc.health.v1.Health/Check"), (0x41, "unix:%2Ftmp%2Fstepwell.sock")] {
        block.push(first); // :path, :authority (static names), with incremental indexing
        block.push(u8::try_from(value.len()).expect("short"));
        block.extend_from_slice(value.as_bytes());
    }
    block.extend_from_slice(&[0x5f, 16]); // content-type (static index 31), indexed
    block.extend_from_slice(b"application/grpc");
    block.extend_from_slice(&[0x40, 2]); // a new name, indexed
    block.extend_from_slice(b"te");
    block.push(8);
    block.extend_from_slice(b"trailers");
    block
}

#[tokio::test]
async fn a_unix_socket_serves_the_percent_encoded_authority_of_c_core_clients() {
    let server = Sidecar::builder().unix_socket().start().await;
    let Target::Unix(path) = server.target() else { panic!("a Unix socket") };
    let mut unix = tokio::net::UnixStream::connect(path).await.expect("dial the sidecar");
    unix.write_all(&frames::preface()).await.expect("the preface");
    // Stream 1 sends the block; stream 3 names every field by its index in
    // the dynamic table, :authority (64) among them.
    let second = [0x83, 0x86, 0x80 | 65, 0x80 | 64, 0x80 | 63, 0x80 | 62];
    let mut requests = Vec::new();
    for (stream, block) in [(1u32, health_check_from_c_core()), (3, second.to_vec())] {
        requests.extend(frames::frame(frames::HEADERS, frames::END_HEADERS, stream, &block));
        requests.extend(frames::frame(frames::DATA, frames::END_STREAM, stream, &[0, 0, 0, 0, 0]));
    }
    let answers = tokio::time::timeout(WAIT_LIMIT, async {
        let (mut sent, mut answers) = (false, std::collections::BTreeMap::<u32, Vec<u8>>::new());
        let mut ended = 0;
        while ended < 2 {
            let (kind, flags, stream, payload) =
                frames::read(&mut unix).await.expect("the server keeps the connection");
            match kind {
                frames::SETTINGS if flags & frames::ACK == 0 => {
                    unix.write_all(&frames::frame(frames::SETTINGS, frames::ACK, 0, &[])).await.expect("ack");
                    if !sent {
                        unix.write_all(&requests).await.expect("the requests");
                        sent = true;
                    }
                }
                frames::RST_STREAM => panic!("stream {stream} was reset: {payload:?}"),
                frames::GOAWAY => panic!("the server closed the connection: {payload:?}"),
                frames::DATA => answers.entry(stream).or_default().extend(payload),
                _ => {}
            }
            if matches!(kind, frames::DATA | frames::HEADERS) && flags & frames::END_STREAM != 0 {
                ended += 1;
            }
        }
        answers
    })
    .await
    .expect("both streams are answered");
    // grpc.health.v1.HealthCheckResponse { status: SERVING }, as one gRPC message.
    let serving = vec![0, 0, 0, 0, 2, 0x08, 0x01];
    assert_eq!(answers, [(1, serving.clone()), (3, serving)].into_iter().collect());
}
