//! The client side of health: connects to a running sidecar over TCP or a
//! Unix socket, in plaintext or over TLS, and asks
//! `grpc.health.v1.Health/Check` whether it serves. `stepwell healthcheck`
//! is built on it, so a container whose image has no shell can still be
//! health-checked by its own binary, also when the sidecar serves TLS or
//! mutual TLS. A wildcard target (`0.0.0.0`, `::`) is dialled on the
//! loopback address, so the address a sidecar serves on can be given as the
//! address to probe.

use std::error::Error as StdError;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use crate::config::commands::ProbeTls;
use crate::config::values::Listen;
use crate::net::tls::{self, certificates, private_key};

/// The status Health/Check answers with (the protocol's enum, which also has
/// `ServiceUnknown`).
pub use tonic_health::pb::health_check_response::ServingStatus;

/// The client side of TLS, loaded from `ProbeTls`'s files: rustls on ring,
/// offering HTTP/2 only, as the sidecar's listener does.
#[derive(Clone)]
pub struct ClientTls {
    connector: TlsConnector,
    server_name: ServerName<'static>,
}

impl ClientTls {
    /// Reads the CAs and, for mutual TLS, the client certificate and key;
    /// the error names the file that did not load or fit.
    pub fn load(files: &ProbeTls) -> Result<ClientTls, tls::FileError> {
        let mut roots = RootCertStore::empty();
        for ca in certificates(&files.ca)? {
            roots.add(ca).map_err(|e| tls::FileError::new(&files.ca, format!("not a usable CA certificate: {e}")))?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| tls::FileError::new(&files.ca, e))?
            .with_root_certificates(roots);
        let mut config = match &files.client {
            Some((cert, key)) => builder
                .with_client_auth_cert(certificates(cert)?, private_key(key)?)
                .map_err(|e| tls::FileError::new(key, format!("does not fit the certificate in --tls-cert: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(ClientTls { connector: TlsConnector::from(Arc::new(config)), server_name: files.server_name.clone() })
    }

    /// Runs the handshake over `stream`; a failure says it was the handshake.
    async fn handshake<IO>(&self, stream: IO) -> std::io::Result<TokioIo<TlsStream<IO>>>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let name = self.server_name.clone();
        match self.connector.connect(name, stream).await {
            Ok(stream) => Ok(TokioIo::new(stream)),
            Err(e) => Err(std::io::Error::new(e.kind(), format!("TLS handshake failed: {e}"))),
        }
    }
}

/// Opens a channel to `target`, over TLS when `tls` is given. A Unix socket
/// is dialled with the HTTP/2 authority `localhost`. Over TLS the channel's
/// scheme stays `http`: the connector, not tonic, speaks TLS.
pub async fn connect(target: &Listen, tls: Option<&ClientTls>) -> Result<Channel, tonic::transport::Error> {
    let endpoint = match target {
        Listen::Tcp(addr) => Endpoint::from_shared(format!("http://{}", dial_address(*addr)))?,
        Listen::Unix(_) => Endpoint::try_from("http://localhost")?,
    };
    match (target, tls.cloned()) {
        (Listen::Tcp(_), None) => endpoint.connect().await,
        (Listen::Tcp(addr), Some(tls)) => {
            let addr = dial_address(*addr);
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let tls = tls.clone();
                    async move { tls.handshake(TcpStream::connect(addr).await?).await }
                }))
                .await
        }
        (Listen::Unix(path), None) => {
            let path = path.clone();
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
                }))
                .await
        }
        (Listen::Unix(path), Some(tls)) => {
            let path = path.clone();
            endpoint
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let (path, tls) = (path.clone(), tls.clone());
                    async move { tls.handshake(UnixStream::connect(path).await?).await }
                }))
                .await
        }
    }
}

