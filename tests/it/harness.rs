//! How a test gets a running stepwell, so that no test knows how a server is
//! started or where its store lives. `TestServer` runs `stepwell::serve`
//! in-process on a fresh store in its own temporary directory; `ChildServer`
//! runs the real binary as a child process on a Unix socket, for tests that
//! kill or signal it. Both hand out connected clients and return only once
//! health reports SERVING. A second backend (Postgres) plugs in at `database`.
//! `TestServer::start_beside` runs a second server on the same store, as
//! sidecars sharing one would; tests that must see what is physically stored
//! (e.g. that the sweeper deleted rows) open it read-only through
//! `TestServer::inspect_store`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use stepwell::api::pb::checkpoint_service_client::CheckpointServiceClient;
use stepwell::api::pb::idempotency_service_client::IdempotencyServiceClient;
use stepwell::config::Config;
use stepwell::{Listener, ServeError};
use tokio::net::{TcpListener, UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::Streaming;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// The generated CheckpointService client every test uses.
pub type Client = CheckpointServiceClient<Channel>;

/// The generated IdempotencyService client.
pub type IdempotencyClient = IdempotencyServiceClient<Channel>;

/// A guard against a hung test, not a synchronisation: every wait below is
/// for a condition, and a passing test never comes near this.
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);

use crate::backend::{Inspector, TestStore};

/// Where a server listens, as a client dials it.
#[derive(Debug, Clone)]
enum Target {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

/// An in-process server on a fresh store, shut down when dropped.
pub struct TestServer {
    channel: Channel,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
    // Holds the store, so it outlives every server on it; removed when the
    // last of them is dropped.
    store: Arc<TestStore>,
}

impl TestServer {
    /// A server on TCP with the default configuration.
    pub async fn start() -> TestServer {
        TestServer::launch(false, |_| {}).await
    }

    /// A server on TCP whose configuration (e.g. its limits) `configure` adjusts.
    pub async fn start_with(configure: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::launch(false, configure).await
    }

    /// A server on a given store whose configuration `configure` adjusts.
    pub async fn start_on(store: TestStore, configure: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::launch_in(Arc::new(store), false, configure).await
    }

    /// A server on a Unix socket with the default configuration.
    pub async fn start_on_unix_socket() -> TestServer {
        TestServer::launch(true, |_| {}).await
    }

    /// A second server on this server's store, as a second sidecar sharing
    /// it would run: its own connections, writer and sweeper, on TCP.
    pub async fn start_beside(&self) -> TestServer {
        TestServer::launch_in(self.store.clone(), false, |_| {}).await
    }

    async fn launch(unix: bool, configure: impl FnOnce(&mut Config)) -> TestServer {
        TestServer::launch_in(Arc::new(TestStore::new().await), unix, configure).await
    }

    async fn launch_in(store: Arc<TestStore>, unix: bool, configure: impl FnOnce(&mut Config)) -> TestServer {
        let mut config = Config::for_database(store.database());
        configure(&mut config);
        let (listener, target) = if unix {
            let path = store.dir().join("stepwell.sock");
            let listener = UnixListener::bind(&path).expect("bind a Unix socket");
            (Listener::Unix(listener, path.clone()), Target::Unix(path))
        } else {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a TCP port");
            let addr = listener.local_addr().expect("a bound address");
            (Listener::Tcp(listener), Target::Tcp(addr))
        };
        let (shutdown, signal) = oneshot::channel::<()>();
        // A dropped sender also shuts the server down, so a panicking test
        // does not leave it running.
        let task = tokio::spawn(stepwell::serve(listener, config, async move {
            let _ = signal.await;
        }));
        let channel = connect(&target).await;
        wait_for_serving(&channel).await;
        TestServer { channel, shutdown: Some(shutdown), task, store }
    }

    pub fn client(&self) -> Client {
        CheckpointServiceClient::new(self.channel.clone())
    }

    pub fn idempotency(&self) -> IdempotencyClient {
        IdempotencyServiceClient::new(self.channel.clone())
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// The store this server runs on.
    pub fn store(&self) -> &TestStore {
        &self.store
    }

    /// A read-only connection to the server's store, for tests that check
    /// what is physically stored rather than what the API shows.
    pub async fn inspect_store(&self) -> Inspector {
        self.store.inspect().await
    }

    /// Starts a graceful shutdown without waiting for it.
    pub fn begin_shutdown(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }

    /// Shuts down (if not begun already) and returns what `serve` returned.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        self.begin_shutdown();
        let task = &mut self.task;
        tokio::time::timeout(WAIT_LIMIT, task)
            .await
            .expect("serve returns after shutdown")
            .expect("the serve task does not panic")
    }
}

/// The real `stepwell` binary serving on a Unix socket in a directory the
/// test owns, so that a restart finds the same store. Killed when dropped.
pub struct ChildServer {
    process: Process,
    socket: PathBuf,
    channel: Channel,
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

impl ChildServer {
    /// Starts the binary on `store`, listening on `stepwell.sock` in the
    /// store's directory, and waits until it serves.
    pub async fn spawn(store: &TestStore) -> ChildServer {
        ChildServer::spawn_as(store, "stepwell").await
    }

    /// Like `spawn`, on the socket `NAME.sock`, so several sidecars can share a store.
    pub async fn spawn_as(store: &TestStore, name: &str) -> ChildServer {
        ChildServer::spawn_with(store, name, &[]).await
    }

