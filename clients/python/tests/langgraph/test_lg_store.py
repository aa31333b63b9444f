"""StepwellStore and AsyncStepwellStore against a real sidecar: what LangGraph's own
store tests check of InMemoryStore and PostgresStore, in our own tests.

Both stores run every test (``kind``), through LangGraph's async methods
(the blocking store's run its batch in an executor); the blocking store's
sync methods and the async store's sync-from-a-thread path have tests of
their own. Times to live are tested through what can be seen without
waiting (expires_at moving on a refreshing read, not on another); expiry
itself is the sidecar's, tested in its Rust suite.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from datetime import datetime, timezone
from typing import Any, List

import pytest
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)

from lg_stores import KINDS, CharacterEmbeddings, cosine, open_store
from lg_support import lg_namespace, lg_sidecar, lg_target  # noqa: F401  (fixtures)
from stepwell import AsyncClient, Client
from stepwell.errors import StepwellError
from stepwell.langgraph import AsyncStepwellStore, StepwellStore
from stepwell.v1 import memory_pb2 as mem


@pytest.fixture(params=KINDS)
def kind(request: Any) -> str:
    return request.param  # type: ignore[no-any-return]


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def keys(items: List[Any]) -> List[str]:
    return [i.key for i in items]


# -- batches and basic ops ----------------------------------------------------


def test_batch_order(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            await store.aput(("test", "foo"), "key1", {"data": "value1"})
            await store.aput(("test", "bar"), "key2", {"data": "value2"})
            r = await store.abatch(
                [
                    GetOp(("test", "foo"), "key1"),
                    PutOp(("test", "bar"), "key2", {"data": "value2b"}),
                    SearchOp(("test",), {"data": "value1"}, 10, 0),
                    ListNamespacesOp(None, None, 10, 0),
                    GetOp(("test",), "missing"),
                ]
            )
            assert isinstance(r[0], Item) and r[0].value == {"data": "value1"} and r[0].key == "key1"
            assert r[1] is None
            assert keys(r[2]) == ["key1"]
            assert set(r[3]) == {("test", "foo"), ("test", "bar")}
            assert r[4] is None
            # Reads do not see the batch's puts; the next batch does.
            r = await store.abatch(
                [
                    SearchOp(("test",), None, 10, 0),
                    PutOp(("test", "baz"), "key3", {"data": "value3"}),
                    GetOp(("test", "bar"), "key2"),
                    ListNamespacesOp((MatchCondition("prefix", ("test", "baz")),), None, 10, 0),
                    GetOp(("test", "baz"), "key3"),
                ]
            )
            assert len(r[0]) == 2 and r[1] is None
            assert r[2].value == {"data": "value2b"}
            assert r[3] == [] and r[4] is None
            assert (await store.aget(("test", "baz"), "key3")).value == {"data": "value3"}

    run(go())


def test_batch_ops(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            r = await store.abatch(
                [
                    PutOp(("test", "foo"), "a", {"tag": "a", "n": 1}),
                    PutOp(("test", "foo"), "b", {"tag": "a", "n": 2}),
                    PutOp(("test", "bar"), "c", {"tag": "b"}),
                    PutOp(("test", "bar", "public"), "d", {"tag": "b"}),
                    PutOp(("other", "public"), "e", {"tag": "c"}),
                    PutOp(("test", "foo"), "gone", {"x": 1}),
                    PutOp(("test", "foo"), "gone", None),
                    PutOp(("test", "foo"), "b", {"tag": "a", "n": 3}),  # the last put wins
                ]
            )
            assert r == [None] * 8
            r = await store.abatch(
                [
                    GetOp(("test", "foo"), "a"),
                    GetOp(("test", "foo"), "b"),
                    GetOp(("test", "foo"), "gone"),
                    SearchOp(("test",), {"tag": "a"}),
                    SearchOp(("test",), None, 2),
                    SearchOp(("test", "foo"), None),
                    ListNamespacesOp(),
                    ListNamespacesOp(max_depth=2),
                    ListNamespacesOp((MatchCondition("suffix", "public"),)),  # a string path is one label
                ]
            )
            assert r[0].value == {"tag": "a", "n": 1} and r[1].value == {"tag": "a", "n": 3} and r[2] is None
            assert keys(r[3]) == ["a", "b"] and len(r[4]) == 2
            assert {i.namespace for i in r[5]} == {("test", "foo")}
            assert r[6] == [("other", "public"), ("test", "bar"), ("test", "bar", "public"), ("test", "foo")]
            assert r[7] == [("other", "public"), ("test", "bar"), ("test", "foo")]
            assert r[8] == [("other", "public"), ("test", "bar", "public")]

    run(go())


def test_basic_ops_and_timestamps(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            ns = ("test", "basic")
            await store.aput(ns, "k", {"data": "v", "nested": {"a": [1, 2.5, None, True]}, "s": "ünï"})
            first = await store.aget(ns, "k")
            assert first.value == {"data": "v", "nested": {"a": [1, 2.5, None, True]}, "s": "ünï"}
            assert first.namespace == ns and first.key == "k"
            for t in (first.created_at, first.updated_at):
                assert isinstance(t, datetime) and t.tzinfo is not None and t.utcoffset().total_seconds() == 0
            assert abs((first.created_at - datetime.now(timezone.utc)).total_seconds()) < 60
            await store.aput(ns, "k", {"data": "w"})
            second = await store.aget(ns, "k")
            assert second.value == {"data": "w"}
            assert second.updated_at > first.updated_at
            assert second.created_at == first.created_at  # an update keeps created_at (as PostgresStore)
            assert await store.aget(("test", "other"), "k") is None
            await store.adelete(ns, "k")
            assert await store.aget(ns, "k") is None
            await store.adelete(ns, "never")  # deleting a missing item changes nothing

    run(go())


def test_sync_methods(lg_target: str, lg_namespace: str) -> None:
    with StepwellStore.from_address(lg_target, namespace=lg_namespace) as store:
        store.put(("s",), "k", {"v": 1})
        assert store.get(("s",), "k").value == {"v": 1}
        assert keys(store.search(("s",))) == ["k"]
        assert store.list_namespaces() == [("s",)]
        store.delete(("s",), "k")
        assert store.get(("s",), "k") is None
    # The store built on a client names the client's namespace unless told.
    with Client(lg_target, namespace=lg_namespace) as c:
        store = StepwellStore(c)
        assert store.namespace == lg_namespace and store.supports_ttl
        assert StepwellStore(c, namespace="elsewhere").namespace == "elsewhere"


def test_async_store_sync_calls(lg_target: str) -> None:
    async def go() -> None:
        async with open_store("async", lg_target) as store:
            # On the store's own loop a sync call would deadlock: LangGraph refuses it.
            with pytest.raises(asyncio.InvalidStateError):
                store.get(("a",), "k")
            with pytest.raises(asyncio.InvalidStateError):
                store.batch([GetOp(("a",), "k")])

            def from_thread() -> Any:
                store.put(("a",), "k", {"v": 1})
                got = store.get(("a",), "k")
                found = store.search(("a",))
                listed = store.list_namespaces()
                store.delete(("a",), "k")
                return got, found, listed, store.get(("a",), "k")

            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                got, found, listed, gone = await asyncio.get_running_loop().run_in_executor(pool, from_thread)
            assert got.value == {"v": 1} and keys(found) == ["k"] and listed == [("a",)] and gone is None

    run(go())


# -- namespaces ---------------------------------------------------------------


def test_namespace_validation(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            for bad in [(), ("the", "thing.about"), ("some", "fun", ""), ("langgraph", "foo"), ("a", "b\x00")]:
                with pytest.raises(InvalidNamespaceError):
                    await store.aput(bad, "k", {"v": 1})
            with pytest.raises(InvalidNamespaceError):
                await store.abatch([GetOp(("a.b",), "k")])  # labels are checked on every op
            with pytest.raises(InvalidNamespaceError):
                await store.abatch([PutOp((), "k", {"v": 1})])  # MemoryService paths have labels
            assert await store.abatch([GetOp((), "k"), PutOp((), "k", None)]) == [None, None]
            ok = ("foo", "langgraph", "foo")
            await store.aput(ok, "k", {"v": 1})
            assert (await store.aget(ok, "k")).value == {"v": 1}
            assert keys(await store.asearch(ok, query="x")) == ["k"]
            await store.adelete(ok, "k")
            assert await store.aget(ok, "k") is None
            # A raw batch may write under a "langgraph" root; it stays reachable.
            root = ("langgraph", "foo")
            await store.abatch([PutOp(root, "k", {"v": 2})])
            assert (await store.aget(root, "k")).value == {"v": 2}
            assert keys(await store.asearch(root)) == ["k"]
            await store.adelete(root, "k")
            assert await store.aget(root, "k") is None

    run(go())


def test_sync_put_validation_and_control_characters(lg_target: str, lg_namespace: str) -> None:
    with StepwellStore.from_address(lg_target, namespace=lg_namespace) as store:
        with pytest.raises(InvalidNamespaceError):
            store.put(("langgraph",), "k", {})
        # MemoryService refuses labels with control characters, which LangGraph allows.
        with pytest.raises(StepwellError):
            store.put(("users", "alice\n"), "k", {"v": 1})


NINE = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("b", "a", "f"),
    ("users", "123"),
    ("users", "456", "settings"),
    ("admin", "users", "789"),
]


def test_list_namespaces(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            assert await store.alist_namespaces() == []
            for i, ns in enumerate(NINE):
                await store.aput(ns, f"id{i}", {"i": i})
            ls = store.alist_namespaces
            assert len(await ls(prefix=("a", "b"))) == 4
            assert len(await ls(suffix=("f",))) == 3
            assert await ls(prefix=("a",), suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
            assert await ls(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
            assert await ls(prefix=("a", "b"), limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
            assert await ls(prefix=("a", "b"), offset=2) == [("a", "b", "d", "i"), ("a", "b", "f")]
            assert await ls(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
            assert len(await ls(suffix=("*", "f"))) == 3
            assert await ls(prefix=("nonexistent",)) == []
            assert await ls(prefix=("users", "123")) == [("users", "123")]
            assert len(await ls(prefix=("users", "*"))) == 2
            assert await ls(suffix=("*", "settings")) == [("users", "456", "settings")]
            assert await ls(prefix=("*", "users"), suffix=("*", "settings")) == []
            assert await ls(prefix=("*", "users"), suffix=("789",)) == [("admin", "users", "789")]
            assert await ls(max_depth=1) == [("a",), ("admin",), ("b",), ("users",)]
            assert len(await ls()) == 9 and await ls() == sorted(NINE)
            # Only paths holding items are listed.
            await store.adelete(("users", "123"), "id6")
            assert await ls(prefix=("users",)) == [("users", "456", "settings")]

    run(go())


def test_list_namespaces_pagination_and_depth(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            for i in range(20):
                await store.aput(("namespace", f"sub_{i:02d}"), "k", {"i": i})
            all_ = [("namespace", f"sub_{i:02d}") for i in range(20)]
            for offset in (0, 5, 15):
                assert await store.alist_namespaces(prefix=("namespace",), limit=5, offset=offset) == all_[offset : offset + 5]
            for ns in [("a", "b", "c"), ("a", "b", "d"), ("a", "g", "h"), ("h", "i", "j")]:
                await store.aput(ns, "k", {})
            got = await store.alist_namespaces(max_depth=2, prefix=())
            assert got == [("a", "b"), ("a", "g"), ("h", "i"), ("namespace", "sub_00")] + all_[1:]

    run(go())


def test_segment_boundaries_and_like_metacharacters(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            for ns in [("foo",), ("foo", "child"), ("foobar",), ("foobar", "baz"), ("foo2",),
                       ("user_1",), ("user_1", "x"), ("userX1",), ("a%b",), ("aXb",), ("a\\b",),
                       ("uid", "1", "alice"), ("uid", "2", "malice"), ("uid", "3", "alice", "x")]:
                await store.aput(ns, "k", {"ns": list(ns)})

            async def under(prefix: Any) -> set:
                return {i.namespace for i in await store.asearch(prefix, limit=100)}

            assert await under(("foo",)) == {("foo",), ("foo", "child")}
            assert await under(("foobar",)) == {("foobar",), ("foobar", "baz")}
            assert await under(("fo",)) == set()
            assert await under(("user_1",)) == {("user_1",), ("user_1", "x")}
            assert await under(("a%b",)) == {("a%b",)}
            assert await under(("a\\b",)) == {("a\\b",)}
            assert len(await under(())) == 14  # the empty prefix is every item
            ls = store.alist_namespaces
            assert await ls(prefix=("foo",)) == [("foo",), ("foo", "child")]
            assert await ls(suffix=("alice",)) == [("uid", "1", "alice")]
            assert await ls(prefix=("uid", "*", "alice")) == [("uid", "1", "alice"), ("uid", "3", "alice", "x")]
            assert len(await ls(prefix=("uid",))) == 3
            assert await ls(prefix=("a%b",)) == [("a%b",)]
            assert await ls(prefix=("user_1",)) == [("user_1",), ("user_1", "x")]

    run(go())


def test_search_filters_and_pages(kind: str, lg_target: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            docs = [
                (("test", "docs"), "d1", {"author": "a", "n": 1, "meta": {"x": 1, "y": 2}, "tags": ["p", 1]}),
                (("test", "docs"), "d2", {"author": "b", "n": 2.5, "meta": {"x": 2}}),
                (("test", "other"), "d3", {"author": "a", "n": 3, "flag": True}),
            ]
            for ns, k, v in docs:
                await store.aput(ns, k, v)
            s = store.asearch
            assert keys(await s(("test",))) == ["d1", "d2", "d3"]
            assert keys(await s(("test", "docs"))) == ["d1", "d2"]
            assert keys(await s(("test",), filter={"author": "a"})) == ["d1", "d3"]
            assert keys(await s(("test",), limit=2)) == ["d1", "d2"]
            assert keys(await s(("test",), offset=2)) == ["d3"]
            assert keys(await s(("test",), filter={"n": {"$gt": 1, "$lte": 3}})) == ["d2", "d3"]
            assert keys(await s(("test",), filter={"n": {"$ne": 2.5}})) == ["d1", "d3"]
            assert keys(await s(("test",), filter={"n": 1.0})) == ["d1"]  # numbers by value
            assert keys(await s(("test",), filter={"meta": {"x": 1}})) == ["d1"]  # objects as subsets
            assert keys(await s(("test",), filter={"tags": ["p", 1]})) == ["d1"]
            assert keys(await s(("test",), filter={"flag": None})) == ["d1", "d2"]  # missing is null
            assert keys(await s(("test",), filter={"flag": 1})) == []  # true is not 1
            assert keys(await s(("test",), filter={"author": {"$gte": "b"}})) == ["d2"]
            with pytest.raises(ValueError, match="Unsupported operator"):
                await s(("test",), filter={"n": {"$in": [1]}})
            with pytest.raises(ValueError):
                await s(("test",), filter={"n": {"$eq": 1, "other": 2}})
            assert await s(("test",), limit=0) == []

    run(go())


def test_sidecar_filter_refusal_is_value_error(
    kind: str, lg_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the store's own check, the sidecar's INVALID_ARGUMENT on a filter is a ValueError too."""
    import stepwell._store

    monkeypatch.setattr(stepwell._store, "_check_filter", lambda flt: None)

    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            await store.aput(("f",), "k", {"n": 1})
            with pytest.raises(ValueError, match="unsupported operator"):
                await store.asearch(("f",), filter={"n": {"$in": [1]}})
            with pytest.raises(ValueError):
                await store.asearch(("f",), filter={"n": {"$eq": 1, "x": 2}})

    run(go())