/// Asks `target`, over TLS when `tls` is given, for the status of `service`
/// ("" is the whole server).
/// Connecting and answering together must finish within `timeout`. An
/// answered status is `Ok` whatever it is; `Err` says, for a person, why no
/// status was had (nothing listening, a timeout, an unknown service).
pub async fn check(
    target: &Listen,
    tls: Option<&ClientTls>,
    service: &str,
    timeout: Duration,
) -> Result<ServingStatus, String> {
    let name = describe(target);
    let ask = async {
        let channel = connect(target, tls).await.map_err(|e| format!("could not connect to {name}: {}", chain(&e)))?;
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
pub(crate) fn chain(error: &dyn StdError) -> String {
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
        assert_eq!(check(&target, None, "", WAIT).await, Ok(ServingStatus::Serving));
        reporter.set_service_status("", tonic_health::ServingStatus::NotServing).await;
        assert_eq!(check(&target, None, "", WAIT).await, Ok(ServingStatus::NotServing));
    }

    #[tokio::test]
    async fn an_unknown_service_is_an_error() {
        let (target, _reporter) = health_on_tcp(tonic_health::ServingStatus::Serving).await;
        let error = check(&target, None, "no.such.Service", WAIT).await.unwrap_err();
        assert!(error.contains("NotFound"), "{error}");
    }

    #[tokio::test]
    async fn a_wildcard_target_is_dialled_on_loopback() {
        let (target, _reporter) = health_on_tcp(tonic_health::ServingStatus::Serving).await;
        let Listen::Tcp(addr) = target else { unreachable!() };
        let wildcard = Listen::Tcp(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port()));
        assert_eq!(check(&wildcard, None, "", WAIT).await, Ok(ServingStatus::Serving));
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
        assert_eq!(check(&Listen::Unix(path), None, "", WAIT).await, Ok(ServingStatus::Serving));
    }

    /// A health service behind the listener's TLS on a fresh TCP port, with
    /// a self-signed certificate for localhost; answers the target and the
    /// probe's TLS files (no client certificate).
    async fn health_over_tls(dir: &std::path::Path) -> (Listen, ProbeTls) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        let files = crate::config::sections::Tls { cert: cert_path.clone(), key: key_path, client_ca: None };
        let server_tls = crate::net::tls::ServerTls::load(&files).unwrap();
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = crate::config::sections::Handshakes { timeout: WAIT, max: 16, per_address_max: 16 };
        let metrics = crate::observe::metrics::Metrics::off();
        let incoming = crate::net::tls::incoming(TcpListenerStream::new(listener), server_tls, limits, metrics);
        tokio::spawn(tonic::transport::Server::builder().add_service(service).serve_with_incoming(incoming));
        let server_name = ServerName::try_from("localhost").unwrap();
        (Listen::Tcp(addr), ProbeTls { ca: cert_path, server_name, client: None })
    }

    #[tokio::test]
    async fn answers_over_tls_and_names_a_failed_handshake() {
        let dir = tempfile::tempdir().unwrap();
        let (target, files) = health_over_tls(dir.path()).await;
        let tls = ClientTls::load(&files).unwrap();
        assert_eq!(check(&target, Some(&tls), "", WAIT).await, Ok(ServingStatus::Serving));

        let elsewhere = ProbeTls { server_name: ServerName::try_from("stepwell.example").unwrap(), ..files };
        let error = check(&target, Some(&ClientTls::load(&elsewhere).unwrap()), "", WAIT).await.unwrap_err();
        assert!(error.contains("TLS handshake failed") && error.contains("not valid for name"), "{error}");
        assert!(check(&target, None, "", WAIT).await.is_err(), "plaintext to a TLS listener");
    }

    #[test]
    fn tls_files_that_do_not_load_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let server_name = ServerName::try_from("localhost").unwrap();
        let files = ProbeTls { ca: missing.clone(), server_name, client: None };
        let Err(error) = ClientTls::load(&files) else { panic!("a missing CA file loaded") };
        assert_eq!(error.path, missing);
    }

    #[tokio::test]
    async fn nothing_listening_is_an_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = Listen::Tcp(listener.local_addr().unwrap());
        drop(listener);
        let error = check(&target, None, "", WAIT).await.unwrap_err();
        assert!(error.starts_with("could not connect"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let error = check(&Listen::Unix(dir.path().join("none.sock")), None, "", WAIT).await.unwrap_err();
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
        let error = check(&target, None, "", Duration::from_millis(200)).await.unwrap_err();
        assert!(error.contains("within 200 ms"), "{error}");
    }
}
