//! Who is calling, and what they may do: the principals of `--auth-file`,
//! each with a bearer token's SHA-256 hash or a client certificate's
//! identity and its roles per namespace; how a call's credentials are
//! checked against them; the audit events; and new tokens for
//! `stepwell auth new-token`.
//!
//! The file keeps only hashes, so reading it (or a backup of it) gives no
//! one a working token. A presented token is hashed and compared with every
//! principal's hash in constant time. The principals in force sit behind a
//! lock that SIGHUP swaps whole (`Authenticator::reload`), so each call sees
//! either the old file or the new one, on connections already open too.

use std::collections::HashSet;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::codegen::http::header::AUTHORIZATION;
use tonic::codegen::http::{Extensions, HeaderMap};
use tonic::transport::server::TcpConnectInfo;

use crate::domain::rpc::{Role, Rpc, Unknown};

/// The identities a verified client certificate proves: its URI names (such
/// as a SPIFFE ID) and DNS names. The TLS listener puts it in each request's
/// extensions; a request over plaintext or without a certificate has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity(pub Vec<CertificateName>);

/// One subject alternative name of a certificate, of a kind stepwell reads.
/// The kind is part of the name: a DNS name spelled `spiffe://…` is not that
/// URI, since a CA that checks URIs may issue DNS names it never checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CertificateName {
    /// A URI SAN, such as a SPIFFE ID.
    Uri(String),
    /// A DNS SAN.
    Dns(String),
}

impl CertificateName {
    /// The name an auth file's `certificate` value means: one with a URI
    /// scheme (`spiffe://…`, `urn:…`) is a URI, since no DNS name holds a
    /// colon; any other is a DNS name. A value that is neither is refused.
    pub fn parse(text: &str) -> Result<CertificateName, String> {
        if let Some((scheme, rest)) = text.split_once(':') {
            let scheme_ok = scheme.as_bytes().first().is_some_and(u8::is_ascii_alphabetic)
                && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'));
            if scheme_ok && !rest.is_empty() && text.bytes().all(|b| b.is_ascii_graphic()) {
                return Ok(CertificateName::Uri(text.to_owned()));
            }
        } else if !text.is_empty()
            && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'*'))
        {
            return Ok(CertificateName::Dns(text.to_owned()));
        }
        Err(format!(
            "certificate {text:?} is neither a URI with a scheme (such as \"spiffe://example.org/agent\") \
             nor a DNS name (letters, digits, '-', '.')"
        ))
    }
}

/// The audit log's `tracing` target: route it to keep the audit trail apart.
pub const AUDIT_TARGET: &str = "stepwell::audit";

/// The namespace that a grant of `*` names: every namespace.
pub const EVERY_NAMESPACE: &str = "*";

/// One grant: a role in a namespace, or in every namespace (`*`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Grant {
    pub namespace: String,
    pub role: Role,
}

/// A principal as the file spells it, before its checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PrincipalEntry {
    id: String,
    token_sha256: Option<String>,
    certificate: Option<String>,
    #[serde(default)]
    grants: Vec<Grant>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntries {
    #[serde(default)]
    principals: Vec<PrincipalEntry>,
}

/// A caller the file names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// A name for logs and audit events; never a secret.
    pub id: String,
    token_sha256: Option<[u8; 32]>,
    certificate: Option<CertificateName>,
    grants: Vec<Grant>,
}

impl Principal {
    /// The principal's grants, as the file lists them.
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }

    /// The best role the principal's grants give in `namespace`, if any.
    pub fn role_in(&self, namespace: &str) -> Option<Role> {
        self.grants
            .iter()
            .filter(|grant| grant.namespace == namespace || grant.namespace == EVERY_NAMESPACE)
            .map(|grant| grant.role)
            .max()
    }
}

/// Why an auth file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("could not read the auth file {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("the auth file {} is not valid: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

/// The principals of one auth file, checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Principals(Vec<Arc<Principal>>);

impl Principals {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<Principals, FileError> {
        let text = std::fs::read_to_string(path).map_err(|source| FileError::Read { path: path.to_owned(), source })?;
        Principals::parse(&text).map_err(|message| FileError::Invalid { path: path.to_owned(), message })
    }

