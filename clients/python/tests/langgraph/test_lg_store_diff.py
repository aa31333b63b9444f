"""Differential test: StepwellStore against LangGraph's InMemoryStore.

Seeded random sequences of puts (with the store's fields, op-level fields,
``index=False``), gets, deletes, searches (filters on fields of consistent
types, a query, limit and offset) and namespace listings (prefix and suffix
with ``*``, max_depth, limit and offset), some of them batched, run on both;
every answer must be equal: namespaces, keys and values, scores within 1e-5
(the sidecar keeps vectors as f32); created_at and updated_at are not
compared.

The reference is InMemoryStore with its documented artifacts corrected in
``Reference`` below (docs/guides/memory.md, "LangGraph", lists them too):

(a) InMemoryStore lists namespaces emptied by deletes, and a get (or a
    delete) on a missing namespace creates one, which also gives it an early
    place in the item order; stepwell lists only paths holding items, and a
    path's place is its first put. The reference answers gets without
    creating namespaces, drops the empty ones a batch created, and lists only
    namespaces holding items. (A namespace emptied by deletes keeps its
    place in both.)
(b) With a query, InMemoryStore ignores the offset for the unscored items
    (every page is filled with the same ones); stepwell applies the offset to
    one ordering: scored by score, highest first (ties in item order), then
    the unscored in item order. The reference searches the whole ordering
    and slices it.
(c) InMemoryStore's $gt etc. raise TypeError on a missing field and
    ValueError on non-numeric strings, and ``True == 1``: the sequences avoid
    these (comparisons only on the numeric fields every item has, equality
    values of one type per field) rather than emulating them.
(d) InMemoryStore resets created_at on an update: timestamps are not compared.
(e) InMemoryStore embeds each distinct text of a batch once, and then fails
    ("Number of embeddings ... does not match") when a batch embeds one text
    twice: a batch here holds at most one put, whose texts are distinct.

Both stores run the sequences: StepwellStore, and AsyncStepwellStore through
its sync methods from the sequences' threads. Seed: STEPWELL_STORE_DIFF_SEED
(printed; sequence i has seed SEED * 100003 + i); sequences:
STEPWELL_STORE_DIFF_SEQUENCES (default 1000).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import math
import os
import random
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
from langchain_core.embeddings import Embeddings
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from conftest import fresh_namespace
from lg_support import lg_sidecar, lg_target  # noqa: F401  (fixtures)
from stepwell import AsyncClient, Client
from stepwell.langgraph import AsyncStepwellStore, StepwellStore

DEFAULT_SEED = 20261204
DIMS = 8
FIELDS = ["text", "tags[*]", "meta.k"]
WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi", "lemon", "mango"]
LABELS = ["a", "b", "user_1", "a%b"]
# Few paths, so that searches and listings find something; labels that are
# prefixes of others as strings, and LIKE metacharacters.
PATHS = [("a",), ("a", "b"), ("a", "b", "user_1"), ("b",), ("user_1", "a"), ("a%b",), ("a", "a%b")]
PREFIXES = [(), (), (), ("a",), ("a",), ("a", "b"), ("b",), ("user_1",), ("a%b",), ("user",), ("a", "a%b")]
KEYS = ["k0", "k1", "k2", "k3", "k4"]
EVERYTHING = 10**6


class OrderFreeEmbeddings(Embeddings):
    """A text's vector depends on its characters' counts only, not on what was embedded before."""

    def __init__(self) -> None:
        self._proj: Dict[str, List[float]] = {}

    def _p(self, ch: str) -> List[float]:
        if ch not in self._proj:
            rng = random.Random(ord(ch))
            self._proj[ch] = [rng.gauss(0, 1) for _ in range(DIMS)]
        return self._proj[ch]

    def _one(self, text: str) -> List[float]:
        v = [0.0] * DIMS
        for ch in sorted(set(text)):
            n, p = text.count(ch), self._p(ch)
            for i in range(DIMS):
                v[i] += n * p[i]
        return v

    def embed_documents(self, texts: List[str]) -> List[List[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> List[float]:
        return self._one(text)


class Reference(InMemoryStore):
    """InMemoryStore with the artifacts (a) and (b) of the module's docstring corrected."""

    def batch(self, ops: Any) -> List[Any]:
        ops = list(ops)
        before = set(self._data)
        held = {ns for ns, items in self._data.items() if items}
        results: List[Any] = [None] * len(ops)
        rest: List[Tuple[int, Any]] = []
        for i, op in enumerate(ops):
            if isinstance(op, GetOp):  # (a): no namespace made by a read
                results[i] = self._data.get(op.namespace, {}).get(op.key)
            elif isinstance(op, SearchOp) and op.query:  # (b): one ordering, sliced
                rest.append((i, op._replace(limit=EVERYTHING, offset=0)))
            elif isinstance(op, ListNamespacesOp):  # (a): only namespaces holding items
                rest.append((i, op._replace(max_depth=None, limit=EVERYTHING, offset=0)))
            else:
                rest.append((i, op))
        answers = super().batch([op for _, op in rest])
        for (i, _), answer in zip(rest, answers):
            op = ops[i]
            if isinstance(op, SearchOp) and op.query:
                answer = answer[op.offset : op.offset + op.limit]
            elif isinstance(op, ListNamespacesOp):
                listed = [ns for ns in answer if ns in held]
                if op.max_depth is not None:
                    listed = sorted({ns[: op.max_depth] for ns in listed})
                answer = listed[op.offset : op.offset + op.limit]
            results[i] = answer
        for ns in set(self._data) - before:  # (a): a delete on a missing namespace made it
            if not self._data[ns]:
                del self._data[ns]
        return results


