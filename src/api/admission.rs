//! Admission control in front of each stepwell service: what a request meets
//! before its handler. Two limits answer RESOURCE_EXHAUSTED, through the one
//! status table, without touching the store:
//!
//! - load shedding: at most `--max-concurrent-requests` requests are in the
//!   handlers at once, across all connections (tower's global concurrency
//!   limit, shed rather than queued, so a caller over the limit hears at once
//!   and backs off instead of waiting behind it);
//! - message size: tonic refuses a request over `--message-bytes-max` from
//!   its length prefix, before reading the body, but reports OUT_OF_RANGE;
//!   the contract says RESOURCE_EXHAUSTED, so that answer is replaced here.
//!   No handler answers OUT_OF_RANGE, so the replacement cannot hide one.
//!
//! Health and reflection are not wrapped: probes keep answering under load.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use tokio::sync::Semaphore;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::limit::GlobalConcurrencyLimitLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

use crate::error::Error;

type Request = tonic::codegen::http::Request<Body>;
type Response = tonic::codegen::http::Response<Body>;

/// The admission limits every wrapped service shares.
#[derive(Debug, Clone)]
pub struct Admission {
    permits: Arc<Semaphore>,
    message_bytes_max: usize,
}

impl Admission {
    pub fn new(max_concurrent_requests: usize, message_bytes_max: usize) -> Admission {
        Admission { permits: Arc::new(Semaphore::new(max_concurrent_requests)), message_bytes_max }
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
        let shed = ServiceBuilder::new()
            .load_shed()
            .layer(GlobalConcurrencyLimitLayer::with_semaphore(self.admission.permits.clone()))
            .service(self.inner.clone());
        let message_bytes_max = self.admission.message_bytes_max;
        Box::pin(async move {
            match shed.oneshot(request).await {
                Ok(response) => Ok(refused_as_too_large(response, message_bytes_max)),
                // The inner service is infallible and the concurrency limit
                // only waits, so the one error is the shedder's `Overloaded`.
                Err(_) => {
                    Ok(Status::from(Error::Overloaded("too many requests in flight; retry with backoff")).into_http())
                }
            }
        })
    }
}

/// tonic's OUT_OF_RANGE for an oversized request, answered as the contract's
/// RESOURCE_EXHAUSTED; every other response passes unchanged.
fn refused_as_too_large(response: Response, limit: usize) -> Response {
    match response.extensions().get::<Status>() {
        Some(status) if status.code() == Code::OutOfRange => Status::from(Error::MessageTooLarge { limit }).into_http(),
        _ => response,
    }
}
