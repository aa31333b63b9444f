"""stepwell for Google's Agent Development Kit: a durable memory service.

:class:`StepwellMemoryService` is an ADK ``BaseMemoryService`` (google-adk
2.x) whose memories live in stepwell's MemoryService, so every process, in
Python or TypeScript, finds what a user's past sessions said; re-exported by
:mod:`stepwell.adk`. It answers as ADK's ``InMemoryMemoryService`` does
(what is kept, re-adds that replace, deltas, deletions that hold, the word
search, its ranking and its ten results), and, given an embedder, searches
by meaning in the sidecar instead.

The layout is decision record 0047's (docs/decisions/0047-adk-memory-layout.md),
in the service's namespace; names (app name, user id, session id, event id)
are percent-encoded (``urllib.parse.quote(name, safe="")``, the empty name
``%``):

* ``("adk", app, user, "s", session)``: a session's memories, key the event
  id; ``("adk", app, user, "m")``: memories written with ``add_memory``, key
  the entry's id (a new UUID when it has none); ``("adk-deleted", app,
  user)``: tombstones of deleted ids, value ``{}``;
* a memory's value: ``{"id", "author", "timestamp" (seconds), "content"
  (ADK's camelCase Content JSON), "text" (the text parts joined with " "),
  "place", "session" (raw, session memories only), "custom_metadata"
  (direct memories only)}``; with an embedder, a vector of field ``text``.

Memories are in the order of their path's first put, then ``place`` (the
event's index in the session; after the bucket's largest for a delta), which
is InMemory's order of session buckets, then events. Each write is one
PutItems (split, puts first, past 1000 writes). A search reads the user's
memories under ``("adk", app, user)`` and matches words here, as InMemory's
(``\\w+`` tokens, NFC, lower case, single-script runs of mixed tokens,
substrings for non-ASCII words; ranked by words matched, ties in memory
order; at most ``max_results``); with ``embed`` the sidecar ranks them by
cosine similarity to the query's vector, and each entry's
``custom_metadata`` has its ``score``.

Where it differs from ``InMemoryMemoryService``, on purpose: a session (or a
delta) with nothing to remember stores nothing, so it holds no place in the
order until its first memory is stored (InMemory keeps an empty bucket at
its first add); an event id is kept once per session, its first occurrence
(InMemory keeps duplicates a session holds); ``add_events_to_memory``
ignores ``custom_metadata``, as InMemory does, and ``add_memory`` is
supported (InMemory raises ``NotImplementedError``), with the validation of
ADK's ``VertexAiMemoryBankService``; an entry's ``timestamp`` must be ISO 8601
(one without offset is local time, as ADK's ``format_timestamp`` writes it)
and comes back in ADK's format. Tombstones never expire; memories expire
after ``ttl`` seconds when it is set. A memory whose text has not changed
keeps its stored vector when its session is added again (one stored by a
service without an embedder gets its vector when its text next changes).
Errors of the sidecar are stepwell's (``stepwell.errors``: ``Unavailable``,
``InvalidArgument`` for a memory larger than ``--memory-value-bytes-max``, ...);
names too long for a label (256 bytes encoded) or a key (1024) raise
``ValueError`` before anything is written.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import re
import unicodedata
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union
from urllib.parse import quote

try:
    from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "stepwell.adk needs google-adk 2.x: pip install './clients/python[adk]' google-adk==2.13.0 "
        "(from a checkout of stepwell)"
    ) from exc

from ._common import finish_mutation as _finish
from ._owned import OwnedClient
from .aio import AsyncClient
from .v1 import memory_pb2 as mem

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

__all__ = ["StepwellMemoryService", "UNKNOWN_SESSION_ID"]

ROOT = "adk"
DELETED = "adk-deleted"
SESSIONS = "s"
DIRECT = "m"
TEXT_FIELD = "text"
# InMemoryMemoryService's bucket of a delta without a session id.
UNKNOWN_SESSION_ID = "__unknown_session_id__"
LABEL_BYTES_MAX = 256
KEY_BYTES_MAX = 1024
# MemoryService's default --memory-items-per-request-max and --memory-search-results-max.
ITEMS_PER_REQUEST_MAX = 1000
SEARCH_PAGE = 1000
# Memories without text never match a word, nor have a vector.
_WITH_TEXT = {"text": {"$ne": ""}}

Embedder = Callable[[List[str]], Union[Sequence[Sequence[float]], Awaitable[Sequence[Sequence[float]]]]]
_Value = Dict[str, Any]


def _encode(name: str, what: str, limit: int) -> str:
    encoded = quote(name, safe="") or "%"
    if len(encoded.encode("utf-8")) > limit:
        raise ValueError(
            f"{what} {name!r} is too long for stepwell's memory: {len(encoded)} bytes percent-encoded, at most {limit}"
        )
    return encoded


def _label(name: str, what: str) -> str:
    return _encode(name, what, LABEL_BYTES_MAX)


def _key(name: str, what: str) -> str:
    return _encode(name, what, KEY_BYTES_MAX)


def _scope(app_name: str, user_id: str) -> Tuple[str, str]:
    return _label(app_name, "app name"), _label(user_id, "user id")


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _text(content: types.Content) -> str:
    return " ".join(part.text for part in content.parts or [] if part.text)


def format_timestamp(seconds: float) -> str:
    """ADK's ``memory._utils.format_timestamp``: local time, ISO 8601, no offset."""
    return datetime.fromtimestamp(seconds).isoformat()


