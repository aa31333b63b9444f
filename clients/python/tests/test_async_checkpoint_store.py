"""AsyncCheckpointStore, the asyncio twin of CheckpointStore, against the real sidecar.

Mirrors tests/test_checkpoint_store.py, the clock-skew tests included (workers
an hour apart, a save without a load, a stopped clock), and checks what both
stores send: one Restore before the first save of an unseen execution, none
after.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from typing import Any, Awaitable, Callable, Dict, List, TypeVar

import pytest

from stepwell import (
    AsyncCheckpointStore,
    AsyncClient,
    CheckpointStore,
    Client,
    ExecutionCheckpoint,
    WorkflowVersionMismatch,
)
from stepwell.v1 import checkpoint_pb2 as cp

T = TypeVar("T")
HOUR_NS = 3600 * 1_000_000_000


def _behind(offset_ns: int) -> Callable[[], int]:
    """A clock ``offset_ns`` behind this machine's."""
    return lambda: time.time_ns() - offset_ns


def run_with(
    target: str, namespace: str, connect: Dict[str, Any], body: Callable[[AsyncClient], Awaitable[T]]
) -> T:
    async def main() -> T:
        async with AsyncClient(target, namespace=namespace, **connect) as client:
            return await body(client)

    return asyncio.run(main())


