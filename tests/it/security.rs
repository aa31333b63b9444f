//! The transport's security: TLS and mutual TLS on the listener with
//! certificates made in the test, the client certificate's identity as a
//! handler sees it (a URI principal named by URI SANs only, a DNS one by
//! DNS SANs only), the caller's address in audit events over TLS, the
//! certificate's reload on SIGHUP, the start-up refusals of an exposed port
//! and of bad TLS files, `stepwell healthcheck` over TLS and mutual TLS,
//! and the permissions and lifetime of the Unix socket and SQLite files.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use rcgen::SanType;
use stepwell::api::pb::DeleteTurnRequest;
use stepwell::auth::{CertificateName, PeerIdentity};
use stepwell::config;
use stepwell::config::sections::Tls;
use stepwell::net::tls::{ServerTls, attach_peer_identity};
use stepwell::store::Database;
use stepwell_test_support::WAIT_LIMIT;
use stepwell_test_support::backend::TestStore;
use stepwell_test_support::channel::{Target, connect, server_certificate, try_connect, try_connect_from};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all, states};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};
use stepwell_test_support::tls::{Authority, ClientTls};
use tokio::net::TcpListener;
use tonic::{Request, Response, Status};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::STEPWELL;

const SPIFFE_ID: &str = "spiffe://example.org/agent/planner";

/// A CA, a server certificate from it, and their files in `dir`.
struct Pki {
    ca: Authority,
    tls: Tls,
}

impl Pki {
    fn new(dir: &Path, mutual: bool) -> Pki {
        let ca = Authority::new("stepwell test CA");
        let (cert, key) = ca.server().write(dir, "server");
        let client_ca = mutual.then(|| ca.write(&dir.join("client-ca.pem")));
        Pki { ca, tls: Tls { cert, key, client_ca } }
    }

    /// A client that trusts the CA, presenting a certificate naming SPIFFE_ID.
    fn client_with_certificate(&self) -> ClientTls {
        ClientTls::new(&self.ca, Some(&self.ca.client(SPIFFE_ID, "planner.example.org")))
    }
}

async fn tls_sidecar(store: &TestStore, pki: &Pki, client: ClientTls) -> Sidecar {
    let tls = pki.tls.clone();
    Sidecar::builder().store(store).configure(move |c| c.security.tls = Some(tls)).client_tls(client).start().await
}

/// Whether a Health/Check over a fresh connection with `tls` fails, at the
/// handshake or at the call (TLS 1.3 reports a refused client certificate
/// only after the client's side of the handshake is done).
async fn call_fails(target: &Target, tls: Option<&ClientTls>) -> bool {
    let attempt = async {
        let channel = try_connect(target, tls).await.map_err(|e| e.to_string())?;
        HealthClient::new(channel).check(HealthCheckRequest::default()).await.map_err(|e| e.to_string())
    };
    tokio::time::timeout(WAIT_LIMIT, attempt).await.expect("the attempt ends").is_err()
}

#[tokio::test]
async fn checkpoints_round_trip_over_tls() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), false);
    let server = tls_sidecar(&store, &pki, ClientTls::new(&pki.ca, None)).await;
    let mut client = server.client();

    assert_inserted(&mut client, checkpoint("turn-tls", "started", T0, r#"{"step":1}"#)).await;
    assert_inserted(&mut client, checkpoint("turn-tls", "done", T0 + 1, r#"{"step":2}"#)).await;

    let restored = restore_all(&mut client, restore("turn-tls")).await;
    assert_eq!(states(&restored), [r#"{"step":1}"#, r#"{"step":2}"#]);
    assert!(call_fails(server.target(), None).await, "a plaintext client is refused by a TLS listener");
}

#[tokio::test]
async fn mutual_tls_needs_a_certificate_from_the_client_ca() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), true);
    let server = tls_sidecar(&store, &pki, pki.client_with_certificate()).await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("turn-mtls", "started", T0, "{}")).await;

    assert!(call_fails(server.target(), Some(&ClientTls::new(&pki.ca, None))).await, "no client certificate");
    let stranger = Authority::new("another CA");
    let wrong = ClientTls::new(&pki.ca, Some(&stranger.client(SPIFFE_ID, "planner.example.org")));
    assert!(call_fails(server.target(), Some(&wrong)).await, "a client certificate from another CA");
    assert!(!call_fails(server.target(), Some(&pki.client_with_certificate())).await, "a good certificate");
}

/// A handler that reports the identity its request carries; a health
/// answer has no room for names, so it reports them in an error's message.
struct IdentityEcho;

#[tonic::async_trait]
impl Health for IdentityEcho {
    async fn check(&self, request: Request<HealthCheckRequest>) -> Result<Response<HealthCheckResponse>, Status> {
        Err(Status::failed_precondition(format!("{:?}", request.extensions().get::<PeerIdentity>())))
    }

    type WatchStream = Pin<Box<dyn futures::Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(&self, _: Request<HealthCheckRequest>) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("not needed"))
    }
}