    /// Parses and checks an auth file's text; the message names the
    /// principal at fault.
    pub fn parse(text: &str) -> Result<Principals, String> {
        let entries: FileEntries = toml::from_str(text).map_err(|error| error.to_string().trim_end().to_owned())?;
        let mut ids = HashSet::new();
        let mut hashes = HashSet::new();
        let mut certificates = HashSet::new();
        let mut principals = Vec::with_capacity(entries.principals.len());
        for (index, entry) in entries.principals.into_iter().enumerate() {
            let name = if entry.id.is_empty() { format!("#{}", index + 1) } else { format!("{:?}", entry.id) };
            let fault = |what: &str| format!("principal {name}: {what}");
            if entry.id.trim().is_empty() {
                return Err(fault("id must not be empty"));
            }
            if !ids.insert(entry.id.clone()) {
                return Err(fault("the id is used by another principal"));
            }
            let token_sha256 = match &entry.token_sha256 {
                Some(hex) => {
                    let hash = parse_sha256(hex)
                        .ok_or_else(|| fault("token_sha256 must be 64 lowercase hexadecimal digits"))?;
                    if !hashes.insert(hash) {
                        return Err(fault("token_sha256 is the same as another principal's"));
                    }
                    Some(hash)
                }
                None => None,
            };
            let certificate = match entry.certificate.as_deref() {
                Some("") => return Err(fault("certificate must not be empty")),
                Some(text) => {
                    let name = CertificateName::parse(text).map_err(|message| fault(&message))?;
                    if !certificates.insert(name.clone()) {
                        return Err(fault("certificate is the same as another principal's"));
                    }
                    Some(name)
                }
                None => None,
            };
            if token_sha256.is_none() && certificate.is_none() {
                return Err(fault("needs token_sha256 or certificate"));
            }
            for grant in &entry.grants {
                if grant.namespace != EVERY_NAMESPACE && !is_namespace(&grant.namespace) {
                    return Err(fault(&format!(
                        "grant namespace {:?} is neither \"*\" nor a namespace ([a-z0-9][a-z0-9._-]{{0,62}})",
                        grant.namespace
                    )));
                }
            }
            principals.push(Arc::new(Principal { id: entry.id, token_sha256, certificate, grants: entry.grants }));
        }
        Ok(Principals(principals))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The principal whose token hashes to `hash`. Every principal's hash is
    /// compared, in constant time, so the time taken says nothing about
    /// how close a guess came.
    fn by_token_hash(&self, hash: &[u8; 32]) -> Option<&Arc<Principal>> {
        let mut found = None;
        for principal in &self.0 {
            let equal = match &principal.token_sha256 {
                Some(known) => known.ct_eq(hash),
                None => subtle::Choice::from(0),
            };
            if bool::from(equal) {
                found = Some(principal);
            }
        }
        found
    }

    /// The principal named by one of a verified certificate's identities: a
    /// URI principal by a URI SAN only, a DNS one by a DNS SAN only.
    fn by_certificate(&self, peer: &PeerIdentity) -> Option<&Arc<Principal>> {
        self.0.iter().find(|principal| principal.certificate.as_ref().is_some_and(|name| peer.0.contains(name)))
    }
}

fn is_namespace(text: &str) -> bool {
    let bytes = text.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= crate::domain::limits::NAMESPACE_BYTES_MAX
        && (bytes[0].is_ascii_lowercase() || bytes[0].is_ascii_digit())
        && bytes[1..].iter().all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-'))
}

fn parse_sha256(hex: &str) -> Option<[u8; 32]> {
    let digits = hex.as_bytes();
    if digits.len() != 64 || !digits.iter().all(|d| d.is_ascii_digit() || (b'a'..=b'f').contains(d)) {
        return None;
    }
    let mut hash = [0u8; 32];
    for (byte, pair) in hash.iter_mut().zip(digits.chunks(2)) {
        *byte = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
    }
    Some(hash)
}

/// The SHA-256 of `token`, in lowercase hexadecimal, as the file holds it.
pub fn token_sha256(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A fresh bearer token: `swt_` and 32 bytes from the operating system's
/// random source, in unpadded base64url.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("swt_{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)))
}

/// What `stepwell auth new-token --id ID` prints: the token on the first
/// line, then the lines to paste into the auth file, which carry only its hash.
pub fn new_token_text(id: &str, token: &str) -> String {
    let quoted = toml::Value::String(id.to_owned()).to_string();
    let namespace_hint = if is_namespace(id) { quoted.clone() } else { "\"NAMESPACE\"".to_owned() };
    format!(
        "{token}\n\n\
         # Give the token above to the client; stepwell keeps only its hash.\n\
         # Paste these lines into the --auth-file and grant roles:\n\
         [[principals]]\n\
         id = {quoted}\n\
         token_sha256 = \"{hash}\"\n\
         # grants = [{{ namespace = {namespace_hint}, role = \"write\" }}]\n",
        hash = token_sha256(token),
    )
}

/// What a call's `authorization` headers hold, when it has any.
#[derive(Clone, PartialEq, Eq)]
pub enum Authorization {
    /// One header, of visible ASCII.
    One(String),
    /// One header that is not visible ASCII.
    NotVisibleAscii,
    /// More than one header. Which of them the caller meant cannot be
    /// known, and a proxy or library that adds one to the caller's own
    /// must not decide who is calling, so such a call is refused whole.
    Repeated,
}

impl Authorization {
    /// The `authorization` headers of a request, `None` when it has none.
    pub fn of(headers: &HeaderMap) -> Option<Authorization> {
        let mut values = headers.get_all(AUTHORIZATION).iter();
        let first = values.next()?;
        if values.next().is_some() {
            return Some(Authorization::Repeated);
        }
        Some(first.to_str().map_or(Authorization::NotVisibleAscii, |value| Authorization::One(value.to_owned())))
    }
}

/// The credentials a call came with, read from its headers and its
/// connection before its body. Its `Debug` leaves the header out, so no
/// log can show a token.
#[derive(Clone, Default)]
pub struct Credentials {
    /// The `authorization` header, `None` when absent.
    pub authorization: Option<Authorization>,
    pub peer_identity: Option<PeerIdentity>,
    pub remote: Option<SocketAddr>,
}

impl Credentials {
    /// The credentials of a request with these headers and extensions
    /// (where tonic puts the connection's address and the TLS listener the
    /// client certificate's identity).
    pub fn of(headers: &HeaderMap, extensions: &Extensions) -> Credentials {
        Credentials {
            authorization: Authorization::of(headers),
            peer_identity: extensions.get::<PeerIdentity>().cloned(),
            remote: extensions.get::<TcpConnectInfo>().and_then(TcpConnectInfo::remote_addr),
        }
    }
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("authorization", &self.authorization.as_ref().map(|_| "<redacted>"))
            .field("peer_identity", &self.peer_identity)
            .field("remote", &self.remote)
            .finish()
    }
}

