//! The load the memory benchmark holds on a sidecar: many HTTP/2
//! connections that each made one Health check and then idle, and many
//! Awaits pending on waits nobody signals. Also the one metric it reads,
//! `stepwell_awaits_pending`, from the sidecar's admin listener over plain
//! HTTP/1.0, so the harness needs no HTTP client of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use stepwell::api::pb::wait_service_client::WaitServiceClient;
use stepwell::api::pb::{AwaitRequest, CreateWaitRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinSet;
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// Connections opened (or waits created) at once: enough to go quickly,
/// few enough that the sidecar's accept backlog never overflows.
const AT_ONCE: usize = 64;
/// The longest one connection, Health check or CreateWait may take: far
/// beyond what any takes on a busy machine, so that only a sidecar that
/// does not answer (say, one out of file descriptors) reaches it.
const STEP_LIMIT: Duration = Duration::from_secs(60);
/// The namespace the benchmark's waits live in.
pub const NAMESPACE: &str = "memory-bench";

/// One new HTTP/2 connection to `addr` that has answered a Health check SERVING.
async fn healthy_connection(addr: SocketAddr) -> Result<Channel, String> {
    let work = async {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| e.to_string())?
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let answer = HealthClient::new(channel.clone()).check(HealthCheckRequest { service: String::new() }).await;
        match answer.map(|r| r.into_inner().status) {
            Ok(status) if status == ServingStatus::Serving as i32 => Ok(channel),
            Ok(status) => Err(format!("health status {status}")),
            Err(status) => Err(format!("health check: {}", status.message())),
        }
    };
    tokio::time::timeout(STEP_LIMIT, work).await.map_err(|_| format!("no answer within {STEP_LIMIT:?}"))?
}

/// `n` separate connections to `addr`, each with its Health check answered.
pub async fn connections(addr: SocketAddr, n: usize) -> Result<Vec<Channel>, String> {
    futures::stream::iter((0..n).map(|_| healthy_connection(addr)))
        .buffer_unordered(AT_ONCE)
        .try_collect()
        .await
        .map_err(|e| format!("opening {n} connections to {addr}: {e}"))
}

/// The turn of the `i`th wait: one wait a turn, so no turn reaches `--waits-per-turn-max`.
fn turn(i: usize) -> String {
    format!("t{i}")
}

/// Creates waits 0..n, spread over `channels`; none has a timer or an expiry.
pub async fn create_waits(channels: &[Channel], n: usize) -> Result<(), String> {
    futures::stream::iter((0..n).map(|i| {
        let mut client = WaitServiceClient::new(channels[i % channels.len()].clone());
        async move {
            let request = CreateWaitRequest {
                namespace: NAMESPACE.into(),
                turn_id: turn(i),
                name: "w".into(),
                ..Default::default()
            };
            match tokio::time::timeout(STEP_LIMIT, client.create_wait(request)).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(status)) => Err(format!("CreateWait {i}: {:?} {}", status.code(), status.message())),
                Err(_) => Err(format!("CreateWait {i}: no answer within {STEP_LIMIT:?}")),
            }
        }
    }))
    .buffer_unordered(AT_ONCE)
    .try_collect::<Vec<()>>()
    .await
    .map(drop)
}

/// Awaits on waits 0..n, `per_connection` of them on each of `channels`,
/// each asking to wait `timeout`; they stay pending until the set is
/// dropped. The counter rises as any of them answers, which none should
/// while the benchmark measures; the first answer's text is kept.
pub struct Awaits {
    pub tasks: JoinSet<()>,
    pub answered: Arc<AtomicU64>,
    pub first_answer: Arc<std::sync::Mutex<Option<String>>>,
}

pub fn start_awaits(channels: &[Channel], per_connection: usize, n: usize, timeout: Duration) -> Awaits {
    let answered = Arc::new(AtomicU64::new(0));
    let first_answer = Arc::new(std::sync::Mutex::new(None));
    let mut tasks = JoinSet::new();
    for i in 0..n {
        let mut client = WaitServiceClient::new(channels[i / per_connection].clone());
        let (answered, first_answer) = (answered.clone(), first_answer.clone());
        let request = AwaitRequest {
            namespace: NAMESPACE.into(),
            turn_id: turn(i),
            name: "w".into(),
            timeout: Some(prost_types::Duration { seconds: timeout.as_secs() as i64, nanos: 0 }),
            ..Default::default()
        };
        tasks.spawn(async move {
            let answer = match client.r#await(request).await {
                Ok(r) => format!("Await {i} answered: {:?}", r.into_inner().wait.map(|w| w.status)),
                Err(status) => format!("Await {i} failed: {:?} {}", status.code(), status.message()),
            };
            answered.fetch_add(1, Ordering::SeqCst);
            first_answer.lock().expect("not poisoned").get_or_insert(answer);
        });
    }
    Awaits { tasks, answered, first_answer }
}

/// `stepwell_awaits_pending` as the sidecar's admin listener at `admin` reports it now.
pub async fn awaits_pending(admin: &str) -> Result<u64, String> {
    let work = async {
        let mut stream = tokio::net::TcpStream::connect(admin).await.map_err(|e| e.to_string())?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n").await.map_err(|e| e.to_string())?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await.map_err(|e| e.to_string())?;
        body.lines()
            .find_map(|l| l.strip_prefix("stepwell_awaits_pending "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .map(|v| v as u64)
            .ok_or_else(|| "no stepwell_awaits_pending in /metrics".to_owned())
    };
    tokio::time::timeout(STEP_LIMIT, work)
        .await
        .map_err(|_| format!("/metrics: no answer within {STEP_LIMIT:?}"))?
        .map_err(|e| format!("/metrics at {admin}: {e}"))
}