# -- the sequences ------------------------------------------------------------


def _value(rng: random.Random) -> Dict[str, Any]:
    words = rng.sample(WORDS, 4)  # the texts of one item are distinct, see (e)
    v: Dict[str, Any] = {"text": words[0], "n": rng.randint(0, 5), "f": rng.choice([0.5, 1.0, 1.5, 2.0])}
    if rng.random() < 0.6:
        v["color"] = rng.choice(["red", "blue"])
    if rng.random() < 0.5:
        v["tags"] = words[1 : 1 + rng.randint(1, 2)]
    if rng.random() < 0.4:
        v["meta"] = {"k": words[3], "z": rng.randint(0, 2)}
    if rng.random() < 0.3:
        v["flag"] = rng.random() < 0.5
    return v


def _filter(rng: random.Random) -> Optional[Dict[str, Any]]:
    out: Dict[str, Any] = {}
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2])):
        c = rng.randrange(12)
        if c == 0:
            out["color"] = rng.choice(["red", "blue", "green"])
        elif c == 1:
            out["color"] = {"$ne": rng.choice(["red", "blue"])}
        elif c == 2:
            ops = rng.sample(["$gt", "$gte", "$lt", "$lte"], rng.randint(1, 2))
            out["n"] = {o: rng.choice([0, 1, 2.5, 3, 4, 5]) for o in ops}
        elif c == 3:
            out["f"] = rng.choice([1.0, 1.5, {"$eq": 2.0}, {"$ne": 0.5}, {"$gte": 1.0}, {"$lt": 1.5}])
        elif c == 4:
            out["n"] = rng.randint(0, 5)
        elif c == 5:
            out["flag"] = rng.random() < 0.5
        elif c == 6:
            out["meta"] = {"k": rng.choice(WORDS)}
        elif c == 7:
            out["tags"] = [rng.choice(WORDS)]
        elif c == 8:
            out["text"] = rng.choice(WORDS)
        elif c == 9:  # the rest match most items
            out["n"] = {"$gte": rng.choice([0, 1, 2])}
        elif c == 10:
            out["f"] = {"$lte": rng.choice([1.5, 2.0])}
        else:
            out["color"] = {"$ne": "green"}
    return out or None


def _path(rng: Any, lo: int, hi: int, wild: bool = False) -> Tuple[str, ...]:
    pool = LABELS + (["*"] if wild else [])
    return tuple(rng.choice(pool) for _ in range(rng.randint(lo, hi)))


