"""The synchronous stepwell client."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import _common as c
from ._common import DurationLike, OnceContext, RetryPolicy, TimestampLike
from ._security import TLS, BearerTokenInterceptor, check_token, refuse_duplicate_authorization, resolve_credentials
from ._tracing import sync_interceptors
from .errors import (
    LeaseLost,
    NotAcquired,
    OnceTimeout,
    OperationFailed,
    StepwellError,
    from_rpc_error,
)
from .v1 import checkpoint_pb2 as cp
from .v1 import checkpoint_pb2_grpc as cp_grpc
from .v1 import idempotency_pb2 as ip
from .v1 import idempotency_pb2_grpc as ip_grpc
from .v1 import records_pb2_grpc as rec_grpc

T = TypeVar("T")

_STATUS = {
    None: cp.TURN_STATUS_ANY,
    "any": cp.TURN_STATUS_ANY,
    "open": cp.TURN_STATUS_OPEN,
    "terminal": cp.TURN_STATUS_TERMINAL,
}


def turn_status(status: Any) -> int:
    if isinstance(status, int):
        return status
    return _STATUS[status.lower() if isinstance(status, str) else status]


class Client:
    """A blocking client of the stepwell sidecar.

    Args:
        target: ``host:port`` or ``unix:/path/to.sock``.
        namespace: sent with every request ("" means ``default``).
        timeout: default per-call deadline in seconds (each method takes a
            ``timeout=`` override).
        retry: the :class:`RetryPolicy` for UNAVAILABLE / OVERLOADED.
        token: a bearer token, sent as ``authorization: Bearer <token>`` on
            every call of the channel (never shown in reprs or errors).
        tls: a :class:`TLS` (CA bundle, optional client certificate and key),
            or True for the system's roots; plaintext when None.
        credentials: raw ``grpc.ChannelCredentials`` instead of ``tls``.
        metadata: extra call metadata.
        options: extra gRPC channel options.

    The raw one-to-one stubs are ``checkpoint_stub``, ``idempotency_stub`` and
    ``record_stub`` (RecordService, which :mod:`stepwell.langgraph` uses).

    With OpenTelemetry installed (the ``otel`` extra), every call made inside
    a span carries its trace context (W3C ``traceparent``), so the sidecar's
    span of the call is a child of the caller's.
    """

    def __init__(
        self,
        target: str = c.DEFAULT_TARGET,
        *,
        namespace: str = "",
        timeout: float = 10.0,
        retry: Optional[RetryPolicy] = None,
        token: Optional[str] = None,
        tls: Union[None, bool, TLS] = None,
        credentials: Optional[grpc.ChannelCredentials] = None,
        metadata: Optional[Sequence[Tuple[str, str]]] = None,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
    ) -> None:
        addr, extra = c.channel_target(target)
        secret = None
        if token is not None:
            secret = check_token(token)
            refuse_duplicate_authorization(metadata)
        credentials, tls_opts = resolve_credentials(tls, credentials)
        opts = list(extra) + tls_opts + list(options or [])
        if credentials is None:
            channel = grpc.insecure_channel(addr, options=opts)
        else:
            channel = grpc.secure_channel(addr, credentials, options=opts)
        # The interceptors wrap the channel itself, so the raw stubs send the token
        # and the trace context too.
        interceptors = sync_interceptors() + ([BearerTokenInterceptor(secret)] if secret is not None else [])
        self._channel = grpc.intercept_channel(channel, *interceptors) if interceptors else channel
        self.target = target
        self.namespace = namespace
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = list(metadata or [])
        self.checkpoint_stub = cp_grpc.CheckpointServiceStub(self._channel)
        self.idempotency_stub = ip_grpc.IdempotencyServiceStub(self._channel)
        self.record_stub = rec_grpc.RecordServiceStub(self._channel)

    # -- plumbing ---------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Callable[..., T], request: Any, timeout: Optional[float]) -> T:
        """Calls ``method`` with the same ``request`` until it succeeds or fails for good."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return method(
                    request,
                    timeout=self.timeout if timeout is None else timeout,
                    metadata=self.metadata or None,
                )
            except grpc.RpcError as rpc_err:
                err = from_rpc_error(rpc_err)
                if not self.retry.should_retry(err, attempt):
                    raise err from None
            time.sleep(self.retry.backoff(attempt))

    # -- CheckpointService ------------------------------------------------

    def checkpoint(
        self,
        turn_id: str,
        phase: str,
        state: Any,
        *,
        timestamp: TimestampLike = None,
        session_id: str = "",
        terminal: bool = False,
        workflow_version: str = "",
        timeout: Optional[float] = None,
    ) -> cp.CheckpointResponse:
        """Appends a checkpoint. ``state`` is any JSON value (or raw JSON bytes);
        ``timestamp`` defaults to now and is fixed once, so retries dedupe."""
        req = cp.CheckpointRequest(
            namespace=self.namespace,
            turn_id=turn_id,
            session_id=session_id,
            phase=phase,
            state=c.to_state_bytes(state),
            timestamp=c.to_timestamp(timestamp),
            terminal=terminal,
            workflow_version=workflow_version,
        )
        return self._call(self.checkpoint_stub.Checkpoint, req, timeout)

    def restore_page(
        self,
        turn_id: str,
        *,
        page_size: int = 0,
        page_token: str = "",
        newest_first: bool = False,
        phase: str = "",
        expect_workflow_version: str = "",
        timeout: Optional[float] = None,
    ) -> cp.RestoreResponse:
        """One page of a turn's checkpoints (the raw Restore RPC)."""
        req = cp.RestoreRequest(
            namespace=self.namespace,
            turn_id=turn_id,
            page_size=page_size,
            page_token=page_token,
            newest_first=newest_first,
            phase=phase,
            expect_workflow_version=expect_workflow_version,
        )
        return self._call(self.checkpoint_stub.Restore, req, timeout)

    def iter_restore(
        self,
        turn_id: str,
        *,
        page_size: int = 0,
        newest_first: bool = False,
        phase: str = "",
        expect_workflow_version: str = "",
        timeout: Optional[float] = None,
    ) -> Iterator[cp.Checkpoint]:
        """Every checkpoint of a turn, fetching page after page lazily."""
        token = ""
        while True:
            page = self.restore_page(
                turn_id,
                page_size=page_size,
                page_token=token,
                newest_first=newest_first,
                phase=phase,
                expect_workflow_version=expect_workflow_version,
                timeout=timeout,
            )
            yield from page.checkpoints
            token = page.next_page_token
            if not token:
                return

    def restore(self, turn_id: str, **kwargs: Any) -> List[cp.Checkpoint]:
        """Every checkpoint of a turn (all pages), oldest first unless ``newest_first``.
        Takes the keyword arguments of :meth:`iter_restore`."""
        return list(self.iter_restore(turn_id, **kwargs))

    def latest(
        self, turn_id: str, *, expect_workflow_version: str = "", timeout: Optional[float] = None
    ) -> Optional[cp.Checkpoint]:
        """The newest checkpoint of a turn (Restore newest_first, page_size 1), or None."""
        page = self.restore_page(
            turn_id,
            page_size=1,
            newest_first=True,
            expect_workflow_version=expect_workflow_version,
            timeout=timeout,
        )
        return page.checkpoints[0] if page.checkpoints else None

    def list_turns(
        self,
        *,
        status: Any = None,
        session_id: str = "",
        updated_before: TimestampLike = None,
        page_size: int = 0,
        page_token: str = "",
        timeout: Optional[float] = None,
    ) -> cp.ListTurnsResponse:
        """One page of turn summaries. ``status``: "open", "terminal", "any" or a TurnStatus."""
        req = cp.ListTurnsRequest(
            namespace=self.namespace,
            status=turn_status(status),
            session_id=session_id,
            page_size=page_size,
            page_token=page_token,
        )
        if updated_before is not None:
            req.updated_before.CopyFrom(c.to_timestamp(updated_before))
        return self._call(self.checkpoint_stub.ListTurns, req, timeout)

    def iter_turns(self, **kwargs: Any) -> Iterator[cp.TurnSummary]:
        """Every turn summary matching the filters of :meth:`list_turns`, across pages."""
        kwargs.pop("page_token", None)
        token = ""
        while True:
            page = self.list_turns(page_token=token, **kwargs)
            yield from page.turns
            token = page.next_page_token
            if not token:
                return

    def delete_turn(self, turn_id: str, *, timeout: Optional[float] = None) -> int:
        """Deletes a turn's checkpoints; returns how many were deleted."""
        req = cp.DeleteTurnRequest(namespace=self.namespace, turn_id=turn_id)
        return int(self._call(self.checkpoint_stub.DeleteTurn, req, timeout).deleted)

    # -- IdempotencyService -----------------------------------------------

    def begin(
        self,
        key: str,
        *,
        fingerprint: Any = None,
        lease: DurationLike = None,
        retention: DurationLike = None,
        timeout: Optional[float] = None,
    ) -> ip.BeginResponse:
        req = ip.BeginRequest(namespace=self.namespace, key=key, fingerprint=c.to_bytes(fingerprint))
        d = c.to_duration(lease)
        if d is not None:
            req.lease.CopyFrom(d)
        r = c.to_duration(retention)
        if r is not None:
            req.retention.CopyFrom(r)
        return self._call(self.idempotency_stub.Begin, req, timeout)

    def complete(
        self, key: str, lease_token: int, result: Any = b"", *, timeout: Optional[float] = None
    ) -> ip.CompleteResponse:
        """Records the result (bytes or str) under the lease."""
        req = ip.CompleteRequest(
            namespace=self.namespace, key=key, lease_token=int(lease_token), result=c.to_bytes(result)
        )
        return self._call(self.idempotency_stub.Complete, req, timeout)

    def release(
        self,
        key: str,
        lease_token: int,
        *,
        error: str = "",
        permanent: bool = False,
        timeout: Optional[float] = None,
    ) -> ip.ReleaseResponse:
        req = ip.ReleaseRequest(
            namespace=self.namespace, key=key, lease_token=int(lease_token), error=error, permanent=permanent
        )
        return self._call(self.idempotency_stub.Release, req, timeout)

    def extend(
        self, key: str, lease_token: int, *, lease: DurationLike = None, timeout: Optional[float] = None
    ) -> ip.ExtendResponse:
        req = ip.ExtendRequest(namespace=self.namespace, key=key, lease_token=int(lease_token))
        d = c.to_duration(lease)
        if d is not None:
            req.lease.CopyFrom(d)
        return self._call(self.idempotency_stub.Extend, req, timeout)

    def get(self, key: str, *, timeout: Optional[float] = None) -> ip.GetResponse:
        req = ip.GetRequest(namespace=self.namespace, key=key)
        return self._call(self.idempotency_stub.Get, req, timeout)

    # -- once -------------------------------------------------------------

    def once(
        self,
        key: str,
        fn: Callable[..., Any],
        *,
        fingerprint: Any = None,
        lease: float = 30.0,
        retention: DurationLike = None,
        heartbeat: Optional[float] = None,
        wait_timeout: float = 60.0,
        poll_interval: float = 0.05,
    ) -> Any:
        """Runs ``fn`` at most once per ``key`` (across processes and sidecars sharing a store)
        and returns its result, JSON round-tripped.

        * ACQUIRED: calls ``fn(ctx)`` if fn takes an argument (an
          :class:`OnceContext`, with ``previous_lease_expired``), else ``fn()``;
          a background thread Extends the lease every ``heartbeat`` seconds
          (default ``lease / 3``); the JSON of the return value is Completed.
          If fn raises, the lease is Released (not permanent) and the
          exception re-raised.
        * COMPLETED: returns the recorded result without calling fn.
        * IN_PROGRESS: waits (at most ``wait_timeout`` overall) and asks again;
          raises :class:`OnceTimeout` when the wait runs out.
        * FAILED: raises :class:`OperationFailed` with the recorded error.

        Every caller gets ``json.loads(json.dumps(value))``, so the holder and
        the callers that read the record see the same value.
        """
        deadline = time.monotonic() + wait_timeout
        sleep = poll_interval
        while True:
            r = self.begin(key, fingerprint=fingerprint, lease=lease, retention=retention)
            if r.outcome == ip.BEGIN_OUTCOME_COMPLETED:
                return c.decode_result(r.result)
            if r.outcome == ip.BEGIN_OUTCOME_FAILED:
                raise OperationFailed(grpc.StatusCode.FAILED_PRECONDITION, r.error, "FAILED", metadata={"key": key})
            if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
                return self._run_acquired(key, r, fn, lease, heartbeat)
            # IN_PROGRESS: wait for the holder, bounded.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OnceTimeout(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"key {key!r} still in progress after {wait_timeout}s",
                    "IN_PROGRESS",
                    metadata={"key": key},
                )
            time.sleep(min(sleep, remaining, max(c.seconds_until(r.lease_expires_at), 0.005)))
            sleep = min(sleep * 2, 1.0)

    def _run_acquired(
        self, key: str, r: ip.BeginResponse, fn: Callable[..., Any], lease: float, heartbeat: Optional[float]
    ) -> Any:
        ctx = OnceContext(key, int(r.lease_token), int(r.attempt), bool(r.previous_lease_expired))
        stop = threading.Event()
        interval = heartbeat if heartbeat is not None else max(lease / 3.0, 0.01)

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    self.extend(key, ctx.lease_token, lease=lease)
                except (LeaseLost, NotAcquired):
                    ctx.lease_lost = True
                    return
                except StepwellError:
                    continue  # transient: try again at the next beat

        t = threading.Thread(target=beat, name=f"stepwell-once-{key}", daemon=True)
        t.start()
        try:
            value = fn(ctx) if c.wants_context(fn) else fn()
        except BaseException as exc:
            stop.set()
            t.join()
            try:
                self.release(key, ctx.lease_token, error=f"{type(exc).__name__}: {exc}"[:16000])
            except StepwellError:
                pass  # the lease was lost or the sidecar is gone: the original error matters more
            raise
        stop.set()
        t.join()
        raw = c.encode_result(value)
        self.complete(key, ctx.lease_token, raw)
        return c.decode_result(raw)

    def once_decorator(self, key_fn: Callable[..., str], **once_kwargs: Any) -> Callable[[Callable[..., T]], Callable[..., Any]]:
        """Decorator form of :meth:`once`: ``key_fn`` gets the call's arguments and returns the key.

        If the decorated function has a parameter named ``once_context`` it
        receives the :class:`OnceContext`.

            @client.once_decorator(lambda order_id: f"{order_id}/charge")
            def charge(order_id): ...
        """

        def deco(f: Callable[..., T]) -> Callable[..., Any]:
            takes_ctx = _takes_once_context(f)

            @functools.wraps(f)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                key = key_fn(*args, **kwargs)

                def run(ctx: OnceContext) -> Any:
                    if takes_ctx:
                        return f(*args, once_context=ctx, **kwargs)
                    return f(*args, **kwargs)

                return self.once(key, run, **once_kwargs)

            return wrapper

        return deco


def _takes_once_context(f: Callable[..., Any]) -> bool:
    import inspect

    try:
        return "once_context" in inspect.signature(f).parameters
    except (TypeError, ValueError):
        return False
