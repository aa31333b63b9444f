"""LangGraph long-term memory stores on stepwell's MemoryService.

:class:`StepwellStore` (blocking) and :class:`AsyncStepwellStore` (asyncio)
implement ``langgraph.store.base.BaseStore``; :mod:`stepwell.langgraph`
re-exports them. A LangGraph namespace tuple is a MemoryService path, a key
is an item's key, a value its JSON object; the embeddings of an item's
indexed fields are computed here, with LangGraph's own field paths and
texts, and stored as its vectors (one per field, named as LangGraph's stores
name them). Filters, scores (cosine similarity), ordering and times to live
are the sidecar's (docs/guides/memory.md), so both its stores answer alike.

A batch runs its gets, searches and namespace listings first, then every
put and delete in one PutItems (the last op of an address wins): its reads
do not see its writes, as in LangGraph's stores. PutItems takes at most
1000 writes: a batch with more puts is sent as several PutItems, each
atomic, the whole not.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta, timezone
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import duration_pb2
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore
from langgraph.store.base.embed import ensure_embeddings, get_text_at_path, tokenize_path

try:  # langgraph-checkpoint 4.3 and later
    from langgraph.store.base import validate_op_namespace
except ImportError:  # earlier ones (the extra takes >= 2.1.2): the same label checks

    def validate_op_namespace(op: Op) -> None:
        if isinstance(op, (GetOp, PutOp)):
            paths: Sequence[Any] = [op.namespace]
        elif isinstance(op, SearchOp):
            paths = [op.namespace_prefix]
        elif isinstance(op, ListNamespacesOp):
            paths = [c.path for c in op.match_conditions or ()]
        else:
            paths = []
        for path in paths:
            for label in path:
                if not isinstance(label, str):
                    raise InvalidNamespaceError(f"Namespace labels must be strings, got {type(label).__name__}.")
                if "." in label or "\x00" in label or not label:
                    raise InvalidNamespaceError(f"Invalid namespace label {label!r} in {path}.")


from .aio import AsyncClient
from .client import Client
from .errors import StepwellError
from .v1 import memory_pb2 as mem

# MemoryService's default --memory-items-per-request-max: the most writes of
# one PutItems and addresses of one GetItems.
ITEMS_PER_REQUEST_MAX = 1000

_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_Address = Tuple[Tuple[str, ...], str]


def _check_filter(flt: Optional[Dict[str, Any]]) -> None:
    """Refuses an operator MemoryService does not know, with LangGraph's message."""
    for cond in (flt or {}).values():
        if isinstance(cond, dict) and any(isinstance(k, str) and k.startswith("$") for k in cond):
            for k in cond:
                if k not in _OPERATORS:
                    raise ValueError(f"Unsupported operator: {k}")


