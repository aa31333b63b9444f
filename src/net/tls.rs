//! TLS and mutual TLS on the gRPC listener, terminated by stepwell itself
//! rather than by tonic's own TLS settings, which cannot change their
//! certificate while serving.
//!
//! `ServerTls` holds the rustls configuration built from `--tls-cert`,
//! `--tls-key` and `--tls-client-ca`, and rebuilds it on `reload` (SIGHUP):
//! a file that does not load keeps the configuration in use. `incoming`
//! turns the listener's accepted streams into TLS streams, each handshake in
//! a task of its own under a timeout, so a client that stalls or fails its
//! handshake never holds up the accept loop or anyone else. The accept loop
//! never waits: handshakes under way are bounded per peer address and in
//! all, and a new connection past either bound closes the oldest handshake
//! under it (`UnderWay`), so stalled connections cannot keep a new caller
//! out. Each TLS stream carries the identities its verified client
//! certificate proves and its TCP addresses (`TlsPeer`); tonic puts that in
//! every request's extensions, and `attach_peer_identity` copies them there
//! as `auth::PeerIdentity` and tonic's `TcpConnectInfo`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::http;
use tonic::transport::server::{Connected, TcpConnectInfo};
use x509_parser::extensions::GeneralName;

use crate::auth::{CertificateName, PeerIdentity};
use crate::config;
use crate::observe::metrics::{HandshakeShed, Metrics};

/// Why a TLS file could not be used, naming the file.
#[derive(Debug, thiserror::Error)]
#[error("{}: {reason}", path.display())]
pub struct FileError {
    pub path: PathBuf,
    pub reason: String,
}

impl FileError {
    pub(crate) fn new(path: &Path, reason: impl std::fmt::Display) -> FileError {
        FileError { path: path.to_owned(), reason: reason.to_string() }
    }
}

/// The listener's TLS configuration, replaced whole on each good reload.
pub struct ServerTls {
    files: config::sections::Tls,
    /// The protocols offered by ALPN.
    alpn: &'static [&'static [u8]],
    current: RwLock<Arc<ServerConfig>>,
}

impl ServerTls {
    /// Loads the certificate chain, its key and the client CAs; any file
    /// that cannot be read or does not fit the others is an error. gRPC's
    /// listener offers HTTP/2 alone.
    pub fn load(files: &config::sections::Tls) -> Result<Arc<ServerTls>, FileError> {
        ServerTls::offering(files, &[b"h2"])
    }

    /// As `load`, offering HTTP/2 and HTTP/1.1: the admin listener's, which
    /// browsers, scrapers and probes of either kind reach.
    pub fn load_for_http(files: &config::sections::Tls) -> Result<Arc<ServerTls>, FileError> {
        ServerTls::offering(files, &[b"h2", b"http/1.1"])
    }

    fn offering(files: &config::sections::Tls, alpn: &'static [&'static [u8]]) -> Result<Arc<ServerTls>, FileError> {
        let current = RwLock::new(Arc::new(server_config(files, alpn)?));
        Ok(Arc::new(ServerTls { files: files.clone(), alpn, current }))
    }

    /// Reads the files again. On success new handshakes use them (open
    /// connections keep what they agreed); on failure the configuration in
    /// use stays, and the error says why.
    pub fn reload(&self) -> Result<(), FileError> {
        let config = Arc::new(server_config(&self.files, self.alpn)?);
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        Ok(())
    }

    /// Whether client certificates are required.
    pub fn mutual(&self) -> bool {
        self.files.client_ca.is_some()
    }

    fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone())
    }
}

