"""Tuples larger than one gRPC message, through both savers, with the
client's and the sidecar's default limits (4 MiB messages): a checkpoint of
five 3 MB channels and 3 MB of pending writes is put and read back whole by
get_tuple and list (and aget_tuple and alist), the sidecar cutting it into
pages that each fit 4 MiB; a task whose writes do not fit one request is
stored in several, and its writes count only once all of them are stored,
so a put_writes cut short leaves the task as if it had written nothing."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

import grpc
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from lg_support import lg_namespace, lg_sidecar, lg_target, new_thread, thread_config  # noqa: F401  (fixtures)
from stepwell import Client, StepwellError
from stepwell.langgraph import AsyncStepwellSaver, StepwellSaver
from stepwell.v1 import records_pb2 as rec

MB3 = 3 << 20
CHANNELS = 5


def big_values() -> Dict[str, Any]:
    """Five channels of 3 MB: text and bytes, of random content."""
    return {f"c{i}": os.urandom(MB3 // 2).hex() if i % 2 == 0 else os.urandom(MB3) for i in range(CHANNELS)}


def checkpoint(values: Dict[str, Any], versions: Dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


# What a test needs of a saver, each as a coroutine so that one check runs
# against the blocking saver and the async one alike.
Put = Callable[[Any, Any, Dict[str, Any], Dict[str, Any]], Awaitable[Any]]
PutWrites = Callable[[Any, List[Tuple[str, Any]], str], Awaitable[None]]
Get = Callable[[Any], Awaitable[Any]]
Listed = Callable[..., Awaitable[List[Any]]]


def blocking(saver: StepwellSaver) -> Tuple[Put, PutWrites, Get, Listed]:
    async def put(cfg: Any, cp: Any, meta: Dict[str, Any], versions: Dict[str, Any]) -> Any:
        return saver.put(cfg, cp, meta, versions)

    async def put_writes(cfg: Any, writes: List[Tuple[str, Any]], task: str) -> None:
        saver.put_writes(cfg, writes, task)

    async def get(cfg: Any) -> Any:
        return saver.get_tuple(cfg)

    async def listed(cfg: Any, **kw: Any) -> List[Any]:
        return list(saver.list(cfg, **kw))

    return put, put_writes, get, listed


def asynchronous(saver: AsyncStepwellSaver) -> Tuple[Put, PutWrites, Get, Listed]:
    async def listed(cfg: Any, **kw: Any) -> List[Any]:
        return [t async for t in saver.alist(cfg, **kw)]

    return saver.aput, saver.aput_writes, saver.aget_tuple, listed  # type: ignore[return-value]


async def eighteen_megabytes(
    thread: str, one_put: bool, put: Put, put_writes: PutWrites, get: Get, listed: Listed
) -> None:
    """Puts five 3 MB channels in one checkpoint (``one_put``: all in one
    put, else one more channel a put, so that each put fits one message)
    with 3 MB of pending writes, and a newer checkpoint that keeps them;
    then reads both back whole."""
    values = big_values()
    versions = {ch: 1 for ch in values}
    first = thread_config(thread, checkpoint_ns="")
    steps = [list(values)] if one_put else [[ch] for ch in values]
    for n, new in enumerate(steps):
        so_far = [ch for step in steps[: n + 1] for ch in step]
        cp = checkpoint({ch: values[ch] for ch in so_far}, {ch: 1 for ch in so_far})
        first = await put(first, cp, {"step": n}, {ch: 1 for ch in new})
    # 3 MB of pending writes: one task's three writes of 1 MB.
    writes = [(f"c{i}", os.urandom(1 << 20)) for i in range(3)]
    await put_writes(first, writes, "task-1")
    # A newer checkpoint that keeps the five channels and adds a small one.
    later_versions = {**versions, "small": 2}
    later = await put(first, checkpoint({**values, "small": 2}, later_versions), {"step": 2}, {"small": 2})

    got = await get(first)
    assert got is not None and got.checkpoint["channel_values"] == values
    assert got.pending_writes == [("task-1", ch, v) for ch, v in writes]
    newest = await get(thread_config(thread))
    assert newest.config == later and newest.checkpoint["channel_values"] == {**values, "small": 2}

    history = await listed(thread_config(thread))
    assert [t.config for t in history[:2]] == [later, first] and len(history) == len(steps) + 1
    assert history[1].checkpoint["channel_values"] == values and history[1].pending_writes == got.pending_writes
    assert history[0].checkpoint["channel_values"] == {**values, "small": 2}
    assert [t.config for t in await listed(thread_config(thread), limit=1)] == [later]
    before = await listed(thread_config(thread), before=later, limit=1)
    assert [t.config for t in before] == [first] and before[0].checkpoint["channel_values"] == values


@pytest.mark.parametrize("one_put", [True, False], ids=["one-put", "a-channel-a-put"])
def test_a_checkpoint_of_eighteen_megabytes_round_trips_through_the_blocking_saver(
    lg_target: str, lg_namespace: str, one_put: bool
) -> None:
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace, timeout=120) as saver:
        asyncio.run(eighteen_megabytes(new_thread(), one_put, *blocking(saver)))


@pytest.mark.parametrize("one_put", [True, False], ids=["one-put", "a-channel-a-put"])
def test_a_checkpoint_of_eighteen_megabytes_round_trips_through_the_async_saver(
    lg_target: str, lg_namespace: str, one_put: bool
) -> None:
    async def run() -> None:
        async with AsyncStepwellSaver.from_address(lg_target, namespace=lg_namespace, timeout=120) as saver:
            await eighteen_megabytes(new_thread(), one_put, *asynchronous(saver))

    asyncio.run(run())


async def two_big_writes(thread: str, put: Put, put_writes: PutWrites, get: Get, listed: Listed) -> None:
    cfg = await put(thread_config(thread, checkpoint_ns=""), checkpoint({}, {}), {"step": 1}, {})
    writes = [("a", os.urandom(MB3)), ("b", os.urandom(MB3)), ("c", "small")]
    await put_writes(cfg, writes, "task-1")
    await put_writes(cfg, [("d", "alone")], "task-2")
    expected = [("task-1", ch, v) for ch, v in writes] + [("task-2", "d", "alone")]
    assert (await get(cfg)).pending_writes == expected
    assert (await listed(thread_config(thread)))[0].pending_writes == expected


@pytest.mark.parametrize("flavour", ["blocking", "async"])
def test_a_tasks_writes_larger_than_one_request_are_stored(lg_target: str, lg_namespace: str, flavour: str) -> None:
    if flavour == "blocking":
        with StepwellSaver.from_address(lg_target, namespace=lg_namespace, timeout=120) as saver:
            asyncio.run(two_big_writes(new_thread(), *blocking(saver)))
        return

    async def run() -> None:
        async with AsyncStepwellSaver.from_address(lg_target, namespace=lg_namespace, timeout=120) as saver:
            await two_big_writes(new_thread(), *asynchronous(saver))

    asyncio.run(run())


class CrashingClient(Client):
    """Stops, as a crashed process would, before the PutRecords numbered
    ``crash_at`` (counting from 1); every call after that fails too."""

    crash_at: Optional[int] = None
    puts = 0

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        if isinstance(request, rec.PutRecordsRequest):
            self.puts += 1
            if self.crash_at is not None and self.puts >= self.crash_at:
                raise StepwellError(grpc.StatusCode.UNAVAILABLE, "the worker crashed", "CRASHED")
        return super()._call(method, request, timeout)


def stored_writes(client: Client, namespace: str, thread: str) -> List[rec.Record]:
    """Every record of kind "write" of ``thread``, as stored."""
    req = rec.ListRecordsRequest(namespace=namespace, turn_id=thread, kind="write")
    found: List[rec.Record] = []
    while True:
        page = client._call(client.record_stub.ListRecords, req, 120)
        found.extend(e.record for e in page.entries)
        if not page.next_page_token:
            return found
        req.page_token = page.next_page_token


def test_a_tasks_writes_cut_short_count_as_none_and_its_rerun_counts_once(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    client = CrashingClient(lg_target, namespace=lg_namespace, timeout=120)
    with client, StepwellSaver(client) as saver:
        cfg = saver.put(thread_config(thread, checkpoint_ns=""), checkpoint({}, {}), {"step": 1}, {})
        saver.put_writes(cfg, [("done", "small")], "task-0")
        # Three writes of 3 MB go in three requests; the worker dies after the first.
        client.crash_at = client.puts + 2
        with pytest.raises(StepwellError):
            saver.put_writes(cfg, [(ch, os.urandom(MB3)) for ch in "abc"], "task-1")
        client.crash_at = None
        assert len(stored_writes(client, lg_namespace, thread)) == 2, "task-1's first part is stored"
        tup = saver.get_tuple(cfg)
        assert tup is not None and tup.pending_writes == [("task-0", "done", "small")], "but counts for nothing"

        # The task runs again, its writes differ, and they all count, once.
        rerun = [(ch, os.urandom(MB3)) for ch in "ab"]
        saver.put_writes(cfg, rerun, "task-1")
        tup = saver.get_tuple(cfg)
        assert tup is not None
        assert tup.pending_writes == [("task-0", "done", "small")] + [("task-1", ch, v) for ch, v in rerun]
