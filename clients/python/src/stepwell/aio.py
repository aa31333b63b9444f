"""The asyncio stepwell client (grpc.aio)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from typing import Any, AsyncIterator, Awaitable, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

import grpc
import grpc.aio

from . import _common as c
from ._common import DurationLike, OnceContext, RetryPolicy, TimestampLike
from .client import _takes_once_context, turn_status
from ._security import TLS, AsyncBearerTokenInterceptor, check_token, refuse_duplicate_authorization, resolve_credentials
from ._tracing import async_interceptors
from .errors import LeaseLost, NotAcquired, OnceTimeout, OperationFailed, StepwellError, from_rpc_error
from .v1 import checkpoint_pb2 as cp
from .v1 import checkpoint_pb2_grpc as cp_grpc
from .v1 import idempotency_pb2 as ip
from .v1 import idempotency_pb2_grpc as ip_grpc
from .v1 import records_pb2_grpc as rec_grpc

T = TypeVar("T")


class AsyncClient:
    """The asyncio twin of :class:`stepwell.Client`: same methods, awaitable.

    Create it inside a running event loop; ``async with AsyncClient(...)``
    closes the channel.
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
        interceptors = async_interceptors() + ([AsyncBearerTokenInterceptor(secret)] if secret is not None else [])
        if credentials is None:
            self._channel = grpc.aio.insecure_channel(addr, options=opts, interceptors=interceptors or None)
        else:
            self._channel = grpc.aio.secure_channel(addr, credentials, options=opts, interceptors=interceptors or None)
        self.target = target
        self.namespace = namespace
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.metadata = list(metadata or [])
        self.checkpoint_stub = cp_grpc.CheckpointServiceStub(self._channel)
        self.idempotency_stub = ip_grpc.IdempotencyServiceStub(self._channel)
        self.record_stub = rec_grpc.RecordServiceStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        attempt = 0
        while True:
            attempt += 1
            try:
                return await method(
                    request,
                    timeout=self.timeout if timeout is None else timeout,
                    metadata=self.metadata or None,
                )
            except grpc.RpcError as rpc_err:
                err = from_rpc_error(rpc_err)
                if not self.retry.should_retry(err, attempt):
                    raise err from None
            await asyncio.sleep(self.retry.backoff(attempt))

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
        return await self._call(self.checkpoint_stub.Checkpoint, req, timeout)

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
        req = cp.RestoreRequest(
            namespace=self.namespace,
            turn_id=turn_id,
            page_size=page_size,
            page_token=page_token,
            newest_first=newest_first,
            phase=phase,
            expect_workflow_version=expect_workflow_version,
        )
        return await self._call(self.checkpoint_stub.Restore, req, timeout)

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
        token = ""
        while True:
            page = await self.restore_page(
                turn_id,
                page_size=page_size,
                page_token=token,
                newest_first=newest_first,
                phase=phase,
                expect_workflow_version=expect_workflow_version,
                timeout=timeout,
            )
            for ck in page.checkpoints:
                yield ck
            token = page.next_page_token
            if not token:
                return

    async def restore(self, turn_id: str, **kwargs: Any) -> List[cp.Checkpoint]:
        return [ck async for ck in self.iter_restore(turn_id, **kwargs)]

    async def latest(
        self, turn_id: str, *, expect_workflow_version: str = "", timeout: Optional[float] = None
    ) -> Optional[cp.Checkpoint]:
        page = await self.restore_page(
            turn_id, page_size=1, newest_first=True, expect_workflow_version=expect_workflow_version, timeout=timeout
        )
        return page.checkpoints[0] if page.checkpoints else None

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
        req = cp.ListTurnsRequest(
            namespace=self.namespace,
            status=turn_status(status),
            session_id=session_id,
            page_size=page_size,
            page_token=page_token,
        )
        if updated_before is not None:
            req.updated_before.CopyFrom(c.to_timestamp(updated_before))
        return await self._call(self.checkpoint_stub.ListTurns, req, timeout)

    async def iter_turns(self, **kwargs: Any) -> AsyncIterator[cp.TurnSummary]:
        kwargs.pop("page_token", None)
        token = ""
        while True:
            page = await self.list_turns(page_token=token, **kwargs)
            for t in page.turns:
                yield t
            token = page.next_page_token
            if not token:
                return

    async def delete_turn(self, turn_id: str, *, timeout: Optional[float] = None) -> int:
        req = cp.DeleteTurnRequest(namespace=self.namespace, turn_id=turn_id)
        return int((await self._call(self.checkpoint_stub.DeleteTurn, req, timeout)).deleted)

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
        req = ip.BeginRequest(namespace=self.namespace, key=key, fingerprint=c.to_bytes(fingerprint))
        d = c.to_duration(lease)
        if d is not None:
            req.lease.CopyFrom(d)
        r = c.to_duration(retention)
        if r is not None:
            req.retention.CopyFrom(r)
        return await self._call(self.idempotency_stub.Begin, req, timeout)

    async def complete(
        self, key: str, lease_token: int, result: Any = b"", *, timeout: Optional[float] = None
    ) -> ip.CompleteResponse:
        req = ip.CompleteRequest(
            namespace=self.namespace, key=key, lease_token=int(lease_token), result=c.to_bytes(result)
        )
        return await self._call(self.idempotency_stub.Complete, req, timeout)

    async def release(
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
        return await self._call(self.idempotency_stub.Release, req, timeout)

    async def extend(
        self, key: str, lease_token: int, *, lease: DurationLike = None, timeout: Optional[float] = None
    ) -> ip.ExtendResponse:
        req = ip.ExtendRequest(namespace=self.namespace, key=key, lease_token=int(lease_token))
        d = c.to_duration(lease)
        if d is not None:
            req.lease.CopyFrom(d)
        return await self._call(self.idempotency_stub.Extend, req, timeout)

    async def get(self, key: str, *, timeout: Optional[float] = None) -> ip.GetResponse:
        req = ip.GetRequest(namespace=self.namespace, key=key)
        return await self._call(self.idempotency_stub.Get, req, timeout)

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
    ) -> Any:
        """Like :meth:`stepwell.Client.once`; ``fn`` may be sync or async (its
        result is awaited when it is awaitable); the heartbeat is an asyncio task."""
        deadline = time.monotonic() + wait_timeout
        sleep = poll_interval
        while True:
            r = await self.begin(key, fingerprint=fingerprint, lease=lease, retention=retention)
            if r.outcome == ip.BEGIN_OUTCOME_COMPLETED:
                return c.decode_result(r.result)
            if r.outcome == ip.BEGIN_OUTCOME_FAILED:
                raise OperationFailed(grpc.StatusCode.FAILED_PRECONDITION, r.error, "FAILED", metadata={"key": key})
            if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
                return await self._run_acquired(key, r, fn, lease, heartbeat)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OnceTimeout(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"key {key!r} still in progress after {wait_timeout}s",
                    "IN_PROGRESS",
                    metadata={"key": key},
                )
            await asyncio.sleep(min(sleep, remaining, max(c.seconds_until(r.lease_expires_at), 0.005)))
            sleep = min(sleep * 2, 1.0)

    async def _run_acquired(
        self, key: str, r: ip.BeginResponse, fn: Callable[..., Any], lease: float, heartbeat: Optional[float]
    ) -> Any:
        ctx = OnceContext(key, int(r.lease_token), int(r.attempt), bool(r.previous_lease_expired))
        interval = heartbeat if heartbeat is not None else max(lease / 3.0, 0.01)

        async def beat() -> None:
            while True:
                await asyncio.sleep(interval)
                try:
                    await self.extend(key, ctx.lease_token, lease=lease)
                except (LeaseLost, NotAcquired):
                    ctx.lease_lost = True
                    return
                except StepwellError:
                    continue

        task = asyncio.ensure_future(beat())

        async def stop() -> None:
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass

        try:
            value = fn(ctx) if c.wants_context(fn) else fn()
            if inspect.isawaitable(value):
                value = await value
        except BaseException as exc:
            await stop()
            try:
                await self.release(key, ctx.lease_token, error=f"{type(exc).__name__}: {exc}"[:16000])
            except StepwellError:
                pass
            raise
        await stop()
        raw = c.encode_result(value)
        await self.complete(key, ctx.lease_token, raw)
        return c.decode_result(raw)

    def once_decorator(
        self, key_fn: Callable[..., str], **once_kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Awaitable[Any]]]:
        """Decorator form of :meth:`once` for sync or async functions; the
        decorated function becomes a coroutine function."""

        def deco(f: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
            takes_ctx = _takes_once_context(f)

            @functools.wraps(f)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                key = key_fn(*args, **kwargs)

                def run(ctx: OnceContext) -> Any:
                    if takes_ctx:
                        return f(*args, once_context=ctx, **kwargs)
                    return f(*args, **kwargs)

                return await self.once(key, run, **once_kwargs)

            return wrapper

        return deco