def _op(rng: random.Random, written: List[Tuple[Tuple[str, ...], str]], put: bool = False) -> Any:
    r = 0.0 if put else rng.random()
    if r < 0.4:
        index = rng.choice([None, None, None, False, ["text"], ["tags[*]", "meta.k"], ["$"]])
        return PutOp(rng.choice(PATHS), rng.choice(KEYS), _value(rng), index=index)
    if r < 0.55:
        ns, key = rng.choice(written) if written and rng.random() < 0.8 else (rng.choice(PATHS + [("c",)]), rng.choice(KEYS))
        return GetOp(ns, key)
    if r < 0.65:
        ns, key = rng.choice(written) if written and rng.random() < 0.8 else (rng.choice(PATHS + [("c",)]), rng.choice(KEYS))
        return PutOp(ns, key, None)
    if r < 0.9:
        query = rng.choice(WORDS + [f"{a} {b}" for a, b in [rng.sample(WORDS, 2)]]) if rng.random() < 0.6 else None
        return SearchOp(rng.choice(PREFIXES), _filter(rng), rng.randint(1, 6), rng.choice([0, 0, 1, 2, 4]), query)
    conds = []
    if rng.random() < 0.5:
        conds.append(MatchCondition("prefix", _path(rng, 1, 2, wild=True)))
    if rng.random() < 0.4:
        conds.append(MatchCondition("suffix", _path(rng, 1, 2, wild=True)))
    return ListNamespacesOp(
        tuple(conds), rng.choice([None, None, 1, 2, 3]), rng.choice([1, 2, 4, 100]), rng.choice([0, 0, 1, 2])
    )


def _batches(rng: random.Random) -> List[List[Any]]:
    """10-20 ops, the first 3-6 of them puts, some of the others grouped into
    batches of 2-3 with at most one put, see (e)."""
    written: List[Tuple[Tuple[str, ...], str]] = []
    out: List[List[Any]] = []
    total = rng.randint(10, 20)
    n = 0
    for _ in range(rng.randint(3, 6)):
        op = _op(rng, written, put=True)
        written.append((op.namespace, op.key))
        out.append([op])
        n += 1
    while n < total:
        size = rng.choice([1, 1, 1, 2, 3])
        batch: List[Any] = []
        while len(batch) < size:
            op = _op(rng, written)
            if isinstance(op, PutOp) and any(isinstance(o, PutOp) for o in batch):
                continue
            if isinstance(op, PutOp) and op.value is not None:
                written.append((op.namespace, op.key))
            batch.append(op)
        out.append(batch)
        n += size
    return out


def _call(store: Any, batch: List[Any]) -> List[Any]:
    """One op through the store's public method, several through batch()."""
    if len(batch) > 1:
        return store.batch(batch)
    (op,) = batch
    if isinstance(op, GetOp):
        return [store.get(op.namespace, op.key)]
    if isinstance(op, SearchOp):
        return [
            store.search(op.namespace_prefix, query=op.query, filter=op.filter, limit=op.limit, offset=op.offset)
        ]
    if isinstance(op, ListNamespacesOp):
        kw: Dict[str, Any] = {c.match_type: c.path for c in op.match_conditions}
        return [store.list_namespaces(**kw, max_depth=op.max_depth, limit=op.limit, offset=op.offset)]
    if op.value is None:
        store.delete(op.namespace, op.key)
    else:
        store.put(op.namespace, op.key, op.value, index=op.index)
    return [None]


def _shape(result: Any) -> Any:
    """What is compared of a result: items as (namespace, key, value[, score])."""
    if result is None:
        return None
    if isinstance(result, list):
        return [r if isinstance(r, tuple) else _shape(r) for r in result]
    score = getattr(result, "score", "absent")
    return (tuple(result.namespace), result.key, result.value, score)


def _equal(want: Any, got: Any) -> bool:
    if isinstance(want, list) and isinstance(got, list):
        return len(want) == len(got) and all(_equal(w, g) for w, g in zip(want, got))
    if isinstance(want, tuple) and len(want) == 4 and isinstance(got, tuple) and len(got) == 4 \
            and not isinstance(want[0], str):
        ws, gs = want[3], got[3]
        if want[:3] != got[:3]:
            return False
        if ws is None or gs is None or ws == "absent":
            return ws == gs
        return math.isclose(ws, gs, abs_tol=1e-5)
    return bool(want == got)


