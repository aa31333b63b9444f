"""The savers' contract with the sidecar: one call per method, the record
mapping (blobs once per version, writes in LangGraph's order, first regular
write kept), and calls that are not made."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Dict, List

import pytest

from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint, writes_sort_key
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT

from lg_support import lg_namespace, lg_sidecar, lg_target, new_thread, thread_config  # noqa: F401  (fixtures)
from stepwell import AsyncClient, Client, InvalidArgument
from stepwell.langgraph import AsyncStepwellSaver, StepwellSaver, blob_id, write_id
from stepwell.v1 import records_pb2 as rec


class CountingClient(Client):
    """Keeps every request it sends, by message type."""

    sent: List[Any]

    def _call(self, method: Any, request: Any, timeout: Any) -> Any:
        self.sent.append(request)
        return super()._call(method, request, timeout)

    def kinds(self) -> List[str]:
        return [type(r).__name__ for r in self.sent]


def counting(target: str, namespace: str) -> CountingClient:
    c = CountingClient(target, namespace=namespace)
    c.sent = []
    return c


def checkpoint(values: Dict[str, Any], versions: Dict[str, Any]) -> Any:
    cp = empty_checkpoint()
    cp["channel_values"] = values
    cp["channel_versions"] = versions
    return cp


def test_each_method_is_one_call(lg_target: str, lg_namespace: str) -> None:
    client = counting(lg_target, lg_namespace)
    thread, other = new_thread(), new_thread()
    with client, StepwellSaver(client) as saver:
        cfg = saver.put(thread_config(thread, checkpoint_ns=""), checkpoint({"a": [1], "b": "x"}, {"a": 1, "b": 1}),
                        {"source": "input", "step": -1, "run_id": "r1"}, {"a": 1, "b": 1})
        saver.put_writes(cfg, [("a", [2]), ("b", "y")], "task-1")
        assert saver.get_tuple(cfg) is not None
        assert len(list(saver.list(thread_config(thread), filter={"run_id": "r1"}, limit=5))) == 1
        saver.copy_thread(thread, other)
        saver.delete_for_runs(["r1"])
        saver.prune([other], strategy="keep_latest")
        saver.prune([other], strategy="delete")
        saver.delete_thread(thread)
        assert client.kinds() == [
            "PutRecordsRequest", "PutRecordsRequest", "ListRecordsRequest", "ListRecordsRequest",
            "CopyTurnRequest", "DeleteRecordsRequest", "DeleteRecordsRequest", "DeleteRecordsRequest",
            "DeleteRecordsRequest",
        ]
        put, writes, get, lst, _copy, runs, keep, drop, thread_del = client.sent
        assert [r.kind for r in put.records] == ["checkpoint", "blob", "blob"] and not put.HasField("fence")
        assert put.records[0].mode == rec.PUT_MODE_UPSERT
        assert [r.mode for r in put.records[1:]] == [rec.PUT_MODE_INSERT_IF_ABSENT] * 2
        assert sorted(put.records[0].refs) == sorted([blob_id("a", 1), blob_id("b", 1)])
        assert [w.parent_id for w in writes.records] == [cfg["configurable"]["checkpoint_id"]] * 2
        assert (get.page_size, get.has_scope, get.children_kind, get.refs_kind) == (1, True, "write", "blob")
        assert (lst.page_size, json.loads(lst.metadata_contains), lst.has_scope) == (5, {"run_id": "r1"}, False)
        assert list(runs.turn_ids) == [] and [json.loads(m) for m in runs.metadata_any] == [{"run_id": "r1"}]
        assert keep.keep_latest and keep.kind == "checkpoint" and not drop.kind and list(thread_del.turn_ids) == [thread]

        # Empty lists of runs or threads, and empty writes, call nothing.
        client.sent.clear()
        saver.delete_for_runs([])
        saver.prune([])
        saver.put_writes(cfg, [], "task-2")
        assert client.sent == []


def test_blobs_are_stored_once_per_version(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    client = counting(lg_target, lg_namespace)
    with client, StepwellSaver(client) as saver:
        c1 = saver.put(thread_config(thread, checkpoint_ns=""), checkpoint({"big": "v1", "small": 1}, {"big": 1, "small": 1}),
                       {"step": 0}, {"big": 1, "small": 1})
        c2 = saver.put(c1, checkpoint({"big": "v1", "small": 2}, {"big": 1, "small": 2}), {"step": 1}, {"small": 2})
        # The second put sends only the new version of "small".
        assert [r.id for r in client.sent[1].records[1:]] == [blob_id("small", 2)]
        blobs = client._call(client.record_stub.ListRecords, rec.ListRecordsRequest(
            namespace=lg_namespace, turn_id=thread, scope="", has_scope=True, kind="blob"), None)
        assert sorted(e.record.id for e in blobs.entries) == sorted(
            [blob_id("big", 1), blob_id("small", 1), blob_id("small", 2)])
        t1, t2 = saver.get_tuple(c1), saver.get_tuple(c2)
        assert t1 is not None and t1.checkpoint["channel_values"] == {"big": "v1", "small": 1}
        assert t2 is not None and t2.checkpoint["channel_values"] == {"big": "v1", "small": 2}
        # A channel in new_versions without a value is stored as "empty", and read as absent.
        c3 = saver.put(c2, checkpoint({"big": "v1"}, {"big": 1, "small": 3}), {"step": 2}, {"small": 3})
        t3 = saver.get_tuple(c3)
        assert t3 is not None and t3.checkpoint["channel_values"] == {"big": "v1"}
        assert client.sent[-2].records[1].content_type == "empty"


def test_writes_come_back_in_langgraph_order_and_keep_the_first(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        cfg = saver.put(thread_config(thread, checkpoint_ns=""), checkpoint({}, {}), {"step": 0}, {})
        cid = cfg["configurable"]["checkpoint_id"]
        calls = [
            ("b-task", "path~2", [("x", 1), ("y", 2)]),
            ("a-task", "path~10", [("x", 3)]),
            ("c-task", "", [(ERROR, "boom"), ("x", 4)]),
            ("a-task", "path~2", [(INTERRUPT, "ask"), ("z", 5)]),
        ]
        for task_id, path, writes in calls:
            saver.put_writes(cfg, writes, task_id, path)
        # A regular write repeated keeps the first; a special channel's is replaced.
        saver.put_writes(cfg, [("x", 99), ("y", 98)], "b-task", "path~2")
        saver.put_writes(cfg, [(ERROR, "boom again")], "c-task", "")
        tup = saver.get_tuple(cfg)
        assert tup is not None
        expected = []
        for task_id, path, writes in calls:
            for i, (ch, v) in enumerate(writes):
                v = "boom again" if ch == ERROR else v
                expected.append((writes_sort_key(path, task_id, WRITES_IDX_MAP.get(ch, i)), (task_id, ch, v)))
        assert tup.pending_writes == [w for _, w in sorted(expected)]
        assert write_id(cid, "p", "t", -4) < write_id(cid, "p", "t", 0) < write_id(cid, "p", "t", 10)


def test_async_saver_calls_match(lg_target: str, lg_namespace: str) -> None:
    sent: List[Any] = []

    class CountingAsync(AsyncClient):
        async def _call(self, method: Any, request: Any, timeout: Any) -> Any:
            sent.append(request)
            return await super()._call(method, request, timeout)

    async def run() -> None:
        async with CountingAsync(lg_target, namespace=lg_namespace) as client:
            saver = AsyncStepwellSaver(client)
            thread = new_thread()
            cfg = await saver.aput(thread_config(thread, checkpoint_ns=""), checkpoint({"a": 1}, {"a": 1}),
                                   {"step": -1, "run_id": "r"}, {"a": 1})
            await saver.aput_writes(cfg, [("a", 2)], "t")
            tup = await saver.aget_tuple(cfg)
            assert tup is not None and tup.pending_writes == [("t", "a", 2)]
            assert [t.config async for t in saver.alist(thread_config(thread))] == [cfg]
            await saver.acopy_thread(thread, thread + "-copy")
            await saver.adelete_for_runs(["r"])
            await saver.aprune([thread + "-copy"])
            await saver.adelete_thread(thread)
            await saver.adelete_for_runs([])
            await saver.aprune([])
            assert [type(r).__name__ for r in sent] == [
                "PutRecordsRequest", "PutRecordsRequest", "ListRecordsRequest", "ListRecordsRequest",
                "CopyTurnRequest", "DeleteRecordsRequest", "DeleteRecordsRequest", "DeleteRecordsRequest",
            ]

    asyncio.run(run())


def test_metadata_filters_are_json_containment(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        cfg = thread_config(thread, checkpoint_ns="")
        for step, user, tags in ((0, "Zoë", {"tier": "gold", "n": 1}), (1, "Zoë", {"tier": "free"}), (2, "Åsa", {})):
            cfg = saver.put(cfg, checkpoint({}, {}), {"step": step, "user": user, "tags": tags}, {})

        def steps(**f: Any) -> List[int]:
            return [t.metadata["step"] for t in saver.list(thread_config(thread), filter=f)]

        assert steps(user="Zoë") == [1, 0]
        assert steps(tags={"tier": "gold"}) == [0]
        assert steps(user="Zoë", tags={"n": 1}) == [0]
        assert steps(tags={}) == [2, 1, 0]
        assert steps(user="Zoe") == []
        # Across threads, newest first, with before.
        other = saver.put(thread_config(new_thread(), checkpoint_ns=""), checkpoint({}, {}), {"step": 9, "user": "Zoë"}, {})
        across = [t.metadata["step"] for t in saver.list(None, filter={"user": "Zoë"})]
        assert across == [9, 1, 0]
        assert [t.metadata["step"] for t in saver.list(None, filter={"user": "Zoë"}, before=other)] == [1, 0]


def records(client: Client, namespace: str, thread: str, kind: str) -> List[str]:
    """The ids of a thread's records of one kind (root namespace), read raw."""
    resp = client._call(client.record_stub.ListRecords, rec.ListRecordsRequest(
        namespace=namespace, turn_id=thread, scope="", has_scope=True, kind=kind), None)
    return sorted(e.record.id for e in resp.entries)