def test_batches_beyond_one_request(kind: str, lg_target: str) -> None:
    """More than 1000 puts, or gets, in one batch go in several requests."""

    async def go() -> None:
        async with open_store(kind, lg_target) as store:
            puts = [PutOp(("big", str(i % 3)), f"k{i}", {"i": i}) for i in range(1500)]
            assert await store.abatch(puts) == [None] * 1500
            got = await store.abatch([GetOp(("big", str(i % 3)), f"k{i}") for i in range(1500)] + [GetOp((), "k")])
            assert [g.value["i"] for g in got[:-1]] == list(range(1500)) and got[-1] is None
            page = await store.asearch(("big", "1"), limit=1000, offset=10)
            assert [r.value["i"] for r in page[:2]] == [31, 34] and len(page) == 490

    run(go())


# -- vectors ------------------------------------------------------------------


@pytest.fixture
def embeddings() -> CharacterEmbeddings:
    return CharacterEmbeddings(dims=500)


def test_vector_store_initialization(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings}) as store:
            assert store.index_config["dims"] == 500 and store.index_config["embed"] is embeddings
            assert store.embeddings is embeddings

    run(go())


def test_vector_insert_with_auto_embedding(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings}) as store:
            docs = [
                ("doc1", {"text": "short text"}),
                ("doc2", {"text": "longer text document with more words"}),
                ("doc3", {"text": "longest text document with even more words and content"}),
                ("doc4", {"description": "text in a different field"}),
                ("doc5", {"content": "another field with text"}),
                ("doc6", {"text": "ẅ", "other": {"nested": "text"}}),
            ]
            for k, v in docs:
                await store.aput(("test",), k, v)
            found = await store.asearch(("test",), query="long text")
            assert len(found) == 6 and all(isinstance(r.score, float) for r in found)
            assert {"doc2", "doc3"} <= set(keys(found))
            assert [r.score for r in found] == sorted((r.score for r in found), reverse=True)

    run(go())