/// The principals in force, and the file they came from.
#[derive(Debug)]
pub struct Authenticator {
    path: PathBuf,
    principals: RwLock<Arc<Principals>>,
}

impl Authenticator {
    /// Loads the file at `path`; a file that cannot be used is an error.
    pub fn load(path: &Path) -> Result<Authenticator, FileError> {
        let principals = Principals::load(path)?;
        Ok(Authenticator { path: path.to_owned(), principals: RwLock::new(Arc::new(principals)) })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file again; the new principals apply to the next call. A
    /// file that cannot be used leaves the principals in force as they were.
    pub fn reload(&self) -> Result<usize, FileError> {
        let principals = Principals::load(&self.path)?;
        let count = principals.len();
        *self.principals.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(principals);
        Ok(count)
    }

    fn current(&self) -> Arc<Principals> {
        self.principals.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Who the credentials prove the caller to be. A bearer token, when
    /// present, decides alone: a wrong token is refused even beside a
    /// known certificate, since a caller that sends one meant to use it.
    pub fn authenticate(&self, credentials: &Credentials) -> Result<Arc<Principal>, Unknown> {
        let principals = self.current();
        match &credentials.authorization {
            Some(Authorization::Repeated) => Err(Unknown::RepeatedHeader),
            Some(Authorization::NotVisibleAscii) => Err(Unknown::MalformedHeader),
            Some(Authorization::One(header)) => {
                let token = bearer_token(header).ok_or(Unknown::MalformedHeader)?;
                let hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
                principals.by_token_hash(&hash).cloned().ok_or(Unknown::UnknownToken)
            }
            None => credentials
                .peer_identity
                .as_ref()
                .and_then(|peer| principals.by_certificate(peer))
                .cloned()
                .ok_or(Unknown::NoCredentials),
        }
    }
}

impl Authenticator {
    /// The principal a token names, and the token's SHA-256, which a
    /// console session keeps instead of the token.
    pub fn sign_in(&self, token: &str) -> Option<(Arc<Principal>, [u8; 32])> {
        let hash: [u8; 32] = Sha256::digest(token.trim().as_bytes()).into();
        self.by_token_hash(&hash).map(|principal| (principal, hash))
    }

    /// The principal whose token has this SHA-256, as the file says now: a
    /// session ends as soon as a reload drops its principal.
    pub fn by_token_hash(&self, hash: &[u8; 32]) -> Option<Arc<Principal>> {
        self.current().by_token_hash(hash).cloned()
    }
}

/// The token of an `authorization: Bearer <token>` header; the scheme is
/// case-insensitive, as HTTP's are.
fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' ')).then_some(token)
}

