"""Trace context from the client to the real sidecar's spans.

An OTLP/gRPC trace receiver runs in the test process (grpcio serving the
OTLP definitions' TraceService); a sidecar is started exporting its spans to
it. The test makes a span active with the OpenTelemetry SDK, calls
Checkpoint, and waits (bounded) until the receiver has the sidecar's server
span of that call: its trace id must be the test span's, its parent the test
span. Without an active span, and in a process where OpenTelemetry cannot be
imported at all, the call still works and the sidecar's span is a root.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any, Callable, Iterator, List

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.sdk.trace import TracerProvider

from stepwell import AsyncClient, Client
from stepwell import _tracing

from conftest import Sidecar, fresh_namespace, free_port

CHECKPOINT_SPAN = "stepwell.v1.CheckpointService/Checkpoint"


class OtlpReceiver(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace endpoint on a free loopback port that keeps every span it is sent."""

    def __init__(self) -> None:
        self._spans: List[trace_pb2.Span] = []
        self._changed = threading.Condition()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def Export(self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any) -> Any:
        with self._changed:
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    self._spans.extend(scope_spans.spans)
            self._changed.notify_all()
        return trace_service_pb2.ExportTraceServiceResponse()

    def wait_for(self, match: Callable[[trace_pb2.Span], bool], what: str, limit: float = 30.0) -> trace_pb2.Span:
        """The first span received that ``match`` accepts, waiting for it at most ``limit`` seconds."""
        deadline = time.monotonic() + limit
        with self._changed:
            while True:
                for span in self._spans:
                    if match(span):
                        return span
                left = deadline - time.monotonic()
                if left <= 0:
                    names = sorted({s.name for s in self._spans})
                    raise AssertionError(f"no {what} within {limit} s; {len(self._spans)} spans received: {names}")
                self._changed.wait(left)

    def stop(self) -> None:
        self.server.stop(None)


def attribute(span: trace_pb2.Span, key: str) -> Any:
    for kv in span.attributes:
        if kv.key == key:
            return kv.value.string_value
    return None


def checkpoint_span_of(namespace: str) -> Callable[[trace_pb2.Span], bool]:
    """Matches the sidecar's server span of a Checkpoint in ``namespace``."""
    return lambda s: (
        s.name == CHECKPOINT_SPAN
        and s.kind == trace_pb2.Span.SPAN_KIND_SERVER
        and attribute(s, "stepwell.namespace") == namespace
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    r = OtlpReceiver()
    yield r
    r.stop()


@pytest.fixture(scope="module")
def traced(receiver: OtlpReceiver, workdir: Path) -> Iterator[Sidecar]:
    """A plaintext sidecar exporting its spans to ``receiver`` every 50 ms."""
    s = Sidecar(
        f"127.0.0.1:{free_port()}",
        workdir,
        extra_args=["--admin-listen", "off"],
        extra_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.port}",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
        },
    )
    yield s
    s.stop()


@pytest.fixture(scope="module")
def tracer() -> Any:
    # Not installed as the global provider: a span started from it is made
    # current all the same, which is all the client's propagation reads.
    provider = TracerProvider()
    yield provider.get_tracer("stepwell-python-client-tests")
    provider.shutdown()


def test_opentelemetry_is_installed_for_these_tests() -> None:
    assert _tracing.TRACING


def test_sync_client_checkpoint_is_child_of_active_span(traced: Sidecar, receiver: OtlpReceiver, tracer: Any) -> None:
    ns = fresh_namespace("trace-sync")
    with Client(traced.target, namespace=ns) as c:
        with tracer.start_as_current_span("caller") as caller:
            assert c.checkpoint("turn-1", "started", {"step": 1}).inserted
        want = caller.get_span_context()
    span = receiver.wait_for(checkpoint_span_of(ns), f"server span of the Checkpoint in {ns}")
    assert span.trace_id.hex() == format(want.trace_id, "032x")
    assert span.parent_span_id.hex() == format(want.span_id, "016x")


def test_async_client_checkpoint_is_child_of_active_span(traced: Sidecar, receiver: OtlpReceiver, tracer: Any) -> None:
    ns = fresh_namespace("trace-aio")

    async def run() -> Any:
        async with AsyncClient(traced.target, namespace=ns) as c:
            with tracer.start_as_current_span("caller") as caller:
                assert (await c.checkpoint("turn-1", "started", {"step": 1})).inserted
            return caller.get_span_context()

    want = asyncio.run(run())
    span = receiver.wait_for(checkpoint_span_of(ns), f"server span of the Checkpoint in {ns}")
    assert span.trace_id.hex() == format(want.trace_id, "032x")
    assert span.parent_span_id.hex() == format(want.span_id, "016x")


def test_without_active_span_the_call_works_and_its_span_is_a_root(traced: Sidecar, receiver: OtlpReceiver) -> None:
    ns = fresh_namespace("trace-none")
    with Client(traced.target, namespace=ns) as c:
        assert c.checkpoint("turn-1", "started", {"step": 1}).inserted
        assert [ck.phase for ck in c.restore("turn-1")] == ["started"]
    span = receiver.wait_for(checkpoint_span_of(ns), f"server span of the Checkpoint in {ns}")
    assert span.parent_span_id == b""
    assert len(span.trace_id) == 16


def test_without_opentelemetry_the_client_works_as_before(traced: Sidecar, receiver: OtlpReceiver) -> None:
    """In a process where ``opentelemetry`` cannot be imported, the client puts
    no tracing interceptor on its channels and its calls still succeed."""
    ns = fresh_namespace("trace-absent")
    script = textwrap.dedent(
        f"""
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # any import of it now fails
        import stepwell
        from stepwell import _tracing
        assert not _tracing.TRACING
        assert _tracing.sync_interceptors() == [] and _tracing.async_interceptors() == []
        with stepwell.Client({traced.target!r}, namespace={ns!r}) as c:
            assert c.checkpoint("turn-1", "started", {{"step": 1}}).inserted
        async def run():
            async with stepwell.AsyncClient({traced.target!r}, namespace={ns!r}) as c:
                assert [ck.phase for ck in await c.restore("turn-1")] == ["started"]
        asyncio.run(run())
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
    span = receiver.wait_for(checkpoint_span_of(ns), f"server span of the Checkpoint in {ns}")
    assert span.parent_span_id == b""
