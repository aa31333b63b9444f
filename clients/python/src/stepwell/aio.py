"""The asyncio stepwell client (grpc.aio).

Every method's logic (request building, validation, retries, paging,
``once()``) is an operation of :mod:`stepwell._core`, shared with
:class:`stepwell.Client`; this module runs it with awaited ``grpc.aio``
calls, ``asyncio.sleep`` and a heartbeat task."""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import grpc.aio

from . import _common as c
from . import _core
from ._common import DurationLike, RetryPolicy, TimestampLike
from ._security import TLS, AsyncBearerTokenInterceptor, plan_channel
from ._tracing import async_interceptors
from .v1 import checkpoint_pb2 as cp
from .v1 import idempotency_pb2 as ip
from .v1 import records_pb2 as rp
from .v1 import waits_pb2 as wp

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of :class:`stepwell.Client`: same methods, awaitable.

    Create it inside a running event loop; ``async with AsyncClient(...)``
    closes the channel.

    Its raw stubs are the blocking client's (``record_stub``, ``memory_stub``,
    ...), awaitable; ``await client._call(method, request, timeout)`` maps
    errors and retries as :class:`stepwell.Client` does.
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
        interceptors = async_interceptors() + ([AsyncBearerTokenInterceptor(plan.token)] if plan.token is not None else [])
        if plan.credentials is None:
            channel = grpc.aio.insecure_channel(plan.address, options=plan.options, interceptors=interceptors or None)
        else:
            channel = grpc.aio.secure_channel(
                plan.address, plan.credentials, options=plan.options, interceptors=interceptors or None
            )
        _core.attach(self, channel, target, namespace, timeout, retry, metadata)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _run(self, op: _core.Op[T]) -> T:
        """Drives a shared operation (see :mod:`stepwell._core`) with awaited
        calls and ``asyncio.sleep``."""
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
                    send = await self._call(effect.method, effect.request, effect.timeout)
                elif type(effect) is _core.Rpc:
                    send = await effect.method(effect.request, timeout=effect.timeout, metadata=effect.metadata)
                elif type(effect) is _core.Sleep:
                    await asyncio.sleep(effect.seconds)
                elif type(effect) is _core.Hold:
                    send = await self._hold(effect)
                else:
                    raise TypeError(f"unknown effect {effect!r}")
            except BaseException as e:  # the operation decides: retry, release, or re-raise
                exc = e

    async def _hold(self, effect: _core.Hold) -> Any:
        # Not shared with Client: the heartbeat is an asyncio task here (a
        # thread there), stopped by cancelling it; what it does, Extend every
        # interval and note a lost lease, is the shared _core heartbeat operation.
        task = asyncio.ensure_future(self._run(effect.beat()))
        try:
            value = _core.call_holder(effect.fn, effect.ctx)
            if inspect.isawaitable(value):
                value = await value
            return value
        finally:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

    async def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        """Calls ``method`` with the same ``request`` until it succeeds or fails for good."""
        return await self._run(_core.retrying(self, method, request, timeout))

    # -- CheckpointService ------------------------------------------------

    async def checkpoint(
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
        """Appends a checkpoint (:meth:`stepwell.Client.checkpoint`)."""
        return await self._run(
            _core.checkpoint(self, turn_id, phase, state, timestamp, session_id, terminal, workflow_version, timeout)
        )

    async def restore_page(
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
        return await self._run(
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

    async def iter_restore(
        self,
        turn_id: str,
        *,
        page_size: int = 0,
        newest_first: bool = False,
        phase: str = "",
        expect_workflow_version: str = "",
        timeout: Optional[float] = None,
    ) -> AsyncIterator[cp.Checkpoint]:
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
            for ck in await self._run(pages.next()):
                yield ck

    async def restore(self, turn_id: str, **kwargs: Any) -> List[cp.Checkpoint]:
        """Every checkpoint of a turn (all pages), oldest first unless ``newest_first``.
        Takes the keyword arguments of :meth:`iter_restore`."""
        return await self._run(_core.restore(self, turn_id, **kwargs))

    async def latest(
        self, turn_id: str, *, expect_workflow_version: str = "", timeout: Optional[float] = None
    ) -> Optional[cp.Checkpoint]:
        """The newest checkpoint of a turn (Restore newest_first, page_size 1), or None."""
        return await self._run(
            _core.latest(self, turn_id, expect_workflow_version=expect_workflow_version, timeout=timeout)
        )

    async def list_turns(
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
        return await self._run(
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

    async def iter_turns(self, **kwargs: Any) -> AsyncIterator[cp.TurnSummary]:
        """Every turn summary matching the filters of :meth:`list_turns`, across pages."""
        pages = _core.turn_pages(self, kwargs)
        while not pages.done:
            for t in await self._run(pages.next()):
                yield t

    async def delete_turn(self, turn_id: str, *, timeout: Optional[float] = None) -> int:
        """Deletes a turn's checkpoints; returns how many were deleted."""
        return await self._run(_core.delete_turn(self, turn_id, timeout))

    # -- IdempotencyService -----------------------------------------------

    async def begin(
        self,
        key: str,
        *,
        fingerprint: Any = None,
        lease: DurationLike = None,
        retention: DurationLike = None,
        timeout: Optional[float] = None,
    ) -> ip.BeginResponse:
        """Begin: acquires the key's lease, or reports it completed, failed or in progress."""
        return await self._run(
            _core.begin(self, key, fingerprint=fingerprint, lease=lease, retention=retention, timeout=timeout)
        )

    async def complete(
        self, key: str, lease_token: int, result: Any = b"", *, timeout: Optional[float] = None
    ) -> ip.CompleteResponse:
        """Records the result (bytes or str) under the lease."""
        return await self._run(_core.complete(self, key, lease_token, result, timeout))

    async def release(
        self,
        key: str,
        lease_token: int,
        *,
        error: str = "",
        permanent: bool = False,
        timeout: Optional[float] = None,
    ) -> ip.ReleaseResponse:
        """Releases the lease; ``permanent`` records the key as failed with ``error``."""
        return await self._run(
            _core.release(self, key, lease_token, error=error, permanent=permanent, timeout=timeout)
        )

    async def extend(
        self, key: str, lease_token: int, *, lease: DurationLike = None, timeout: Optional[float] = None
    ) -> ip.ExtendResponse:
        """Extends the lease (by ``lease``, or the sidecar's default)."""
        return await self._run(_core.extend(self, key, lease_token, lease=lease, timeout=timeout))

    async def get(self, key: str, *, timeout: Optional[float] = None) -> ip.GetResponse:
        """The key's record (KeyNotFound when there is none)."""
        return await self._run(_core.get(self, key, timeout))

    # -- WaitService ------------------------------------------------------

    async def create_wait(
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
        return await self._run(
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

    async def signal_wait(
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
        return await self._run(
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

    async def await_wait(
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
        return await self._run(
            _core.await_wait(
                self, turn_id, name, handle=handle, await_timeout=await_timeout, namespace=namespace, timeout=timeout
            )
        )

    async def get_wait(
        self,
        turn_id: str = "",
        name: str = "",
        *,
        handle: str = "",
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.GetWaitResponse:
        """GetWait (:class:`WaitNotFound` when there is none)."""
        return await self._run(_core.get_wait(self, turn_id, name, handle=handle, namespace=namespace, timeout=timeout))

    async def list_waits(
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
        return await self._run(
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

    async def iter_waits(self, **kwargs: Any) -> AsyncIterator[wp.Wait]:
        """Every wait matching the filters of :meth:`list_waits`, across pages."""
        pages = _core.wait_pages(self, kwargs)
        while not pages.done:
            for w in await self._run(pages.next()):
                yield w

    async def cancel_wait(
        self,
        turn_id: str = "",
        name: str = "",
        *,
        handle: str = "",
        namespace: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> wp.CancelWaitResponse:
        """CancelWait: the wait, CANCELLED; a wait settled otherwise raises :class:`WaitSettled`."""
        return await self._run(_core.cancel_wait(self, turn_id, name, handle=handle, namespace=namespace, timeout=timeout))

    # -- pausing a run ----------------------------------------------------

    async def signal(
        self, turn_id: str, name: str, payload: Union[bytes, str] = b"", *, namespace: Optional[str] = None
    ) -> bool:
        """Resolves the wait ``name`` of ``turn_id`` with ``payload`` (a str is
        sent as UTF-8). True if this call settled it, False if it repeated the
        winning signal; :class:`WaitSettled` (with the winner as ``.wait``)
        when another payload won or the wait was cancelled or expired. A
        wait that does not exist yet is created resolved, so a signal sent
        before its run waits is kept."""
        return await self._run(_core.signal(self, turn_id, name, payload, namespace))

    async def wait_for_signal(
        self, turn_id: str, name: str, *, timeout: Optional[float] = None, namespace: Optional[str] = None
    ) -> bytes:
        """Creates the wait if it does not exist, waits until it is settled,
        and returns the payload it was resolved with. Raises
        :class:`WaitExpired` or :class:`WaitCancelled`, or :class:`WaitTimeout`
        (the wait still pending) after ``timeout`` seconds (None: no limit).
        Waits in Awaits of at most a minute, each retried as every call is,
        so a sidecar restarted meanwhile is ridden over."""
        return await self._run(_core.wait_for_signal(self, turn_id, name, timeout, namespace))

    async def sleep_until(self, turn_id: str, name: str, when: TimestampLike, *, namespace: Optional[str] = None) -> None:
        """A durable sleep: the wait ``name`` of ``turn_id`` with a timer at
        ``when`` (a datetime, naive meaning UTC, or ns since the epoch, or a
        Timestamp), then waits until it is settled. The first creation of a
        wait stands, so a run that resumes keeps its first time: after it,
        this returns at once; before it, it waits only the rest. A signal of
        the wait wakes it early; :class:`WaitCancelled` if it is cancelled."""
        return await self._run(_core.sleep_until(self, turn_id, name, when, namespace))

    # -- once -------------------------------------------------------------

    async def once(
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
        """Like :meth:`stepwell.Client.once`; ``fn`` may be sync or async (its
        result is awaited when it is awaitable); the heartbeat is an asyncio task."""
        return await self._run(
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

    def once_decorator(
        self, key_fn: Callable[..., str], **once_kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]:
        """Decorator form of :meth:`once` for sync or async functions; the
        decorated function becomes a coroutine function."""

        def deco(f: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
            bind = _core.bind_once(key_fn, f)

            # Not shared with Client beyond bind_once: a coroutine function
            # here, a plain function there.
            @functools.wraps(f)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                key, run = bind(args, kwargs)
                return await self.once(key, run, **once_kwargs)

            return wrapper

        return deco
