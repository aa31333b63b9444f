//! How a test dials a sidecar: over TCP, or over a Unix socket through the
//! one Unix-socket connector, either at once (retrying while the server is
//! not yet listening) or lazily, reconnecting after every lost connection
//! as a long-lived client does while its sidecar restarts; plain, or over
//! TLS as a `ClientTls` says; and from a chosen loopback address.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpSocket, TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::WAIT_LIMIT;
use crate::tls::ClientTls;

/// Where a server listens, as a client dials it.
#[derive(Debug, Clone)]
pub enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// The one connector to a Unix socket: a channel's every connection dials
/// `path` afresh, so a restarted server on the same path is found again.
fn unix_connector(
    path: &Path,
) -> impl tower::Service<Uri, Response = TokioIo<UnixStream>, Error = std::io::Error, Future: Send> + Clone + Send + 'static
{
    let path = path.to_owned();
    tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    })
}

/// Unix-socket channels carry no authority of their own; tonic wants one.
const UNIX_ENDPOINT: &str = "http://localhost";

/// A byte stream to a sidecar, plain or TLS, over TCP or a Unix socket.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// Dials `target` and, with `tls`, completes a TLS handshake naming the
/// server `localhost`.
async fn dial(target: &Target, tls: Option<&ClientTls>) -> std::io::Result<Box<dyn Io>> {
    let plain: Box<dyn Io> = match target {
        Target::Tcp(addr) => {
            let stream = TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            Box::new(stream)
        }
        Target::Unix(path) => Box::new(UnixStream::connect(path).await?),
    };
    let Some(tls) = tls else { return Ok(plain) };
    let name = ServerName::try_from("localhost").expect("a server name");
    Ok(Box::new(TlsConnector::from(tls.config.clone()).connect(name, plain).await?))
}

/// Connects once: plain TCP through tonic's own connector, anything else
/// through `dial`.
pub async fn try_connect(target: &Target, tls: Option<&ClientTls>) -> Result<Channel, tonic::transport::Error> {
    match (target, tls) {
        (Target::Tcp(addr), None) => Endpoint::from_shared(format!("http://{addr}"))?.connect().await,
        (Target::Unix(path), None) => {
            Endpoint::from_static(UNIX_ENDPOINT).connect_with_connector(unix_connector(path)).await
        }
        (_, Some(tls)) => {
            let (target, tls) = (target.clone(), tls.clone());
            let endpoint = match &target {
                Target::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))?,
                Target::Unix(_) => Endpoint::from_static(UNIX_ENDPOINT),
            };
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let (target, tls) = (target.clone(), tls.clone());
                    async move { Ok::<_, std::io::Error>(TokioIo::new(dial(&target, Some(&tls)).await?)) }
                }))
                .await
        }
    }
}

/// Connects once over TLS to `addr` from the loopback address `source` (any
/// 127.x.y.z: Linux lets a client bind every one of them), for tests that
/// tell callers apart by address. Answers the channel and the address it
/// connected from, which the server sees as its peer.
pub async fn try_connect_from(
    addr: SocketAddr,
    source: IpAddr,
    tls: &ClientTls,
) -> Result<(Channel, SocketAddr), tonic::transport::Error> {
    let local = Arc::new(Mutex::new(None));
    let (seen, tls) = (local.clone(), tls.clone());
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let (seen, tls) = (seen.clone(), tls.clone());
            async move {
                let stream = connect_from(addr, source).await?;
                *seen.lock().expect("not poisoned") = Some(stream.local_addr()?);
                let name = ServerName::try_from("localhost").expect("a server name");
                Ok::<_, std::io::Error>(TokioIo::new(TlsConnector::from(tls.config).connect(name, stream).await?))
            }
        }))
        .await?;
    let local = local.lock().expect("not poisoned").expect("the connector ran");
    Ok((channel, local))
}

/// A TCP connection to `addr` from `source`, on a port the system picks.
pub async fn connect_from(addr: SocketAddr, source: IpAddr) -> std::io::Result<TcpStream> {
    let socket = if source.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
    socket.bind(SocketAddr::new(source, 0))?;
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The certificate a new TLS connection to `target` is shown, for tests
/// that watch it change.
pub async fn server_certificate(target: &Target, tls: &ClientTls) -> std::io::Result<CertificateDer<'static>> {
    let name = ServerName::try_from("localhost").expect("a server name");
    let plain = dial(target, None).await?;
    let stream = TlsConnector::from(tls.config.clone()).connect(name, plain).await?;
    let certs = stream.get_ref().1.peer_certificates().unwrap_or_default();
    certs.first().cloned().ok_or_else(|| std::io::Error::other("the server showed no certificate"))
}

/// A channel to the Unix socket at `path` that connects on first use and
/// again after every lost connection.
pub fn lazy_unix_channel(path: &Path) -> Channel {
    Endpoint::from_static(UNIX_ENDPOINT).connect_with_connector_lazy(unix_connector(path))
}

/// Connects, retrying with a short backoff while the server is not yet
/// listening (a child process binds its socket a moment after it starts).
pub async fn connect(target: &Target) -> Channel {
    connect_with(target, None).await
}

/// `connect`, over TLS when `tls` is given.
pub async fn connect_with(target: &Target, tls: Option<&ClientTls>) -> Channel {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut backoff = Duration::from_millis(2);
    loop {
        match try_connect(target, tls).await {
            Ok(channel) => return channel,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
            Err(error) => panic!("could not connect to {target:?}: {error}"),
        }
    }
}