def test_vector_update_with_embedding(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings, "fields": ["text"]}) as store:
            await store.aput(("test",), "doc1", {"text": "zany zebra Xylophone"})
            await store.aput(("test",), "doc2", {"text": "something about dogs"})
            await store.aput(("test",), "doc3", {"text": "text about birds"})
            before = await store.asearch(("test",), query="Zany Xerxes")
            assert before[0].key == "doc1" and before[0].score is not None
            await store.aput(("test",), "doc1", {"text": "new text about dogs"})
            after = {r.key: r.score for r in await store.asearch(("test",), query="Zany Xerxes")}
            assert after["doc1"] < before[0].score
            new = {r.key: r.score for r in await store.asearch(("test",), query="new text about dogs")}
            assert new["doc1"] > after["doc1"]
            await store.aput(("test",), "doc4", {"text": "new text about dogs"}, index=False)
            found = await store.asearch(("test",), query="new text about dogs", limit=3)
            assert "doc4" not in keys(found)
            # index=False on an update keeps the item's vectors (as LangGraph's stores).
            await store.aput(("test",), "doc1", {"text": "unrelated"}, index=False)
            again = {r.key: r.score for r in await store.asearch(("test",), query="new text about dogs")}
            assert again["doc1"] == pytest.approx(new["doc1"], abs=1e-6)

    run(go())


