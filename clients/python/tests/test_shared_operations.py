"""The operations Client and AsyncClient share (stepwell._core), run by each client.

The same scenario runs on both clients where each drives the shared logic
with its own concurrency primitive: once()'s heartbeat (a thread, a task),
a lease taken away while fn runs, and an asyncio cancellation in the middle
of fn. One test drives the retry loop by hand, with no I/O at all.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List

import grpc
import pytest
from test_resource_exhausted import ConstructedRpcError

from stepwell import AsyncClient, Client, NotAcquired, OnceContext, RetryPolicy, Unavailable
from stepwell import _core
from stepwell.v1 import checkpoint_pb2 as cp
from stepwell.v1 import idempotency_pb2 as ip


class RecordingClient(Client):
    """Keeps every request it sends (every RPC of every method goes through ``_call``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: List[Any] = []

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        return super()._call(method, request, timeout)


class RecordingAsyncClient(AsyncClient):
    """Keeps every request it sends (every RPC of every method goes through ``_call``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: List[Any] = []

    async def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        return await super()._call(method, request, timeout)


def names(sent: List[Any]) -> List[str]:
    return [type(r).__name__ for r in sent]


def extends(sent: List[Any]) -> int:
    return sum(isinstance(r, ip.ExtendRequest) for r in sent)


def wait_until(cond: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


async def async_wait_until(cond: Callable[[], bool], what: str, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def heartbeat_threads(key: str) -> List[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"stepwell-once-{key}"]


# -- the heartbeat keeps a lease longer than its length ------------------------


def test_sync_heartbeat_keeps_the_lease_and_every_rpc_goes_through_call(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    with RecordingClient(target, namespace=namespace, **connect) as c:
        started = time.monotonic()

        def work(ctx: OnceContext) -> str:
            # Runs until the heartbeat has extended the lease three times:
            # longer than the lease itself.
            wait_until(lambda: extends(c.sent) >= 3, "three Extends")
            assert not ctx.lease_lost
            return "done"

        assert c.once("hb/sync", work, lease=0.3, heartbeat=0.1) == "done"
        assert time.monotonic() - started > 0.3
        kinds = names(c.sent)
        assert kinds[0] == "BeginRequest" and kinds[-1] == "CompleteRequest"
        assert set(kinds[1:-1]) == {"ExtendRequest"} and len(kinds) >= 5
        assert heartbeat_threads("hb/sync") == []  # the thread ended before Complete
        assert c.get("hb/sync").state == ip.RECORD_STATE_COMPLETED


def test_async_heartbeat_keeps_the_lease_and_every_rpc_goes_through_call(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    async def main() -> None:
        async with RecordingAsyncClient(target, namespace=namespace, **connect) as c:
            started = time.monotonic()

            async def work(ctx: OnceContext) -> str:
                await async_wait_until(lambda: extends(c.sent) >= 3, "three Extends")
                assert not ctx.lease_lost
                return "done"

            assert await c.once("hb/async", work, lease=0.3, heartbeat=0.1) == "done"
            assert time.monotonic() - started > 0.3
            kinds = names(c.sent)
            assert kinds[0] == "BeginRequest" and kinds[-1] == "CompleteRequest"
            assert set(kinds[1:-1]) == {"ExtendRequest"} and len(kinds) >= 5
            assert asyncio.all_tasks() == {asyncio.current_task()}  # the heartbeat task ended
            assert (await c.get("hb/async")).state == ip.RECORD_STATE_COMPLETED

    asyncio.run(main())


# -- a lease taken away while fn runs: the heartbeat notices ------------------


def test_sync_heartbeat_notices_a_lease_taken_away(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    with Client(target, namespace=namespace, **connect) as c, Client(target, namespace=namespace, **connect) as op:
        running = threading.Event()
        outcome: Dict[str, Any] = {}

        def work(ctx: OnceContext) -> str:
            running.set()
            wait_until(lambda: ctx.lease_lost, "the heartbeat to find the lease gone")
            return "late"

        def holder() -> None:
            try:
                outcome["value"] = c.once("lost/sync", work, lease=30, heartbeat=0.05)
            except BaseException as exc:  # noqa: BLE001  (inspected below)
                outcome["error"] = exc

        t = threading.Thread(target=holder)
        t.start()
        assert running.wait(10)
        # An operator frees the key the holder still runs under.
        op.release("lost/sync", op.get("lost/sync").lease_token)
        t.join(20)
        assert not t.is_alive()
        assert "value" not in outcome and isinstance(outcome["error"], NotAcquired)  # its Complete is refused
        assert op.once("lost/sync", lambda: "again") == "again"


def test_async_heartbeat_notices_a_lease_taken_away(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    async def main() -> None:
        async with AsyncClient(target, namespace=namespace, **connect) as c:
            running = asyncio.Event()

            async def work(ctx: OnceContext) -> str:
                running.set()
                await async_wait_until(lambda: ctx.lease_lost, "the heartbeat to find the lease gone")
                return "late"

            holder = asyncio.ensure_future(c.once("lost/async", work, lease=30, heartbeat=0.05))
            await asyncio.wait_for(running.wait(), 10)
            await c.release("lost/async", (await c.get("lost/async")).lease_token)
            with pytest.raises(NotAcquired):
                await asyncio.wait_for(holder, 20)
            assert await c.once("lost/async", lambda: "again") == "again"

    asyncio.run(main())


# -- asyncio cancellation in the middle of fn -----------------------------------


def test_async_once_cancelled_mid_fn_releases_the_lease_and_stops_the_heartbeat(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    async def main() -> None:
        async with AsyncClient(target, namespace=namespace, **connect) as c:
            running = asyncio.Event()

            async def forever(ctx: OnceContext) -> None:
                running.set()
                await asyncio.Event().wait()

            holder = asyncio.ensure_future(c.once("cancel/async", forever, lease=30, heartbeat=0.05))
            await asyncio.wait_for(running.wait(), 10)
            holder.cancel()
            with pytest.raises(asyncio.CancelledError):
                await holder
            got = await c.get("cancel/async")
            assert got.state == ip.RECORD_STATE_RELEASED
            assert asyncio.all_tasks() == {asyncio.current_task()}
            # Released, not failed: the next caller runs it at once.
            assert await c.once("cancel/async", lambda ctx: ctx.attempt) == 2

    asyncio.run(main())


# -- the retry loop, with no I/O --------------------------------------------------


class Conf:
    namespace = "ns"
    timeout = 7.0
    retry = RetryPolicy(max_attempts=3, initial_backoff=0.5, max_backoff=0.8, multiplier=2.0, jitter=0.0)
    metadata = [("x-k", "v")]
    checkpoint_stub = object()
    idempotency_stub = object()


def test_retry_loop_resends_the_same_request_then_raises_typed() -> None:
    method = object()
    request = cp.CheckpointRequest(turn_id="t")
    op = _core.retrying(Conf(), method, request, None)
    first = op.send(None)
    assert isinstance(first, _core.Rpc)
    assert (first.method, first.request, first.timeout, first.metadata) == (method, request, 7.0, [("x-k", "v")])
    unavailable = ConstructedRpcError(grpc.StatusCode.UNAVAILABLE, None)
    backoffs = []
    effect = op.throw(unavailable)
    for _ in range(2):
        assert isinstance(effect, _core.Sleep)
        backoffs.append(effect.seconds)
        effect = op.send(None)
        assert isinstance(effect, _core.Rpc) and effect.request is request  # the very same message
        if len(backoffs) == 2:
            break
        effect = op.throw(unavailable)
    assert backoffs == [0.5, 0.8]
    with pytest.raises(Unavailable):
        op.throw(unavailable)  # the third attempt was the last


def test_retry_loop_returns_the_response() -> None:
    op = _core.retrying(Conf(), object(), cp.RestoreRequest(), 2.5)
    assert op.send(None).timeout == 2.5
    answer = cp.RestoreResponse(next_page_token="n")
    with pytest.raises(StopIteration) as done:
        op.send(answer)
    assert done.value.value is answer