/// Serves `IdentityEcho` behind the listener's TLS and the layer `serve`
/// uses, and answers what the handler saw for a client presenting `tls`.
async fn identity_seen(server_tls: Arc<ServerTls>, client_tls: ClientTls) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let target = Target::Tcp(listener.local_addr().expect("an address"));
    let accepted = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let handshakes =
        config::sections::Config::from_args(&config::serve::ServeArgs::defaults()).expect("defaults").connections;
    let metrics = stepwell::observe::metrics::Metrics::off();
    let incoming = stepwell::net::tls::incoming(accepted, server_tls, handshakes.tls_handshakes, metrics);
    let layer = tower::util::MapRequestLayer::new(attach_peer_identity::<tonic::body::Body>);
    let router = tonic::transport::Server::builder().layer(layer).add_service(HealthServer::new(IdentityEcho));
    let server = tokio::spawn(router.serve_with_incoming(incoming));
    let channel = try_connect(&target, Some(&client_tls)).await.expect("connect over TLS");
    let status = HealthClient::new(channel).check(HealthCheckRequest::default()).await.expect_err("the echo");
    server.abort();
    status.message().to_owned()
}

#[tokio::test]
async fn a_handler_sees_the_client_certificates_identity() {
    let dir = tempfile::tempdir().expect("a directory");
    let pki = Pki::new(dir.path(), true);
    let server_tls = ServerTls::load(&pki.tls).expect("the TLS files load");

    let seen = identity_seen(server_tls.clone(), pki.client_with_certificate()).await;
    let expected = PeerIdentity(vec![
        CertificateName::Uri(SPIFFE_ID.to_owned()),
        CertificateName::Dns("planner.example.org".to_owned()),
    ]);
    assert_eq!(seen, format!("{:?}", Some(expected)));

    // Without a client CA no certificate is asked for, and none is proven.
    let one_way = Pki::new(dir.path(), false);
    let seen = identity_seen(ServerTls::load(&one_way.tls).expect("load"), ClientTls::new(&one_way.ca, None)).await;
    assert_eq!(seen, "None");
}

#[tokio::test]
async fn sighup_reloads_the_certificate() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), false);
    let client = ClientTls::new(&pki.ca, None);
    let flags = tls_flags(&pki.tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server = SidecarProcess::builder(STEPWELL, &store).flags(&flags).client_tls(client.clone()).spawn().await;
    let old = server_certificate(server.target(), &client).await.expect("a handshake");

    // A key that does not load keeps the certificate in use.
    std::fs::write(&pki.tls.key, "not a key").expect("spoil the key");
    server.signal(libc::SIGHUP);
    let renewed = pki.ca.server();
    renewed.write(store.dir(), "server");
    server.signal(libc::SIGHUP);

    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let shown = server_certificate(server.target(), &client).await.expect("a handshake");
        if shown == renewed.der() {
            break;
        }
        assert_eq!(shown, old, "only the old or the new certificate is ever shown");
        assert!(tokio::time::Instant::now() < deadline, "the new certificate was never shown");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling for the reload, bounded above
    }
    let mut checkpoints = server.client();
    assert_inserted(&mut checkpoints, checkpoint("turn-reload", "started", T0, "{}")).await;
}