@pytest.mark.parametrize("refresh_ttl", [True, False])
def test_vector_search_with_filters(
    kind: str, lg_target: str, embeddings: CharacterEmbeddings, refresh_ttl: bool
) -> None:
    async def go() -> None:
        index = {"dims": 500, "embed": embeddings, "fields": ["text"]}
        async with open_store(kind, lg_target, index=index, ttl={"default_ttl": 60}) as store:
            docs = [
                ("doc1", {"text": "red apple", "color": "red", "score": 4.5}),
                ("doc2", {"text": "red car", "color": "red", "score": 3.0}),
                ("doc3", {"text": "green apple", "color": "green", "score": 4.0}),
                ("doc4", {"text": "blue car", "color": "blue", "score": 3.5}),
            ]
            for k, v in docs:
                await store.aput(("test",), k, v)
            s = store.asearch
            r = await s(("test",), query="apple", filter={"color": "red"}, refresh_ttl=refresh_ttl)
            assert len(r) == 2 and r[0].key == "doc1"
            r = await s(("test",), query="car", filter={"color": "red"}, refresh_ttl=refresh_ttl)
            assert len(r) == 2 and r[0].key == "doc2"
            r = await s(("test",), query="bbbbluuu", filter={"score": {"$gt": 3.2}}, refresh_ttl=refresh_ttl)
            assert len(r) == 3 and r[0].key == "doc4"
            r = await s(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
            assert keys(r) == ["doc3"]

    run(go())


def test_vector_search_pagination(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings}) as store:
            for i in range(5):
                await store.aput(("test",), f"doc{i}", {"text": f"test document number {i}"})
            p1 = await store.asearch(("test",), query="test", limit=2)
            p2 = await store.asearch(("test",), query="test", limit=2, offset=2)
            full = await store.asearch(("test",), query="test", limit=10)
            assert len(p1) == 2 and len(p2) == 2 and p1[0].key != p2[0].key
            assert len(full) == 5 and keys(full) == keys(p1) + keys(p2) + keys(full)[4:]

    run(go())


