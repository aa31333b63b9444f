//! Admission control in front of each stepwell service: what a request meets
//! before its handler, in this order. Every refusal is answered through the
//! one status table, without touching the store.
//!
//! 0. With `--auth-file`, the caller is authenticated from the request's
//!    headers and connection (`Shared::authenticate`) before a byte of its
//!    body is read: an unknown caller hears UNAUTHENTICATED at once and its
//!    body is never buffered, so it holds none of `--body-buffer-bytes-max`.
//!    A path that names no method of the services is answered UNIMPLEMENTED
//!    without its body too. Whether a known caller may act in the namespace
//!    its message names is decided after the body, in `Shared::answer`.
//! 1. The body is read whole first, bounded in bytes by `--message-bytes-max`
//!    (over it: RESOURCE_EXHAUSTED, MESSAGE_TOO_LARGE), across all requests
//!    by `--body-buffer-bytes-max` (over it: RESOURCE_EXHAUSTED, OVERLOADED),
//!    and in time by `--body-read-timeout-ms` (past it: DEADLINE_EXCEEDED,
//!    BODY_READ_TIMEOUT).
//!    A caller that sends headers and stalls its body therefore holds no
//!    place in the handlers: only its own HTTP/2 stream and its connection's
//!    share (`--connection-requests-max`, taken by the server per
//!    connection, before this).
//! 2. Load shedding: at most `--max-concurrent-requests` requests are in the
//!    handlers at once, across all connections; one over the limit is shed
//!    at once (RESOURCE_EXHAUSTED, OVERLOADED) rather than queued, so its
//!    caller hears at once and backs off instead of waiting behind it.
//!    An Await instead takes one of `--awaits-max` places (over it:
//!    RESOURCE_EXHAUSTED, AWAITS): it spends its life waiting, and must not
//!    starve the requests that do work.
//! 3. The whole of it, body and handler, runs under `--request-timeout-ms`
//!    (an Await, under that plus `--await-timeout-max-ms`)
//!    (past it: DEADLINE_EXCEEDED, REQUEST_TIMEOUT), so no request is left
//!    hanging whatever its caller's deadline.
//!
//! tonic itself still refuses a message over the limit from its length
//! prefix, but reports OUT_OF_RANGE; the contract says RESOURCE_EXHAUSTED,
//! so that answer is replaced here. No handler answers OUT_OF_RANGE, so the
//! replacement cannot hide one.
//!
//! Health and reflection are not wrapped: probes keep answering under load.
//!
//! Admission also observes every request it wraps, from its first byte to
//! its answer: the duration histogram by method and status code (and, for
//! a refusal, its reason), and, when tracing is on, the server span the
//! request runs in (`traces::in_request`).

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::{Code, Status};
use tower::{Service, ServiceExt};

use crate::api::{Authenticated, Shared, status};
use crate::config::sections::Connections;
use crate::domain::clock;
use crate::domain::error::Error;
use crate::domain::rpc::{Role, Rpc};
use crate::observe::activity;
use crate::observe::metrics::Metrics;
use crate::observe::traces::{self, RequestScope, Traces};

type Request = tonic::codegen::http::Request<Body>;
type Response = tonic::codegen::http::Response<Body>;

/// The bytes a gRPC message's length prefix adds to it on the wire.
const GRPC_PREFIX_BYTES: usize = 5;

/// The admission limits every wrapped service shares.
#[derive(Clone)]
pub struct Admission {
    /// Who authenticates callers, and audits those refused.
    shared: Arc<Shared>,
    permits: Arc<Semaphore>,
    /// Places of Awaits (`--awaits-max`), which hold none of `permits`.
    awaits: Arc<Semaphore>,
    awaits_max: usize,
    /// How much longer than `request_timeout` an Await may run: the longest it may wait.
    await_timeout_max: Duration,
    /// Bytes of request bodies read and not yet answered (`--body-buffer-bytes-max`).
    body_bytes: Arc<Semaphore>,
    message_bytes_max: usize,
    body_read_timeout: Duration,
    request_timeout: Duration,
    metrics: Arc<Metrics>,
    traces: Option<Arc<Traces>>,
}

impl Admission {
    pub fn new(
        shared: Arc<Shared>,
        max_concurrent_requests: usize,
        connections: &Connections,
        metrics: Arc<Metrics>,
        traces: Option<Arc<Traces>>,
    ) -> Admission {
        let message_bytes_max = shared.limits().message_bytes_max;
        let (awaits_max, await_timeout_max) = (shared.limits().awaits_max, shared.limits().await_timeout_max);
        Admission {
            awaits: Arc::new(Semaphore::new(awaits_max.min(Semaphore::MAX_PERMITS))),
            awaits_max,
            await_timeout_max,
            shared,
            metrics,
            traces,
            permits: Arc::new(Semaphore::new(max_concurrent_requests)),
            body_bytes: Arc::new(Semaphore::new(connections.body_buffer_bytes_max.min(Semaphore::MAX_PERMITS))),
            message_bytes_max,
            body_read_timeout: connections.body_read_timeout,
            request_timeout: connections.request_timeout,
        }
    }

    /// `service` behind these limits.
    pub fn wrap<S>(&self, service: S) -> Admitted<S> {
        Admitted { inner: service, admission: self.clone() }
    }
}