fn tls_flags(tls: &Tls) -> Vec<String> {
    let mut flags = vec![
        "--tls-cert".to_owned(),
        tls.cert.display().to_string(),
        "--tls-key".to_owned(),
        tls.key.display().to_string(),
    ];
    if let Some(ca) = &tls.client_ca {
        flags.extend(["--tls-client-ca".to_owned(), ca.display().to_string()]);
    }
    flags
}

#[tokio::test]
async fn bad_tls_files_at_start_up_are_a_configuration_error() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), false);
    let missing = store.dir().join("missing.pem");
    let tls = Tls { cert: missing.clone(), ..pki.tls.clone() };
    let flags = tls_flags(&tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).flags(&flags).run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "the file is named: {stderr}");

    // A key that belongs to another certificate does not fit.
    let other = pki.ca.server();
    std::fs::write(&pki.tls.key, &other.key_pem).expect("write another key");
    let flags = tls_flags(&pki.tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).flags(&flags).run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("does not fit"), "{stderr}");
}

#[tokio::test]
async fn a_network_port_without_tls_and_auth_exits_64() {
    let store = TestStore::new().await;
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).listen("0.0.0.0:0").run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--insecure-allow-network"), "the way out is named: {stderr}");
}

#[tokio::test]
async fn insecure_allow_network_starts_with_a_warning() {
    let store = TestStore::new().await;
    let log = SidecarProcess::builder(STEPWELL, &store)
        .listen("0.0.0.0:0")
        .flags(&["--insecure-allow-network"])
        .run_until_logged("serving");
    let warning = log.lines().find(|line| line.contains("WARN") && line.contains("--insecure-allow-network"));
    assert!(warning.is_some(), "a warning at start: {log}");
}

/// Runs `stepwell healthcheck` against the sidecar's socket with `flags`;
/// answers its exit code and stderr. The probe's own variables are cleared,
/// so only the flags given count.
fn healthcheck(server: &SidecarProcess, flags: &[&Path]) -> (Option<i32>, String) {
    let target = format!("unix:{}", server.socket_path().display());
    let output = std::process::Command::new(STEPWELL)
        .args(["healthcheck", "--target", &target, "--timeout-ms", "5000"])
        .args(flags)
        .env_remove("STEPWELL_HEALTHCHECK_TLS_CA")
        .env_remove("STEPWELL_HEALTHCHECK_TLS_SERVER_NAME")
        .env_remove("STEPWELL_HEALTHCHECK_TLS_CERT")
        .env_remove("STEPWELL_HEALTHCHECK_TLS_KEY")
        .output()
        .expect("run stepwell healthcheck");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn the_healthcheck_speaks_tls_to_a_tls_sidecar() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), false);
    let flags = tls_flags(&pki.tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server =
        SidecarProcess::builder(STEPWELL, &store).flags(&flags).client_tls(ClientTls::new(&pki.ca, None)).spawn().await;
    let ca = pki.ca.write(&store.dir().join("ca.pem"));
    let tls_ca = Path::new("--tls-ca");

    let (code, stderr) = healthcheck(&server, &[tls_ca, &ca]);
    assert_eq!(code, Some(0), "SERVING over TLS: {stderr}");
    let (code, stderr) = healthcheck(&server, &[]);
    assert_eq!(code, Some(1), "plaintext to a TLS listener: {stderr}");
    // The TLS listener drops the connection once it reads no handshake, which
    // the probe sees as a failed connection or a cancelled call.
    assert!(stderr.starts_with("stepwell healthcheck: ") && stderr.contains("stepwell.sock"), "{stderr}");

    let stranger = Authority::new("another CA").write(&store.dir().join("stranger.pem"));
    let (code, stderr) = healthcheck(&server, &[tls_ca, &stranger]);
    assert_eq!(code, Some(1), "a CA that did not issue the certificate: {stderr}");
    assert!(stderr.contains("TLS handshake failed"), "the handshake is named: {stderr}");
    let name = [tls_ca, &ca, Path::new("--tls-server-name"), Path::new("stepwell.example")];
    let (code, stderr) = healthcheck(&server, &name);
    assert_eq!(code, Some(1), "a name the certificate does not hold: {stderr}");
    assert!(stderr.contains("not valid for name"), "{stderr}");

    let (code, stderr) = healthcheck(&server, &[tls_ca, &ca, Path::new("--tls-cert"), &ca]);
    assert_eq!(code, Some(64), "a client certificate without its key: {stderr}");
    assert!(stderr.contains("--tls-key"), "{stderr}");
    let missing = store.dir().join("missing.pem");
    let (code, stderr) = healthcheck(&server, &[tls_ca, &missing]);
    assert_eq!(code, Some(64), "a CA file that does not load: {stderr}");
    assert!(stderr.contains(&missing.display().to_string()), "the file is named: {stderr}");
}

