//! A proxy that loses replies: it relays a client's TCP connection to the
//! sidecar's Unix socket byte for byte, and reads the sidecar's side as
//! HTTP/2 frames. When a cut is asked for, the next response HEADERS frame
//! (which the sidecar sends only once the handler has answered, so after the
//! commit) is not forwarded: the connection is closed instead. The client
//! sees a reset connection for a write that was in fact committed, which is
//! exactly an ambiguous commit.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

/// HTTP/2's HEADERS frame type.
const HEADERS: u8 = 0x1;

#[derive(Default)]
struct Cuts {
    /// Cuts asked for and not yet made.
    pending: AtomicUsize,
    /// Cuts made so far.
    made: AtomicUsize,
    made_signal: Notify,
}

pub struct LossyProxy {
    addr: SocketAddr,
    cuts: Arc<Cuts>,
    task: JoinHandle<()>,
}

impl LossyProxy {
    /// Listens on a free loopback port and relays to the Unix socket at `upstream`.
    pub async fn start(upstream: &Path) -> LossyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let cuts = Arc::new(Cuts::default());
        let upstream = upstream.to_owned();
        let task = tokio::spawn({
            let cuts = cuts.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(relay(client, upstream.clone(), cuts.clone()));
                }
            }
        });
        LossyProxy { addr, cuts, task }
    }

    /// A channel through the proxy, reconnecting after each cut.
    pub fn channel(&self) -> Channel {
        Endpoint::from_shared(format!("http://{}", self.addr)).expect("the proxy's URI").connect_lazy()
    }

    /// Loses the next reply that any connection carries.
    pub fn cut_next_reply(&self) {
        self.cuts.pending.fetch_add(1, Ordering::SeqCst);
    }

    pub fn cuts_made(&self) -> usize {
        self.cuts.made.load(Ordering::SeqCst)
    }

    /// Waits until `count` cuts have been made.
    pub async fn cuts_reach(&self, count: usize) {
        loop {
            let made = self.cuts.made_signal.notified();
            if self.cuts_made() >= count {
                return;
            }
            made.await;
        }
    }
}

impl Drop for LossyProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn relay(client: TcpStream, upstream: PathBuf, cuts: Arc<Cuts>) {
    let Ok(server) = UnixStream::connect(upstream).await else { return };
    let _ = client.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let requests = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
        let _ = server_write.shutdown().await;
    });
    // The sidecar's side, frame by frame: a 9-byte header (24-bit length,
    // type, flags, 31-bit stream id) and the payload.
    let mut header = [0u8; 9];
    loop {
        if server_read.read_exact(&mut header).await.is_err() {
            break;
        }
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let stream = u32::from_be_bytes([header[5], header[6], header[7], header[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; length];
        if server_read.read_exact(&mut payload).await.is_err() {
            break;
        }
        let take_cut = header[3] == HEADERS
            && stream != 0
            && cuts.pending.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok();
        if take_cut {
            // Drop both directions without forwarding the reply.
            requests.abort();
            cuts.made.fetch_add(1, Ordering::SeqCst);
            cuts.made_signal.notify_waiters();
            return;
        }
        if client_write.write_all(&header).await.is_err() || client_write.write_all(&payload).await.is_err() {
            break;
        }
    }
    requests.abort();
}