def test_vector_search_edge_cases(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings}) as store:
            await store.aput(("test",), "doc1", {"text": "test document"})
            for q in ("", None):
                r = await store.asearch(("test",), query=q)
                assert len(r) == 1 and r[0].score is None
            perfect = await store.asearch(("test",), query=embedded_text({"text": "test document"}))
            long = await store.asearch(("test",), query="test " * 100)
            special = await store.asearch(("test",), query="test!@#$%^&*()")
            assert len(long) == 1 and len(special) == 1
            assert perfect[0].score == pytest.approx(1.0, abs=1e-5)
            assert long[0].score < perfect[0].score and special[0].score < perfect[0].score

    run(go())


def embedded_text(value: Any) -> str:
    """What a store-level "$" embeds: LangGraph's text of the whole value."""
    from langgraph.store.base.embed import get_text_at_path

    return get_text_at_path(value, "$")[0]


def test_embed_with_path(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        index = {"dims": 500, "embed": embeddings, "fields": ["key0", "key1", "key3"]}
        async with open_store(kind, lg_target, index=index) as store:
            # doc2 has an extra field with "uuu", doc1 lacks key0.
            await store.aput(("test",), "doc1", {"key1": "xxx", "key2": "yyy", "key3": "zzz"})
            await store.aput(("test",), "doc2", {"key0": "uuu", "key1": "vvv", "key2": "www", "key3": "xxx"})
            xxx = await store.asearch(("test",), query="xxx")
            assert len(xxx) == 2 and xxx[0].score == pytest.approx(xxx[1].score, abs=1e-5)
            uuu = await store.asearch(("test",), query="uuu")
            assert uuu[0].key == "doc2" and uuu[0].score > uuu[1].score
            assert uuu[0].score == pytest.approx(xxx[0].score, abs=1e-5)
            zzz = await store.asearch(("test",), query="zzz")
            assert zzz[0].key == "doc1" and zzz[0].score == pytest.approx(xxx[0].score, abs=1e-5)
            www = await store.asearch(("test",), query="www")  # key2 is not indexed
            assert all(r.score < xxx[0].score for r in www)

    run(go())


def test_embed_with_path_operation_config(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        index = {"dims": 500, "embed": embeddings, "fields": ["key17"]}
        async with open_store(kind, lg_target, index=index) as store:
            await store.aput(("test",), "doc3", {"key0": "aaa", "key1": "bbb", "key2": "ccc"}, index=["key0", "key1"])
            await store.aput(("test",), "doc4", {"key0": "ddd", "key1": "bbb", "key3": "ggg"}, index=["key1", "key3"])
            aaa = await store.asearch(("test",), query="aaa")
            assert aaa[0].key == "doc3" and aaa[0].score > aaa[1].score
            ggg = await store.asearch(("test",), query="ggg")
            assert ggg[0].key == "doc4" and ggg[0].score > ggg[1].score
            bbb = await store.asearch(("test",), query="bbb")
            assert len(bbb) == 2 and bbb[0].score == bbb[1].score  # the same text, the same f32 vector
            ccc = await store.asearch(("test",), query="ccc")  # key2 is not indexed
            assert all(r.score < aaa[0].score for r in ccc)
            await store.aput(("test",), "doc5", {"key0": "hhh", "key1": "iii"}, index=False)
            hhh = await store.asearch(("test",), query="hhh")
            assert len(hhh) == 3 and {r.key: r.score for r in hhh}["doc5"] is None
            assert hhh[-1].key == "doc5"  # the unscored follow the scored
            plain = await store.asearch(("test",))
            assert len(plain) == 3 and all(r.score is None for r in plain)
            # An op-level "$" is a key, not the whole value: nothing is embedded.
            await store.aput(("test",), "doc6", {"key0": "hhh"}, index=["$"])
            hhh = await store.asearch(("test",), query="hhh")
            assert {r.key: r.score for r in hhh}["doc6"] is None

    run(go())


def test_multiple_texts_at_a_path(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        index = {"dims": 500, "embed": embeddings, "fields": ["tags[*]"]}
        async with open_store(kind, lg_target, index=index) as store:
            await store.aput(("t",), "k", {"tags": ["alpha", "omega"]})
            await store.aput(("t",), "j", {"tags": ["middle"]})
            for q in ("alpha", "omega"):
                r = await store.asearch(("t",), query=q)
                assert r[0].key == "k" and r[0].score == pytest.approx(1.0, abs=1e-5)
            # Every text of the path is embedded, once, in put order.
            assert [t for call in embeddings.calls for t in call] == ["alpha", "omega", "middle"]

    run(go())


def test_non_ascii(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings, "fields": ["text"]}) as store:
            texts = {
                "zh": "这是一个中文测试文档",
                "ja": "これは日本語のテスト文書です",
                "ko": "이것은 한국어 테스트 문서입니다",
                "ru": "это тестовый документ на русском языке",
                "hi": "यह एक हिंदी परीक्षण दस्तावेज़ है",
            }
            for k, t in texts.items():
                await store.aput(("non_ascii",), k, {"text": t})
            for k, t in texts.items():
                r = await store.asearch(("non_ascii",), query=t)
                assert r[0].key == k and r[0].value == {"text": t}

    run(go())


@pytest.mark.parametrize("query", ["aaa", "bbb", "ccc", "abcd", "poisson"])
def test_scores_are_cosine(kind: str, lg_target: str, embeddings: CharacterEmbeddings, query: str) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings, "fields": ["key0"]}) as store:
            await store.aput(("test",), "doc", {"key0": "aaa", "key1": "bbb"}, index=["key0", "key1"])
            expected = max(cosine(embeddings.embed_query(t), embeddings.embed_query(query)) for t in ("aaa", "bbb"))
            r = await store.asearch((), query=query)
            assert len(r) == 1 and r[0].score == pytest.approx(expected, abs=1e-5)

    run(go())


