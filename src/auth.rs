//! Who is calling: the identities the transport proved about a caller.
//! (Authentication and authorization against `--auth-file` build on this.)

/// The identities a verified client certificate proves: its URI names (such
/// as a SPIFFE ID) and DNS names. The TLS listener puts it in each request's
/// extensions; a request over plaintext or without a certificate has none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerIdentity(pub Vec<String>);