/// A known caller's call that no grant allows: it needs `role` in
/// `namespace`. `api` answers it as PERMISSION_DENIED.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denied {
    pub namespace: String,
    pub role: Role,
}

/// The caller's verdict for one call: allowed, or why not.
pub fn authorize(principal: &Principal, rpc: Rpc, namespace: &str) -> Result<(), Denied> {
    match principal.role_in(namespace) {
        Some(role) if role >= rpc.role() => Ok(()),
        _ => Err(Denied { namespace: namespace.to_owned(), role: rpc.role() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HASH_A: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
    const HASH_B: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";

    fn parse_err(text: &str) -> String {
        Principals::parse(text).expect_err("refused")
    }

    #[test]
    fn each_rpc_is_found_by_its_path_and_named_by_its_service_and_method() {
        for rpc in Rpc::ALL {
            assert_eq!(rpc.full_name(), format!("{}/{}", rpc.service(), rpc.as_str()));
            assert_eq!(Rpc::from_path(&format!("/{}", rpc.full_name())), Some(rpc));
        }
        assert_eq!(Rpc::from_path("/stepwell.v1.CheckpointService/Nothing"), None);
        assert_eq!(Rpc::from_path("/grpc.health.v1.Health/Check"), None);
    }

    #[test]
    fn parses_the_documented_format() {
        let text = format!(
            r#"
            [[principals]]
            id = "billing"
            token_sha256 = "{HASH_A}"
            grants = [
              {{ namespace = "billing", role = "write" }},
              {{ namespace = "*", role = "read" }},
            ]

            [[principals]]
            id = "runner"
            certificate = "spiffe://example.org/agents/runner"
            grants = [{{ namespace = "agents", role = "admin" }}]
            "#
        );
        let principals = Principals::parse(&text).expect("valid");
        assert_eq!(principals.len(), 2);
        let billing = &principals.0[0];
        assert_eq!(billing.role_in("billing"), Some(Role::Write), "the best grant wins");
        assert_eq!(billing.role_in("elsewhere"), Some(Role::Read));
        let runner = &principals.0[1];
        assert_eq!(runner.role_in("agents"), Some(Role::Admin));
        assert_eq!(runner.role_in("billing"), None);
        let peer = PeerIdentity(vec![
            CertificateName::Dns("dns.example".into()),
            CertificateName::Uri("spiffe://example.org/agents/runner".into()),
        ]);
        assert_eq!(principals.by_certificate(&peer).map(|p| p.id.as_str()), Some("runner"));
    }

    #[test]
    fn refuses_mistakes_naming_the_principal() {
        let one = |fields: &str| format!("[[principals]]\n{fields}\n");
        assert!(parse_err(&one(&format!("id = \"a\"\ntoken_sha256 = \"{HASH_A}\"\ncolour = 1"))).contains("colour"));
        let short = parse_err(&one("id = \"a\"\ntoken_sha256 = \"abc\""));
        assert!(short.contains("\"a\"") && short.contains("64 lowercase"), "{short}");
        let upper = parse_err(&one(&format!("id = \"a\"\ntoken_sha256 = \"{}\"", HASH_A.to_uppercase())));
        assert!(upper.contains("64 lowercase"), "{upper}");
        assert!(parse_err(&one(&format!("id = \"\"\ntoken_sha256 = \"{HASH_A}\""))).contains("id must not be empty"));
        assert!(parse_err(&one("id = \"a\"")).contains("needs token_sha256 or certificate"));
        let duplicate_id = format!(
            "{}{}",
            one(&format!("id = \"a\"\ntoken_sha256 = \"{HASH_A}\"")),
            one(&format!("id = \"a\"\ntoken_sha256 = \"{HASH_B}\""))
        );
        assert!(parse_err(&duplicate_id).contains("principal \"a\": the id is used"));
        let duplicate_hash = format!(
            "{}{}",
            one(&format!("id = \"a\"\ntoken_sha256 = \"{HASH_A}\"")),
            one(&format!("id = \"b\"\ntoken_sha256 = \"{HASH_A}\""))
        );
        assert!(parse_err(&duplicate_hash).contains("principal \"b\": token_sha256 is the same"));
        let bad_role = one(&format!(
            "id = \"a\"\ntoken_sha256 = \"{HASH_A}\"\ngrants = [{{ namespace = \"x\", role = \"root\" }}]"
        ));
        assert!(parse_err(&bad_role).contains("root"));
        let bad_namespace = one(&format!(
            "id = \"a\"\ntoken_sha256 = \"{HASH_A}\"\ngrants = [{{ namespace = \"X\", role = \"read\" }}]"
        ));
        assert!(parse_err(&bad_namespace).contains("grant namespace \"X\""));
        assert!(parse_err("[[principal]]\nid = \"a\"").contains("principal"));
    }

    #[test]
    fn tokens_authenticate_by_hash_and_headers_are_checked() {
        let text = format!("[[principals]]\nid = \"a\"\ntoken_sha256 = \"{}\"\n", token_sha256("swt_known"));
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("auth.toml");
        std::fs::write(&path, text).expect("write");
        let auth = Authenticator::load(&path).expect("valid");
        let with = |header: Option<&str>| Credentials {
            authorization: header.map(|h| Authorization::One(h.to_owned())),
            ..Credentials::default()
        };
        assert_eq!(auth.authenticate(&with(Some("Bearer swt_known"))).map(|p| p.id.clone()), Ok("a".to_owned()));
        assert_eq!(auth.authenticate(&with(Some("bearer swt_known"))).map(|p| p.id.clone()), Ok("a".to_owned()));
        assert_eq!(auth.authenticate(&with(Some("Bearer swt_other"))), Err(Unknown::UnknownToken));
        assert_eq!(auth.authenticate(&with(Some("Basic swt_known"))), Err(Unknown::MalformedHeader));
        assert_eq!(auth.authenticate(&with(Some("Bearer "))), Err(Unknown::MalformedHeader));
        assert_eq!(auth.authenticate(&with(None)), Err(Unknown::NoCredentials));
        std::fs::write(&path, "not toml [").expect("write");
        assert!(auth.reload().is_err());
        assert!(auth.authenticate(&with(Some("Bearer swt_known"))).is_ok(), "a broken file keeps the old principals");
        std::fs::write(&path, "").expect("write");
        assert_eq!(auth.reload().expect("an empty file is valid"), 0);
        assert_eq!(auth.authenticate(&with(Some("Bearer swt_known"))), Err(Unknown::UnknownToken));
    }

    #[test]
    fn two_authorization_headers_are_refused_whatever_they_hold() {
        let text = format!("[[principals]]\nid = \"a\"\ntoken_sha256 = \"{}\"\n", token_sha256("swt_known"));
        let auth = Authenticator {
            path: PathBuf::new(),
            principals: RwLock::new(Arc::new(Principals::parse(&text).expect("valid"))),
        };
        let headers = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for value in values {
                headers.append(AUTHORIZATION, value.parse().expect("a header value"));
            }
            headers
        };
        let id = |values: &[&str]| {
            let credentials = Credentials::of(&headers(values), &Extensions::new());
            auth.authenticate(&credentials).map(|p| p.id.clone())
        };
        assert_eq!(id(&["Bearer swt_known"]), Ok("a".to_owned()));
        assert_eq!(id(&[]), Err(Unknown::NoCredentials));
        for values in [
            ["Bearer swt_known", "Bearer swt_other"],
            ["Bearer swt_other", "Bearer swt_known"],
            ["Bearer swt_known", "Bearer swt_known"],
        ] {
            assert_eq!(id(&values), Err(Unknown::RepeatedHeader), "{values:?}");
        }
    }

    #[test]
    fn a_verified_certificate_authenticates_unless_a_token_is_sent() {
        let text = format!(
            "[[principals]]\nid = \"runner\"\ncertificate = \"spiffe://example.org/runner\"\n\n\
             [[principals]]\nid = \"both\"\ncertificate = \"both.example\"\ntoken_sha256 = \"{}\"\n",
            token_sha256("swt_both")
        );
        let auth = Authenticator {
            path: PathBuf::new(),
            principals: RwLock::new(Arc::new(Principals::parse(&text).expect("valid"))),
        };
        // A test's name of either kind, spelled as a certificate would hold it.
        let name = |text: &str| CertificateName::parse(text).expect("a URI or DNS name");
        let peer = |names: &[&str]| Credentials {
            peer_identity: Some(PeerIdentity(names.iter().map(|text| name(text)).collect())),
            ..Credentials::default()
        };
        let id = |credentials: &Credentials| auth.authenticate(credentials).map(|p| p.id.clone());
        assert_eq!(id(&peer(&["x.example", "spiffe://example.org/runner"])), Ok("runner".to_owned()));
        assert_eq!(id(&peer(&["both.example"])), Ok("both".to_owned()));
        assert_eq!(id(&peer(&["spiffe://example.org/other"])), Err(Unknown::NoCredentials));
        // The same text under the other kind of SAN names no one.
        let crossed = |names: Vec<CertificateName>| Credentials {
            peer_identity: Some(PeerIdentity(names)),
            ..Credentials::default()
        };
        let dns_spelled_as_uri = CertificateName::Dns("spiffe://example.org/runner".to_owned());
        assert_eq!(id(&crossed(vec![dns_spelled_as_uri])), Err(Unknown::NoCredentials));
        let uri_spelled_as_dns = CertificateName::Uri("both.example".to_owned());
        assert_eq!(id(&crossed(vec![uri_spelled_as_dns])), Err(Unknown::NoCredentials));
        let with_token = |header: &str| Credentials {
            authorization: Some(Authorization::One(header.to_owned())),
            ..peer(&["spiffe://example.org/runner"])
        };
        assert_eq!(id(&with_token("Bearer swt_both")), Ok("both".to_owned()), "the token decides");
        assert_eq!(id(&with_token("Bearer swt_wrong")), Err(Unknown::UnknownToken), "a wrong token is refused");
        let debug = format!("{:?}", with_token("Bearer swt_both"));
        assert!(!debug.contains("swt_both"), "Debug leaves the token out: {debug}");
    }

    #[test]
    fn a_certificate_value_names_a_uri_when_it_has_a_scheme_and_a_dns_name_otherwise() {
        let uri = |text: &str| Ok(CertificateName::Uri(text.to_owned()));
        let dns = |text: &str| Ok(CertificateName::Dns(text.to_owned()));
        assert_eq!(CertificateName::parse("spiffe://example.org/agent"), uri("spiffe://example.org/agent"));
        assert_eq!(CertificateName::parse("urn:example:agent"), uri("urn:example:agent"));
        assert_eq!(CertificateName::parse("planner.example.org"), dns("planner.example.org"));
        assert_eq!(CertificateName::parse("*.example.org"), dns("*.example.org"));
        for neither in ["example.org/agent", "://x", "1x:y", "spiffe:", "a b.example", "spiffe://a b", "é.example"] {
            let error = CertificateName::parse(neither).expect_err(neither);
            assert!(error.contains("neither a URI"), "{neither}: {error}");
        }
        let text = "[[principals]]\nid = \"a\"\ncertificate = \"example.org/agent\"\n";
        let refused = parse_err(text);
        assert!(refused.contains("principal \"a\"") && refused.contains("neither a URI"), "{refused}");
    }

    #[test]
    fn a_new_token_is_random_and_its_text_parses() {
        let token = new_token().expect("the OS has randomness");
        assert!(token.starts_with("swt_") && token.len() == 4 + 43, "{token}");
        assert_ne!(token, new_token().expect("the OS has randomness"));
        let text = new_token_text("billing", &token);
        assert_eq!(text.lines().next(), Some(token.as_str()));
        let principals = Principals::parse(text.split_once('\n').expect("more lines").1).expect("valid TOML");
        assert_eq!(principals.0[0].token_sha256, parse_sha256(&token_sha256(&token)));
    }

    #[test]
    fn roles_include_the_ones_below() {
        assert!(Role::Admin > Role::Write && Role::Write > Role::Read);
        assert_eq!(Rpc::DeleteTurn.role(), Role::Admin);
        assert_eq!(Rpc::Get.role(), Role::Read);
        assert_eq!(Rpc::Extend.role(), Role::Write);
    }
}