def run_sequence(make_store: Callable[[str, Dict[str, Any]], Any], seed: int) -> Optional[str]:
    """Runs one sequence on both stores; a description of the first difference, or None."""
    rng = random.Random(seed)
    embed = OrderFreeEmbeddings()
    # The store's fields: paths with one text and with several, or the whole value.
    index = {"dims": DIMS, "embed": embed, "fields": rng.choice([FIELDS, FIELDS, ["$"], ["text", "$"]])}
    ref = Reference(index=index)
    store = make_store(fresh_namespace("lgd"), index)
    log: List[str] = []
    for batch in _batches(rng):
        log.append(repr(batch))
        want = [_shape(r) for r in _call(ref, batch)]
        got = [_shape(r) for r in _call(store, batch)]
        if not _equal(want, got):
            steps = "\n  ".join(log)
            return f"sequence seed {seed}: after\n  {steps}\nInMemoryStore (corrected): {want}\nStepwellStore: {got}"
    return None


@contextlib.contextmanager
def _store_maker(kind: str, target: str) -> Iterator[Callable[[str, Dict[str, Any]], Any]]:
    """Makes the stores of the sequences, on one client: a StepwellStore, or an
    AsyncStepwellStore on an event loop of its own thread, which the
    sequences' threads call through its sync methods."""
    if kind == "sync":
        with Client(target) as client:
            yield lambda ns, index: StepwellStore(client, namespace=ns, index=index)
        return
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def on_loop(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def new_client() -> AsyncClient:
        return AsyncClient(target)

    async def new_store(client: AsyncClient, ns: str, index: Dict[str, Any]) -> AsyncStepwellStore:
        return AsyncStepwellStore(client, namespace=ns, index=index)

    aclient = on_loop(new_client())
    try:
        yield lambda ns, index: on_loop(new_store(aclient, ns, index))
    finally:
        on_loop(aclient.close())
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_differential_against_in_memory_store(lg_target: str, kind: str) -> None:
    seed = int(os.environ.get("STEPWELL_STORE_DIFF_SEED", DEFAULT_SEED))
    count = int(os.environ.get("STEPWELL_STORE_DIFF_SEQUENCES", 1000))
    print(f"differential ({kind}): {count} sequences, STEPWELL_STORE_DIFF_SEED={seed}")
    started = time.monotonic()
    with _store_maker(kind, lg_target) as make_store:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            runs = pool.map(lambda i: run_sequence(make_store, seed * 100_003 + i), range(count))
            failures = [f for f in runs if f]
    print(f"differential ({kind}): {count} sequences in {time.monotonic() - started:.1f} s, {len(failures)} differing")
    if failures:
        pytest.fail(f"{len(failures)} of {count} sequences differ; the first:\n{failures[0]}")


def test_reference_corrections_are_needed() -> None:
    """The artifacts the reference corrects are InMemoryStore's (so the corrections stay honest)."""
    raw = InMemoryStore(index={"dims": DIMS, "embed": OrderFreeEmbeddings(), "fields": ["text"]})
    raw.put(("x",), "k", {"text": "apple"})
    raw.delete(("x",), "k")
    raw.get(("y",), "k")
    assert raw.list_namespaces() == [("x",), ("y",)]  # (a)
    raw.put(("z",), "scored", {"text": "apple"})
    raw.put(("z",), "u1", {"other": 1}, index=False)
    raw.put(("z",), "u2", {"other": 2}, index=False)
    page2 = raw.search(("z",), query="apple", limit=2, offset=2)
    assert [i.key for i in page2] == ["u1", "u2"]  # (b): the offset skipped no unscored item
    ref = Reference(index={"dims": DIMS, "embed": OrderFreeEmbeddings(), "fields": ["text"]})
    for k, v in [("scored", {"text": "apple"}), ("u1", {"other": 1}), ("u2", {"other": 2})]:
        ref.put(("z",), k, v)
    assert [i.key for i in ref.search(("z",), query="apple", limit=2, offset=2)] == ["u2"]
    ref.get(("y",), "k")
    ref.delete(("w",), "k")
    assert ref.list_namespaces() == [("z",)]
