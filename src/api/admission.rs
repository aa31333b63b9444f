//! Admission control in front of each stepwell service: what a request meets
//! before its handler, in this order. Every refusal is answered through the
//! one status table, without touching the store.
//!
//! 1. The body is read whole first, bounded in bytes by `--message-bytes-max`
//!    (over it: RESOURCE_EXHAUSTED, MESSAGE_TOO_LARGE) and in time by
//!    `--body-read-timeout-ms` (past it: DEADLINE_EXCEEDED, BODY_READ_TIMEOUT).
//!    A caller that sends headers and stalls its body therefore holds no
//!    place in the handlers: only its own HTTP/2 stream and its connection's
//!    share (`--connection-requests-max`, taken by the server per
//!    connection, before this).
//! 2. Load shedding: at most `--max-concurrent-requests` requests are in the
//!    handlers at once, across all connections; one over the limit is shed
//!    at once (RESOURCE_EXHAUSTED, OVERLOADED) rather than queued, so its
//!    caller hears at once and backs off instead of waiting behind it.
//! 3. The whole of it, body and handler, runs under `--request-timeout-ms`
//!    (past it: DEADLINE_EXCEEDED, REQUEST_TIMEOUT), so no request is left
//!    hanging whatever its caller's deadline.
//!
//! tonic itself still refuses a message over the limit from its length
//! prefix, but reports OUT_OF_RANGE; the contract says RESOURCE_EXHAUSTED,
//! so that answer is replaced here. No handler answers OUT_OF_RANGE, so the
//! replacement cannot hide one.
//!
//! Health and reflection are not wrapped: probes keep answering under load.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::{Service, ServiceExt};

use crate::error::Error;

type Request = tonic::codegen::http::Request<Body>;
type Response = tonic::codegen::http::Response<Body>;

/// The bytes a gRPC message's length prefix adds to it on the wire.
const GRPC_PREFIX_BYTES: usize = 5;

/// The admission limits every wrapped service shares.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    message_bytes_max: usize,
    body_read_timeout: Duration,
    request_timeout: Duration,
}

impl Admission {
    pub fn new(
        max_concurrent_requests: usize,
        message_bytes_max: usize,
        body_read_timeout: Duration,
        request_timeout: Duration,
    ) -> Admission {
        let permits = Arc::new(Semaphore::new(max_concurrent_requests));
        Admission { permits, message_bytes_max, body_read_timeout, request_timeout }
    }

    /// `service` behind these limits.
    pub fn wrap<S>(&self, service: S) -> Admitted<S> {
        Admitted { inner: service, admission: self.clone() }
    }
}

/// A service behind the admission limits.
#[derive(Debug, Clone)]
pub struct Admitted<S> {
    inner: S,
    admission: Admission,
}

impl<S: NamedService> NamedService for Admitted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<Request> for Admitted<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Readiness is decided per request below, where shedding answers it.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let (inner, admission) = (self.inner.clone(), self.admission.clone());
        Box::pin(async move {
            let after = admission.request_timeout;
            let answer = tokio::time::timeout(after, admission.admit(request, inner)).await;
            Ok(answer.unwrap_or_else(|_| refusal(Error::RequestTimeout { after })))
        })
    }
}

impl Admission {
    /// Reads the body, takes a place, and runs `inner` in it.
    async fn admit<S>(self, request: Request, inner: S) -> Response
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        let (parts, body) = request.into_parts();
        let limited = Limited::new(body, self.message_bytes_max + GRPC_PREFIX_BYTES);
        let body = match tokio::time::timeout(self.body_read_timeout, limited.collect()).await {
            Ok(Ok(collected)) => collected.to_bytes(),
            Ok(Err(error)) if error.is::<LengthLimitError>() => {
                return refusal(Error::MessageTooLarge { limit: self.message_bytes_max });
            }
            Ok(Err(_)) => return refusal(Error::BodyBrokenOff),
            Err(_) => return refusal(Error::BodyReadTimeout { after: self.body_read_timeout }),
        };
        let Ok(_permit) = self.permits.clone().try_acquire_owned() else {
            return refusal(Error::Overloaded("too many requests in flight; retry with backoff"));
        };
        let request = Request::from_parts(parts, Body::new(Full::new(body)));
        // The inner service is infallible.
        let Ok(response) = inner.oneshot(request).await;
        refused_as_too_large(response, self.message_bytes_max)
    }
}

fn refusal(error: Error) -> Response {
    Status::from(error).into_http()
}

/// tonic's OUT_OF_RANGE for an oversized request, answered as the contract's
/// RESOURCE_EXHAUSTED; every other response passes unchanged.
fn refused_as_too_large(response: Response, limit: usize) -> Response {
    match response.extensions().get::<Status>() {
        Some(status) if status.code() == Code::OutOfRange => Status::from(Error::MessageTooLarge { limit }).into_http(),
        _ => response,
    }
}
