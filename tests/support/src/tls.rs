//! Certificates made in the test, with rcgen: a CA (`Authority`), server
//! and client certificates it issues (`Issued`), written as PEM files for
//! the sidecar's flags, and the client side of TLS (`ClientTls`), which
//! trusts one CA and may present a client certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate authority that issues the test's certificates.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    cert: rcgen::Certificate,
}

/// A certificate and its private key, as PEM.
pub struct Issued {
    pub cert: rcgen::Certificate,
    pub key_pem: String,
}

impl Authority {
    pub fn new(name: &str) -> Authority {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().expect("a CA key");
        let cert = params.self_signed(&key).expect("a self-signed CA");
        Authority { issuer: Issuer::new(params, key), cert }
    }

    /// A server certificate for localhost and 127.0.0.1.
    pub fn server(&self) -> Issued {
        self.issue(CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("names"))
    }

    /// A client certificate naming `uri` (such as a SPIFFE ID) and `dns`.
    pub fn client(&self, uri: &str, dns: &str) -> Issued {
        let mut params = CertificateParams::new(vec![dns.to_owned()]).expect("names");
        params.subject_alt_names.insert(0, SanType::URI(uri.try_into().expect("an ASCII URI")));
        self.issue(params)
    }

    /// A client certificate whose only subject alternative names are `names`,
    /// of whatever kind each says (a DNS name may read like a URI).
    pub fn client_named(&self, names: Vec<SanType>) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("no names yet");
        params.subject_alt_names = names;
        self.issue(params)
    }

    fn issue(&self, mut params: CertificateParams) -> Issued {
        params.distinguished_name.push(DnType::CommonName, "stepwell test");
        let key = KeyPair::generate().expect("a key");
        let cert = params.signed_by(&key, &self.issuer).expect("a signed certificate");
        Issued { cert, key_pem: key.serialize_pem() }
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }

    /// Writes the CA certificate to `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.cert.pem()).expect("write the CA");
        path.to_owned()
    }
}

impl Issued {
    /// Writes `STEM.pem` and `STEM.key` in `dir`; answers their paths.
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let (cert, key) = (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")));
        std::fs::write(&cert, self.cert.pem()).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        (cert, key)
    }

    pub fn der(&self) -> CertificateDer<'static> {
        self.cert.der().clone()
    }
}

/// How a test's client speaks TLS: the CA it trusts and, for mutual TLS,
/// the certificate it presents. The server is named `localhost`.
#[derive(Clone)]
pub struct ClientTls {
    pub(crate) config: Arc<rustls::ClientConfig>,
}

impl ClientTls {
    pub fn new(trusted: &Authority, identity: Option<&Issued>) -> ClientTls {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(trusted.der()).expect("a usable CA");
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots);
        let mut config = match identity {
            Some(issued) => {
                let key = PrivateKeyDer::from_pem_slice(issued.key_pem.as_bytes()).expect("a PEM key");
                builder.with_client_auth_cert(vec![issued.der()], key).expect("a client certificate")
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        ClientTls { config: Arc::new(config) }
    }
}
