"""Fenced savers: one worker at a time on a thread, and a clear error for the other.

Worker A and worker B are savers with clients of their own on the same
namespace. While A holds a thread's lease, B's first put (or its
thread_lease) raises ThreadBusy and stores nothing; once A's lease is gone
and B has taken the thread over, A's puts are refused by the sidecar
(LeaseLost), so the thread's history never forks.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import lg_graphs
from lg_support import lg_namespace, lg_sidecar, lg_target, new_thread, thread_config  # noqa: F401  (fixtures)
from stepwell import Client, LeaseLost, NotAcquired, ThreadBusy
from stepwell.langgraph import AsyncStepwellSaver, StepwellSaver, thread_lease_key
from stepwell.v1 import idempotency_pb2 as ip
from stepwell.v1 import records_pb2 as rec


class RecordingClient(Client):
    """Keeps every PutRecords request it sends."""

    puts: List[rec.PutRecordsRequest]

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        if isinstance(request, rec.PutRecordsRequest):
            self.puts.append(request)
        return super()._call(method, request, timeout)


def recording(target: str, namespace: str) -> RecordingClient:
    c = RecordingClient(target, namespace=namespace)
    c.puts = []
    return c


def put_one(saver: StepwellSaver, thread: str) -> None:
    saver.put(thread_config(thread, checkpoint_ns=""), empty_checkpoint(), {"source": "input", "step": -1}, {})


def test_second_worker_of_a_running_thread_gets_thread_busy(lg_target: str, lg_namespace: str, tmp_path: Path) -> None:
    thread = new_thread()
    config = thread_config(thread)
    client_a = recording(lg_target, lg_namespace)
    client_b = recording(lg_target, lg_namespace)
    seen_by_b: List[BaseException] = []
    with client_a, client_b, StepwellSaver(client_a, fenced=True) as a, StepwellSaver(client_b, fenced=True) as b:
        effects_b = tmp_path / "effects-b"
        graph_b = lg_graphs.chain_builder(str(effects_b)).compile(checkpointer=b)

        def b_tries() -> None:
            # Worker B starts the same thread while A is inside node "b". With
            # durability "sync" its input is stored before any node runs, so
            # the refusal comes before B does anything.
            with pytest.raises(ThreadBusy) as busy:
                graph_b.invoke({"log": ["from B"]}, config, durability="sync")
            seen_by_b.append(busy.value)

        graph_a = lg_graphs.chain_builder(hooks={"b": b_tries}).compile(checkpointer=a)
        out = graph_a.invoke({"log": []}, config, durability="sync")

        # A's view: its run completed, every put fenced by its lease.
        assert out["log"] == ["a", "b", "c", "d"]
        lease_a = a._leases[thread]
        assert client_a.puts and all(
            p.fence.key == thread_lease_key(thread) and p.fence.lease_token == lease_a.token for p in client_a.puts
        )
        # B's view: a clear error naming the thread, and nothing stored.
        assert len(seen_by_b) == 1 and seen_by_b[0].thread_id == thread
        assert client_b.puts == [] and not effects_b.exists()
        history = list(graph_a.get_state_history(config))
        assert [h.metadata["step"] for h in history] == [4, 3, 2, 1, 0, -1]
        assert all("from B" not in h.values.get("log", []) for h in history)

        # B's thread_lease is refused the same way while A holds the thread.
        with pytest.raises(ThreadBusy):
            with b.thread_lease(thread):
                pass

        # Once A lets go (close releases its leases), B continues the thread.
        a.close()
        more = graph_b.invoke({"log": ["from B"]}, config)
        assert more["log"] == ["a", "b", "c", "d", "from B", "a", "b", "c", "d"]
        assert client_b.puts and all(p.fence.key == thread_lease_key(thread) for p in client_b.puts)
        assert {p.fence.lease_token for p in client_b.puts} != {lease_a.token}


def test_thread_lease_held_and_released_around_a_run(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as a, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, fenced=True
    ) as b:
        # An unfenced saver fences the puts made inside its thread_lease.
        with a.thread_lease(thread) as lease:
            graph = lg_graphs.chain_builder().compile(checkpointer=a)
            graph.invoke({"log": []}, thread_config(thread))
            with pytest.raises(ThreadBusy) as busy:
                put_one(b, thread)
            assert busy.value.metadata["key"] == thread_lease_key(thread)
            with a.thread_lease(thread) as again:  # re-entrant: the same lease
                assert again is lease
        assert thread not in a._leases
        # Released on exit: B takes the thread at once.
        put_one(b, thread)
        assert b._leases[thread].token != lease.token


def test_first_workers_puts_are_refused_after_a_takeover(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    key = thread_lease_key(thread)
    with Client(lg_target, namespace=lg_namespace) as admin, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, fenced=True
    ) as a, StepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True) as b:
        with a.thread_lease(thread) as lease_a:
            put_one(a, thread)
            # A's lease ends without A knowing (as when it lapses while A is
            # stalled): the key is released under A's token.
            admin.release(key, lease_a.token)
            # Nobody holds the thread: A's put is refused, not stored.
            with pytest.raises(NotAcquired):
                put_one(a, thread)
            # B takes the thread over with its first put.
            put_one(b, thread)
            lease_b = b._leases[thread]
            assert lease_b.token > lease_a.token
            # A's puts are now refused with LeaseLost, writes as checkpoints.
            with pytest.raises(LeaseLost) as lost:
                put_one(a, thread)
            # As records.proto's Fence says (since the contract's revision): ABORTED,
            # the code Complete gets for a stale token.
            assert lost.value.code.name == "ABORTED" and lost.value.reason == "LEASE_LOST"
            with pytest.raises(LeaseLost):
                a.put_writes(
                    {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": "x"}},
                    [("ch", 1)],
                    "task",
                )
        # A leaving its block did not release B's lease.
        got = admin.get(key)
        assert got.state == ip.RECORD_STATE_IN_PROGRESS and got.lease_token == lease_b.token
        put_one(b, thread)
        # A's first put and B's two: nothing of A's after its lease ended.
        assert len(list(a.list(thread_config(thread)))) == 3
        b.close()
        assert admin.get(key).state == ip.RECORD_STATE_RELEASED


def test_long_thread_ids_lease_a_hashed_key(lg_target: str, lg_namespace: str) -> None:
    thread = "t" * 250  # a turn id may have 256 bytes, a lease key too: with the prefix, too long
    key = thread_lease_key(thread)
    assert key.startswith("langgraph-thread-sha256:") and len(key) <= 256
    assert thread_lease_key("short") == "langgraph-thread:short"
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True) as a:
        put_one(a, thread)
        assert a._leases[thread].key == key
        assert a.get_tuple(thread_config(thread, checkpoint_ns="")) is not None


def test_async_workers(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    config = thread_config(thread)

    async def run() -> None:
        async with AsyncStepwellSaver.from_address(
            lg_target, namespace=lg_namespace, fenced=True
        ) as a, AsyncStepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True) as b:
            graph_a = lg_graphs.chain_builder().compile(checkpointer=a)
            graph_b = lg_graphs.chain_builder().compile(checkpointer=b)
            async with a.thread_lease(thread) as lease_a:
                out = await graph_a.ainvoke({"log": []}, config)
                assert out["log"] == ["a", "b", "c", "d"]
                with pytest.raises(ThreadBusy):
                    await graph_b.ainvoke({"log": ["from B"]}, config)
                with pytest.raises(ThreadBusy):
                    async with b.thread_lease(thread):
                        pass
            async with b.thread_lease(thread) as lease_b:
                assert lease_b.token > lease_a.token
                more = await graph_b.ainvoke({"log": ["from B"]}, config)
                assert more["log"][-5:] == ["from B", "a", "b", "c", "d"]
                # A let the thread go: its next put asks again and is told B has it.
                with pytest.raises(ThreadBusy):
                    await a.aput(
                        thread_config(thread, checkpoint_ns=""), empty_checkpoint(), {"source": "input", "step": -1}, {}
                    )
            history = [h async for h in graph_a.aget_state_history(config)]
            assert len(history) == 12  # two runs of six checkpoints, nothing from the refused put

    asyncio.run(run())


class ExtendWatchingClient(Client):
    """Sets ``extended`` after every Extend that succeeded, and keeps the requests."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.extended = threading.Event()
        self.sent: List[Any] = []

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        out = super()._call(method, request, timeout)
        if type(request).__name__ == "ExtendRequest":
            self.extended.set()
        return out


