//! Traces: OpenTelemetry spans exported over OTLP/gRPC, off unless an
//! endpoint is configured (`OTEL_EXPORTER_OTLP_ENDPOINT`; the SDK reads the
//! other standard `OTEL_*` variables itself: service name, sampler, batch
//! delay, headers).
//!
//! Admission opens a server span for each request, as a child of the
//! caller's span when the request carries a W3C `traceparent`, and runs the
//! request inside a task-local scope holding it (`in_request`), so the
//! handler can name its namespace and outcome (`annotate`) and the writer
//! can learn which span a write belongs to (`current`) without any of them
//! passing it along. The writer records, after its batch, two children of
//! each write's span (`stepwell.queue_wait`, `stepwell.commit`, both with
//! the batch's id and size) and one `stepwell.batch` span linked to every
//! request span it committed. Those spans are built after the fact, from
//! the instants the writer measured anyway, so tracing adds no clock reads
//! or allocations to a request it does not sample.
//!
//! Spans carry the RPC semantic conventions' attributes and stepwell's
//! namespace and outcome; never a state, result, turn or key.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Link, Span, SpanContext, SpanId, SpanKind, Status as SpanStatus, TraceContextExt, TraceFlags, TraceId, TraceState,
    Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tonic::Code;
use tonic::codegen::http::{HeaderMap, HeaderName};

use crate::domain::clock;
use crate::domain::rpc::Rpc;

/// The tracer of one sidecar, and its export pipeline.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    /// One moment read on both clocks, to turn the writer's instants into
    /// the wall-clock times spans carry.
    base: (SystemTime, Instant),
    batches: AtomicU64,
    backend: &'static str,
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
#[error("the OTLP trace exporter for {endpoint} did not start: {source}")]
pub struct StartError {
    endpoint: String,
    source: opentelemetry_otlp::ExporterBuildError,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces").field("backend", &self.backend).finish_non_exhaustive()
    }
}

impl Traces {
    /// Starts exporting to `endpoint`; must run inside the Tokio runtime.
    /// Its spans name the service `service_name`.
    pub fn start(endpoint: &str, service_name: &str, backend: &'static str) -> Result<Arc<Traces>, StartError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
            .map_err(|source| StartError { endpoint: endpoint.to_owned(), source })?;
        let resource = Resource::builder().with_service_name(service_name.to_owned()).build();
        let provider = SdkTracerProvider::builder().with_resource(resource).with_batch_exporter(exporter).build();
        let tracer = provider.tracer("stepwell");
        let now = UNIX_EPOCH + Duration::from_nanos(u64::try_from(clock::system_now()).unwrap_or_default());
        Ok(Arc::new(Traces {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
            base: (now, Instant::now()),
            batches: AtomicU64::new(0),
            backend,
        }))
    }

    /// Exports what is left; the sidecar calls it as it stops.
    pub fn shutdown(&self) {
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "traces not all exported at shutdown");
        }
    }

    /// A request's server span, a child of the caller's span if the
    /// request's metadata carries one, in a context to run the request in.
    pub fn server_span(&self, rpc: Rpc, headers: &HeaderMap) -> Context {
        let parent = self.propagator.extract(&Headers(headers));
        let span = self
            .tracer
            .span_builder(rpc.full_name())
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("rpc.system", "grpc"),
                KeyValue::new("rpc.service", rpc.service()),
                KeyValue::new("rpc.method", rpc.as_str()),
            ])
            .start_with_context(&self.tracer, &parent);
        parent.with_span(span)
    }

    /// Ends a request's server span with the request's status code.
    pub fn end_server_span(context: &Context, code: Code, refusal: Option<&'static str>) {
        let span = context.span();
        span.set_attribute(KeyValue::new("rpc.grpc.status_code", code as i64));
        if let Some(refusal) = refusal {
            span.set_attribute(KeyValue::new("stepwell.refusal", refusal));
        }
        if is_server_error(code) {
            span.set_status(SpanStatus::error(format!("{code:?}")));
        }
        span.end();
    }

    /// Records a committed (or failed) batch: for each traced write, its
    /// wait in the queue and its commit as children of its request's span;
    /// and the batch as one span linked to all of them.
    pub fn batch(&self, writes: &[(SpanContext, Instant)], size: usize, began: Instant, ended: Instant, failed: bool) {
        if writes.is_empty() {
            return;
        }
        let id = self.batches.fetch_add(1, Ordering::Relaxed) + 1;
        let attributes = || {
            vec![
                KeyValue::new("stepwell.batch.id", id as i64),
                KeyValue::new("stepwell.batch.size", size as i64),
                KeyValue::new("db.system.name", self.backend),
            ]
        };
        let (began_at, ended_at) = (self.wall(began), self.wall(ended));
        let mut links = Vec::with_capacity(writes.len());
        for (request, queued) in writes {
            let parent = Context::new().with_remote_span_context(request.clone());
            let waited = (self.wall(*queued), began_at);
            self.internal("stepwell.queue_wait", waited, &parent, attributes(), Vec::new(), false);
            self.internal("stepwell.commit", (began_at, ended_at), &parent, attributes(), Vec::new(), failed);
            links.push(Link::with_context(request.clone()));
        }
        self.internal("stepwell.batch", (began_at, ended_at), &Context::new(), attributes(), links, failed);
    }

    /// Records one internal span that ran from `start` to `end`, marked as
    /// an error if its batch `failed`.
    fn internal(
        &self,
        name: &'static str,
        (start, end): (SystemTime, SystemTime),
        parent: &Context,
        attributes: Vec<KeyValue>,
        links: Vec<Link>,
        failed: bool,
    ) {
        let mut span = self
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attributes)
            .with_links(links)
            .start_with_context(&self.tracer, parent);
        if failed {
            span.set_status(SpanStatus::error("the batch was not committed"));
        }
        span.end_with_timestamp(end);
    }

    fn wall(&self, instant: Instant) -> SystemTime {
        let (wall, at) = self.base;
        match instant.checked_duration_since(at) {
            Some(after) => wall + after,
            None => wall - at.duration_since(instant),
        }
    }
}