#[tokio::test]
async fn the_healthcheck_presents_a_client_certificate_to_a_mutual_tls_sidecar() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), true);
    let flags = tls_flags(&pki.tls);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let server =
        SidecarProcess::builder(STEPWELL, &store).flags(&flags).client_tls(pki.client_with_certificate()).spawn().await;
    let ca = pki.ca.write(&store.dir().join("ca.pem"));
    let (cert, key) = pki.ca.client(SPIFFE_ID, "planner.example.org").write(store.dir(), "client");
    let tls_ca = Path::new("--tls-ca");

    let mutual = [tls_ca, &ca, Path::new("--tls-cert"), &cert, Path::new("--tls-key"), &key];
    let (code, stderr) = healthcheck(&server, &mutual);
    assert_eq!(code, Some(0), "SERVING over mutual TLS: {stderr}");
    let (code, stderr) = healthcheck(&server, &[tls_ca, &ca]);
    assert_eq!(code, Some(1), "no client certificate: {stderr}");
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).permissions().mode() & 0o777
}

#[tokio::test]
async fn the_socket_and_the_sqlite_files_are_private() {
    let server = Sidecar::builder().unix_socket().start().await;
    let Target::Unix(socket) = server.target().clone() else { panic!("a Unix socket") };
    assert_eq!(mode(&socket), 0o600, "the socket's mode");
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("turn-files", "started", T0, "{}")).await;

    if let Database::Sqlite { path } = server.store().database() {
        let mut files: Vec<PathBuf> = vec![path.clone()];
        for suffix in ["-wal", "-shm", "-migrate.lock"] {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            files.push(name.into());
        }
        for file in files {
            assert_eq!(mode(&file), 0o600, "{}", file.display());
        }
    }
}

#[tokio::test]
async fn the_socket_mode_follows_the_flag() {
    let server = Sidecar::builder().unix_socket().configure(|c| c.security.unix_socket_mode = 0o660).start().await;
    let Target::Unix(socket) = server.target().clone() else { panic!("a Unix socket") };
    assert_eq!(mode(&socket), 0o660);
}

#[tokio::test]
async fn a_live_socket_is_refused_and_a_stale_one_replaced() {
    let store = TestStore::new().await;
    let first = SidecarProcess::builder(STEPWELL, &store).spawn().await;

    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).run_until_exit();
    assert_eq!(status.code(), Some(1), "a start-up error: {stderr}");
    assert!(stderr.contains("already answers"), "{stderr}");
    let mut client = first.client();
    assert_inserted(&mut client, checkpoint("turn-live", "started", T0, "{}")).await;

    // A killed sidecar leaves its socket behind; the next one replaces it.
    let socket = first.socket_path().to_owned();
    first.kill().await;
    assert!(socket.exists(), "SIGKILL leaves a stale socket");
    let second = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    assert_eq!(restore_all(&mut second.client(), restore("turn-live")).await.len(), 1);
}

