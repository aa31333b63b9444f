//! TLS to Postgres, and what the sidecar does at start-up when the store's
//! settings are wrong. A private cluster accepts TCP over TLS only, with a
//! certificate from a throwaway CA and a role that must give its password:
//! `sslmode=verify-full` with that CA serves end to end, while a wrong root
//! certificate, a wrong password, a server without TLS under
//! `sslmode=require`, or a missing database make the real binary exit 64 at
//! once instead of retrying as if the database were down. No password, in
//! the URL's user part or its query, appears in what the sidecar logs.
//! These tests run in the Postgres pass of scripts/test only.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};

use sqlx::{Connection, PgConnection};
use stepwell::config::sections::Config;
use stepwell::store::Database;

use stepwell_test_support::Client;
use stepwell_test_support::backend::{TestStore, fresh_database_on, postgres_admin_url, with_database};
use stepwell_test_support::channel::{Target, connect};
use stepwell_test_support::health::wait_for_serving;
use stepwell_test_support::pg_cluster::PgCluster;
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all, states};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

/// The role the sidecar logs in as, and its password: distinctive, so a
/// search of the logs for it cannot match anything else.
const ROLE: &str = "stepwell_app";
const PASSWORD: &str = "pw-7f3c9e1a-do-not-log";
/// A password the server refuses, as distinctive.
const WRONG_PASSWORD: &str = "wrong-5b2d8c44-do-not-log";

/// The exit code of a configuration error (EX_USAGE).
const EXIT_CONFIG: i32 = 64;

/// A TLS-only cluster with a database owned by `ROLE`.
struct TlsServer {
    cluster: PgCluster,
    database: String,
}

async fn tls_server() -> TlsServer {
    let cluster = PgCluster::start_tls();
    let url = fresh_database_on(&cluster.url()).await;
    let database = url.rsplit('/').next().expect("a database name").to_owned();
    let mut admin = PgConnection::connect(&cluster.url()).await.expect("connect as postgres");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'; ALTER DATABASE {database} OWNER TO {ROLE}"
    )))
    .execute(&mut admin)
    .await
    .expect("create the application role");
    TlsServer { cluster, database }
}

impl TlsServer {
    /// A URL for `ROLE`, with `password` in its user part if given, and `query`.
    fn url(&self, password: Option<&str>, query: &str) -> String {
        let password = password.map(|p| format!(":{p}")).unwrap_or_default();
        format!("postgres://{ROLE}{password}@127.0.0.1:{}/{}?{query}", self.cluster.port(), self.database)
    }

    /// The query that verifies the server's certificate and name against `ca`.
    fn verify_full(ca: &Path) -> String {
        format!("sslmode=verify-full&sslrootcert={}", ca.display())
    }

    fn store(&self, url: String) -> TestStore {
        TestStore::on(Database::Postgres { url })
    }
}

/// Asserts a run ended with the configuration exit code and said what to
/// fix, without retrying: a retried failure never exits by itself, so
/// `run_until_exit` would have failed the test instead.
fn assert_configuration_error(status: ExitStatus, stderr: &str, fix: &str) {
    assert_eq!(status.code(), Some(EXIT_CONFIG), "a configuration error exits 64: {stderr}");
    assert!(stderr.contains(fix), "the message says what to fix ({fix:?}): {stderr}");
    assert!(!stderr.contains("retrying"), "a wrong setting is not retried as an outage: {stderr}");
}