# -- words, as InMemoryMemoryService matches them ------------------------------


def _words(text: str) -> Set[str]:
    return {word.lower() for word in re.findall(r"\w+", unicodedata.normalize("NFC", text))}


def _is_latin(c: str) -> bool:
    if c.isascii():
        return c.isalnum() or c == "_"
    return unicodedata.name(c, "").startswith("LATIN")


def _searchable_words(text: str) -> Set[str]:
    """The words of ``text`` and, of each non-ASCII one, its single-script runs."""
    words = _words(text)
    for word in list(words):
        if not word.isascii():
            words.update("".join(run) for _, run in itertools.groupby(word, _is_latin))
    return words


def _matched(query_words: Set[str], text: str) -> int:
    words = _searchable_words(text)
    if not words:
        return 0
    lowered = unicodedata.normalize("NFC", text).lower()
    return sum(1 for w in query_words if w in words or (not w.isascii() and w in lowered))


# -- values --------------------------------------------------------------------


def _rememberable(events: Iterable[Event]) -> List[Tuple[int, Event]]:
    """The events with content parts, with their index, each id's first only."""
    seen: Set[str] = set()
    out = []
    for i, event in enumerate(events):
        if event.content and event.content.parts and event.id not in seen:
            seen.add(event.id)
            out.append((i, event))
    return out


def _event_value(event: Event, session_id: str, place: int) -> _Value:
    assert event.content is not None
    value: _Value = {"id": event.id}
    if event.author is not None:
        value["author"] = event.author
    if event.timestamp is not None:
        value["timestamp"] = event.timestamp
    value.update(
        content=event.content.model_dump(mode="json", exclude_none=True, by_alias=True),
        text=_text(event.content), place=place, session=session_id,
    )
    return value


def _entry(value: _Value, score: Optional[float] = None) -> MemoryEntry:
    meta = dict(value.get("custom_metadata") or {})
    if score is not None:
        meta["score"] = score
    stamp = value.get("timestamp")
    return MemoryEntry(
        id=value.get("id"), author=value.get("author"),
        timestamp=format_timestamp(stamp) if stamp is not None else None,
        content=types.Content.model_validate(value["content"]), custom_metadata=meta,
    )


def _seconds(stamp: Optional[str], index: int) -> Optional[float]:
    if stamp is None:
        return None
    text = stamp[:-1] + "+00:00" if isinstance(stamp, str) and stamp[-1:] in ("Z", "z") else stamp
    try:
        return datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        raise ValueError(f"memories[{index}].timestamp must be an ISO 8601 time, not {stamp!r}.") from None


