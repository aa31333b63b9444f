//! The floor baseline: a tonic server that answers stepwell's own services
//! (the same generated request and response types) with fixed OK answers
//! and no store, so a row shows what gRPC itself costs on this machine.
//! `Checkpoint` answers `inserted = true`, `Begin` answers ACQUIRED with a
//! lease token, `Complete` answers empty; everything else is UNIMPLEMENTED.
//!
//! It runs as a child process of the harness (`stepwell-bench floor-server
//! --listen ADDR`, the same binary), on a multi-threaded tokio runtime of
//! default size like the sidecar's, with `grpc.health` reporting SERVING, so
//! it is started, metered (CPU, context switches) and stopped exactly as a
//! sidecar is, and the load generator reaches it over the same TCP loopback.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use stepwell::api::pb::checkpoint_service_server::{CheckpointService, CheckpointServiceServer};
use stepwell::api::pb::idempotency_service_server::{IdempotencyService, IdempotencyServiceServer};
use stepwell::api::pb::{
    BeginOutcome, BeginRequest, BeginResponse, CheckpointRequest, CheckpointResponse, CompleteRequest,
    CompleteResponse, DeleteTurnRequest, DeleteTurnResponse, ExtendRequest, ExtendResponse, GetRequest, GetResponse,
    ListTurnsRequest, ListTurnsResponse, ReleaseRequest, ReleaseResponse, RestoreRequest, RestoreResponse,
};
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

/// The first argument that makes `stepwell-bench` serve the floor instead of benchmarking.
pub const SUBCOMMAND: &str = "floor-server";

/// Answers every call at once, storing nothing.
#[derive(Default)]
pub struct NoOp {
    tokens: AtomicU64,
}

fn unimplemented<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("the floor server answers only Checkpoint, Begin and Complete"))
}

#[tonic::async_trait]
impl CheckpointService for NoOp {
    async fn checkpoint(&self, _: Request<CheckpointRequest>) -> Result<Response<CheckpointResponse>, Status> {
        Ok(Response::new(CheckpointResponse { inserted: true, ..Default::default() }))
    }

    async fn restore(&self, _: Request<RestoreRequest>) -> Result<Response<RestoreResponse>, Status> {
        unimplemented()
    }

    async fn list_turns(&self, _: Request<ListTurnsRequest>) -> Result<Response<ListTurnsResponse>, Status> {
        unimplemented()
    }

    async fn delete_turn(&self, _: Request<DeleteTurnRequest>) -> Result<Response<DeleteTurnResponse>, Status> {
        unimplemented()
    }
}

#[tonic::async_trait]
impl IdempotencyService for NoOp {
    async fn begin(&self, _: Request<BeginRequest>) -> Result<Response<BeginResponse>, Status> {
        let lease_token = self.tokens.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(Response::new(BeginResponse {
            outcome: BeginOutcome::Acquired as i32,
            lease_token,
            attempt: 1,
            ..Default::default()
        }))
    }

    async fn complete(&self, _: Request<CompleteRequest>) -> Result<Response<CompleteResponse>, Status> {
        Ok(Response::new(CompleteResponse::default()))
    }

    async fn release(&self, _: Request<ReleaseRequest>) -> Result<Response<ReleaseResponse>, Status> {
        unimplemented()
    }

    async fn extend(&self, _: Request<ExtendRequest>) -> Result<Response<ExtendResponse>, Status> {
        unimplemented()
    }

    async fn get(&self, _: Request<GetRequest>) -> Result<Response<GetResponse>, Status> {
        unimplemented()
    }
}

/// Serves the floor on `listen` until SIGTERM or Ctrl-C.
pub async fn serve(listen: SocketAddr) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("bind {listen}: {e}"))?;
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_service_status("", tonic_health::ServingStatus::Serving).await;
    let stopped = async {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    };
    let no_op = std::sync::Arc::new(NoOp::default());
    Server::builder()
        .add_service(health)
        .add_service(CheckpointServiceServer::from_arc(no_op.clone()))
        .add_service(IdempotencyServiceServer::from_arc(no_op))
        .serve_with_incoming_shutdown(incoming, stopped)
        .await
        .map_err(|e| format!("serve: {e}"))
}

/// `floor-server --listen ADDR`: the arguments after the subcommand.
pub fn listen_address(args: &[String]) -> Result<SocketAddr, String> {
    match args {
        [flag, address] if flag == "--listen" => address.parse().map_err(|e| format!("--listen {address}: {e}")),
        _ => Err(format!("usage: stepwell-bench {SUBCOMMAND} --listen HOST:PORT")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_listen_address() {
        let args = ["--listen".to_string(), "127.0.0.1:5000".to_string()];
        assert_eq!(listen_address(&args).unwrap(), "127.0.0.1:5000".parse().unwrap());
        assert!(listen_address(&[]).is_err());
    }

    #[tokio::test]
    async fn answers_fixed_ok_responses() {
        let no_op = NoOp::default();
        let answer = no_op.checkpoint(Request::new(CheckpointRequest::default())).await.unwrap().into_inner();
        assert!(answer.inserted);
        let first = no_op.begin(Request::new(BeginRequest::default())).await.unwrap().into_inner();
        let second = no_op.begin(Request::new(BeginRequest::default())).await.unwrap().into_inner();
        assert_eq!(first.outcome, BeginOutcome::Acquired as i32);
        assert!(second.lease_token > first.lease_token);
        assert!(no_op.restore(Request::new(RestoreRequest::default())).await.is_err());
    }
}
