//! The client side of health: connects to a running sidecar over TCP or a
//! Unix socket and asks `grpc.health.v1.Health/Check` whether it serves.
//! `stepwell healthcheck` is built on it, so a container whose image has no
//! shell can still be health-checked by its own binary. A wildcard target
//! (`0.0.0.0`, `::`) is dialled on the loopback address, so the address a
//! sidecar serves on can be given as the address to probe.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::config::Listen;

/// The status Health/Check answers with (the protocol's enum, which also has
/// `ServiceUnknown`).
pub use tonic_health::pb::health_check_response::ServingStatus;

/// Opens a channel to `target`. A Unix socket is dialled directly, with the
/// HTTP/2 authority `localhost`.
pub async fn connect(target: &Listen) -> Result<Channel, tonic::transport::Error> {
    match target {
        Listen::Tcp(addr) => Endpoint::from_shared(format!("http://{}", dial_address(*addr)))?.connect().await,
        Listen::Unix(path) => {
            let path = path.clone();
            Endpoint::try_from("http://localhost")?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
                }))
                .await
        }
    }
}

/// Asks `target` for the status of `service` ("" is the whole server).
/// Connecting and answering together must finish within `timeout`. An
/// answered status is `Ok` whatever it is; `Err` says, for a person, why no
/// status was had (nothing listening, a timeout, an unknown service).
pub async fn check(target: &Listen, service: &str, timeout: Duration) -> Result<ServingStatus, String> {
    let name = describe(target);
    let ask = async {
        let channel = connect(target).await.map_err(|e| format!("could not connect to {name}: {}", chain(&e)))?;
        let request = HealthCheckRequest { service: service.to_owned() };
        let response = HealthClient::new(channel)
            .check(request)
            .await
            .map_err(|status| format!("{name} answered Health/Check with {:?}: {}", status.code(), status.message()))?;
        let status = response.into_inner().status;
        ServingStatus::try_from(status).map_err(|_| format!("{name} answered an unknown serving status {status}"))
    };
    tokio::time::timeout(timeout, ask)
        .await
        .unwrap_or_else(|_| Err(format!("{name} did not answer Health/Check within {} ms", timeout.as_millis())))
}

/// The address to dial for `addr`: the loopback address for a wildcard one.
fn dial_address(addr: SocketAddr) -> SocketAddr {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), addr.port()),
        IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), addr.port()),
        _ => addr,
    }
}

/// The target as it is written on the command line (`HOST:PORT`, `unix:/path`).
pub fn describe(target: &Listen) -> String {
    match target {
        Listen::Tcp(addr) => addr.to_string(),
        Listen::Unix(path) => format!("unix:{}", path.display()),
    }
}

/// An error and its causes on one line: tonic's transport error alone says
/// only "transport error".
fn chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text = format!("{text}: {cause}");
        }
        source = source.and_then(StdError::source);
    }
    text
}

#[cfg(test)]
mod tests {
    use tokio::net::{TcpListener, UnixListener};
    use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
    use tonic_health::server::HealthReporter;

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    /// A health service alone on a fresh TCP port, in the given status.
    async fn health_on_tcp(status: tonic_health::ServingStatus) -> (Listen, HealthReporter) {
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("", status).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let incoming = TcpListenerStream::new(listener);
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        (Listen::Tcp(addr), reporter)
    }

    #[tokio::test]
    async fn reports_the_served_status() {
        let (target, reporter) = health_on_tcp(tonic_health::ServingStatus::Serving).await;
        assert_eq!(check(&target, "", WAIT).await, Ok(ServingStatus::Serving));
        reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
        assert_eq!(check(&target, "", WAIT).await, Ok(ServingStatus::NotServing));
    }

    #[tokio::test]
    async fn an_unknown_service_is_an_error() {
        let (target, _reporter) = health_on_tcp(tonic_health::ServingStatus::Serving).await;
        let error = check(&target, "no.such.Service", WAIT).await.unwrap_err();
        assert!(error.contains("NotFound"), "{error}");
    }

    #[tokio::test]
    async fn a_wildcard_target_is_dialled_on_loopback() {
        let (target, _reporter) = health_on_tcp(tonic_health::ServingStatus::Serving).await;
        let Listen::Tcp(addr) = target else { unreachable!() };
        let wildcard = Listen::Tcp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port()));
        assert_eq!(check(&wildcard, "", WAIT).await, Ok(ServingStatus::Serving));
        let v6 = SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), 7);
        assert_eq!(dial_address(v6), SocketAddr::new(Ipv6Addr::LOCALHOST.into(), 7));
    }

    #[tokio::test]
    async fn answers_over_a_unix_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("health.sock");
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        let incoming = UnixListenerStream::new(UnixListener::bind(&path).unwrap());
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        assert_eq!(check(&Listen::Unix(path), "", WAIT).await, Ok(ServingStatus::Serving));
    }

    #[tokio::test]
    async fn nothing_listening_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Listen::Tcp(listener.local_addr().unwrap());
        drop(listener);
        let error = check(&target, "", WAIT).await.unwrap_err();
        assert!(error.starts_with("could not connect"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let error = check(&Listen::Unix(dir.path().join("none.sock")), "", WAIT).await.unwrap_err();
        assert!(error.contains("No such file"), "{error}");
    }

    #[tokio::test]
    async fn a_silent_server_times_out() {
        // Accepts connections and never says a word.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Listen::Tcp(listener.local_addr().unwrap());
        let _silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let error = check(&target, "", Duration::from_millis(200)).await.unwrap_err();
        assert!(error.contains("within 200 ms"), "{error}");
    }
}