/// Builds rustls's server configuration from the files, with ring as its
/// cryptography and `alpn` the protocols offered.
fn server_config(files: &config::sections::Tls, alpn: &[&[u8]]) -> Result<ServerConfig, FileError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(&files.cert)?;
    let key = private_key(&files.key)?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| FileError::new(&files.cert, e))?;
    let builder = match &files.client_ca {
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for ca in certificates(path)? {
                roots.add(ca).map_err(|e| FileError::new(path, format!("not a usable CA certificate: {e}")))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| FileError::new(path, e))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| FileError::new(&files.key, format!("does not fit the certificate in --tls-cert: {e}")))?;
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Every certificate in a PEM file; a file with none is an error, since an
/// empty chain or CA list would fail every handshake. `stepwell healthcheck`
/// loads its CAs and client certificate with it too.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, FileError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| FileError::new(path, pem_reason(&e)))?;
    if certs.is_empty() {
        return Err(FileError::new(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The first private key in a PEM file (PKCS#8, PKCS#1 or SEC1).
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, FileError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| FileError::new(path, pem_reason(&e)))
}

fn pem_reason(error: &rustls_pki_types::pem::Error) -> String {
    match error {
        rustls_pki_types::pem::Error::Io(error) => format!("could not be read: {error}"),
        rustls_pki_types::pem::Error::NoItemsFound => "holds no PEM item of the kind needed".to_owned(),
        other => format!("is not valid PEM: {other:?}"),
    }
}

/// What a TLS connection proved about its client: the identities of a
/// verified client certificate, or `None` without one; and, over TCP, the
/// connection's addresses, which the audit log names.
#[derive(Debug, Clone, Default)]
pub struct TlsPeer {
    pub identity: Option<PeerIdentity>,
    pub tcp: Option<TcpConnectInfo>,
}

/// A server-side TLS stream that tonic can serve.
pub struct TlsConn<IO> {
    stream: tokio_rustls::server::TlsStream<IO>,
    peer: TlsPeer,
}

impl<IO> Connected for TlsConn<IO> {
    type ConnectInfo = TlsPeer;

    fn connect_info(&self) -> TlsPeer {
        self.peer.clone()
    }
}

/// What an accepted stream tells of where it comes from: a TCP stream its
/// addresses, a Unix socket's stream nothing.
pub trait Accepted {
    fn tcp_info(&self) -> Option<TcpConnectInfo>;
}

impl Accepted for tokio::net::TcpStream {
    fn tcp_info(&self) -> Option<TcpConnectInfo> {
        Some(self.connect_info())
    }
}

impl Accepted for tokio::net::UnixStream {
    fn tcp_info(&self) -> Option<TcpConnectInfo> {
        None
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsConn<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

write_through!(TlsConn, stream, AsyncRead + AsyncWrite + Unpin);

/// TLS streams from the plain streams `accepted` yields. Each handshake
/// runs in its own task, bounded by `limits.timeout`; one that fails or
/// stalls is logged and dropped without touching the others. The accept
/// loop never waits for room: a connection from an address that has
/// `limits.per_address_max` handshakes under way closes that address's
/// oldest, and one that finds `limits.max` under way closes the oldest of
/// all, so stalled clients cost the newest callers nothing. Accept errors (a
/// full descriptor table) are logged and accepting goes on. The stream
/// ends, and the listener closes, once the server stops taking connections.
pub fn incoming<S, IO>(
    accepted: S,
    tls: Arc<ServerTls>,
    limits: config::sections::Handshakes,
    metrics: Arc<Metrics>,
) -> impl Stream<Item = io::Result<TlsConn<IO>>> + Send + 'static
where
    S: Stream<Item = io::Result<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Accepted + Unpin + Send + 'static,
{
    let (ready, receiver) = mpsc::channel(limits.max);
    tokio::spawn(async move {
        let mut accepted = std::pin::pin!(accepted);
        let under_way = Arc::new(Mutex::new(UnderWay::new(limits)));
        loop {
            let next = tokio::select! {
                next = accepted.next() => next,
                () = ready.closed() => return,
            };
            match next {
                Some(Ok(stream)) => start_handshake(stream, &tls, &limits, &under_way, &metrics, &ready),
                Some(Err(error)) => {
                    tracing::warn!(%error, "could not accept a connection");
                    // Back off briefly, so a full descriptor table is not a busy loop.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                None => return,
            }
        }
    });
    ReceiverStream::new(receiver)
}

/// Makes room for the handshake of `stream` and starts it in a task of its
/// own, entered in `under_way` before it can run, so that it can be shed.
fn start_handshake<IO>(
    stream: IO,
    tls: &ServerTls,
    limits: &config::sections::Handshakes,
    under_way: &Arc<Mutex<UnderWay>>,
    metrics: &Metrics,
    ready: &mpsc::Sender<io::Result<TlsConn<IO>>>,
) where
    IO: AsyncRead + AsyncWrite + Accepted + Unpin + Send + 'static,
{
    let tcp = stream.tcp_info();
    let address = tcp.as_ref().and_then(|tcp| tcp.remote_addr).map(|remote| remote.ip().to_canonical());
    let mut table = under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for limit in table.make_room(address) {
        tracing::debug!(?address, ?limit, "closed the oldest TLS handshake under way to make room for a new one");
        metrics.tls_handshake_shed(limit);
    }
    let id = table.next_id();
    let handshake = Handshake {
        acceptor: tls.acceptor(),
        mutual: tls.mutual(),
        timeout: limits.timeout,
        tcp,
        under_way: under_way.clone(),
        id,
        ready: ready.clone(),
    };
    let task = tokio::spawn(handshake.run(stream));
    table.insert(id, address, task.abort_handle());
}

/// One handshake's task: what it needs to finish and to hand on its stream.
struct Handshake<IO> {
    acceptor: TlsAcceptor,
    mutual: bool,
    timeout: Duration,
    tcp: Option<TcpConnectInfo>,
    under_way: Arc<Mutex<UnderWay>>,
    id: u64,
    ready: mpsc::Sender<io::Result<TlsConn<IO>>>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Handshake<IO> {
    async fn run(self, stream: IO) {
        let result = tokio::time::timeout(self.timeout, self.acceptor.accept(stream)).await;
        // Done, one way or another: no longer under way, so never shed.
        self.under_way.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(self.id);
        match result {
            Ok(Ok(stream)) => {
                let identity = self.mutual.then(|| peer_identity(&stream)).flatten();
                let peer = TlsPeer { identity, tcp: self.tcp };
                let _ = self.ready.send(Ok(TlsConn { stream, peer })).await;
            }
            Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
            Err(_) => tracing::debug!(timeout = ?self.timeout, "TLS handshake timed out"),
        }
    }
}

/// The handshakes under way, numbered in the order their connections were
/// accepted (the lowest is the oldest), each with its peer's IP address
/// (none over a Unix socket) and the handle that closes it.
struct UnderWay {
    limits: config::sections::Handshakes,
    next: u64,
    all: BTreeMap<u64, (Option<IpAddr>, AbortHandle)>,
    by_address: HashMap<IpAddr, BTreeSet<u64>>,
}

impl UnderWay {
    fn new(limits: config::sections::Handshakes) -> UnderWay {
        UnderWay { limits, next: 0, all: BTreeMap::new(), by_address: HashMap::new() }
    }

    /// Closes what must go for a handshake from `address` to start: that
    /// address's oldest while it has its share, then the oldest of all
    /// while the total is reached. Answers the bound each one made room under.
    fn make_room(&mut self, address: Option<IpAddr>) -> Vec<HandshakeShed> {
        let mut shed = Vec::new();
        while let Some(oldest) = address
            .and_then(|address| self.by_address.get(&address))
            .filter(|own| own.len() >= self.limits.per_address_max)
            .and_then(|own| own.first().copied())
        {
            self.close(oldest);
            shed.push(HandshakeShed::Address);
        }
        while self.all.len() >= self.limits.max
            && let Some(oldest) = self.all.keys().next().copied()
        {
            self.close(oldest);
            shed.push(HandshakeShed::Total);
        }
        shed
    }

    fn next_id(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    fn insert(&mut self, id: u64, address: Option<IpAddr>, handle: AbortHandle) {
        self.all.insert(id, (address, handle));
        if let Some(address) = address {
            self.by_address.entry(address).or_default().insert(id);
        }
    }

    /// Ends a handshake's task, which drops (and so closes) its connection.
    fn close(&mut self, id: u64) {
        if let Some(handle) = self.remove(id) {
            handle.abort();
        }
    }

    fn remove(&mut self, id: u64) -> Option<AbortHandle> {
        let (address, handle) = self.all.remove(&id)?;
        if let Some(address) = address
            && let Some(own) = self.by_address.get_mut(&address)
        {
            own.remove(&id);
            if own.is_empty() {
                self.by_address.remove(&address);
            }
        }
        Some(handle)
    }
}

/// The URI and DNS names of the client's verified certificate, each kept
/// with its kind. rustls has checked it against the client CAs before the
/// handshake completed.
fn peer_identity<IO>(stream: &tokio_rustls::server::TlsStream<IO>) -> Option<PeerIdentity> {
    let leaf = stream.get_ref().1.peer_certificates()?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf).ok()?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::URI(uri) => names.push(CertificateName::Uri((*uri).to_owned())),
                GeneralName::DNSName(dns) => names.push(CertificateName::Dns((*dns).to_owned())),
                _ => {}
            }
        }
    }
    Some(PeerIdentity(names))
}

/// Copies the connection's proven identity into the request as
/// `auth::PeerIdentity`, where authorization and handlers read it, and its
/// TCP addresses as tonic's `TcpConnectInfo`, where `remote_addr` (and so
/// the audit log) finds them as over plaintext. Requests over plaintext, or
/// over TLS without a client certificate, get no identity.
pub fn attach_peer_identity<B>(mut request: http::Request<B>) -> http::Request<B> {
    let Some(peer) = request.extensions().get::<TlsPeer>().cloned() else { return request };
    if let Some(identity) = peer.identity {
        request.extensions_mut().insert(identity);
    }
    if let Some(tcp) = peer.tcp {
        request.extensions_mut().insert(tcp);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path) -> config::sections::Tls {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap().self_signed(&key).unwrap();
        let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        config::sections::Tls { cert: cert_path, key: key_path, client_ca: None }
    }

    #[test]
    fn a_file_that_does_not_load_keeps_the_configuration_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_pair(dir.path());
        let tls = ServerTls::load(&files).unwrap();
        let before = tls.current.read().unwrap().clone();

        std::fs::write(&files.key, "not a key").unwrap();
        let error = tls.reload().unwrap_err();
        assert_eq!(error.path, files.key, "{error}");
        assert!(Arc::ptr_eq(&before, &tls.current.read().unwrap()), "the old configuration stays");

        write_pair(dir.path());
        tls.reload().unwrap();
        assert!(!Arc::ptr_eq(&before, &tls.current.read().unwrap()), "a good reload replaces it");
    }

    #[test]
    fn a_client_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = write_pair(dir.path());
        let empty = dir.path().join("ca.pem");
        std::fs::write(&empty, "").unwrap();
        files.client_ca = Some(empty.clone());
        let Err(error) = ServerTls::load(&files) else { panic!("an empty CA file loaded") };
        assert_eq!(error.path, empty);
    }
}