/// The codes that mean the server failed (the RPC conventions' rule for
/// a server span's error status); the others are the caller's to handle.
fn is_server_error(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}

struct Headers<'a>(&'a HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

/// What a request's handler and writes learn of the request they serve.
pub struct RequestScope {
    /// The request's server span, when tracing is on.
    pub context: Option<Context>,
    /// The namespace the handler named, kept when metrics label it.
    pub namespace: RefCell<Option<String>>,
    /// Whether to keep the namespace.
    pub keep_namespace: bool,
}

tokio::task_local! {
    static REQUEST: RequestScope;
}

/// Runs `request` inside `scope`, and gives the scope back with its output.
pub async fn in_request<F: Future>(scope: RequestScope, request: F) -> (F::Output, Option<RequestScope>) {
    let mut scoped = std::pin::pin!(REQUEST.scope(scope, request));
    let output = (&mut scoped).await;
    (output, scoped.as_mut().take_value())
}

/// The span of the request being served, if tracing is on and it is sampled.
pub fn current() -> Option<SpanContext> {
    REQUEST
        .try_with(|scope| {
            let context = scope.context.as_ref()?;
            let span = context.span();
            let span_context = span.span_context();
            span_context.is_sampled().then(|| span_context.clone())
        })
        .ok()
        .flatten()
}

/// The span of the request being served, as "<trace id>-<span id>" in
/// hex, if it is traced: what a settlement keeps for the Awaits it wakes.
pub fn current_span() -> Option<String> {
    current().map(|span| format!("{}-{}", span.trace_id(), span.span_id()))
}

/// Links the span of the request being served (an Await) to the span that
/// `settlement` names (`current_span`'s form), the request that settled its
/// wait, on whichever sidecar it ran.
pub fn link_settlement(settlement: &str) {
    let Some((trace, span)) = settlement.split_once('-') else { return };
    let (Ok(trace), Ok(span)) = (TraceId::from_hex(trace), SpanId::from_hex(span)) else { return };
    let linked = SpanContext::new(trace, span, TraceFlags::SAMPLED, true, TraceState::default());
    let _ = REQUEST.try_with(|scope| {
        if let Some(context) = &scope.context {
            context.span().add_link(linked, vec![KeyValue::new("stepwell.link", "settlement")]);
        }
    });
}

/// Names the request's namespace and outcome on its span, and keeps the
/// namespace for its metrics if `labelled` (the call was admitted).
/// `namespace` is called only inside a request's scope.
pub fn annotate(namespace: impl FnOnce() -> String, outcome: &'static str, labelled: bool) {
    let _ = REQUEST.try_with(|scope| {
        let namespace = namespace();
        if let Some(context) = &scope.context {
            let span = context.span();
            span.set_attribute(KeyValue::new("stepwell.namespace", namespace.clone()));
            span.set_attribute(KeyValue::new("stepwell.outcome", outcome));
        }
        if scope.keep_namespace && labelled {
            *scope.namespace.borrow_mut() = Some(namespace);
        }
    });
}