def _validate(memories: Sequence[MemoryEntry]) -> List[MemoryEntry]:
    """VertexAiMemoryBankService's checks of ``add_memory``, with its messages."""
    if isinstance(memories, (str, bytes)) or not isinstance(memories, Sequence):
        raise TypeError("memories must be a sequence of memory items.")
    for index, memory in enumerate(memories):
        if not isinstance(memory, MemoryEntry):
            raise TypeError(f"memories[{index}] must be a MemoryEntry.")
    if not memories:
        raise ValueError("memories must contain at least one entry.")
    for index, memory in enumerate(memories):
        texts = [p.text for p in memory.content.parts or [] if p.text]
        if not texts:
            raise ValueError(f"memories[{index}] must include text.")
        if not any(t.strip() for t in texts):
            raise ValueError(f"memories[{index}] must include non-whitespace text.")
    return list(memories)


def _direct_value(memory: MemoryEntry, index: int, memory_id: str, meta: Mapping[str, object]) -> _Value:
    value: _Value = {"id": memory_id}
    if memory.author is not None:
        value["author"] = memory.author
    stamp = _seconds(memory.timestamp, index)
    if stamp is not None:
        value["timestamp"] = stamp
    merged = {**dict(meta), **memory.custom_metadata}
    try:
        json.dumps(merged, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"memories[{index}]: custom_metadata must be JSON: {exc}") from None
    value.update(
        content=memory.content.model_dump(mode="json", exclude_none=True, by_alias=True),
        text=_text(memory.content), custom_metadata=merged,
    )
    return value


def _in_order(items: Iterable[mem.MemoryItem]) -> List[_Value]:
    """Values in memory order: the sidecar's path order, then ``place``."""
    rank: Dict[Tuple[str, ...], int] = {}
    ranked = []
    for item in items:
        r = rank.setdefault(tuple(item.path), len(rank))
        value = json.loads(item.value)
        ranked.append((r, value.get("place", 0), value))
    ranked.sort(key=lambda x: (x[0], x[1]))
    return [value for _, _, value in ranked]


