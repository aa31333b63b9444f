//! How a test gets a running stepwell, so that no test knows how a server is
//! started or where its store lives. Two builders:
//!
//! - `Sidecar::builder()` runs `stepwell::serve` in-process, on TCP or
//!   (`.unix_socket()`) a Unix socket, on a fresh store or (`.store(..)`)
//!   a given one, with its configuration adjusted by `.configure(..)`.
//!   A second sidecar on another's store (`.store(first.store())`) runs as
//!   sidecars sharing one would: its own connections, writer and sweeper.
//! - `SidecarProcess::builder(binary, &store)` runs the real binary as a
//!   child process on a Unix socket in the store's directory, for tests
//!   that kill or signal it and restart it on the same store; `.name(..)`
//!   picks the socket, so several can share a store, `.flags(..)` and
//!   `.env(..)` reach the process, and `.stderr_to(..)` keeps its log;
//!   `spawn_on_loopback` serves TCP instead, on a port the log names.
//!
//! Neither serves the admin listener unless asked (`.admin_listen(..)`, or
//! the configuration), so sidecars side by side never contend for its port;
//! nor does either export traces unless its flags say where.
//!
//! Either dials over TLS when given `.client_tls(..)` (the sidecar's own TLS
//! comes from its configuration or flags).
//!
//! An in-process sidecar logs its warnings (why the store was unavailable,
//! say) into the output of the test that started it, which the test harness
//! shows when that test fails.
//!
//! Both return only once health reports SERVING, as a `Running` sidecar
//! that hands out connected clients. This is the one place a test's
//! `Config` is built from its store (`Config::for_database`), before
//! `.configure(..)` adjusts it.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::api::pb::record_service_client::RecordServiceClient;
use stepwell::api::pb::wait_service_client::WaitServiceClient;
use stepwell::config::sections::Config;
use stepwell::config::values::Listen;
use stepwell::{Listener, ServeError};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

use crate::backend::TestStore;
use crate::channel::{Target, connect_with};
use crate::health::wait_for_serving;
use crate::tls::ClientTls;
use crate::{Client, IdempotencyClient, MemoryClient, RecordClient, WAIT_LIMIT, WaitClient};

/// A running sidecar, connected: `Sidecar` in-process, or `SidecarProcess`,
/// the real binary. Either hands out clients on its channel.
pub struct Running<Kind> {
    channel: Channel,
    target: Target,
    kind: Kind,
}

/// An in-process server, shut down when dropped.
pub type Sidecar = Running<InProcess>;

/// The real `stepwell` binary serving on a Unix socket in its store's
/// directory, so that a restart finds the same store. Killed when dropped.
pub type SidecarProcess = Running<ChildProcess>;

/// What only an in-process sidecar has.
pub struct InProcess {
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
    // A clone of the store, so that it outlives every server on it.
    store: TestStore,
}

/// What only a sidecar process has.
pub struct ChildProcess {
    process: Process,
    socket: PathBuf,
}

impl<Kind> Running<Kind> {
    pub fn client(&self) -> Client {
        CheckpointServiceClient::new(self.channel.clone())
    }

    pub fn idempotency(&self) -> IdempotencyClient {
        IdempotencyServiceClient::new(self.channel.clone())
    }

    pub fn records(&self) -> RecordClient {
        RecordServiceClient::new(self.channel.clone())
    }

    pub fn memory(&self) -> MemoryClient {
        stepwell::api::pb::memory_service_client::MemoryServiceClient::new(self.channel.clone())
    }

    pub fn waits(&self) -> WaitClient {
        WaitServiceClient::new(self.channel.clone())
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// Where the sidecar listens, for tests that dial it their own way.
    pub fn target(&self) -> &Target {
        &self.target
    }
}

/// One adjustment of a test's configuration, given to `.configure(..)`.
type Adjustment<'a> = Box<dyn FnOnce(&mut Config) + 'a>;

/// What an in-process sidecar is to be: see `Sidecar::builder`.
#[must_use = "a builder starts nothing until `start`"]
pub struct SidecarBuilder<'a> {
    store: Option<TestStore>,
    configure: Vec<Adjustment<'a>>,
    unix_socket: bool,
    tls: Option<ClientTls>,
}