#[tokio::test]
async fn an_old_sidecar_stopping_leaves_a_new_ones_socket() {
    let old = Sidecar::builder().unix_socket().start().await;
    let Target::Unix(socket) = old.target().clone() else { panic!("a Unix socket") };
    // Someone removed the old socket, and a new sidecar took the path.
    std::fs::remove_file(&socket).expect("remove the old socket");
    let new = Sidecar::builder().store(old.store()).unix_socket().start().await;

    old.stop().await.expect("the old sidecar stops");

    assert!(socket.exists(), "the new sidecar's socket is still there");
    let mut client = stepwell_test_support::Client::new(connect(&Target::Unix(socket.clone())).await);
    assert_inserted(&mut client, checkpoint("turn-new", "started", T0, "{}")).await;
    new.stop().await.expect("the new sidecar stops");
    assert!(!socket.exists(), "a sidecar removes its own socket");
}

#[tokio::test]
async fn a_client_certificate_alone_authorizes_its_granted_namespace_and_no_other() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), true);
    let auth_file = store.dir().join("auth.toml");
    std::fs::write(
        &auth_file,
        format!("[[principals]]\nid = \"planner\"\ncertificate = \"{SPIFFE_ID}\"\ngrants = [{{ namespace = \"ns-a\", role = \"write\" }}]\n"),
    )
    .expect("write the auth file");
    let tls = pki.tls.clone();
    let server = Sidecar::builder()
        .store(&store)
        .configure(move |c| {
            c.security.tls = Some(tls);
            c.security.auth_file = Some(auth_file);
        })
        .client_tls(pki.client_with_certificate())
        .start()
        .await;
    let mut client = server.client();

    // No token is sent: the verified certificate's URI is the principal.
    let mut in_a = checkpoint("turn-a", "started", T0, "{}");
    in_a.namespace = "ns-a".to_owned();
    assert_inserted(&mut client, in_a).await;

    let mut in_b = checkpoint("turn-b", "started", T0, "{}");
    in_b.namespace = "ns-b".to_owned();
    let denied = client.checkpoint(in_b).await.expect_err("ns-b is not granted");
    stepwell_test_support::errors::assert_error(&denied, tonic::Code::PermissionDenied, "PERMISSION_DENIED");

    let mut restore_b = restore("turn-b");
    restore_b.namespace = "ns-b".to_owned();
    let denied = client.restore(restore_b).await.expect_err("ns-b is not granted, for reading either");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    let mut restore_a = restore("turn-a");
    restore_a.namespace = "ns-a".to_owned();
    assert_eq!(restore_all(&mut client, restore_a).await.len(), 1, "the granted namespace holds the checkpoint");
}

/// A sidecar with mutual TLS whose auth file names one principal by a URI
/// and one by a DNS name, each granted writes everywhere.
async fn sidecar_with_certificate_principals(store: &TestStore, pki: &Pki) -> Sidecar {
    let auth_file = store.dir().join("auth.toml");
    let grants = "grants = [{ namespace = \"*\", role = \"write\" }]";
    std::fs::write(
        &auth_file,
        format!(
            "[[principals]]\nid = \"writer-a\"\ncertificate = \"spiffe://example.org/writer-a\"\n{grants}\n\n\
             [[principals]]\nid = \"writer-b\"\ncertificate = \"writer-b.example.org\"\n{grants}\n"
        ),
    )
    .expect("write the auth file");
    let tls = pki.tls.clone();
    Sidecar::builder()
        .store(store)
        .configure(move |c| {
            c.security.tls = Some(tls);
            c.security.auth_file = Some(auth_file);
        })
        .client_tls(pki.client_with_certificate())
        .start()
        .await
}

/// What a Checkpoint answers a client presenting a certificate whose only
/// subject alternative name is `name`.
async fn checkpoint_as(server: &Sidecar, pki: &Pki, name: SanType) -> Result<(), Status> {
    let tls = ClientTls::new(&pki.ca, Some(&pki.ca.client_named(vec![name])));
    let channel = try_connect(server.target(), Some(&tls)).await.expect("the certificate is trusted");
    let mut client = stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient::new(channel);
    client.checkpoint(checkpoint("turn-san", "started", T0, "{}")).await.map(|_| ())
}

