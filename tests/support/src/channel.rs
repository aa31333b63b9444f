//! How a test dials a sidecar: over TCP, or over a Unix socket through the
//! one Unix-socket connector, either at once (retrying while the server is
//! not yet listening) or lazily, reconnecting after every lost connection
//! as a long-lived client does while its sidecar restarts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::WAIT_LIMIT;

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

async fn try_connect(target: &Target) -> Result<Channel, tonic::transport::Error> {
    match target {
        Target::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))?.connect().await,
        Target::Unix(path) => Endpoint::from_static(UNIX_ENDPOINT).connect_with_connector(unix_connector(path)).await,
    }
}

/// A channel to the Unix socket at `path` that connects on first use and
/// again after every lost connection.
pub fn lazy_unix_channel(path: &Path) -> Channel {
    Endpoint::from_static(UNIX_ENDPOINT).connect_with_connector_lazy(unix_connector(path))
}

/// Connects, retrying with a short backoff while the server is not yet
/// listening (a child process binds its socket a moment after it starts).
pub async fn connect(target: &Target) -> Channel {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    let mut backoff = Duration::from_millis(2);
    loop {
        match try_connect(target).await {
            Ok(channel) => return channel,
            Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_millis(100));
            }
            Err(error) => panic!("could not connect to {target:?}: {error}"),
        }
    }
}