impl Sidecar {
    /// An in-process sidecar on TCP, on a fresh store, with the default
    /// configuration, until the builder says otherwise.
    pub fn builder<'a>() -> SidecarBuilder<'a> {
        SidecarBuilder { store: None, configure: Vec::new(), unix_socket: false, tls: None }
    }

    /// The store this server runs on.
    pub fn store(&self) -> &TestStore {
        &self.kind.store
    }

    /// Starts a graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.kind.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Shuts down (if not begun already) and returns what `serve` returned.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.begin_shutdown();
        let task = &mut self.kind.task;
        tokio::time::timeout(WAIT_LIMIT, task)
            .await
            .expect("serve returns after shutdown")
            .expect("the serve task does not panic")
    }
}

impl<'a> SidecarBuilder<'a> {
    /// Runs on `store` (shared with whoever else holds it) instead of a fresh one.
    pub fn store(mut self, store: &TestStore) -> Self {
        self.store = Some(store.clone());
        self
    }

    /// Adjusts the configuration (e.g. its limits or clock) before the start;
    /// adjustments apply in the order given.
    pub fn configure(mut self, configure: impl FnOnce(&mut Config) + 'a) -> Self {
        self.configure.push(Box::new(configure));
        self
    }

    /// Listens on `stepwell.sock` in the store's directory instead of TCP.
    pub fn unix_socket(mut self) -> Self {
        self.unix_socket = true;
        self
    }

    /// Dials the sidecar over TLS (configure its own TLS with `.configure`).
    pub fn client_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Starts the server and waits until it serves.
    pub async fn start(self) -> Sidecar {
        log_to_test_output();
        let store = match self.store {
            Some(store) => store,
            None => TestStore::new().await,
        };
        let mut config = Config::for_database(store.sidecar_database());
        config.store.postgres = store.postgres_mode();
        config.observability.admin_listen = None;
        config.observability.otlp_endpoint = None;
        for configure in self.configure {
            configure(&mut config);
        }
        let (listener, target) = if self.unix_socket {
            let path = store.dir().join("stepwell.sock");
            let listen = Listen::Unix(path.clone());
            let listener = Listener::bind(&listen, config.security.unix_socket_mode).await.expect("bind a Unix socket");
            (listener, Target::Unix(path))
        } else {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a TCP port");
            let addr = listener.local_addr().expect("a bound address");
            (Listener::Tcp(listener), Target::Tcp(addr))
        };
        let (shutdown, signal) = oneshot::channel::<()>();
        // A dropped sender also shuts the server down, so a panicking test
        // does not leave it running.
        let mut task = tokio::spawn(stepwell::serve(listener, config, async move {
            let _ = signal.await;
        }));
        // A sidecar that cannot start (an admin port taken, a store it cannot
        // open) ends its task: say why, rather than time out connecting.
        let channel = tokio::select! {
            channel = connect_with(&target, self.tls.as_ref()) => channel,
            ended = &mut task => panic!("the in-process sidecar stopped before it served: {ended:?}"),
        };
        wait_for_serving(&channel).await;
        Running { channel, target, kind: InProcess { shutdown: Some(shutdown), task, store } }
    }
}

/// Sends the warnings of in-process sidecars to the output of the test
/// whose thread logs them: the harness keeps it, and prints it only for a
/// test that fails, where it says what the sidecar saw go wrong.
fn log_to_test_output() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let logs = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::WARN)
            .with_ansi(false)
            .with_test_writer();
        // Another subscriber installed first keeps its place.
        let _ = logs.try_init();
    });
}

/// What a sidecar process is to be: see `SidecarProcess::builder`.
#[must_use = "a builder starts nothing until `spawn` or `run_until_exit`"]
pub struct SidecarProcessBuilder {
    binary: PathBuf,
    store: TestStore,
    name: String,
    flags: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    tls: Option<ClientTls>,
    listen: Option<String>,
    admin_listen: String,
    stderr: Option<PathBuf>,
}