#[tokio::test]
async fn a_principal_is_named_by_a_uri_san_or_a_dns_san_never_by_the_other_kind() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), true);
    let server = sidecar_with_certificate_principals(&store, &pki).await;
    let uri = |text: &str| SanType::URI(text.try_into().expect("ASCII"));
    let dns = |text: &str| SanType::DnsName(text.try_into().expect("ASCII"));

    checkpoint_as(&server, &pki, uri("spiffe://example.org/writer-a")).await.expect("the URI SAN is writer-a");
    checkpoint_as(&server, &pki, dns("writer-b.example.org")).await.expect("the DNS SAN is writer-b");

    // The same texts under the other kind of SAN: trusted certificates, no principal.
    let crossed = [dns("spiffe://example.org/writer-a"), uri("writer-b.example.org")];
    for name in crossed {
        let described = format!("{name:?}");
        let refused = checkpoint_as(&server, &pki, name).await.expect_err(&described);
        stepwell_test_support::errors::assert_error(&refused, tonic::Code::Unauthenticated, "UNAUTHENTICATED");
    }
}

#[tokio::test]
async fn audit_events_over_tls_name_the_callers_address() {
    let store = TestStore::new().await;
    let pki = Pki::new(store.dir(), true);
    let auth_file = store.dir().join("auth.toml");
    let grant = "grants = [{ namespace = \"ns-a\", role = \"admin\" }]";
    std::fs::write(&auth_file, format!("[[principals]]\nid = \"planner\"\ncertificate = \"{SPIFFE_ID}\"\n{grant}\n"))
        .expect("write the auth file");
    let log = store.dir().join("stepwell.log");
    let path = |p: &Path| p.to_str().expect("a UTF-8 path").to_owned();
    let client_ca = pki.tls.client_ca.as_deref().expect("mutual TLS");
    let flags = [
        "--tls-cert".to_owned(),
        path(&pki.tls.cert),
        "--tls-key".to_owned(),
        path(&pki.tls.key),
        "--tls-client-ca".to_owned(),
        path(client_ca),
        "--auth-file".to_owned(),
        path(&auth_file),
        "--log-format".to_owned(),
        "json".to_owned(),
    ];
    let server = SidecarProcess::builder(STEPWELL, &store)
        .flags(&flags.iter().map(String::as_str).collect::<Vec<_>>())
        .client_tls(pki.client_with_certificate())
        .stderr_to(&log)
        .spawn_on_loopback()
        .await;
    let Target::Tcp(addr) = server.target().clone() else { panic!("a TCP sidecar") };

    // From an address of its own, so the event cannot name another caller's.
    let source = "127.0.0.9".parse().expect("an address");
    let (channel, local) = try_connect_from(addr, source, &pki.client_with_certificate()).await.expect("connect");
    let mut client = stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient::new(channel);
    let delete =
        DeleteTurnRequest { namespace: "ns-a".to_owned(), turn_id: "turn-9".to_owned(), include_records: false };
    client.delete_turn(delete).await.expect("the admin deletes");
    let mut elsewhere = checkpoint("turn-b", "started", T0, "{}");
    elsewhere.namespace = "ns-b".to_owned();
    client.checkpoint(elsewhere).await.expect_err("ns-b is not granted");

    server.terminate();
    assert!(server.wait().await.success(), "a clean exit flushes the log");
    let text = std::fs::read_to_string(&log).expect("the log");
    let peers: Vec<(String, String)> = text
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|event| event["target"] == "stepwell::audit")
        .map(|event| {
            let field = |name: &str| event["fields"][name].as_str().unwrap_or("-").to_owned();
            (field("rpc"), field("peer"))
        })
        .collect();
    let expected = [("DeleteTurn", local.to_string()), ("Checkpoint", local.to_string())];
    assert_eq!(peers, expected.map(|(rpc, peer)| (rpc.to_owned(), peer)), "{text}");
}
