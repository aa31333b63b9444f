//! The time a new connection has to open itself: every accepted stream
//! (after its TLS handshake, if any) must deliver the HTTP/2 connection
//! preface within `--connection-preface-timeout-ms`, or its next read fails
//! and the server drops it. Without this a peer that connects and sends
//! nothing, or half a preface, holds a descriptor for ever: HTTP/2 keepalive
//! only starts once the preface is in. After the preface the deadline is
//! gone; keepalive, the stream limit and the request timeouts take over.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

/// The bytes of the HTTP/2 client connection preface.
const PREFACE_BYTES: usize = 24;

/// The streams `accepted` yields, each under its preface deadline.
pub fn deadlined<IO>(
    accepted: impl Stream<Item = io::Result<IO>>,
    timeout: Duration,
) -> impl Stream<Item = io::Result<PrefaceDeadline<IO>>> {
    accepted.map(move |accepted| accepted.map(|io| PrefaceDeadline::new(io, timeout)))
}

/// An accepted stream whose first `PREFACE_BYTES` must arrive before a deadline.
pub struct PrefaceDeadline<IO> {
    io: IO,
    /// Present until the preface's bytes are in.
    deadline: Option<Pin<Box<Sleep>>>,
    awaited: usize,
}

impl<IO> PrefaceDeadline<IO> {
    pub fn new(io: IO, timeout: Duration) -> PrefaceDeadline<IO> {
        PrefaceDeadline { io, deadline: Some(Box::pin(tokio::time::sleep(timeout))), awaited: PREFACE_BYTES }
    }
}

impl<IO: Connected> Connected for PrefaceDeadline<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> IO::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for PrefaceDeadline<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        let Some(deadline) = &mut this.deadline else { return polled };
        match polled {
            Poll::Ready(Ok(())) => {
                this.awaited = this.awaited.saturating_sub(buf.filled().len() - before);
                if this.awaited == 0 {
                    this.deadline = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                tracing::debug!("a connection did not send its HTTP/2 preface in time; closing it");
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "no HTTP/2 preface in time")))
            }
            other => other,
        }
    }
}

write_through!(PrefaceDeadline, io, AsyncWrite + Unpin);