def test_deletes_take_writes_and_unused_blobs_along(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    client = counting(lg_target, lg_namespace)
    with client, StepwellSaver(client) as saver:
        c1 = saver.put(thread_config(thread, checkpoint_ns=""), checkpoint({"a": "1", "b": "1"}, {"a": 1, "b": 1}),
                       {"step": 0, "run_id": "r1"}, {"a": 1, "b": 1})
        saver.put_writes(c1, [("a", "w1")], "t1")
        c2 = saver.put(c1, checkpoint({"a": "2", "b": "1"}, {"a": 2, "b": 1}), {"step": 1, "run_id": "r2"}, {"a": 2})
        saver.put_writes(c2, [("a", "w2")], "t2")
        c3 = saver.put(c2, checkpoint({"a": "3", "b": "1"}, {"a": 3, "b": 1}), {"step": 2, "run_id": "r3"}, {"a": 3})
        # The copy has everything: three checkpoints, both writes, every blob.
        copy = thread + "-copy"
        saver.copy_thread(thread, copy)
        assert len(list(saver.list(thread_config(copy)))) == 3
        assert len(records(client, lg_namespace, copy, "write")) == 2
        assert len(records(client, lg_namespace, copy, "blob")) == 4
        t2 = saver.get_tuple(thread_config(copy, checkpoint_ns="", checkpoint_id=c2["configurable"]["checkpoint_id"]))
        assert t2 is not None and t2.pending_writes == [("t2", "a", "w2")]
        assert t2.checkpoint["channel_values"] == {"a": "2", "b": "1"}

        # delete_for_runs, in every thread: r2's checkpoint, its write, and
        # blob a@2 that only it used.
        saver.delete_for_runs(["r2"])
        for t in (thread, copy):
            assert saver.get_tuple(thread_config(t, checkpoint_ns="", checkpoint_id=c2["configurable"]["checkpoint_id"])) is None
            assert records(client, lg_namespace, t, "blob") == sorted([blob_id("a", 1), blob_id("a", 3), blob_id("b", 1)])
            assert len(records(client, lg_namespace, t, "write")) == 1

        # prune keep_latest: c3 and what it uses stay.
        saver.prune([thread])
        assert [t.config for t in saver.list(thread_config(thread))] == [c3]
        assert records(client, lg_namespace, thread, "blob") == sorted([blob_id("a", 3), blob_id("b", 1)])
        assert records(client, lg_namespace, thread, "write") == []
        t3 = saver.get_tuple(c3)
        assert t3 is not None and t3.checkpoint["channel_values"] == {"a": "3", "b": "1"}

        # delete_thread: nothing of the thread is left, the copy is untouched.
        saver.delete_thread(thread)
        for kind in ("checkpoint", "blob", "write"):
            assert records(client, lg_namespace, thread, kind) == []
        assert len(list(saver.list(thread_config(copy)))) == 2


def test_metadata_integers_over_64_bits_are_refused(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        cfg = thread_config(thread, checkpoint_ns="")
        with pytest.raises(InvalidArgument) as refused:
            saver.put(cfg, checkpoint({}, {}), {"step": 0, "score": 2**70}, {})
        assert refused.value.field == "records[0].metadata"
        assert saver.get_tuple(cfg) is None
        # Any float (its shortest form) and 64-bit integers are stored and filtered on exactly.
        saver.put(cfg, checkpoint({}, {}), {"step": 0, "score": 0.1 + 0.2, "big": 2**62}, {})
        assert [t.metadata["score"] for t in saver.list(cfg, filter={"score": 0.1 + 0.2, "big": 2**62})] == [0.1 + 0.2]