def test_save_overwrites_load_latest_and_history(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    async def body(client: AsyncClient) -> None:
        store = AsyncCheckpointStore(client, workflow_version="1.0.0")
        assert await store.load("ex-1") is None
        await store.save("ex-1", {"messages": ["hi"]}, step_index=0, step_name="plan")
        await store.save("ex-1", {"messages": ["hi", "a"]}, step_index=1, step_name="act")
        last = await store.load("ex-1")
        assert last is not None
        assert (last.status, last.step_index, last.step_name) == ("running", 1, "act")
        assert last.state == {"messages": ["hi", "a"]} and not last.terminal and last.resumable
        hist = await store.history("ex-1")
        assert [h.step_index for h in hist] == [0, 1]
        assert hist[0].timestamp_ns < hist[1].timestamp_ns
        with pytest.raises(WorkflowVersionMismatch):
            await store.load("ex-1", expect_workflow_version="2.0.0")

    run_with(target, namespace, connect, body)


def test_failed_keeps_error_and_stays_resumable(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    async def body(client: AsyncClient) -> None:
        store = AsyncCheckpointStore(client)
        await store.save("ex-f", {"x": 1}, step_index=0)
        await store.save(
            "ex-f", {"x": 1}, status="failed", step_index=1, step_name="call-llm", error=TimeoutError("llm timed out")
        )
        f = await store.load("ex-f")
        assert f is not None
        assert f.status == "failed" and f.error == {"type": "TimeoutError", "message": "llm timed out"}
        assert not f.terminal and f.resumable
        assert [s.execution_id for s in await store.list("failed")] == ["ex-f"]
        assert [s.execution_id for s in await store.resumable()] == ["ex-f"]
        await store.save("ex-f", {"x": 2}, status="completed", step_index=2)
        done = await store.load("ex-f")
        assert done is not None and done.terminal
        assert await store.list("failed") == [] and await store.resumable() == []
        assert [h.status for h in await store.history("ex-f")] == ["running", "failed", "completed"]

    run_with(target, namespace, connect, body)


def test_list_by_status_and_cleanup(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    async def body(client: AsyncClient) -> None:
        store = AsyncCheckpointStore(client, session_id="agent-a")
        other = AsyncCheckpointStore(client, session_id="agent-b")
        await store.save("r", {}, status="running")
        await store.save("p", {}, status="paused")
        await store.save("c", {}, status="completed")
        await other.save("z", {}, status="completed")
        assert [s.execution_id for s in await store.list("running")] == ["r"]
        assert [s.execution_id for s in await store.list("paused")] == ["p"]
        assert [s.execution_id for s in await store.list("completed")] == ["c"]
        assert [(s.execution_id, s.status) for s in await store.list()] == [
            ("c", "completed"),
            ("p", "paused"),
            ("r", "running"),
        ]
        with pytest.raises(ValueError):
            await store.save("r", {}, status="weird")
        with pytest.raises(ValueError):
            await store.list("weird")
        assert await store.cleanup(older_than=dt.timedelta(hours=1)) == 0  # too recent
        assert await store.cleanup() == 1  # completed executions of this store only
        assert await store.load("c") is None and await store.history("c") == []
        assert await other.load("z") is not None
        assert await store.delete("p") == 1
        assert [s.execution_id for s in await store.list()] == ["r"]

    run_with(target, namespace, connect, body)


def test_resume_on_a_worker_whose_clock_is_behind_keeps_its_save(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    # Worker B's clock is one hour behind A's: far more than the gap between
    # their saves. B's save must still be the newest version.
    async def body(client: AsyncClient) -> None:
        a = AsyncCheckpointStore(client)
        b = AsyncCheckpointStore(client, clock=_behind(HOUR_NS))
        saved_a = await a.save("ex-skew", {"by": "a"}, step_index=0)
        loaded = await b.load("ex-skew")
        assert loaded is not None and (loaded.state, loaded.timestamp_ns) == ({"by": "a"}, saved_a.timestamp_ns)
        saved_b = await b.save("ex-skew", {"by": "b"}, step_index=1)
        assert saved_b.timestamp_ns > saved_a.timestamp_ns
        await b.save("ex-skew", {"by": "b"}, status="paused", step_index=2)
        for store in (a, b, AsyncCheckpointStore(client)):
            last = await store.load("ex-skew")
            assert last is not None and (last.state, last.step_index, last.status) == ({"by": "b"}, 2, "paused")
        assert [h.step_index for h in await a.history("ex-skew")] == [0, 1, 2]
        # A, having loaded B's save, stamps above it too (its own clock is ahead anyway).
        await a.save("ex-skew", {"by": "a"}, step_index=3)
        last = await a.load("ex-skew")
        assert last is not None and last.step_index == 3

    run_with(target, namespace, connect, body)


def test_save_without_load_on_a_worker_whose_clock_is_behind(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    async def body(client: AsyncClient) -> None:
        a = AsyncCheckpointStore(client)
        b = AsyncCheckpointStore(client, clock=_behind(HOUR_NS))
        saved_a = await a.save("ex-blind", {"by": "a"}, step_index=0)
        saved_b = await b.save("ex-blind", {"by": "b"}, step_index=1)  # b never loaded it
        assert saved_b.timestamp_ns == saved_a.timestamp_ns + 1
        last = await AsyncCheckpointStore(client).load("ex-blind")
        assert last is not None and (last.state, last.step_index) == ({"by": "b"}, 1)
        # A clock behind on a fresh execution is used as it is.
        fresh = await b.save("ex-fresh", {}, step_index=0)
        assert fresh.timestamp_ns < saved_a.timestamp_ns - HOUR_NS // 2

    run_with(target, namespace, connect, body)


def test_injected_clock_stamps_saves_strictly_increasing(target: str, namespace: str, connect: Dict[str, Any]) -> None:
    t0 = 1_700_000_000 * 1_000_000_000

    async def body(client: AsyncClient) -> None:
        store = AsyncCheckpointStore(client, clock=lambda: t0)  # a clock that stands still
        assert (await store.save("ex-clock", {"n": 0})).timestamp_ns == t0
        assert (await store.save("ex-clock", {"n": 1})).timestamp_ns == t0 + 1
        # A store that stamps from the same stopped clock and never loaded: above what is stored.
        other = AsyncCheckpointStore(client, clock=lambda: t0)
        assert (await other.save("ex-clock", {"n": 2})).timestamp_ns == t0 + 2
        last = await store.load("ex-clock")
        assert last is not None and last.state == {"n": 2}
        assert (await store.save("ex-clock", {"n": 3})).timestamp_ns == t0 + 3
        # Deleting forgets the execution: a new one starts from the clock again.
        assert await store.delete("ex-clock") == 4
        assert (await store.save("ex-clock", {"n": 0})).timestamp_ns == t0

    run_with(target, namespace, connect, body)


def test_concurrent_saves_on_a_stopped_clock_never_share_a_timestamp(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    # Ten tasks save the same unseen execution at once, from a clock that
    # stands still: each gets its own timestamp, none is refused as a
    # duplicate, and the newest is the one load returns.
    t0 = 1_700_000_000 * 1_000_000_000

    async def body(client: AsyncClient) -> None:
        store = AsyncCheckpointStore(client, clock=lambda: t0)
        saved = await asyncio.gather(*[store.save("ex-many", {"n": n}, step_index=n) for n in range(10)])
        stamps = sorted(s.timestamp_ns for s in saved)
        assert stamps == [t0 + n for n in range(10)]
        newest = max(saved, key=lambda s: s.timestamp_ns)
        last = await AsyncCheckpointStore(client).load("ex-many")
        assert last is not None and (last.state, last.timestamp_ns) == (newest.state, newest.timestamp_ns)
        assert len(await store.history("ex-many")) == 10

    run_with(target, namespace, connect, body)


def test_sync_and_async_workers_resume_across_an_hour_of_skew(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    # The blocking store and the asyncio store are workers of the same
    # executions: an asyncio worker an hour behind resumes a blocking
    # worker's run, and the other way around.
    with Client(target, namespace=namespace, **connect) as sync_client:
        ahead = CheckpointStore(sync_client)
        first = ahead.save("ex-mixed", {"by": "sync"}, step_index=0)

        async def body(client: AsyncClient) -> ExecutionCheckpoint:
            behind = AsyncCheckpointStore(client, clock=_behind(HOUR_NS))
            loaded = await behind.load("ex-mixed")
            assert loaded is not None and loaded.state == {"by": "sync"}
            return await behind.save("ex-mixed", {"by": "async"}, step_index=1)

        second = run_with(target, namespace, connect, body)
        assert second.timestamp_ns > first.timestamp_ns
        last = ahead.load("ex-mixed")
        assert last is not None and (last.state, last.step_index) == ({"by": "async"}, 1)

        # The reverse: a blocking worker an hour behind, after the asyncio one.
        async def ahead_async(client: AsyncClient) -> ExecutionCheckpoint:
            return await AsyncCheckpointStore(client).save("ex-mixed-2", {"by": "async"}, step_index=0)

        third = run_with(target, namespace, connect, ahead_async)
        fourth = CheckpointStore(sync_client, clock=_behind(HOUR_NS)).save("ex-mixed-2", {"by": "sync"}, step_index=1)
        assert fourth.timestamp_ns == third.timestamp_ns + 1


class RecordingAsyncClient(AsyncClient):
    """Keeps every request it sends (every RPC goes through ``_call``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: List[Any] = []

    async def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        return await super()._call(method, request, timeout)


class RecordingClient(Client):
    """Keeps every request it sends (every RPC goes through ``_call``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sent: List[Any] = []

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        return super()._call(method, request, timeout)


SAVE_UNSEEN = ["RestoreRequest", "CheckpointRequest"]


def names(sent: List[Any]) -> List[str]:
    return [type(r).__name__ for r in sent]


def assert_newest_only(read: Any) -> None:
    """The read before a first save is Restore newest_first with page size 1."""
    assert isinstance(read, cp.RestoreRequest) and read.newest_first and read.page_size == 1


def test_async_store_reads_once_before_the_first_save_of_an_unseen_execution(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    async def main() -> None:
        async with RecordingAsyncClient(target, namespace=namespace, **connect) as client:
            store = AsyncCheckpointStore(client)
            await store.save("ex-a", {}, step_index=0)
            await store.save("ex-a", {}, step_index=1)
            assert names(client.sent) == SAVE_UNSEEN + ["CheckpointRequest"]
            client.sent.clear()
            # A loaded execution is known: no extra read before its save.
            await AsyncCheckpointStore(client).save("ex-b", {}, step_index=0)
            fresh = AsyncCheckpointStore(client)
            await fresh.load("ex-b")
            await fresh.save("ex-b", {}, step_index=1)
            assert names(client.sent) == SAVE_UNSEEN + ["RestoreRequest", "CheckpointRequest"]
            assert_newest_only(client.sent[0])

    asyncio.run(main())


def test_sync_store_reads_once_before_the_first_save_of_an_unseen_execution(
    target: str, namespace: str, connect: Dict[str, Any]
) -> None:
    with RecordingClient(target, namespace=namespace, **connect) as client:
        store = CheckpointStore(client)
        store.save("ex-a", {}, step_index=0)
        store.save("ex-a", {}, step_index=1)
        assert names(client.sent) == SAVE_UNSEEN + ["CheckpointRequest"]
        client.sent.clear()
        CheckpointStore(client).save("ex-b", {}, step_index=0)
        fresh = CheckpointStore(client)
        fresh.load("ex-b")
        fresh.save("ex-b", {}, step_index=1)
        assert names(client.sent) == SAVE_UNSEEN + ["RestoreRequest", "CheckpointRequest"]
        assert_newest_only(client.sent[0])
