"""The synchronous stepwell client.

Every method's logic (request building, validation, retries, paging,
``once()``) is an operation of :mod:`stepwell._core`, shared with
:class:`stepwell.AsyncClient`; this module runs it with blocking gRPC calls,
``time.sleep`` and a heartbeat thread."""

from __future__ import annotations

import functools
import threading
import time
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc

from . import _common as c
from . import _core
from ._common import DurationLike, OnceContext, RetryPolicy, TimestampLike  # noqa: F401
from ._core import takes_once_context as _takes_once_context  # noqa: F401  (kept importable)
from ._core import turn_status  # noqa: F401  (kept importable)
from ._security import TLS, BearerTokenInterceptor, plan_channel
from ._tracing import sync_interceptors
from .v1 import checkpoint_pb2 as cp
from .v1 import idempotency_pb2 as ip
from .v1 import records_pb2 as rp
from .v1 import waits_pb2 as wp

T = TypeVar("T")


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

    The raw one-to-one stubs are ``checkpoint_stub``, ``idempotency_stub``,
    ``record_stub`` (RecordService, which :mod:`stepwell.langgraph`'s savers
    use), ``wait_stub`` (WaitService) and ``memory_stub`` (MemoryService,
    which :mod:`stepwell.langgraph`'s stores use). Call them through
    ``_call(method, request, timeout)`` for the client's error mapping and
    retries: every MemoryService call may be retried, since PutItems and
    DeleteItems are idempotent (the same writes give the same state) and
    GetItems, SearchItems and ListPaths are reads.

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
        plan = plan_channel(target, token, tls, credentials, metadata, options)
        if plan.credentials is None:
            channel = grpc.insecure_channel(plan.address, options=plan.options)
        else:
            channel = grpc.secure_channel(plan.address, plan.credentials, options=plan.options)
        # The interceptors wrap the channel itself, so the raw stubs send the token
        # and the trace context too.
        interceptors = sync_interceptors() + ([BearerTokenInterceptor(plan.token)] if plan.token is not None else [])
        channel = grpc.intercept_channel(channel, *interceptors) if interceptors else channel
        _core.attach(self, channel, target, namespace, timeout, retry, metadata)

    # -- plumbing ---------------------------------------------------------

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, op: _core.Op[T], stop: Optional[threading.Event] = None) -> T:
        """Drives a shared operation (see :mod:`stepwell._core`) with blocking
        calls. With ``stop``, a Sleep ends the operation as soon as ``stop`` is
        set (the heartbeat thread), returning None."""
        send: Any = None
        exc: Optional[BaseException] = None
        while True:
            try:
                effect = op.send(send) if exc is None else op.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            send = exc = None
            try:
                if type(effect) is _core.Call:
                    send = self._call(effect.method, effect.request, effect.timeout)
                elif type(effect) is _core.Rpc:
                    send = effect.method(effect.request, timeout=effect.timeout, metadata=effect.metadata)
                elif type(effect) is _core.Sleep:
                    if stop is None:
                        time.sleep(effect.seconds)
                    elif stop.wait(effect.seconds):
                        op.close()
                        return None  # type: ignore[return-value]
                elif type(effect) is _core.Hold:
                    send = self._hold(effect)
                else:
                    raise TypeError(f"unknown effect {effect!r}")
            except BaseException as e:  # the operation decides: retry, release, or re-raise
                exc = e

    def _hold(self, effect: _core.Hold) -> Any:
        # Not shared with AsyncClient: the heartbeat runs in a thread here (a
        # task there); what it does, Extend every interval and note a lost
        # lease, is the shared _core heartbeat operation.
        stop = threading.Event()
        beat = threading.Thread(
            target=self._run, args=(effect.beat(), stop), name=f"stepwell-once-{effect.ctx.key}", daemon=True
        )
        beat.start()
        try:
            return _core.call_holder(effect.fn, effect.ctx)
        finally:
            stop.set()
            beat.join()

    def _call(self, method: Callable[..., T], request: Any, timeout: Optional[float]) -> T:
        """Calls ``method`` with the same ``request`` until it succeeds or fails for good."""
        return self._run(_core.retrying(self, method, request, timeout))  # type: ignore[no-any-return]

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
        return self._run(
            _core.checkpoint(self, turn_id, phase, state, timestamp, session_id, terminal, workflow_version, timeout)
        )

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
        return self._run(
            _core.restore_page(
                self,
                turn_id,
                page_size=page_size,
                page_token=page_token,
                newest_first=newest_first,
                phase=phase,
                expect_workflow_version=expect_workflow_version,
                timeout=timeout,
            )
        )

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
        pages = _core.restore_pages(
            self,
            turn_id,
            page_size=page_size,
            newest_first=newest_first,
            phase=phase,
            expect_workflow_version=expect_workflow_version,
            timeout=timeout,
        )
        while not pages.done:
            yield from self._run(pages.next())

    def restore(self, turn_id: str, **kwargs: Any) -> List[cp.Checkpoint]:
        """Every checkpoint of a turn (all pages), oldest first unless ``newest_first``.
        Takes the keyword arguments of :meth:`iter_restore`."""
        return self._run(_core.restore(self, turn_id, **kwargs))

    def latest(
        self, turn_id: str, *, expect_workflow_version: str = "", timeout: Optional[float] = None
    ) -> Optional[cp.Checkpoint]:
        """The newest checkpoint of a turn (Restore newest_first, page_size 1), or None."""
        return self._run(_core.latest(self, turn_id, expect_workflow_version=expect_workflow_version, timeout=timeout))

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
        return self._run(
            _core.list_turns(
                self,
                status=status,
                session_id=session_id,
                updated_before=updated_before,
                page_size=page_size,
                page_token=page_token,
                timeout=timeout,
            )
        )

    def iter_turns(self, **kwargs: Any) -> Iterator[cp.TurnSummary]:
        """Every turn summary matching the filters of :meth:`list_turns`, across pages."""
        pages = _core.turn_pages(self, kwargs)
        while not pages.done:
            yield from self._run(pages.next())

    def delete_turn(self, turn_id: str, *, timeout: Optional[float] = None) -> int:
        """Deletes a turn's checkpoints; returns how many were deleted."""
        return self._run(_core.delete_turn(self, turn_id, timeout))

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
        """Begin: acquires the key's lease, or reports it completed, failed or in progress."""
        return self._run(
            _core.begin(self, key, fingerprint=fingerprint, lease=lease, retention=retention, timeout=timeout)
        )

    def complete(
        self, key: str, lease_token: int, result: Any = b"", *, timeout: Optional[float] = None
    ) -> ip.CompleteResponse:
        """Records the result (bytes or str) under the lease."""
        return self._run(_core.complete(self, key, lease_token, result, timeout))

    def release(
        self,
        key: str,
        lease_token: int,
        *,
        error: str = "",
        permanent: bool = False,
        timeout: Optional[float] = None,
    ) -> ip.ReleaseResponse:
        """Releases the lease; ``permanent`` records the key as failed with ``error``."""
        return self._run(_core.release(self, key, lease_token, error=error, permanent=permanent, timeout=timeout))

    def extend(
        self, key: str, lease_token: int, *, lease: DurationLike = None, timeout: Optional[float] = None
    ) -> ip.ExtendResponse:
        """Extends the lease (by ``lease``, or the sidecar's default)."""
        return self._run(_core.extend(self, key, lease_token, lease=lease, timeout=timeout))

    def get(self, key: str, *, timeout: Optional[float] = None) -> ip.GetResponse:
        """The key's record (KeyNotFound when there is none)."""
        return self._run(_core.get(self, key, timeout))

    # -- WaitService ------------------------------------------------------

    def create_wait(
        self,
        turn_id: str,
        name: str = "",
        *,
        metadata: Any = None,
        expire_at: TimestampLike = None,
        resolve_at: TimestampLike = None,
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.CreateWaitResponse:
        """CreateWait: a PENDING wait, or the one that exists (the first
        creation stands). ``name=""`` lets the sidecar name it; pass the
        returned ``wait.handle`` to whoever must settle it. ``metadata`` is a
        JSON object (or raw JSON bytes); ``resolve_at`` is a durable timer."""
        return self._run(
            _core.create_wait(
                self,
                turn_id,
                name,
                metadata=metadata,
                expire_at=expire_at,
                resolve_at=resolve_at,
                namespace=namespace,
                timeout=timeout,
            )
        )

    def signal_wait(
        self,
        turn_id: str = "",
        name: str = "",
        payload: Union[bytes, str] = b"",
        *,
        handle: str = "",
        content_type: str = "",
        fence: Optional[rp.Fence] = None,
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.SignalResponse:
        """Signal, by (turn_id, name) or by ``handle``: the settled wait and
        whether this call settled it. A wait settled otherwise raises
        :class:`WaitSettled` with the winner as ``.wait``."""
        return self._run(
            _core.signal_wait(
                self,
                turn_id,
                name,
                payload,
                handle=handle,
                content_type=content_type,
                fence=fence,
                namespace=namespace,
                timeout=timeout,
            )
        )

    def await_wait(
        self,
        turn_id: str = "",
        name: str = "",
        *,
        handle: str = "",
        await_timeout: DurationLike = None,
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.AwaitResponse:
        """One Await: the wait once settled, or still pending after
        ``await_timeout`` (the sidecar's default 60 s when None)."""
        return self._run(
            _core.await_wait(
                self, turn_id, name, handle=handle, await_timeout=await_timeout, namespace=namespace, timeout=timeout
            )
        )

    def get_wait(
        self,
        turn_id: str = "",
        name: str = "",
        *,
        handle: str = "",
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.GetWaitResponse:
        """GetWait (:class:`WaitNotFound` when there is none)."""
        return self._run(_core.get_wait(self, turn_id, name, handle=handle, namespace=namespace, timeout=timeout))

    def list_waits(
        self,
        *,
        turn_id: str = "",
        status: Any = None,
        resolve_before: TimestampLike = None,
        page_size: int = 0,
        page_token: str = "",
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.ListWaitsResponse:
        """One page of waits. ``status``: "pending", "resolved", "cancelled", "expired", "any" or a WaitStatus."""
        return self._run(
            _core.list_waits(
                self,
                turn_id=turn_id,
                status=status,
                resolve_before=resolve_before,
                page_size=page_size,
                page_token=page_token,
                namespace=namespace,
                timeout=timeout,
            )
        )

    def iter_waits(self, **kwargs: Any) -> Iterator[wp.Wait]:
        """Every wait matching the filters of :meth:`list_waits`, across pages."""
        pages = _core.wait_pages(self, kwargs)
        while not pages.done:
            yield from self._run(pages.next())

    def cancel_wait(
        self,
        turn_id: str = "",
        name: str = "",
        *,
        handle: str = "",
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.CancelWaitResponse:
        """CancelWait: the wait, CANCELLED; a wait settled otherwise raises :class:`WaitSettled`."""
        return self._run(_core.cancel_wait(self, turn_id, name, handle=handle, namespace=namespace, timeout=timeout))

    # -- pausing a run ----------------------------------------------------

    def signal(
        self, turn_id: str, name: str, payload: Union[bytes, str] = b"", *, namespace: Optional[str] = None
    ) -> bool:
        """Resolves the wait ``name`` of ``turn_id`` with ``payload`` (a str is
        sent as UTF-8). True if this call settled it, False if it repeated the
        winning signal; :class:`WaitSettled` (with the winner as ``.wait``)
        when another payload won or the wait was cancelled or expired. A
        wait that does not exist yet is created resolved, so a signal sent
        before its run waits is kept."""
        return self._run(_core.signal(self, turn_id, name, payload, namespace))

    def wait_for_signal(
        self, turn_id: str, name: str, *, timeout: Optional[float] = None, namespace: Optional[str] = None
    ) -> bytes:
        """Creates the wait if it does not exist, waits until it is settled,
        and returns the payload it was resolved with. Raises
        :class:`WaitExpired` or :class:`WaitCancelled`, or :class:`WaitTimeout`
        (the wait still pending) after ``timeout`` seconds (None: no limit).
        Waits in Awaits of at most a minute, each retried as every call is,
        so a sidecar restarted meanwhile is ridden over."""
        return self._run(_core.wait_for_signal(self, turn_id, name, timeout, namespace))

    def sleep_until(self, turn_id: str, name: str, when: TimestampLike, *, namespace: Optional[str] = None) -> None:
        """A durable sleep: the wait ``name`` of ``turn_id`` with a timer at
        ``when`` (a datetime, naive meaning UTC, or ns since the epoch, or a
        Timestamp), then waits until it is settled. The first creation of a
        wait stands, so a run that resumes keeps its first time: after it,
        this returns at once; before it, it waits only the rest. A signal of
        the wait wakes it early; :class:`WaitCancelled` if it is cancelled."""
        return self._run(_core.sleep_until(self, turn_id, name, when, namespace))

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
        complete_timeout: Optional[float] = None,
    ) -> Any:
        """Runs ``fn`` at most once per ``key`` (across processes and sidecars sharing a store)
        and returns its result, JSON round-tripped.

        * ACQUIRED: calls ``fn(ctx)`` if fn takes an argument (an
          :class:`OnceContext`, with ``previous_lease_expired``), else ``fn()``;
          a background thread Extends the lease every ``heartbeat`` seconds
          (default ``lease / 3``); the JSON of the return value is Completed.
          If fn raises, the lease is Released (not permanent) and the
          exception re-raised. A Complete that cannot reach the sidecar
          (UNAVAILABLE, a deadline, OVERLOADED) is sent again with backoff,
          past the retry policy's attempts, for as long as the lease lasts
          (at most ``complete_timeout`` seconds when given): the holder is
          the only one who may record the result, so a sidecar restart
          shorter than the lease never runs fn a second time.
        * COMPLETED: returns the recorded result without calling fn.
        * IN_PROGRESS: waits (at most ``wait_timeout`` overall) and asks again;
          raises :class:`OnceTimeout` when the wait runs out.
        * FAILED: raises :class:`OperationFailed` with the recorded error.

        Every caller gets ``json.loads(json.dumps(value))``, so the holder and
        the callers that read the record see the same value.
        """
        return self._run(
            _core.once(
                self,
                key,
                fn,
                fingerprint=fingerprint,
                lease=lease,
                retention=retention,
                heartbeat=heartbeat,
                wait_timeout=wait_timeout,
                poll_interval=poll_interval,
                complete_timeout=complete_timeout,
            )
        )

    def once_decorator(self, key_fn: Callable[..., str], **once_kwargs: Any) -> Callable[[Callable[..., T]], Callable[..., Any]]:
        """Decorator form of :meth:`once`: ``key_fn`` gets the call's arguments and returns the key.

        If the decorated function has a parameter named ``once_context`` it
        receives the :class:`OnceContext`.

            @client.once_decorator(lambda order_id: f"{order_id}/charge")
            def charge(order_id): ...
        """

        def deco(f: Callable[..., T]) -> Callable[..., Any]:
            bind = _core.bind_once(key_fn, f)

            # Not shared with AsyncClient beyond bind_once: a plain function
            # here, a coroutine function there.
            @functools.wraps(f)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                key, run = bind(args, kwargs)
                return self.once(key, run, **once_kwargs)

            return wrapper

        return deco
