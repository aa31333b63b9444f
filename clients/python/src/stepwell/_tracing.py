"""Trace context on every call, when OpenTelemetry is installed.

With the ``otel`` extra (``pip install './clients/python[otel]'``) the clients send
the active span's context (W3C ``traceparent``, and ``tracestate`` when there
is one) as call metadata, through the OpenTelemetry API's global propagator,
so the sidecar's server span of each call is a child of the caller's span.
The import is tried once, when this module loads: without OpenTelemetry
``TRACING`` is False, no interceptor is put on the channel, and calls cost
nothing more than before. With it, a call made outside any span sends no
trace context (the propagator writes nothing for an invalid span context).

The interceptors wrap the channel, like the bearer token's, so every call of
it carries the context: the client's methods, ``once()``, the
:class:`~stepwell.CheckpointStore` and the raw stubs, sync and asyncio alike.
Each attempt of a retried call reads the context again, in the caller's
thread (sync) or the caller's task context (asyncio).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import grpc
import grpc.aio

from ._security import _CallDetails

try:
    from opentelemetry.propagate import inject as _inject
except ImportError:  # the otel extra is not installed
    _inject = None

TRACING: bool = _inject is not None
"""True when OpenTelemetry's API could be imported: the clients then send trace context."""


def with_trace_context(metadata: Optional[Sequence[Tuple[str, Any]]]) -> Optional[List[Tuple[str, Any]]]:
    """The call's metadata with the current trace context added.

    Entries the caller already set (e.g. a ``traceparent`` in ``metadata=``)
    win: the propagator's value for the same key is left out. None when there
    is no metadata at all and no context to send.
    """
    if _inject is None:
        return list(metadata) if metadata else None
    carrier: Dict[str, str] = {}
    _inject(carrier)
    if not carrier:
        return list(metadata) if metadata else None
    out = list(metadata or ())
    present = {key.lower() for key, _ in out}
    out.extend((key.lower(), value) for key, value in carrier.items() if key.lower() not in present)
    return out


class TraceContextInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the current trace context to every call of a sync channel."""

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        metadata = with_trace_context(details.metadata)
        if metadata is None:
            return details
        return _CallDetails(details, metadata)

    def intercept_unary_unary(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)


class AsyncTraceContextInterceptor(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """Adds the current trace context to every unary call of a grpc.aio channel."""

    async def intercept_unary_unary(
        self, continuation: Callable[..., Any], details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        metadata = with_trace_context(list(details.metadata or ()))
        if metadata is not None:
            details = grpc.aio.ClientCallDetails(
                details.method, details.timeout, grpc.aio.Metadata(*metadata), details.credentials, details.wait_for_ready
            )
        return await continuation(details, request)


def sync_interceptors() -> List[grpc.UnaryUnaryClientInterceptor]:
    """The interceptors a sync channel gets: one when OpenTelemetry is installed, none otherwise."""
    return [TraceContextInterceptor()] if TRACING else []


def async_interceptors() -> List[grpc.aio.ClientInterceptor]:
    """The interceptors a grpc.aio channel gets: one when OpenTelemetry is installed, none otherwise."""
    return [AsyncTraceContextInterceptor()] if TRACING else []