class StepwellMemoryService(OwnedClient, BaseMemoryService):
    """An ADK memory service whose memories live in stepwell.

    ``StepwellMemoryService(client=AsyncClient(...))`` uses a client you own
    (the service never closes it); :meth:`from_address` makes one of its own
    at the first call, inside the event loop that runs the agent, which
    :meth:`close` closes.

    Args:
        client: the :class:`stepwell.AsyncClient` to call.
        namespace: the stepwell namespace; default the client's, or ``"default"``.
        timeout: per-call deadline in seconds; the client's default when None.
        embed: when given, ``embed(texts)`` returns one vector per text (or an
            awaitable of them): every memory with text gets a vector of field
            ``text`` and ``search_memory`` searches by meaning in the sidecar,
            best first, each entry's ``custom_metadata["score"]`` its cosine
            similarity; without it, by words as ``InMemoryMemoryService``.
        max_results: the most memories a search returns (InMemory's 10).
        ttl: when given, each memory expires this many seconds after it was
            last written (tombstones of deleted ids never expire).
    """

    _stub = "memory_stub"

    def __init__(
        self, client: Optional[AsyncClient] = None, *, namespace: Optional[str] = None,
        timeout: Optional[float] = None, embed: Optional[Embedder] = None, max_results: int = 10,
        ttl: Optional[float] = None,
    ) -> None:
        if max_results < 1:
            raise ValueError(f"max_results must be at least 1, not {max_results}")
        if ttl is not None and ttl <= 0:
            raise ValueError(f"ttl must be a positive number of seconds, not {ttl}")
        self._use_client(client, namespace, timeout)
        self.embed = embed
        self.max_results = max_results
        self.ttl = ttl

    @classmethod
    def from_address(cls, target: str, *, namespace: str = "default", embed: Optional[Embedder] = None,
                     max_results: int = 10, ttl: Optional[float] = None,
                     **client_kwargs: Any) -> "StepwellMemoryService":
        """A service with its own :class:`stepwell.AsyncClient` of ``target``
        (``client_kwargs`` go to it: ``token``, ``tls``, ``timeout``, ...)."""
        service = cls(namespace=namespace, embed=embed, max_results=max_results, ttl=ttl)
        return service._make_client(target, namespace, client_kwargs)

    # -- memory calls ----------------------------------------------------------

    async def _items(self, prefix: List[str], flt: Optional[_Value] = None) -> List[mem.MemoryItem]:
        """Every item under ``prefix`` (that ``flt`` matches), in the sidecar's order."""
        items: List[mem.MemoryItem] = []
        while True:
            req = mem.SearchItemsRequest(
                namespace=self.namespace, path_prefix=prefix, limit=SEARCH_PAGE, offset=len(items),
                filter=_json(flt) if flt else b"",
            )
            hits = (await self._call("SearchItems", req)).hits
            items.extend(h.item for h in hits)
            if len(hits) < SEARCH_PAGE:
                return items

    async def _tombstoned(self, app: str, user: str, keys: Iterable[str]) -> Set[str]:
        """Which of ``keys`` (encoded ids) have a tombstone."""
        addresses = [mem.ItemAddress(path=[DELETED, app, user], key=k) for k in dict.fromkeys(keys)]
        found: Set[str] = set()
        for start in range(0, len(addresses), ITEMS_PER_REQUEST_MAX):
            req = mem.GetItemsRequest(namespace=self.namespace, items=addresses[start:start + ITEMS_PER_REQUEST_MAX])
            found.update(m.key for m in (await self._call("GetItems", req)).items)
        return found

    async def _vectors(self, texts: List[str]) -> List[Optional[List[float]]]:
        """The embedder's vectors of ``texts``; None for an all-zero one."""
        if self.embed is None or not texts:
            return [None] * len(texts)
        got = self.embed(list(texts))
        if inspect.isawaitable(got):
            got = await got
        vectors = [[float(x) for x in v] for v in got]
        if len(vectors) != len(texts):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        return [v if any(v) else None for v in vectors]

    async def _puts(self, path: List[str], new: List[Tuple[str, _Value]], old: Dict[str, _Value]) -> List[mem.MemoryWrite]:
        """The writes putting ``new`` (key, value) at ``path``; only a text
        that changed from ``old`` is embedded (and drops the stored vector)."""
        changed = [k not in old or old[k].get("text") != v["text"] for k, v in new]
        texts = [v["text"] for (_, v), c in zip(new, changed) if c and v["text"]]
        vectors = iter(await self._vectors(texts))
        writes = []
        for (key, value), c in zip(new, changed):
            w = mem.MemoryWrite(path=path, key=key, value=_json(value), replace_vectors=c)
            vector = next(vectors) if c and value["text"] else None
            if vector is not None:
                w.vectors.append(mem.MemoryVector(field=TEXT_FIELD, values=vector))
            if self.ttl is not None:
                w.ttl.FromTimedelta(timedelta(seconds=self.ttl))
            writes.append(w)
        return writes

    async def _commit(self, writes: List[mem.MemoryWrite]) -> None:
        """One PutItems, or several of at most 1000 writes in order (puts
        come first, so an interruption leaves a memory extra, never missing)."""
        for start in range(0, len(writes), ITEMS_PER_REQUEST_MAX):
            req = mem.PutItemsRequest(namespace=self.namespace, writes=writes[start:start + ITEMS_PER_REQUEST_MAX])
            await _finish(self._call("PutItems", req))

    async def _bucket(self, path: List[str]) -> Dict[str, _Value]:
        return {m.key: json.loads(m.value) for m in await self._items(path)}

    # -- the memory service ----------------------------------------------------

    async def add_session_to_memory(self, session: Session) -> None:
        """Replaces the session's memories with its events that have content,
        but for tombstoned (deleted) ids; a session may be added many times."""
        app, user = _scope(session.app_name, session.user_id)
        path = [ROOT, app, user, SESSIONS, _label(session.id, "session id")]
        events = [(i, e, _key(e.id, "event id")) for i, e in _rememberable(session.events)]
        old, deleted = await asyncio.gather(self._bucket(path), self._tombstoned(app, user, [k for _, _, k in events]))
        new = [(k, _event_value(e, session.id, i)) for i, e, k in events if k not in deleted]
        kept = {k for k, _ in new}
        drops = [mem.MemoryWrite(path=path, key=k, delete=True) for k in old if k not in kept]
        await self._commit(await self._puts(path, new, old) + drops)

    async def add_events_to_memory(
        self, *, app_name: str, user_id: str, events: Sequence[Event], session_id: Optional[str] = None,
        custom_metadata: Optional[Mapping[str, object]] = None,
    ) -> None:
        """Adds ``events`` (a delta) to the session's memories: those with
        content whose id is neither stored in that session nor tombstoned, after
        the session's others. Without ``session_id``, to InMemory's
        ``__unknown_session_id__`` bucket; ``custom_metadata`` is ignored."""
        del custom_metadata  # as InMemoryMemoryService
        app, user = _scope(app_name, user_id)
        bucket = session_id or UNKNOWN_SESSION_ID
        path = [ROOT, app, user, SESSIONS, _label(bucket, "session id")]
        found = [(e, _key(e.id, "event id")) for _, e in _rememberable(events)]
        old, deleted = await asyncio.gather(self._bucket(path), self._tombstoned(app, user, [k for _, k in found]))
        place = max((v.get("place", 0) for v in old.values()), default=-1) + 1
        new = []
        for event, key in found:
            if key not in old and key not in deleted:
                new.append((key, _event_value(event, bucket, place)))
                place += 1
        if new:
            await self._commit(await self._puts(path, new, old))

    async def add_memory(
        self, *, app_name: str, user_id: str, memories: Sequence[MemoryEntry],
        custom_metadata: Optional[Mapping[str, object]] = None,
    ) -> None:
        """Stores ``memories`` as the user's direct memories, each under its
        id (a new UUID when it has none; an id stored is replaced), with
        ``custom_metadata`` merged under each entry's own."""
        entries = _validate(memories)
        app, user = _scope(app_name, user_id)
        path = [ROOT, app, user, DIRECT]
        given: Dict[str, _Value] = {}
        for index, memory in enumerate(entries):
            memory_id = memory.id or str(uuid.uuid4())
            given[_key(memory_id, "memory id")] = _direct_value(memory, index, memory_id, custom_metadata or {})
        old = await self._bucket(path)
        place = max((v.get("place", 0) for v in old.values()), default=-1) + 1
        new = []
        for key, value in given.items():
            if key in old:
                value["place"] = old[key].get("place", 0)
            else:
                value["place"], place = place, place + 1
            new.append((key, value))
        await self._commit(await self._puts(path, new, old))

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The user's memories that match ``query``: by words as
        InMemoryMemoryService, or by meaning with an embedder."""
        app, user = _scope(app_name, user_id)
        if self.embed is not None:
            return await self._search_meaning([ROOT, app, user], query)
        words = _words(query)
        if not words:
            return SearchMemoryResponse()
        scored = []
        for value in _in_order(await self._items([ROOT, app, user], _WITH_TEXT)):
            matched = _matched(words, value.get("text", ""))
            if matched:
                scored.append((matched, value))
        scored.sort(key=lambda s: -s[0])  # stable: ties stay in memory order
        return SearchMemoryResponse(memories=[_entry(v) for _, v in scored[: self.max_results]])

    async def _search_meaning(self, prefix: List[str], query: str) -> SearchMemoryResponse:
        if not query.strip():
            return SearchMemoryResponse()
        (vector,) = await self._vectors([query])
        if vector is None:
            return SearchMemoryResponse()
        req = mem.SearchItemsRequest(
            namespace=self.namespace, path_prefix=prefix, filter=_json(_WITH_TEXT), query_vector=vector,
            limit=self.max_results,
        )
        hits = (await self._call("SearchItems", req)).hits
        return SearchMemoryResponse(
            memories=[_entry(json.loads(h.item.value), h.score) for h in hits if h.HasField("score")]
        )

    async def delete_memory(self, *, app_name: str, user_id: str, memory_id: Optional[str] = None) -> None:
        """Removes ``memory_id`` from every session of the user and from the
        direct memories; when it removed any, a tombstone keeps re-adds from
        bringing it back. A falsy or unknown id changes nothing."""
        if not memory_id:
            return
        app, user = _scope(app_name, user_id)
        found = await self._items([ROOT, app, user], {"id": memory_id})
        if not found:
            return
        tombstone = mem.MemoryWrite(path=[DELETED, app, user], key=found[0].key, value=b"{}")
        drops = [mem.MemoryWrite(path=list(m.path), key=m.key, delete=True) for m in found]
        await self._commit([tombstone] + drops)
