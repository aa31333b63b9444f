//! Traces as a collector receives them from the real binary: an OTLP/gRPC
//! receiver runs in the test, and the sidecar exports to it through the
//! standard `OTEL_*` variables. A request that carries a W3C `traceparent`
//! gets a server span whose parent is the caller's span; each write gets a
//! queue-wait and a commit child carrying its batch's id and size; each
//! batch gets one span linked to every request span it committed; an
//! unsampled caller's request is not recorded; and no span carries a state,
//! a turn or a key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{TraceService, TraceServiceServer};
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

use stepwell_test_support::backend::TestStore;
use stepwell_test_support::requests::{T0, begin, checkpoint, restore};
use stepwell_test_support::sidecar::SidecarProcess;

use crate::STEPWELL;

/// The spans received, with the service name of the resource that sent them.
#[derive(Clone, Default)]
struct Receiver(Arc<Mutex<Vec<(String, Span)>>>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut spans = self.0.lock().expect("not poisoned");
        for resource in request.into_inner().resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            let service = text(&attributes, "service.name").unwrap_or_default();
            for scope in resource.scope_spans {
                spans.extend(scope.spans.into_iter().map(|span| (service.clone(), span)));
            }
        }
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An attribute's value, as text.
fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A request carrying the W3C trace context of a caller's span.
fn traced<T>(message: T, trace_id: &str, span_id: &str, sampled: bool) -> Request<T> {
    let mut request = Request::new(message);
    let flags = if sampled { "01" } else { "00" };
    let header = format!("00-{trace_id}-{span_id}-{flags}").parse().expect("a valid header value");
    request.metadata_mut().insert("traceparent", header);
    request
}

const STATE: &str = r#"{"secret":"state-that-must-not-leave"}"#;

#[tokio::test]
async fn a_callers_span_parents_the_server_span_and_each_write_shows_its_queue_wait_and_batch() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
    let endpoint = format!("http://{}", listener.local_addr().expect("bound"));
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );

    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("OTEL_SERVICE_NAME", "checkout-stepwell")
        .spawn()
        .await;
    let (mut client, mut keys) = (server.client(), server.idempotency());
    let (trace, caller) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let (begin_trace, begin_caller) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let unsampled = "11111111111111111111111111111111";
    client
        .checkpoint(traced(checkpoint("turn-secret", "started", T0, STATE), trace, caller, true))
        .await
        .expect("stored");
    keys.begin(traced(begin("key-secret"), begin_trace, begin_caller, true)).await.expect("begun");
    client
        .checkpoint(traced(checkpoint("turn-secret", "step", T0 + 1, STATE), unsampled, caller, false))
        .await
        .expect("stored");
    client.restore(restore("turn-secret")).await.expect("restored");

    // A graceful stop exports every span that is left.
    server.terminate();
    let status = server.wait().await;
    assert_eq!(status.code(), Some(0));
    serving.abort();
    let received = receiver.0.lock().expect("not poisoned").clone();
    let spans: Vec<&Span> = received.iter().map(|(_, span)| span).collect();
    assert!(received.iter().all(|(service, _)| service == "checkout-stepwell"), "OTEL_SERVICE_NAME names the service");
    let named = |name: &str, trace: &str| -> Vec<&Span> {
        spans.iter().copied().filter(|s| s.name == name && hex(&s.trace_id) == trace).collect()
    };

    // The Checkpoint's server span is the caller's span's child.
    let server_spans = named("stepwell.v1.CheckpointService/Checkpoint", trace);
    assert_eq!(server_spans.len(), 1, "one server span: {spans:#?}");
    let request = server_spans[0];
    assert_eq!(hex(&request.parent_span_id), caller);
    assert_eq!(request.kind, SpanKind::Server as i32);
    let attribute = |span: &Span, key: &str| text(&span.attributes, key);
    assert_eq!(attribute(request, "rpc.system").as_deref(), Some("grpc"));
    assert_eq!(attribute(request, "rpc.service").as_deref(), Some("stepwell.v1.CheckpointService"));
    assert_eq!(attribute(request, "rpc.method").as_deref(), Some("Checkpoint"));
    assert_eq!(attribute(request, "rpc.grpc.status_code").as_deref(), Some("0"));
    assert_eq!(attribute(request, "stepwell.namespace").as_deref(), Some("default"));
    assert_eq!(attribute(request, "stepwell.outcome").as_deref(), Some("ok"));

    // Its write waited in the queue, then committed, inside the request.
    let child = |name: &str, of: &Span, trace: &str| -> &Span {
        let found = named(name, trace);
        let found: Vec<&Span> = found.into_iter().filter(|s| s.parent_span_id == of.span_id).collect();
        assert_eq!(found.len(), 1, "one {name} under the request: {spans:#?}");
        found[0]
    };
    let wait = child("stepwell.queue_wait", request, trace);
    let commit = child("stepwell.commit", request, trace);
    assert!(request.start_time_unix_nano <= wait.start_time_unix_nano, "the wait starts within the request");
    assert_eq!(wait.end_time_unix_nano, commit.start_time_unix_nano, "the commit starts as the wait ends");
    assert!(commit.end_time_unix_nano <= request.end_time_unix_nano, "the commit ends within the request");
    let batch_id = attribute(commit, "stepwell.batch.id").expect("the commit names its batch");
    assert_eq!(attribute(wait, "stepwell.batch.id").as_ref(), Some(&batch_id));
    let size: u64 = attribute(commit, "stepwell.batch.size").expect("and its size").parse().expect("a number");
    assert!(size >= 1);

    // The batch is one span, linked to every request span it committed.
    let batches: Vec<&Span> = spans
        .iter()
        .copied()
        .filter(|s| s.name == "stepwell.batch" && attribute(s, "stepwell.batch.id").as_ref() == Some(&batch_id))
        .collect();
    assert_eq!(batches.len(), 1, "{spans:#?}");
    assert!(
        batches[0].links.iter().any(|l| hex(&l.trace_id) == trace && l.span_id == request.span_id),
        "the batch links to the request: {:#?}",
        batches[0]
    );
    assert_eq!(batches[0].links.len() as u64, size, "one link per traced write, all traced here");

    // The Begin likewise.
    let begun = named("stepwell.v1.IdempotencyService/Begin", begin_trace);
    assert_eq!(begun.len(), 1, "{spans:#?}");
    assert_eq!(hex(&begun[0].parent_span_id), begin_caller);
    assert_eq!(attribute(begun[0], "stepwell.outcome").as_deref(), Some("ok"));
    child("stepwell.commit", begun[0], begin_trace);

    // A caller that does not sample its trace gets none recorded.
    assert!(spans.iter().all(|s| hex(&s.trace_id) != unsampled), "nothing of the unsampled trace");

    // A request without a traceparent starts a trace of its own; a read
    // has no queue wait.
    let restores: Vec<&Span> = spans.iter().copied().filter(|s| s.name.ends_with("/Restore")).collect();
    assert_eq!(restores.len(), 1, "{spans:#?}");
    assert!(restores[0].parent_span_id.is_empty(), "a root span");
    assert!(!spans.iter().any(|s| s.parent_span_id == restores[0].span_id), "a read neither queues nor commits");

    // No span carries a state, a turn or a key.
    let mut values: HashMap<String, String> = HashMap::new();
    for span in &spans {
        for kv in &span.attributes {
            values.insert(kv.key.clone(), text(&span.attributes, &kv.key).unwrap_or_default());
        }
    }
    for (key, value) in &values {
        for secret in ["state-that-must-not-leave", "turn-secret", "key-secret"] {
            assert!(!value.contains(secret), "{key}={value} carries {secret}");
        }
    }
}