def _duration(minutes: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromTimedelta(timedelta(minutes=minutes))
    return d


def _item(m: mem.MemoryItem) -> Dict[str, Any]:
    return {
        "namespace": tuple(m.path),
        "key": m.key,
        "value": json.loads(m.value),
        "created_at": m.created_at.ToDatetime(tzinfo=timezone.utc),
        "updated_at": m.updated_at.ToDatetime(tzinfo=timezone.utc),
    }


def _match_path(path: Any) -> List[str]:
    return [path] if isinstance(path, str) else list(path)


class _Plan:
    """A batch cut into requests: the reads in op order, then the writes."""

    def __init__(self, store: "_StoreBase", ops: Iterable[Op]) -> None:
        self.ops = list(ops)
        self.results: List[Result] = [None] * len(self.ops)
        # GetItems by refresh flag: op indexes and addresses.
        self.gets: Dict[bool, List[Tuple[int, _Address]]] = {}
        self.searches: List[Tuple[int, SearchOp]] = []
        self.lists: List[Tuple[int, mem.ListPathsRequest]] = []
        # Last put of an address wins, at its first op's place (as InMemoryStore).
        self.puts: Dict[_Address, PutOp] = {}
        for i, op in enumerate(self.ops):
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                if op.namespace:  # an empty path holds nothing
                    self.gets.setdefault(bool(op.refresh_ttl), []).append((i, (tuple(op.namespace), str(op.key))))
            elif isinstance(op, SearchOp):
                _check_filter(op.filter)
                if op.limit > 0:
                    self.searches.append((i, op))
                else:
                    self.results[i] = []
            elif isinstance(op, ListNamespacesOp):
                if op.limit > 0:
                    self.lists.append((i, store._list_request(op)))
                else:
                    self.results[i] = []
            elif isinstance(op, PutOp):
                if op.namespace:
                    self.puts[(tuple(op.namespace), str(op.key))] = op
                elif op.value is not None:  # a path has 1 or more labels; deleting from none is a no-op
                    raise InvalidNamespaceError("Namespace cannot be empty.")
            else:
                raise ValueError(f"Unknown operation type: {type(op)}")

    def get_requests(self, namespace: str) -> List[Tuple[List[int], mem.GetItemsRequest]]:
        out = []
        for refresh, entries in self.gets.items():
            for start in range(0, len(entries), ITEMS_PER_REQUEST_MAX):
                chunk = entries[start : start + ITEMS_PER_REQUEST_MAX]
                req = mem.GetItemsRequest(
                    namespace=namespace,
                    items=[mem.ItemAddress(path=list(ns), key=key) for _, (ns, key) in chunk],
                    refresh_ttl=refresh,
                )
                out.append(([i for i, _ in chunk], req))
        return out

    def got(self, indexes: List[int], req: mem.GetItemsRequest, resp: mem.GetItemsResponse) -> None:
        found = {(tuple(m.path), m.key): m for m in resp.items}
        for i, a in zip(indexes, req.items):
            m = found.get((tuple(a.path), a.key))
            self.results[i] = Item(**_item(m)) if m is not None else None

    def texts(self, store: "_StoreBase") -> List[Tuple[_Address, str, str]]:
        """(address, field, text) of every vector the puts need, in put order."""
        out: List[Tuple[_Address, str, str]] = []
        if store.embeddings is None:
            return out
        for addr, op in self.puts.items():
            if op.value is None or op.index is False:
                continue
            if op.index is None:
                fields = store._fields
            else:
                fields = [(p, tokenize_path(p)) for p in op.index]
            for path, tokens in fields:
                found = get_text_at_path(op.value, tokens)
                if len(found) == 1:
                    out.append((addr, path, found[0]))
                else:
                    out.extend((addr, f"{path}.{j}", t) for j, t in enumerate(found))
        return out

    def put_requests(
        self, namespace: str, texts: List[Tuple[_Address, str, str]], vectors: Sequence[Sequence[float]]
    ) -> List[mem.PutItemsRequest]:
        if len(texts) != len(vectors):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        by_addr: Dict[_Address, List[mem.MemoryVector]] = {}
        for (addr, field, _), v in zip(texts, vectors):
            values = [float(x) for x in v]
            # An all-zero vector (e.g. of an empty text) is kept: it scores 0
            # against any query, as InMemoryStore scores it.
            by_addr.setdefault(addr, []).append(mem.MemoryVector(field=field, values=values))
        writes = []
        for (ns, key), op in self.puts.items():
            w = mem.MemoryWrite(path=list(ns), key=key)
            if op.value is None:
                w.delete = True
            else:
                w.value = json.dumps(dict(op.value), ensure_ascii=False).encode()
                w.vectors.extend(by_addr.get((ns, key), []))
                if op.ttl:
                    w.ttl.CopyFrom(_duration(op.ttl))
            writes.append(w)
        return [
            mem.PutItemsRequest(namespace=namespace, writes=writes[start : start + ITEMS_PER_REQUEST_MAX])
            for start in range(0, len(writes), ITEMS_PER_REQUEST_MAX)
        ]


class _StoreBase:
    """What both stores share: the configuration and the requests."""

    supports_ttl: bool = True
    namespace: str
    index_config: Optional[IndexConfig]
    ttl_config: Optional[TTLConfig]

    def _init_common(self, namespace: str, index: Optional[IndexConfig], ttl: Optional[TTLConfig]) -> None:
        self.namespace = namespace
        self.ttl_config = ttl
        self.index_config = None
        self.embeddings: Any = None
        self._fields: List[Tuple[str, Union[str, List[str]]]] = []
        if index is not None:
            self.index_config = index.copy()
            self.embeddings = ensure_embeddings(index.get("embed"))
            # The store-level "$" is the whole document; an op-level "$" is a key.
            self._fields = [(p, tokenize_path(p)) if p != "$" else (p, p) for p in (index.get("fields") or ["$"])]

    def _search_request(self, op: SearchOp, query_vector: Optional[Sequence[float]]) -> mem.SearchItemsRequest:
        req = mem.SearchItemsRequest(
            namespace=self.namespace,
            path_prefix=list(op.namespace_prefix),
            limit=op.limit,
            offset=op.offset,
            refresh_ttl=bool(op.refresh_ttl),
        )
        if op.filter:
            req.filter = json.dumps(op.filter, ensure_ascii=False).encode()
        if query_vector is not None:
            req.query_vector.extend(float(x) for x in query_vector)
        return req

    def _list_request(self, op: ListNamespacesOp) -> mem.ListPathsRequest:
        req = mem.ListPathsRequest(
            namespace=self.namespace, max_depth=op.max_depth or 0, limit=op.limit, offset=op.offset
        )
        for cond in op.match_conditions or ():
            labels = _match_path(cond.path)
            if not labels:  # an empty path matches every path
                continue
            if cond.match_type == "prefix":
                end = mem.PathMatch.END_PREFIX
            elif cond.match_type == "suffix":
                end = mem.PathMatch.END_SUFFIX
            else:
                raise ValueError(f"Unsupported match type: {cond.match_type}")
            req.matches.append(mem.PathMatch(end=end, labels=labels))
        return req

    def _queries(self, plan: _Plan) -> List[str]:
        if self.embeddings is None:
            return []
        return list(dict.fromkeys(op.query for _, op in plan.searches if op.query))

    @staticmethod
    def _hits(resp: mem.SearchItemsResponse) -> List[SearchItem]:
        return [
            SearchItem(**_item(h.item), score=h.score if h.HasField("score") else None) for h in resp.hits
        ]

    @staticmethod
    def _search_error(op: SearchOp, err: StepwellError) -> Exception:
        """LangGraph's stores raise ValueError for a filter they cannot apply."""
        if op.filter and err.code == grpc.StatusCode.INVALID_ARGUMENT and err.field in ("filter", ""):
            return ValueError(f"invalid filter {op.filter!r}: {err}")
        return err


class StepwellStore(_StoreBase, BaseStore):
    """A blocking LangGraph store (``BaseStore``) on a stepwell sidecar's MemoryService.

    Args:
        client: the :class:`stepwell.Client` to call through (its retry
            policy, timeout, metadata, token and TLS apply).
        namespace: the stepwell namespace of the items; defaults to the client's.
        index: LangGraph's ``IndexConfig`` (``dims``, ``embed``, ``fields``,
            default ``["$"]``, the whole value): the fields of each put embedded
            with ``embed_documents``, and a search's query with ``embed_query``.
        ttl: LangGraph's ``TTLConfig``: ``default_ttl`` (minutes) for puts
            that give none, ``refresh_on_read`` (default True) for reads that
            do not say. Expired items are never returned, and the sidecar
            sweeps them itself (``--sweep-interval-seconds``), so
            ``sweep_interval_minutes`` is accepted and ignored.

    A batch runs its reads first and then all its puts and deletes in one
    PutItems (atomic), its last op of an address winning; more than 1000
    puts (MemoryService's default ``--memory-items-per-request-max``) go in
    several PutItems, and are then not atomic as a whole.
    """

    def __init__(
        self,
        client: Client,
        *,
        namespace: Optional[str] = None,
        index: Optional[IndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
    ) -> None:
        self._init_common(client.namespace if namespace is None else namespace, index, ttl)
        self.client = client
        self._owns_client = False

    @classmethod
    def from_address(
        cls,
        target: str,
        *,
        namespace: str = "",
        index: Optional[IndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
        **client_kwargs: Any,
    ) -> "StepwellStore":
        """A store with its own :class:`stepwell.Client` of ``target``
        (``client_kwargs`` go to the client); ``close()`` or leaving a
        ``with`` block closes it."""
        store = cls(Client(target, namespace=namespace, **client_kwargs), index=index, ttl=ttl)
        store._owns_client = True
        return store

    def close(self) -> None:
        """Closes the client if the store made it."""
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> "StepwellStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: Any, request: Any) -> Any:
        return self.client._call(method, request, None)

    def batch(self, ops: Iterable[Op]) -> List[Result]:
        plan = _Plan(self, ops)
        stub = self.client.memory_stub
        for indexes, req in plan.get_requests(self.namespace):
            plan.got(indexes, req, self._call(stub.GetItems, req))
        queries = self._queries(plan)
        vectors = {q: self.embeddings.embed_query(q) for q in queries}
        for i, op in plan.searches:
            req = self._search_request(op, vectors.get(op.query) if op.query else None)
            try:
                plan.results[i] = self._hits(self._call(stub.SearchItems, req))
            except StepwellError as err:
                raise self._search_error(op, err) from err
        for i, lreq in plan.lists:
            plan.results[i] = [tuple(p.labels) for p in self._call(stub.ListPaths, lreq).paths]
        if plan.puts:
            texts = plan.texts(self)
            embedded = self.embeddings.embed_documents([t for _, _, t in texts]) if texts else []
            for preq in plan.put_requests(self.namespace, texts, embedded):
                self._call(stub.PutItems, preq)
        return plan.results

    async def abatch(self, ops: Iterable[Op]) -> List[Result]:
        return await asyncio.get_running_loop().run_in_executor(None, self.batch, list(ops))


class AsyncStepwellStore(_StoreBase, AsyncBatchedBaseStore):
    """The asyncio twin of :class:`StepwellStore`, on a :class:`stepwell.AsyncClient`.

    Create it inside a running event loop. Concurrent calls made in one tick
    of the loop are batched (LangGraph's ``AsyncBatchedBaseStore``: equal
    reads run once, puts of one address collapse to the last); a search's
    query is embedded with ``aembed_query``, puts with ``aembed_documents``.
    The sync methods work from other threads (not on the store's loop), as
    LangGraph's async stores do. The arguments are :class:`StepwellStore`'s;
    ``ttl``'s ``sweep_interval_minutes`` is accepted and ignored (the
    sidecar sweeps).
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: Optional[str] = None,
        index: Optional[IndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
    ) -> None:
        super().__init__()
        self._init_common(client.namespace if namespace is None else namespace, index, ttl)
        self.client = client
        self._owns_client = False

    @classmethod
    def from_address(
        cls,
        target: str,
        *,
        namespace: str = "",
        index: Optional[IndexConfig] = None,
        ttl: Optional[TTLConfig] = None,
        **client_kwargs: Any,
    ) -> "AsyncStepwellStore":
        """A store with its own :class:`stepwell.AsyncClient` of ``target``;
        use it as ``async with AsyncStepwellStore.from_address(...) as store``
        (or call ``await store.aclose()``)."""
        store = cls(AsyncClient(target, namespace=namespace, **client_kwargs), index=index, ttl=ttl)
        store._owns_client = True
        return store

    async def aclose(self) -> None:
        """Closes the client if the store made it."""
        if self._owns_client:
            await self.client.close()

    async def __aenter__(self) -> "AsyncStepwellStore":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def _call(self, method: Any, request: Any) -> Any:
        return await self.client._call(method, request, None)

    async def abatch(self, ops: Iterable[Op]) -> List[Result]:
        plan = _Plan(self, ops)
        stub = self.client.memory_stub
        for indexes, req in plan.get_requests(self.namespace):
            plan.got(indexes, req, await self._call(stub.GetItems, req))
        queries = self._queries(plan)
        embedded_queries = await asyncio.gather(*(self.embeddings.aembed_query(q) for q in queries))
        vectors = dict(zip(queries, embedded_queries))
        for i, op in plan.searches:
            req = self._search_request(op, vectors.get(op.query) if op.query else None)
            try:
                plan.results[i] = self._hits(await self._call(stub.SearchItems, req))
            except StepwellError as err:
                raise self._search_error(op, err) from err
        for i, lreq in plan.lists:
            plan.results[i] = [tuple(p.labels) for p in (await self._call(stub.ListPaths, lreq)).paths]
        if plan.puts:
            texts = plan.texts(self)
            embedded = await self.embeddings.aembed_documents([t for _, _, t in texts]) if texts else []
            for preq in plan.put_requests(self.namespace, texts, embedded):
                await self._call(stub.PutItems, preq)
        return plan.results