impl std::fmt::Debug for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admission").field("message_bytes_max", &self.message_bytes_max).finish_non_exhaustive()
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
            let started = admission.metrics.enabled().then(Instant::now);
            let rpc = Rpc::from_path(request.uri().path());
            let context = match (&admission.traces, rpc) {
                (Some(traces), Some(rpc)) => Some(traces.server_span(rpc, request.headers())),
                _ => None,
            };
            let keep_namespace = admission.metrics.namespace_labels();
            let scoped = context.is_some() || keep_namespace;
            // An Await may wait up to its timeout, beyond the time its reads take.
            let after = match rpc {
                Some(Rpc::Await) => admission.request_timeout + admission.await_timeout_max,
                _ => admission.request_timeout,
            };
            let admit = tokio::time::timeout(after, admission.clone().admit(request, rpc, inner));
            let (answer, scope) = if scoped {
                let scope = RequestScope { context, namespace: Default::default(), keep_namespace };
                traces::in_request(scope, admit).await
            } else {
                (admit.await, None)
            };
            let (response, refused) = answer.unwrap_or_else(|_| refusal(Error::RequestTimeout { after }));
            let code = response.extensions().get::<Status>().map_or(Code::Ok, Status::code);
            if let Some(rpc) = rpc {
                let minute = clock::system_now().div_euclid(NANOS_PER_MINUTE);
                admission.metrics.activity.record(minute, rpc.role() != Role::Read, activity::is_failure(code));
                let namespace = scope.as_ref().and_then(|scope| scope.namespace.borrow_mut().take());
                if let Some(started) = started {
                    let histogram = admission.metrics.rpc_duration(rpc, code, refused, namespace.as_deref());
                    histogram.record(started.elapsed().as_secs_f64());
                }
                if let Some(context) = scope.and_then(|scope| scope.context) {
                    Traces::end_server_span(&context, code, refused);
                }
            }
            Ok(response)
        })
    }
}

/// A minute in nanoseconds: the activity chart's resolution.
const NANOS_PER_MINUTE: i64 = 60_000_000_000;

/// An answer, and why admission refused the request if it did.
type Answer = (Response, Option<&'static str>);

impl Admission {
    /// Authenticates the caller, reads the body, takes a place, and runs
    /// `inner` in it.
    async fn admit<S>(self, request: Request, rpc: Option<Rpc>, inner: S) -> Answer
    where
        S: Service<Request, Response = Response, Error = Infallible>,
    {
        let Some(rpc) = rpc else {
            // No such method: the service answers UNIMPLEMENTED without reading the body.
            let Ok(response) = inner.oneshot(request).await;
            return (response, None);
        };
        let (mut parts, body) = request.into_parts();
        match self.shared.authenticate(rpc, &parts.headers, &parts.extensions) {
            Ok(Some(principal)) => {
                parts.extensions.insert(Authenticated(principal));
            }
            Ok(None) => {}
            // The body is dropped unread: whatever more of it comes is discarded, never buffered.
            Err(error) => return refusal(error),
        }
        let read = tokio::time::timeout(self.body_read_timeout, self.read(body)).await;
        let (body, _bytes) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(error)) => return refusal(error),
            Err(_) => return refusal(Error::BodyReadTimeout { after: self.body_read_timeout }),
        };
        // An Await spends its life waiting, so it holds a place of its own
        // kind: thousands of pending Awaits never shed the other requests.
        let (places, refused) = match rpc {
            Rpc::Await => (&self.awaits, Error::AwaitsFull { max: self.awaits_max }),
            _ => (&self.permits, Error::Overloaded("too many requests in flight; retry with backoff")),
        };
        let Ok(_permit) = places.clone().try_acquire_owned() else { return refusal(refused) };
        let request = Request::from_parts(parts, body);
        // The inner service is infallible.
        let Ok(response) = inner.oneshot(request).await;
        refused_as_too_large(response, self.message_bytes_max)
    }

    /// The whole body, and its share of `--body-buffer-bytes-max`, held
    /// until the request is answered. A body over the message limit, or one
    /// whose bytes do not fit the budget, is refused as soon as it is known.
    /// The frames read are handed on as they came, not copied into one buffer.
    async fn read(&self, mut body: Body) -> Result<(Body, Option<OwnedSemaphorePermit>), Error> {
        let limit = self.message_bytes_max + GRPC_PREFIX_BYTES;
        let (mut frames, mut length) = (Vec::with_capacity(1), 0);
        let mut held: Option<OwnedSemaphorePermit> = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|_| Error::BodyBrokenOff)?;
            let Some(data) = frame.data_ref() else { continue };
            length += data.len();
            if length > limit {
                return Err(Error::MessageTooLarge { limit: self.message_bytes_max });
            }
            let more = u32::try_from(data.len())
                .ok()
                .and_then(|bytes| self.body_bytes.clone().try_acquire_many_owned(bytes).ok())
                .ok_or(Error::Overloaded("too many request bytes are being read; retry with backoff"))?;
            match &mut held {
                Some(held) => held.merge(more),
                None => held = Some(more),
            }
            frames.push(frame);
        }
        let replay = StreamBody::new(futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>)));
        Ok((Body::new(replay), held))
    }
}

fn refusal(error: Error) -> Answer {
    let reason = status::reason_of(&error);
    (Status::from(error).into_http(), Some(reason))
}

/// tonic's OUT_OF_RANGE for an oversized request, answered as the contract's
/// RESOURCE_EXHAUSTED; every other response passes unchanged.
fn refused_as_too_large(response: Response, limit: usize) -> Answer {
    match response.extensions().get::<Status>() {
        Some(status) if status.code() == Code::OutOfRange => refusal(Error::MessageTooLarge { limit }),
        _ => (response, None),
    }
}