#[tokio::test]
async fn an_awaits_span_links_to_the_span_of_the_signal_that_settled_its_wait() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the receiver");
    let endpoint = format!("http://{}", listener.local_addr().expect("bound"));
    let serving = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(receiver.clone()))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    let store = TestStore::new().await;
    let server = SidecarProcess::builder(STEPWELL, &store).env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint).spawn().await;
    let mut waits = server.waits();
    let (signal_trace, signal_caller) = ("5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7");
    let (await_trace, await_caller) = ("6af7651916cd43dd8448eb211c80319c", "c7ad6b7169203331");
    let name = |request: &mut stepwell::api::pb::SignalRequest| {
        request.turn_id = "t".into();
        request.name = "w".into();
    };
    let mut signal = stepwell::api::pb::SignalRequest { payload: b"ok".to_vec(), ..Default::default() };
    name(&mut signal);
    waits.signal(traced(signal, signal_trace, signal_caller, true)).await.expect("signalled");
    let awaited = stepwell::api::pb::AwaitRequest { turn_id: "t".into(), name: "w".into(), ..Default::default() };
    waits.r#await(traced(awaited, await_trace, await_caller, true)).await.expect("awaited");

    server.terminate();
    assert_eq!(server.wait().await.code(), Some(0));
    serving.abort();
    let received = receiver.0.lock().expect("not poisoned").clone();
    let spans: Vec<&Span> = received.iter().map(|(_, span)| span).collect();
    let one = |name: &str, trace: &str| -> &Span {
        let found: Vec<&Span> = spans.iter().copied().filter(|s| s.name == name && hex(&s.trace_id) == trace).collect();
        assert_eq!(found.len(), 1, "one {name} span: {spans:#?}");
        found[0]
    };
    let signal = one("stepwell.v1.WaitService/Signal", signal_trace);
    let awaited = one("stepwell.v1.WaitService/Await", await_trace);
    assert!(
        awaited.links.iter().any(|l| hex(&l.trace_id) == signal_trace && l.span_id == signal.span_id),
        "the Await links to the Signal: {:#?}",
        awaited.links
    );
}