    /// Like `spawn_as`, with extra flags for `stepwell serve`.
    pub async fn spawn_with(store: &TestStore, name: &str, flags: &[&str]) -> ChildServer {
        ChildServer::spawn_with_env(store, name, flags, &[]).await
    }

    /// Like `spawn_with`, with extra environment variables (e.g. LD_PRELOAD).
    pub async fn spawn_with_env(
        store: &TestStore,
        name: &str,
        flags: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> ChildServer {
        let socket = store.dir().join(format!("{name}.sock"));
        let child = serve_command(store, &socket)
            .args(flags)
            .envs(env.iter().copied())
            .env("STEPWELL_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the stepwell binary");
        let process = Process(Some(child));
        let channel = connect(&Target::Unix(socket.clone())).await;
        wait_for_serving(&channel).await;
        ChildServer { process, socket, channel }
    }

    pub fn client(&self) -> Client {
        CheckpointServiceClient::new(self.channel.clone())
    }

    pub fn idempotency(&self) -> IdempotencyClient {
        IdempotencyServiceClient::new(self.channel.clone())
    }

    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    pub fn socket_path(&self) -> &Path {
        &self.socket
    }

    /// Whether the process is still running: it has not exited by itself.
    #[allow(dead_code, reason = "used by the fault suite, which shares this harness")]
    pub fn is_running(&mut self) -> bool {
        self.process.0.as_mut().is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Sends SIGTERM, the graceful stop, without waiting.
    pub fn terminate(&self) {
        let child = self.process.0.as_ref().expect("the child is running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid fits pid_t");
        // SAFETY: kill(2) on a pid we spawned and have not reaped, so it
        // cannot name another process.
        let result = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(result, 0, "SIGTERM delivered");
    }

    /// Sends SIGKILL, the crash, and reaps the process.
    pub async fn kill(mut self) -> ExitStatus {
        let mut child = self.process.0.take().expect("the child is running");
        child.kill().expect("SIGKILL delivered");
        reap(child).await
    }

    /// Waits for the process to exit by itself.
    pub async fn wait(mut self) -> ExitStatus {
        reap(self.process.0.take().expect("the child is running")).await
    }
}

/// Waits for a child to exit off the async threads, which `wait` would block.
async fn reap(mut child: Child) -> ExitStatus {
    let waiting = tokio::task::spawn_blocking(move || child.wait().expect("wait for the child"));
    tokio::time::timeout(WAIT_LIMIT, waiting).await.expect("the child exits").expect("the wait task does not panic")
}

async fn try_connect(target: &Target) -> Result<Channel, tonic::transport::Error> {
    match target {
        Target::Tcp(addr) => Endpoint::from_shared(format!("http://{addr}"))?.connect().await,
        Target::Unix(path) => {
            let path = path.clone();
            Endpoint::from_static("http://localhost")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
                }))
                .await
        }
    }
}

/// A channel to the Unix socket at `path` that connects on first use and
/// again after every lost connection, as a long-lived client's does while
/// its sidecar restarts.
#[allow(dead_code, reason = "used by the fault suite, which shares this harness")]
pub fn lazy_unix_channel(path: &Path) -> Channel {
    let path = path.to_owned();
    Endpoint::from_static("http://localhost").connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
        let path = path.clone();
        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
    }))
}

/// Connects, retrying with a short backoff while the server is not yet
/// listening (a child process binds its socket a moment after it starts).
async fn connect(target: &Target) -> Channel {
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

/// Opens a health Watch on the overall server status ("").
/// `stepwell serve` on `store`, listening on `socket`.
fn serve_command(store: &TestStore, socket: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_stepwell"));
    command
        .arg("serve")
        .arg("--listen")
        .arg(format!("unix:{}", socket.display()))
        .arg("--database-url")
        .arg(store.url());
    command
}

/// Runs `stepwell serve` on `store` with extra flags for a process expected
/// to refuse to start; returns its exit status and what it wrote to stderr.
pub fn serve_until_exit(store: &TestStore, flags: &[&str]) -> (ExitStatus, String) {
    use std::io::Read;
    let mut child = serve_command(store, &store.dir().join("refused.sock"))
        .args(flags)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the stepwell binary");
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

pub async fn watch_health(channel: &Channel) -> Streaming<HealthCheckResponse> {
    HealthClient::new(channel.clone())
        .watch(HealthCheckRequest { service: String::new() })
        .await
        .expect("health Watch opens")
        .into_inner()
}

/// The next status a Watch reports, or `None` when the stream ends.
pub async fn next_status(watch: &mut Streaming<HealthCheckResponse>) -> Option<ServingStatus> {
    let message = tokio::time::timeout(WAIT_LIMIT, watch.message())
        .await
        .expect("the health Watch reports a status or ends")
        .expect("the health Watch does not fail");
    message.map(|m| ServingStatus::try_from(m.status).expect("a known ServingStatus"))
}

/// Waits until health reports SERVING: the store is open and migrated.
pub async fn wait_for_serving(channel: &Channel) {
    let mut watch = watch_health(channel).await;
    loop {
        match next_status(&mut watch).await {
            Some(ServingStatus::Serving) => return,
            Some(_) => continue,
            None => panic!("the health Watch ended before the server was SERVING"),
        }
    }
}