def test_search_sorting(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings, "fields": ["key1"]}) as store:
            await store.aput(("test", "M"), "M", {"key1": "mmm"})
            await store.abatch(
                [PutOp(("test", "A"), f"A{i}", {"key1": "no"}) for i in range(100)]
                + [PutOp(("test", "Z"), f"Z{i}", {"key1": "no"}) for i in range(100)]
            )
            r = await store.asearch(("test",), query="mmm", limit=10)
            assert len(set(keys(r))) == 10 and r[0].key == "M" and r[0].score > r[1].score
            # Ties come in item order: the paths by their first put, then the items.
            assert keys(r)[1:] == [f"A{i}" for i in range(9)]

    run(go())


def test_an_all_zero_vector_scores_zero(kind: str, lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store(kind, lg_target, index={"dims": 500, "embed": embeddings, "fields": ["text"]}) as store:
            await store.aput(("z",), "empty", {"text": ""})  # CharacterEmbeddings gives all zeros
            await store.aput(("z",), "full", {"text": "abc"})
            r = await store.asearch(("z",), query="abc")
            assert [x.key for x in r] == ["full", "empty"]
            assert r[0].score is not None and r[0].score > 0.99 and r[1].score == 0.0

    run(go())


# -- times to live ------------------------------------------------------------


def _stored(client: Any, namespace: str, path: Any, key: str) -> mem.MemoryItem:
    req = mem.GetItemsRequest(namespace=namespace, items=[mem.ItemAddress(path=list(path), key=key)])
    (item,) = client._call(client.memory_stub.GetItems, req, None).items
    return item


def test_ttl_refresh(kind: str, lg_target: str, lg_namespace: str) -> None:
    async def go() -> None:
        ttl = {"default_ttl": 60.0, "refresh_on_read": True, "sweep_interval_minutes": 1}
        async with open_store(kind, lg_target, namespace=lg_namespace, ttl=ttl) as store:
            assert store.supports_ttl and store.ttl_config == ttl
            with Client(lg_target, namespace=lg_namespace) as c:
                ns = ("ttl",)
                await store.aput(ns, "k", {"v": 1})
                first = _stored(c, lg_namespace, ns, "k")
                assert first.ttl.ToSeconds() == 3600 and first.HasField("expires_at")
                # The expiry is the ttl after the put (the sidecar reads its clock for it
                # separately from updated_at, a fraction of a millisecond apart).
                assert abs(first.expires_at.ToNanoseconds() - first.updated_at.ToNanoseconds() - 3600 * 10**9) < 10**9

                def expires() -> int:
                    return _stored(c, lg_namespace, ns, "k").expires_at.ToNanoseconds()

                e0 = expires()
                assert await store.aget(ns, "k", refresh_ttl=False) is not None
                assert expires() == e0
                await store.asearch(ns, refresh_ttl=False)
                assert expires() == e0
                await store.aget(ns, "k")  # refresh_on_read: True
                e1 = expires()
                assert e1 > e0
                await store.asearch(ns, refresh_ttl=True)
                e2 = expires()
                assert e2 > e1
                assert _stored(c, lg_namespace, ns, "k").updated_at == first.updated_at  # a refresh is no update
                # A put's own ttl (minutes), and an explicit None: no expiry despite default_ttl.
                await store.aput(ns, "short", {"v": 2}, ttl=0.5)
                assert _stored(c, lg_namespace, ns, "short").ttl.ToMilliseconds() == 30_000
                await store.aput(ns, "forever", {"v": 3}, ttl=None)
                forever = _stored(c, lg_namespace, ns, "forever")
                assert not forever.HasField("expires_at") and not forever.HasField("ttl")

    run(go())


def test_ttl_refresh_on_read_false(kind: str, lg_target: str, lg_namespace: str) -> None:
    async def go() -> None:
        async with open_store(
            kind, lg_target, namespace=lg_namespace, ttl={"default_ttl": 10, "refresh_on_read": False}
        ) as store:
            with Client(lg_target, namespace=lg_namespace) as c:
                await store.aput(("t",), "k", {"v": 1})
                e0 = _stored(c, lg_namespace, ("t",), "k").expires_at.ToNanoseconds()
                await store.aget(("t",), "k")
                await store.asearch(("t",))
                assert _stored(c, lg_namespace, ("t",), "k").expires_at.ToNanoseconds() == e0
                await store.aget(("t",), "k", refresh_ttl=True)
                assert _stored(c, lg_namespace, ("t",), "k").expires_at.ToNanoseconds() > e0

    run(go())


def test_no_ttl_config_means_no_expiry(lg_target: str, lg_namespace: str) -> None:
    with StepwellStore.from_address(lg_target, namespace=lg_namespace) as store:
        store.put(("t",), "k", {"v": 1})
        assert not _stored(store.client, lg_namespace, ("t",), "k").HasField("expires_at")


# -- async batching -----------------------------------------------------------


class _Recording(AsyncStepwellStore):
    """Records the ops of every abatch call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: List[List[Any]] = []

    async def abatch(self, ops: Any) -> Any:
        ops = list(ops)
        self.batches.append(ops)
        return await super().abatch(ops)


def test_async_batching_and_dedup(lg_target: str, lg_namespace: str) -> None:
    async def go() -> None:
        async with AsyncClient(lg_target, namespace=lg_namespace) as c:
            store = _Recording(c)
            await store.aput(("a",), "b", {"v": "ab"})
            await store.aput(("c",), "d", {"v": "cd"})
            store.batches.clear()
            r1, r2 = await asyncio.gather(store.aget(("a",), "b"), store.aget(("c",), "d"))
            assert (r1.value, r2.value) == ({"v": "ab"}, {"v": "cd"})
            assert store.batches == [[GetOp(("a",), "b", refresh_ttl=True), GetOp(("c",), "d", refresh_ttl=True)]]
            store.batches.clear()
            got = await asyncio.gather(store.aget(("a",), "b"), store.aget(("a",), "b"), store.aget(("c",), "d"))
            assert [g.value for g in got] == [{"v": "ab"}, {"v": "ab"}, {"v": "cd"}]
            assert len(store.batches) == 1 and len(store.batches[0]) == 2
            store.batches.clear()
            await asyncio.gather(store.aput(("e",), "k", {"v": "doc1"}), store.aput(("e",), "k", {"v": "doc2"}))
            assert len(store.batches) == 1 and len(store.batches[0]) == 1
            assert (await store.aget(("e",), "k")).value == {"v": "doc2"}
            store.batches.clear()
            s1, s2 = await asyncio.gather(
                store.asearch(("a",), filter={"v": "ab"}), store.asearch(("a",), filter={"v": "ab"})
            )
            assert len(s1) == 1 and s1 == s2
            # Cancelling a pending call leaves the others, and later ones, working.
            pending = asyncio.ensure_future(store.aget(("a",), "b"))
            pending.cancel()
            assert (await store.aget(("c",), "d")).value == {"v": "cd"}
            # So does cancelling the store's background task.
            task = store._task
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            assert len(await store.asearch(("a",))) == 1
            await store.aput(("a",), "z", {"v": 1})
            assert (await store.aget(("a",), "z")).value == {"v": 1}

    run(go())


def test_concurrent_vector_searches(lg_target: str, embeddings: CharacterEmbeddings) -> None:
    async def go() -> None:
        async with open_store("async", lg_target, index={"dims": 500, "embed": embeddings, "fields": ["text"]}) as store:
            colors = ["red", "blue", "green"]
            docs = [
                (f"doc{i}", {"text": f"document {i} about {colors[i % 3]}", "color": colors[i % 3],
                             "score": float(i), "n": i})
                for i in range(50)
            ]
            await asyncio.gather(*(store.aput(("docs",), k, v) for k, v in docs))
            await asyncio.gather(*(store.adelete(("docs",), k) for k, _ in docs[::5]))
            await asyncio.gather(*(store.aput(("docs",), k, v) for k, v in docs[::5]))
            filters = [
                {"score": {"$gt": 10.5}}, {"score": {"$gte": 20.0}}, {"score": {"$lt": 5.5}},
                {"score": {"$lte": 3.0}}, {"n": {"$gt": 30}}, {"n": {"$lt": 10}}, {"color": "red"},
                {"color": "blue", "n": {"$gte": 5}}, {"n": {"$gt": 0, "$lt": 49}},
            ]
            results = await asyncio.gather(*(store.asearch(("docs",), query="about red", filter=f) for f in filters))
            checks = [
                lambda v: v["score"] > 10.5, lambda v: v["score"] >= 20, lambda v: v["score"] < 5.5,
                lambda v: v["score"] <= 3, lambda v: v["n"] > 30, lambda v: v["n"] < 10,
                lambda v: v["color"] == "red", lambda v: v["color"] == "blue" and v["n"] >= 5,
                lambda v: 0 < v["n"] < 49,
            ]
            for res, check in zip(results, checks):
                assert res and all(check(r.value) for r in res) and all(r.score is not None for r in res)

    run(go())

