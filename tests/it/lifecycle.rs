//! The server around the API: health turns SERVING once the store is open
//! and NOT_SERVING when shutdown begins (in-process, and for the binary on
//! SIGTERM, which then exits 0), reflection lists the services for clients
//! without proto files, and a Unix-socket listener serves like TCP.

use std::collections::BTreeSet;

use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::health::{next_status, watch_health};
use stepwell_test_support::requests::{T0, assert_inserted, checkpoint, restore, restore_all};
use stepwell_test_support::sidecar::{Sidecar, SidecarProcess};

use crate::STEPWELL;

const CHECKPOINT_SERVICE: &str = "stepwell.v1.CheckpointService";
const IDEMPOTENCY_SERVICE: &str = "stepwell.v1.IdempotencyService";

#[tokio::test]
async fn health_is_serving_once_started() {
    let server = Sidecar::builder().start().await;
    let mut health = HealthClient::new(server.channel());

    for service in ["", CHECKPOINT_SERVICE, IDEMPOTENCY_SERVICE] {
        let request = HealthCheckRequest { service: service.into() };
        let status = health.check(request).await.expect("health Check succeeds").into_inner().status;
        assert_eq!(ServingStatus::try_from(status), Ok(ServingStatus::Serving), "{service:?}");
    }
    let mut watch = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::Serving));
}

/// Asserts that an open Watch, having seen SERVING, sees NOT_SERVING and
/// then ends, as shutdown clears the statuses.
async fn assert_watch_sees_shutdown(watch: &mut tonic::Streaming<tonic_health::pb::HealthCheckResponse>) {
    assert_eq!(next_status(watch).await, Some(ServingStatus::NotServing));
    assert_eq!(next_status(watch).await, None, "the Watch ends so that it does not hold the drain open");
}

#[tokio::test]
async fn in_process_shutdown_turns_health_not_serving_and_returns() {
    let mut server = Sidecar::builder().start().await;
    let mut watch = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::Serving));

    server.begin_shutdown();

    assert_watch_sees_shutdown(&mut watch).await;
    server.stop().await.expect("serve returns Ok after a graceful shutdown");
}

#[tokio::test]
async fn sigterm_turns_health_not_serving_and_exits_zero() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let mut client = server.client();
    assert_inserted(&mut client, checkpoint("turn-1", "started", T0, "{}")).await;
    let mut watch = watch_health(&server.channel()).await;
    assert_eq!(next_status(&mut watch).await, Some(ServingStatus::Serving));

    server.terminate();

    assert_watch_sees_shutdown(&mut watch).await;
    let socket = server.socket_path().to_owned();
    let status = server.wait().await;
    assert_eq!(status.code(), Some(0), "a graceful stop exits 0: {status:?}");
    assert!(!socket.exists(), "the Unix socket file is removed at shutdown");
}

/// Runs `stepwell healthcheck` against `target`; answers its exit code and stderr.
fn healthcheck(target: &str) -> (Option<i32>, String) {
    let output = std::process::Command::new(STEPWELL)
        .args(["healthcheck", "--target", target, "--timeout-ms", "5000"])
        .output()
        .expect("run stepwell healthcheck");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn the_healthcheck_subcommand_exits_zero_only_while_serving() {
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).spawn().await;
    let target = format!("unix:{}", server.socket_path().display());
    let (code, stderr) = healthcheck(&target);
    assert_eq!(code, Some(0), "SERVING: {stderr}");

    server.kill().await;
    let (code, stderr) = healthcheck(&target);
    assert_eq!(code, Some(1), "nothing serves any more");
    assert!(stderr.contains("could not connect"), "it says why: {stderr}");
    assert_eq!(healthcheck("not an address").0, Some(64), "a bad target is a usage error");
}

/// The services a reflection version lists, by the generated client of
/// that version (the two versions have identical shapes but distinct types).
macro_rules! reflected_services {
    ($version:ident, $channel:expr) => {{
        use tonic_reflection::pb::$version::ServerReflectionRequest;
        use tonic_reflection::pb::$version::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::$version::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::$version::server_reflection_response::MessageResponse;

        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut responses = ServerReflectionClient::new($channel)
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .expect("reflection answers")
            .into_inner();
        let response = responses.message().await.expect("reflection succeeds").expect("one response");
        match response.message_response {
            Some(MessageResponse::ListServicesResponse(list)) => {
                list.service.into_iter().map(|s| s.name).collect::<BTreeSet<String>>()
            }
            other => panic!("not a service list: {other:?}"),
        }
    }};
}

fn assert_lists_the_api(version: &str, services: &BTreeSet<String>) {
    for expected in [CHECKPOINT_SERVICE, IDEMPOTENCY_SERVICE, "grpc.health.v1.Health"] {
        assert!(services.contains(expected), "{version} lists {expected}: {services:?}");
    }
}

#[tokio::test]
async fn reflection_lists_the_services_in_both_versions() {
    let server = Sidecar::builder().start().await;
    let channel: Channel = server.channel();

    assert_lists_the_api("v1", &reflected_services!(v1, channel.clone()));
    assert_lists_the_api("v1alpha", &reflected_services!(v1alpha, channel));
}

#[tokio::test]
async fn a_unix_socket_listener_serves_the_api() {
    let server = Sidecar::builder().unix_socket().start().await;
    let mut client = server.client();

    let stored = assert_inserted(&mut client, checkpoint("turn-1", "started", T0, r#"{"over":"uds"}"#)).await;

    assert_eq!(restore_all(&mut client, restore("turn-1")).await, [stored]);
}

/// `--worker-threads` sets how many threads serve requests, as the
/// "serving" event reports them; 0 is refused before anything starts.
#[tokio::test]
async fn worker_threads_sets_the_serving_threads_and_zero_is_refused() {
    let store = TestStore::new().await;
    let (status, stderr) = SidecarProcess::builder(STEPWELL, &store).flags(&["--worker-threads", "0"]).run_until_exit();
    assert_eq!(status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("--worker-threads"), "{stderr}");
    for threads in ["1", "3"] {
        let log = store.dir().join(format!("workers-{threads}.log"));
        let server = SidecarProcess::builder(STEPWELL, &store)
            .flags(&["--worker-threads", threads, "--log-format", "json", "--log", "info"])
            .stderr_to(&log)
            .spawn()
            .await;
        let serving = logged_line(&log, "\"serving\"").await;
        assert!(serving.contains(&format!("\"workers\":{threads}")), "{serving}");
        server.kill().await;
    }
}

/// The first line of the log at `path` that holds `text`, polled for until
/// it is written (the sidecar answers health before it logs "serving").
async fn logged_line(path: &std::path::Path, text: &str) -> String {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let log = std::fs::read_to_string(path).unwrap_or_default();
        if let Some(line) = log.lines().find(|line| line.contains(text)) {
            return line.to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "no {text} in the log within 60 s:\n{log}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await; // polling the log, bounded above
    }
}