def test_puts_extend_a_lease_they_took(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with ExtendWatchingClient(lg_target, namespace=lg_namespace) as client, StepwellSaver(
        client, fenced=True, lease=60
    ) as a:
        put_one(a, thread)
        put_one(a, thread)
        assert [type(r).__name__ for r in client.sent] == ["BeginRequest", "PutRecordsRequest", "PutRecordsRequest"]
        # A third of the lease has gone by (as if): the next put extends it first.
        a._leases[thread].extended_at -= 21
        client.sent.clear()
        put_one(a, thread)
        assert [type(r).__name__ for r in client.sent] == ["ExtendRequest", "PutRecordsRequest"]
        assert client.sent[0].lease.seconds == 60


def test_thread_lease_extends_in_the_background(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with ExtendWatchingClient(lg_target, namespace=lg_namespace) as client, StepwellSaver(
        client, lease=1.5
    ) as a:
        with a.thread_lease(thread) as lease:
            before = client.get(lease.key).lease_expires_at.ToNanoseconds()
            # The heartbeat extends every lease/3 seconds, while nothing is put:
            # wait for an Extend that ends after the read above.
            client.extended.clear()
            assert client.extended.wait(10)
            after = client.get(lease.key).lease_expires_at.ToNanoseconds()
            assert after > before and not lease.lost
        assert client.get(lease.key).state == ip.RECORD_STATE_RELEASED


def test_two_workers_starting_a_thread_at_once(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    barrier = threading.Barrier(2)
    outcomes: List[str] = []

    def worker(saver: StepwellSaver) -> None:
        barrier.wait()
        try:
            put_one(saver, thread)
            outcomes.append("stored")
        except ThreadBusy:
            outcomes.append("busy")

    with StepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True) as a, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, fenced=True
    ) as b:
        threads = [threading.Thread(target=worker, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Exactly one of them runs the thread; the other stored nothing.
        assert sorted(outcomes) == ["busy", "stored"]
        assert len(list(a.list(thread_config(thread)))) == 1


def test_heartbeat_notices_a_takeover(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    key = thread_lease_key(thread)
    with Client(lg_target, namespace=lg_namespace) as admin, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, lease=1.5
    ) as a:
        with a.thread_lease(thread) as lease:
            admin.release(key, lease.token)
            taken = admin.begin(key)
            assert taken.outcome == ip.BEGIN_OUTCOME_ACQUIRED
            # The heartbeat stops at its first refused Extend, marking the lease lost.
            heartbeat = lease.thread
            assert heartbeat is not None
            heartbeat.join(10)
            assert not heartbeat.is_alive() and lease.lost
            with pytest.raises(LeaseLost):
                put_one(a, thread)
        # A's exit released nothing of the new holder's.
        got = admin.get(key)
        assert got.lease_token == taken.lease_token and got.state == ip.RECORD_STATE_IN_PROGRESS


def _until_expired(admin: Client, key: str) -> None:
    """Waits (bounded) until the sidecar reports the key's lease lapsed."""
    deadline = time.monotonic() + 60
    while admin.get(key).state != ip.RECORD_STATE_EXPIRED:
        assert time.monotonic() < deadline, "the lease did not lapse within 60 s"
        time.sleep(0.05)


def test_a_lapsed_lease_no_one_took_is_taken_again(lg_target: str, lg_namespace: str) -> None:
    # As when a run stops at interrupt() and the answer comes after the lease ran out.
    thread = new_thread()
    key = thread_lease_key(thread)
    with Client(lg_target, namespace=lg_namespace) as admin, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, fenced=True, lease=1.0
    ) as a:
        put_one(a, thread)
        _until_expired(admin, key)
        put_one(a, thread)
        got = admin.get(key)
        assert (got.state, got.attempt) == (ip.RECORD_STATE_IN_PROGRESS, 2)
        assert len(list(a.list(thread_config(thread)))) == 2


def test_a_lapsed_lease_another_worker_held_since_fails_the_put(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    key = thread_lease_key(thread)
    with Client(lg_target, namespace=lg_namespace) as admin, StepwellSaver.from_address(
        lg_target, namespace=lg_namespace, fenced=True, lease=1.0
    ) as a, StepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True) as b:
        put_one(a, thread)
        _until_expired(admin, key)
        # B runs the thread in between, and lets go of it.
        with b.thread_lease(thread):
            put_one(b, thread)
        with pytest.raises((LeaseLost, NotAcquired)):
            put_one(a, thread)
        # Nothing of A's after its lease lapsed; the thread is left free.
        assert len(list(a.list(thread_config(thread)))) == 2
        assert admin.get(key).state == ip.RECORD_STATE_RELEASED
        assert thread not in a._leases


def test_async_a_lapsed_lease_no_one_took_is_taken_again(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    key = thread_lease_key(thread)

    async def run() -> None:
        async with AsyncStepwellSaver.from_address(lg_target, namespace=lg_namespace, fenced=True, lease=1.0) as a:
            config = thread_config(thread, checkpoint_ns="")
            await a.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
            await asyncio.to_thread(_until_expired, admin, key)
            await a.aput(config, empty_checkpoint(), {"source": "input", "step": -1}, {})

    with Client(lg_target, namespace=lg_namespace) as admin:
        asyncio.run(run())
        got = admin.get(key)
        assert (got.state, got.attempt) == (ip.RECORD_STATE_RELEASED, 2)