#[tokio::test]
async fn verify_full_serves_a_checkpoint_and_its_restore_over_tls() {
    let server = tls_server().await;
    // The server refuses plaintext, so whatever connects below used TLS.
    let plaintext = PgConnection::connect(&server.url(Some(PASSWORD), "sslmode=disable")).await;
    assert!(plaintext.is_err(), "the cluster accepts TCP over TLS only");

    let url = server.url(Some(PASSWORD), &TlsServer::verify_full(&server.cluster.ca_file()));
    // The real binary runs the durability guard and migrations over TLS before it serves.
    let sidecar = SidecarProcess::builder(STEPWELL, &server.store(url)).spawn().await;
    let mut client = sidecar.client();
    assert_inserted(&mut client, checkpoint("t", "started", T0, r#"{"step":1}"#)).await;
    assert_inserted(&mut client, checkpoint("t", "done", T0 + 1, r#"{"step":2}"#)).await;
    let log = restore_all(&mut client, restore("t")).await;
    assert_eq!(states(&log), [r#"{"step":1}"#, r#"{"step":2}"#]);
}

#[tokio::test]
async fn the_health_ping_works_over_tls() {
    let server = tls_server().await;
    let url = server.url(Some(PASSWORD), &TlsServer::verify_full(&server.cluster.ca_file()));
    let options = Config::for_database(Database::Postgres { url }).store;
    let store = stepwell::store::open(&options).await.expect("open the store over TLS");
    store.ping().await.expect("a ping over TLS answers");
    store.close().await;
}

#[tokio::test]
async fn a_wrong_root_certificate_exits_64_at_once() {
    let server = tls_server().await;
    let url = server.url(Some(PASSWORD), &TlsServer::verify_full(&server.cluster.other_ca_file()));
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &server.store(url)).run_until_exit();
    assert_configuration_error(status, &stderr, "sslrootcert");
    assert!(stderr.contains("certificate"), "the message names the certificate: {stderr}");
}

#[tokio::test]
async fn a_server_without_tls_under_sslmode_require_exits_64_at_once() {
    let cluster = PgCluster::start(&[]);
    let url = format!("{}?sslmode=require", with_database(&cluster.url(), "postgres"));
    let (status, stderr) =
        SidecarProcess::builder(STEPWELL, &TestStore::on(Database::Postgres { url })).run_until_exit();
    assert_configuration_error(status, &stderr, "the server must offer TLS");
}

#[tokio::test]
async fn a_wrong_password_exits_64_at_once() {
    let server = tls_server().await;
    let url = server.url(Some(WRONG_PASSWORD), &TlsServer::verify_full(&server.cluster.ca_file()));
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &server.store(url)).run_until_exit();
    assert_configuration_error(status, &stderr, "check the user and password");
}

#[tokio::test]
async fn a_database_that_does_not_exist_exits_64_at_once() {
    let url = with_database(&postgres_admin_url(), "stepwell_no_such_database");
    let (status, stderr) =
        SidecarProcess::builder(STEPWELL, &TestStore::on(Database::Postgres { url })).run_until_exit();
    assert_configuration_error(status, &stderr, "create the database");
}

/// A child process killed and reaped when dropped, so a failing test leaves
/// no server behind.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the real binary on `url`, logging everything down to debug, until it
/// serves; writes a checkpoint, stops it with SIGTERM, and returns its stderr.
async fn serve_once(dir: &Path, name: &str, url: &str) -> String {
    let socket = dir.join(format!("{name}.sock"));
    let log_path = dir.join(format!("{name}.stderr"));
    let log = std::fs::File::create(&log_path).expect("create the log file");
    let child = Command::new(STEPWELL)
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .arg("--database-url")
        .arg(url)
        .env("STEPWELL_LOG", "debug")
        .env("STEPWELL_ADMIN_LISTEN", "off")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start the stepwell binary");
    let mut running = Running(child);
    let channel = connect(&Target::Unix(socket)).await;
    wait_for_serving(&channel).await;
    assert_inserted(&mut Client::new(channel), checkpoint(name, "started", T0, "{}")).await;
    let signalled = Command::new("kill").arg("-TERM").arg(running.0.id().to_string()).status().expect("run kill");
    assert!(signalled.success(), "SIGTERM delivered");
    let status = tokio::task::block_in_place(|| running.0.wait()).expect("wait for the sidecar");
    assert!(status.success(), "the sidecar stops cleanly on SIGTERM: {status:?}");
    std::fs::read_to_string(log_path).expect("read the log")
}

fn assert_never_logged(stderr: &str, secret: &str) {
    for line in stderr.lines() {
        assert!(!line.contains(secret), "a password reached the log: {line}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_password_reaches_the_log_in_either_url_form() {
    let server = tls_server().await;
    let dir = tempfile::tempdir().expect("a directory for sockets and logs");
    let verify = TlsServer::verify_full(&server.cluster.ca_file());

    // Serving, with debug logs: the password in the user part (and in
    // libpq's sslpassword, which sqlx does not know), then in the query.
    let in_user_part = server.url(Some(PASSWORD), &format!("{verify}&sslpassword={PASSWORD}"));
    let stderr = serve_once(dir.path(), "user_part", &in_user_part).await;
    assert!(stderr.contains(&format!("{ROLE}:***@")), "the store is described, its password hidden: {stderr}");
    assert_never_logged(&stderr, PASSWORD);
    let in_query = server.url(None, &format!("{verify}&password={PASSWORD}"));
    let stderr = serve_once(dir.path(), "query", &in_query).await;
    assert!(stderr.contains("password=***"), "the store is described, its password hidden: {stderr}");
    assert_never_logged(&stderr, PASSWORD);

    // Failing at start-up, in both forms.
    for url in
        [server.url(Some(WRONG_PASSWORD), &verify), server.url(None, &format!("{verify}&password={WRONG_PASSWORD}"))]
    {
        let (status, stderr) =
            SidecarProcess::builder(STEPWELL, &server.store(url)).env("STEPWELL_LOG", "debug").run_until_exit();
        assert_eq!(status.code(), Some(EXIT_CONFIG), "{stderr}");
        assert_never_logged(&stderr, WRONG_PASSWORD);
    }
}