/// A child process that is killed and reaped when dropped, so that a failing
/// test leaves no server behind.
struct Process(Option<Child>);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl SidecarProcess {
    /// The binary at `binary` (the test binary's `CARGO_BIN_EXE_stepwell`)
    /// serving `store` on `stepwell.sock` in the store's directory, until
    /// the builder says otherwise.
    pub fn builder(binary: impl AsRef<Path>, store: &TestStore) -> SidecarProcessBuilder {
        SidecarProcessBuilder {
            binary: binary.as_ref().to_owned(),
            store: store.clone(),
            name: "stepwell".to_owned(),
            flags: Vec::new(),
            env: Vec::new(),
            tls: None,
            listen: None,
            admin_listen: "off".to_owned(),
            stderr: None,
        }
    }

    pub fn socket_path(&self) -> &Path {
        &self.kind.socket
    }

    /// The process's id, for reading what it uses (its memory, say).
    pub fn pid(&self) -> u32 {
        self.kind.process.0.as_ref().expect("the child is running").id()
    }

    /// Whether the process is still running: it has not exited by itself.
    pub fn is_running(&mut self) -> bool {
        self.kind.process.0.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM, the graceful stop, without waiting.
    pub fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends `signal` (such as SIGHUP, which reloads the TLS files and the
    /// auth file) without waiting.
    pub fn signal(&self, signal: libc::c_int) {
        let child = self.kind.process.0.as_ref().expect("the child is running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on a pid we spawned and have not reaped, so it
        // cannot name another process.
        let result = unsafe { libc::kill(pid, signal) };
        assert_eq!(result, 0, "signal {signal} delivered");
    }

    /// Sends SIGKILL, the crash, and reaps the process.
    pub async fn kill(mut self) -> ExitStatus {
        let mut child = self.kind.process.0.take().expect("the child is running");
        child.kill().expect("SIGKILL delivered");
        reap(child).await
    }

    /// Waits for the process to exit by itself.
    pub async fn wait(mut self) -> ExitStatus {
        reap(self.kind.process.0.take().expect("the child is running")).await
    }
}

impl SidecarProcessBuilder {
    /// Listens on `NAME.sock`, so several sidecars can share a store.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }

    /// Extra flags for `stepwell serve`.
    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.flags.extend(flags.iter().map(OsString::from));
        self
    }

    /// An extra environment variable for the process (e.g. LD_PRELOAD).
    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.env.push((key.into(), value.as_ref().to_owned()));
        self
    }

    /// Listens on `listen` (HOST:PORT) instead of the socket, for
    /// `run_until_exit` and `run_until_logged`, which do not dial it.
    pub fn listen(mut self, listen: &str) -> Self {
        self.listen = Some(listen.to_owned());
        self
    }

    /// Serves the admin listener (/metrics, /healthz, /readyz) on `address`.
    pub fn admin_listen(mut self, address: &str) -> Self {
        self.admin_listen = address.to_owned();
        self
    }

    /// Dials the process over TLS (give it `--tls-cert` and `--tls-key` too).
    pub fn client_tls(mut self, tls: ClientTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Writes the process's standard error (its log) to the file at `path`
    /// instead of the test's.
    pub fn stderr_to(mut self, path: impl AsRef<Path>) -> Self {
        self.stderr = Some(path.as_ref().to_owned());
        self
    }

    /// `stepwell serve` on the store, listening on `NAME.sock`.
    fn command(&self) -> (Command, PathBuf) {
        let socket = self.store.dir().join(format!("{}.sock", self.name));
        let mut command = Command::new(&self.binary);
        command
            .arg("serve")
            .arg("--listen")
            .arg(self.listen.clone().unwrap_or_else(|| format!("unix:{}", socket.display())))
            .arg("--database-url")
            .arg(self.store.sidecar_url())
            .args(self.store.postgres_flags())
            .args(&self.flags)
            // Below flags, so `.flags(..)` may still name an admin address.
            .env("STEPWELL_ADMIN_LISTEN", &self.admin_listen)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .envs(self.store.postgres_env())
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        (command, socket)
    }

    /// Starts the process and waits until it serves.
    pub async fn spawn(self) -> SidecarProcess {
        let (mut command, socket) = self.command();
        if let Some(path) = &self.stderr {
            command.stderr(std::fs::File::create(path).expect("create the log file"));
        }
        let child = command.env("STEPWELL_LOG", "warn").spawn().expect("start the stepwell binary");
        let process = Process(Some(child));
        let channel = connect_with(&Target::Unix(socket.clone()), self.tls.as_ref()).await;
        wait_for_serving(&channel).await;
        Running { channel, target: Target::Unix(socket.clone()), kind: ChildProcess { process, socket } }
    }

    /// Starts the process on a loopback TCP port of its own choosing and
    /// waits until it serves. The port is read from the "serving" line of
    /// its log, so it needs `.stderr_to(..)` and a log at `info` for
    /// stepwell's own events (the default here).
    pub async fn spawn_on_loopback(mut self) -> SidecarProcess {
        self.listen = Some("127.0.0.1:0".to_owned());
        let log = self.stderr.clone().expect("spawn_on_loopback reads the log that .stderr_to(..) names");
        let (mut command, socket) = self.command();
        command.stderr(std::fs::File::create(&log).expect("create the log file"));
        let child = command.env("STEPWELL_LOG", "info").spawn().expect("start the stepwell binary");
        let process = Process(Some(child));
        let addr = served_address(&log).await;
        let channel = connect_with(&Target::Tcp(addr), self.tls.as_ref()).await;
        wait_for_serving(&channel).await;
        Running { channel, target: Target::Tcp(addr), kind: ChildProcess { process, socket } }
    }

    /// Runs a process expected to refuse to start; returns its exit status
    /// and what it wrote to stderr. One still running after `WAIT_LIMIT` is
    /// killed and fails the test.
    pub fn run_until_exit(self) -> (ExitStatus, String) {
        let (mut command, _) = self.command();
        let mut child = command.stderr(Stdio::piped()).spawn().expect("run the stepwell binary");
        let deadline = std::time::Instant::now() + WAIT_LIMIT;
        let status = loop {
            if let Some(status) = child.try_wait().expect("poll the child") {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("stepwell kept running; it was expected to refuse to start");
            }
            std::thread::sleep(Duration::from_millis(10)); // polling for the exit, bounded above
        };
        let mut stderr = String::new();
        child.stderr.take().expect("piped").read_to_string(&mut stderr).expect("read stderr");
        (status, stderr)
    }
}

impl SidecarProcessBuilder {
    /// Runs the process, logging at `info`, until a line of its stderr
    /// contains `line` (such as "serving"), then kills it; returns the
    /// stderr read so far. Fails if it exits or stays silent for `WAIT_LIMIT`.
    pub fn run_until_logged(self, line: &str) -> String {
        use std::io::BufRead;
        let (mut command, _) = self.command();
        let child =
            command.env("STEPWELL_LOG", "info").stderr(Stdio::piped()).spawn().expect("run the stepwell binary");
        let mut process = Process(Some(child));
        let stderr = process.0.as_mut().and_then(|child| child.stderr.take()).expect("piped");
        let (lines, received) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for text in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if lines.send(text).is_err() {
                    return;
                }
            }
        });
        let deadline = std::time::Instant::now() + WAIT_LIMIT;
        let mut seen = String::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match received.recv_timeout(left) {
                Ok(text) => {
                    seen.push_str(&text);
                    seen.push('\n');
                    if text.contains(line) {
                        return seen;
                    }
                }
                Err(_) => panic!("stepwell did not log {line:?}; its stderr:\n{seen}"),
            }
        }
    }
}

/// The address the "serving" line of the log at `path` names, once written
/// (text or JSON: the first `127.0.0.1:PORT` on that line).
async fn served_address(path: &Path) -> std::net::SocketAddr {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let port = text.lines().filter(|line| line.contains("serving")).find_map(|line| {
            let (_, rest) = line.split_once("127.0.0.1:")?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u16>().ok()
        });
        if let Some(port) = port {
            return std::net::SocketAddr::from(([127, 0, 0, 1], port));
        }
        assert!(tokio::time::Instant::now() < deadline, "stepwell never logged where it serves:\n{text}");
        tokio::time::sleep(Duration::from_millis(20)).await; // polling the log, bounded above
    }
}

/// Waits for a child to exit off the async threads, which `wait` would block.
async fn reap(mut child: Child) -> ExitStatus {
    let waiting = tokio::task::spawn_blocking(move || child.wait().expect("wait for the child"));
    tokio::time::timeout(WAIT_LIMIT, waiting).await.expect("the child exits").expect("the wait task does not panic")
}
