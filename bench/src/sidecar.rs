//! One stepwell sidecar process under test: started from the built binary on
//! a free loopback port and a given store, ready once `grpc.health` says
//! SERVING, and stopped with SIGTERM (or killed, if the harness is dropped
//! mid-run). Its log goes to a file, shown when it fails to start.
//!
//! The same handling serves the floor baseline: the harness's own binary
//! run as `stepwell-bench floor-server` (see `floor`). A sidecar may also
//! listen on a Unix socket (`--listen unix:PATH`), reached through a
//! connector that dials the path.
//!
//! `STEPWELL_*` variables in the harness's environment reach the sidecar, so
//! a flag can be tried without editing the harness (e.g.
//! `STEPWELL_WRITE_BATCH_MAX=512 bench/run --quick`); the report records them.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use tokio::net::UnixStream;
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint, Uri};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::shape;

/// How long a sidecar may take to open and migrate its store.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// How long a stopping sidecar may drain before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(15);

/// Where a server under test listens.
#[derive(Debug, Clone)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

pub struct Sidecar {
    child: Child,
    addr: Address,
    log: PathBuf,
    /// The admin listener's address (metrics), when the harness chose it.
    admin: Option<String>,
}

impl Sidecar {
    /// Starts `binary` serving `database_url` on a free loopback port,
    /// logging to `log`, and waits until it is SERVING.
    pub async fn start(binary: &Path, database_url: &str, log: &Path) -> Result<Sidecar, String> {
        let addr = Address::Tcp(free_port().map_err(|e| format!("no free port: {e}"))?);
        Sidecar::start_on(binary, database_url, log, addr).await
    }

    /// Starts `binary` serving `database_url` on `addr` (a TCP address or a
    /// Unix socket path), logging to `log`, and waits until it is SERVING.
    pub async fn start_on(binary: &Path, database_url: &str, log: &Path, addr: Address) -> Result<Sidecar, String> {
        let mut command = Command::new(binary);
        command.arg("serve");
        Sidecar::start_with(binary, database_url, log, addr, command).await
    }

    /// Starts `command` (the sidecar `binary` and `serve`, with whatever
    /// flags and process settings the caller added) serving
    /// `database_url` on `addr`, logging to `log`, and waits until it is SERVING.
    pub async fn start_with(
        binary: &Path,
        database_url: &str,
        log: &Path,
        addr: Address,
        mut command: Command,
    ) -> Result<Sidecar, String> {
        let admin = admin_listen()?;
        command
            .args(["--listen", &addr.to_string(), "--database-url", database_url])
            .env("STEPWELL_LOG", std::env::var("STEPWELL_LOG").unwrap_or_else(|_| "warn".into()))
            // Metrics on, as a user gets them, on a port of its own; the
            // caller's STEPWELL_ADMIN_LISTEN (off, say) goes first.
            .env("STEPWELL_ADMIN_LISTEN", &admin);
        let mut sidecar = Sidecar::spawn(command, binary, log, addr).await?;
        sidecar.admin = Some(admin).filter(|a| a != "off");
        Ok(sidecar)
    }

    /// Starts the floor baseline (this binary's `floor-server`) on a free
    /// loopback port, logging to `log`, and waits until it is SERVING.
    pub async fn start_floor(log: &Path) -> Result<Sidecar, String> {
        let binary = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let addr = free_port().map_err(|e| format!("no free port: {e}"))?;
        let mut command = Command::new(&binary);
        command.args([crate::floor::SUBCOMMAND, "--listen", &addr.to_string()]);
        Sidecar::spawn(command, &binary, log, Address::Tcp(addr)).await
    }

    async fn spawn(mut command: Command, binary: &Path, log: &Path, addr: Address) -> Result<Sidecar, String> {
        let log_file = std::fs::File::create(log).map_err(|e| format!("create {}: {e}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().map_err(|e| e.to_string())?)
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        let mut sidecar = Sidecar { child, addr, log: log.to_owned(), admin: None };
        match sidecar.wait_until_serving().await {
            Ok(()) => Ok(sidecar),
            Err(why) => Err(format!("the sidecar did not become ready: {why}\n{}", sidecar.log_tail())),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The address the sidecar serves gRPC on.
    pub fn address(&self) -> &Address {
        &self.addr
    }

    /// The admin listener's address (metrics), unless it is off.
    pub fn admin(&self) -> Option<&str> {
        self.admin.as_deref()
    }

    /// `n` separate HTTP/2 connections to the sidecar.
    pub async fn connect(&self, n: usize) -> Result<Vec<Channel>, String> {
        let mut channels = Vec::with_capacity(n);
        for _ in 0..n.max(1) {
            channels.push(self.connect_one().await.map_err(|e| format!("connect to {}: {e}", self.addr))?);
        }
        Ok(channels)
    }

    async fn connect_one(&self) -> Result<Channel, tonic::transport::Error> {
        match &self.addr {
            Address::Tcp(addr) => {
                shape::get().endpoint(Endpoint::from_shared(format!("http://{addr}"))?).connect().await
            }
            Address::Unix(path) => {
                let path = path.clone();
                // A Unix-socket channel has no authority of its own; tonic wants one.
                shape::get()
                    .endpoint(Endpoint::from_static("http://localhost"))
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
                    }))
                    .await
            }
        }
    }

    async fn wait_until_serving(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_LIMIT;
        let mut last = String::from("no answer yet");
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
                return Err(format!("it exited with {status}"));
            }
            match self.connect_one().await {
                Ok(channel) => {
                    let answer = HealthClient::new(channel).check(HealthCheckRequest { service: String::new() }).await;
                    match answer.map(|r| r.into_inner().status) {
                        Ok(status) if status == ServingStatus::Serving as i32 => return Ok(()),
                        Ok(status) => last = format!("health status {status}"),
                        Err(status) => last = format!("health check failed: {}", status.message()),
                    }
                }
                Err(error) => last = format!("connect: {error}"),
            }
            // Polling for readiness: the process gives no other signal.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(format!("not SERVING within {READY_LIMIT:?} ({last})"))
    }

    /// SIGTERM, then waits for the drain; kills it if it takes too long.
    /// Fails if the sidecar had already died.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(status) = self.child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("the sidecar died during the run ({status})\n{}", self.log_tail()));
        }
        if let Some(pid) = self.child.id() {
            // SAFETY: signalling a child we spawned and have not reaped.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        }
        match tokio::time::timeout(STOP_LIMIT, self.child.wait()).await {
            Ok(_) => Ok(()),
            Err(_) => {
                let _ = self.child.kill().await;
                Err(format!("the sidecar did not stop within {STOP_LIMIT:?} of SIGTERM"))
            }
        }
    }

    /// The end of the sidecar's log, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("--- last lines of {} ---\n{}", self.log.display(), lines[lines.len().saturating_sub(20)..].join("\n"))
    }
}

/// A loopback port nothing listens on right now.
fn free_port() -> std::io::Result<SocketAddr> {
    TcpListener::bind("127.0.0.1:0")?.local_addr()
}

/// Where the sidecar serves its metrics: the caller's `STEPWELL_ADMIN_LISTEN`
/// if set, or a free loopback port.
fn admin_listen() -> Result<String, String> {
    match std::env::var("STEPWELL_ADMIN_LISTEN") {
        Ok(address) => Ok(address),
        Err(_) => free_port().map(|a| a.to_string()).map_err(|e| format!("no free port for the admin listener: {e}")),
    }
}
