"""stepwell for the OpenAI Agents SDK: a durable session, tools that run once,
and approvals that survive a restart.

:class:`StepwellSession` keeps an agent's conversation in stepwell's record
service instead of a local SQLite file, so any process (in Python, or in
TypeScript through ``@stepwell/client/agents``) that names the same session
continues it. It follows the SDK's ``Session`` protocol with the semantics of
its ``SQLiteSession``: items in order, ``get_items(limit)`` the newest
``limit`` oldest first, ``pop_item`` the newest exactly once,
``clear_session`` all of the session's items.

How a session is stored, shared byte for byte with the TypeScript client:

* one record per item, at (namespace, turn_id = the session id, scope ``""``,
  kind ``"agent-item"``, id = the item's sequence number as 20 zero-padded
  decimal digits), so the sidecar's bytewise id order is the conversation's;
* payload: the item as compact UTF-8 JSON (``application/json``); metadata
  ``{"u": <a fresh random UUID as 32 hex digits>}``, so that a pop deletes
  exactly the record it read and two racing pops never return the same item;
* ``add_items`` writes its items in one PutRecords with ``PUT_MODE_CREATE``
  at the ids after the newest it knows of. When another writer took one of
  them first, the sidecar refuses the whole request (``RecordExists``) and
  the session reads the newest id and tries again, so two racing batches
  both stay whole and one follows the other. A batch larger than one request
  (1000 records, or 4 MiB less 64 KiB) is written in several requests, each
  whole and in order; another writer's batch may then fall between them.
  An item larger than the sidecar's ``--record-bytes-max`` (4 MiB by
  default) is refused by it (``InvalidArgument``).

Each ``add_items`` reads the newest id before it writes (two calls), rather
than trusting an id it remembers: after a clear, a remembered id may lie in
a gap below items written since, and a batch put there would sort before
them. Only a clear racing the add itself can still reorder: a batch that
read the newest id before the clear may land after items written after it.

:func:`run_once` makes a function tool's effect run once per (session, run,
tool call id) through the idempotency service, and :func:`save_run_state`,
:func:`load_run_state` and :func:`await_approval` carry a run that stopped for
a tool approval across a process restart (see the README).
"""

from __future__ import annotations

import functools
import inspect
import json
import unicodedata
import uuid
import warnings
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

import grpc

try:
    from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "stepwell.agents needs the OpenAI Agents SDK 0.24: "
        "pip install './clients/python[agents]' openai-agents==0.24.0 (from a checkout of stepwell)"
    ) from exc

from ._common import finish_mutation as _finish
from ._owned import OwnedClient
from .aio import AsyncClient
from .client import Client
from .errors import RecordExists, StepwellError
from .v1 import records_pb2 as rec

__all__ = [
    "ITEM_KIND",
    "RUN_STATE_KIND",
    "StepwellSession",
    "approval_wait_name",
    "await_approval",
    "apply_approval",
    "delete_run_state",
    "load_run_state",
    "run_once",
    "save_run_state",
    "tool_once_key",
]

ITEM_KIND = "agent-item"
RUN_STATE_KIND = "agent-run-state"
ID_DIGITS = 20
CONTENT_TYPE = "application/json"
# The most records one PutRecords or one page of ListRecords carries (the
# sidecar's default --records-per-request-max; a page of at most this size
# is accepted under any --page-size-max).
RECORDS_PER_REQUEST = 1000
PAGE_SIZE = 1000
# What one PutRecords carries at most: the sidecar's default
# --message-bytes-max (4 MiB) less room for the request's own fields.
REQUEST_BYTES_MAX = (4 << 20) - (64 << 10)
# A record's framing inside a PutRecordsRequest: its tag and length.
RECORD_FRAMING_BYTES = 8
SESSION_ID_BYTES_MAX = 256

JsonItem = Any
T = TypeVar("T")


def check_session_id(session_id: Any) -> str:
    """``session_id`` if it can name a session (a turn): 1..256 bytes of
    UTF-8 without control characters; ValueError naming it otherwise."""
    if not isinstance(session_id, str):
        raise ValueError(f"session_id must be a str, not {type(session_id).__name__}")
    try:
        size = len(session_id.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError("session_id must be valid UTF-8 (it has a lone surrogate)") from None
    if not 1 <= size <= SESSION_ID_BYTES_MAX:
        raise ValueError(f"session_id must be 1..{SESSION_ID_BYTES_MAX} bytes of UTF-8, not {size}")
    if any(unicodedata.category(ch) == "Cc" for ch in session_id):
        raise ValueError(f"session_id must not contain control characters: {session_id!r}")
    return session_id


def item_id(seq: int) -> str:
    """The record id of the item with sequence number ``seq`` (1 is the first)."""
    return f"{seq:0{ID_DIGITS}d}"


def encode_item(item: JsonItem) -> bytes:
    """The item as compact UTF-8 JSON. A string with a lone surrogate cannot
    be UTF-8, so such an item is written with ASCII escapes instead (the
    same JSON value)."""
    try:
        return json.dumps(item, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(item, separators=(",", ":")).encode("utf-8")


def _u_of(record: rec.Record) -> str:
    try:
        meta = json.loads(record.metadata.decode("utf-8")) if record.metadata else {}
    except ValueError:
        return ""
    u = meta.get("u") if isinstance(meta, dict) else None
    return u if isinstance(u, str) else ""


def _runs(records: List[rec.Record]) -> List[List[rec.Record]]:
    """``records`` in order, in runs that each fit one PutRecords (a record
    larger than a request makes a run of its own, which the sidecar refuses)."""
    runs: List[List[rec.Record]] = []
    used = 0
    for r in records:
        size = r.ByteSize() + RECORD_FRAMING_BYTES
        if not runs or len(runs[-1]) >= RECORDS_PER_REQUEST or (runs[-1] and used + size > REQUEST_BYTES_MAX):
            runs.append([])
            used = 0
        runs[-1].append(r)
        used += size
    return runs


class StepwellSession(OwnedClient):
    """An OpenAI Agents SDK session stored in stepwell.

    ``StepwellSession(session_id, client=AsyncClient(...))`` uses a client you
    own (the session never closes it); :meth:`from_address` makes a client of
    its own, which :meth:`close` (or leaving ``async with``) closes. Either
    way the client is an :class:`stepwell.AsyncClient`, used in one event loop.

    Args:
        session_id: the conversation; 1..256 bytes of UTF-8 without control
            characters (it is the stepwell turn id).
        client: the client to call.
        namespace: the stepwell namespace; default the client's, or
            ``"default"``.
        session_settings: the SDK's ``SessionSettings`` (or a dict of them);
            its ``limit`` is what ``get_items()`` returns without a limit.
        timeout: per-call deadline in seconds; the client's default when None.
    """

    session_settings: Optional[SessionSettings] = None

    def __init__(
        self,
        session_id: str,
        *,
        client: Optional[AsyncClient] = None,
        namespace: Optional[str] = None,
        session_settings: Union[SessionSettings, Dict[str, Any], None] = None,
        timeout: Optional[float] = None,
    ) -> None:
        self.session_id = check_session_id(session_id)
        self.session_settings = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings()
        )
        self._use_client(client, namespace, timeout)

    @classmethod
    def from_address(
        cls,
        session_id: str,
        target: str,
        *,
        namespace: str = "default",
        session_settings: Union[SessionSettings, Dict[str, Any], None] = None,
        **client_kwargs: Any,
    ) -> "StepwellSession":
        """A session with its own :class:`stepwell.AsyncClient` of ``target``
        (``client_kwargs`` go to it: ``token``, ``tls``, ``timeout``,
        ``retry``, ...). The client is made at the first call, inside the
        event loop that runs the agent, so the session may be built outside it."""
        session = cls(session_id, namespace=namespace, session_settings=session_settings)
        return session._make_client(target, namespace, client_kwargs)

    def _list_request(self, page_size: int, page_token: str = "", id: str = "") -> rec.ListRecordsRequest:
        return rec.ListRecordsRequest(
            namespace=self.namespace,
            turn_id=self.session_id,
            scope="",
            has_scope=True,
            kind=ITEM_KIND,
            id=id,
            page_size=page_size,
            page_token=page_token,
        )

    async def _newest(self) -> Optional[rec.Record]:
        resp = await self._call("ListRecords", self._list_request(1))
        return resp.entries[0].record if resp.entries else None

    async def _newest_records(self, limit: Optional[int]) -> List[rec.Record]:
        """The newest ``limit`` records (all when None), newest first."""
        got: List[rec.Record] = []
        token = ""
        while limit is None or len(got) < limit:
            size = PAGE_SIZE if limit is None else min(limit - len(got), PAGE_SIZE)
            resp = await self._call("ListRecords", self._list_request(size, token))
            got.extend(e.record for e in resp.entries if e.HasField("record"))
            token = resp.next_page_token
            if not token:
                break
        return got if limit is None else got[:limit]

    # -- the Session protocol -------------------------------------------------

    async def get_items(self, limit: Optional[int] = None) -> List[JsonItem]:
        """The session's items, oldest first: the newest ``limit`` of them
        (or of ``session_settings.limit``), every item when both are None.
        As ``SQLiteSession``: none for 0, every item for a negative limit."""
        n = resolve_session_limit(limit, self.session_settings)
        if n == 0:
            return []
        records = await self._newest_records(None if n is None or n < 0 else n)
        return [json.loads(r.payload.decode("utf-8")) for r in reversed(records)]

    async def add_items(self, items: List[JsonItem]) -> None:
        """Appends ``items`` after the session's newest item, in one request
        (several, each whole and in order, when they do not fit one). A
        caller cancelled meanwhile is answered once the write is done."""
        if not items:
            return
        await _finish(self._add(items))

    async def _add(self, items: List[JsonItem]) -> None:
        records = [
            rec.Record(
                turn_id=self.session_id,
                scope="",
                kind=ITEM_KIND,
                id=item_id(0),
                payload=encode_item(item),
                content_type=CONTENT_TYPE,
                metadata=json.dumps({"u": uuid.uuid4().hex}, separators=(",", ":")).encode("utf-8"),
                mode=rec.PUT_MODE_CREATE,
            )
            for item in items
        ]
        for run in _runs(records):
            await self._create(run)

    async def _create(self, run: List[rec.Record]) -> None:
        """Writes ``run`` at the next free ids, reading the newest id again
        after each refusal (each means another writer made progress)."""
        while True:
            newest = await self._newest()
            first = int(newest.id) + 1 if newest is not None else 1
            for i, r in enumerate(run):
                r.id = item_id(first + i)
            try:
                await self._call("PutRecords", rec.PutRecordsRequest(namespace=self.namespace, records=run))
            except RecordExists:
                if await self._written(run[0]):
                    return
                continue
            return

    async def _written(self, record: rec.Record) -> bool:
        """Whether ``record`` is stored as is: a retried request whose first
        attempt was committed though its answer was lost is refused by its
        own records, and is then done."""
        resp = await self._call("ListRecords", self._list_request(1, id=record.id))
        return bool(resp.entries) and _u_of(resp.entries[0].record) == _u_of(record)

    async def pop_item(self) -> Optional[JsonItem]:
        """Removes the newest item and returns it (None when the session is
        empty). Of two racing pops each gets a different item."""
        return await _finish(self._pop())

    async def _pop(self) -> Optional[JsonItem]:
        while True:
            newest = await self._newest()
            if newest is None:
                return None
            u = _u_of(newest)
            if not u:
                raise StepwellError(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"record {newest.id} of session {self.session_id!r} has no \"u\" in its metadata",
                    "NOT_A_SESSION_ITEM",
                )
            req = rec.DeleteRecordsRequest(
                namespace=self.namespace,
                turn_ids=[self.session_id],
                kind=ITEM_KIND,
                metadata_any=[json.dumps({"u": u}, separators=(",", ":")).encode("utf-8")],
            )
            resp = await self._call("DeleteRecords", req)
            if resp.deleted >= 1:
                return json.loads(newest.payload.decode("utf-8"))
            # Another pop took it first: the newest is now another item.

    async def clear_session(self) -> None:
        """Deletes every item of the session (other records of the same turn,
        e.g. saved run states or a LangGraph thread's checkpoints, stay)."""
        req = rec.DeleteRecordsRequest(namespace=self.namespace, turn_ids=[self.session_id], kind=ITEM_KIND)
        await _finish(self._call("DeleteRecords", req))


# -- tools that run once -------------------------------------------------------

TOOL_KEY_PREFIX = "agent-tool:"
# The keys of tool calls scoped to a session: "agent-tool@<session>:<run key>:<call id>",
# never equal to a key of the older, unscoped form.
SESSION_TOOL_KEY_PREFIX = "agent-tool@"
DEFAULT_TOOL_LEASE = 30.0
RunKey = Union[str, Callable[[Any], str]]
SessionKey = Union[None, str, Callable[[Any], str]]
OnceClient = Union[AsyncClient, Client, StepwellSession]


def _key_part(part: str) -> str:
    """A part of a session-scoped key, with ``%``, ``:`` and ``@`` written
    ``%25``, ``%3A`` and ``%40``, so that no two (session, run key, call id)
    make the same key."""
    return part.replace("%", "%25").replace(":", "%3A").replace("@", "%40")


def tool_once_key(run_key: str, tool_call_id: str, session_id: Optional[str] = None) -> str:
    """The idempotency key of a tool call: with ``session_id``,
    ``agent-tool@<session id>:<run key>:<call id>`` (each part with ``%``,
    ``:`` and ``@`` escaped); without, ``agent-tool:<run key>:<call id>``,
    which two sessions with the same run key and call id share."""
    if session_id is None:
        return f"{TOOL_KEY_PREFIX}{run_key}:{tool_call_id}"
    parts = (_key_part(session_id), _key_part(run_key), _key_part(tool_call_id))
    return SESSION_TOOL_KEY_PREFIX + ":".join(parts)


def _call_key(run_key: RunKey, session: SessionKey, ctx: Any) -> str:
    call_id = getattr(ctx, "tool_call_id", None)
    if not isinstance(call_id, str) or not call_id:
        raise TypeError(
            "run_once: the tool's first parameter must be the SDK's ToolContext "
            "(annotate it `ctx: ToolContext[...]`), which carries the tool call id"
        )
    session_id = session(ctx) if callable(session) else session
    return tool_once_key(run_key(ctx) if callable(run_key) else run_key, call_id, session_id)


def _tool_session(client: OnceClient, run_key: RunKey, session_id: SessionKey) -> SessionKey:
    """The session a tool's keys are scoped to: ``session_id``, else the
    StepwellSession's. Without either, a constant run key cannot tell two
    sessions apart: warned of (a run key that is a function is trusted)."""
    if session_id is not None:
        return session_id
    if isinstance(client, StepwellSession):
        return client.session_id
    if isinstance(run_key, str):
        warnings.warn(
            f"run_once: the key of a tool call is agent-tool:{run_key}:<call id>, the same in every session: "
            "two sessions whose model repeats a call id share one recorded result. Pass session_id= "
            "(or a StepwellSession), or a run key unique to the run",
            UserWarning,
            stacklevel=3,
        )
    return None


def run_once(
    client: OnceClient,
    run_key: RunKey,
    *,
    session_id: SessionKey = None,
    lease: float = DEFAULT_TOOL_LEASE,
    **once_kwargs: Any,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Makes a function tool's effect run once per (session, run, tool call id).

    Put it under ``@function_tool``, on a function whose first parameter is
    the ``ToolContext``::

        @function_tool(needs_approval=True)
        @run_once(session, run_key="order-42")
        async def refund(ctx: ToolContext[Any], amount: int) -> str: ...

    The first call with a call id runs the function under the idempotency key
    :func:`tool_once_key` of (session, run key, call id) and records its
    output as JSON; a run that is resumed or replayed with the same call id
    gets the recorded output without running it again. The output must be
    JSON (as ``json.dumps`` takes it) and comes back as JSON decodes it. A
    function that raises records nothing, so a later call runs it again.

    ``client`` is a :class:`stepwell.AsyncClient` (an async or sync function),
    a :class:`StepwellSession` (its client), or a :class:`stepwell.Client`
    (a sync function only). ``run_key`` is a string, or a function of the
    ``ToolContext`` giving one (e.g. from ``ctx.context``). ``session_id``
    (a string, or a function of the ``ToolContext``) scopes the keys to a
    session; by default the StepwellSession's when ``client`` is one. With
    neither and a constant run key, the keys are those of every session
    (``agent-tool:<run key>:<call id>``), which is warned of.

    ``lease`` (seconds) is the tool's lease: a worker that dies inside the
    tool keeps its call's key until the lease runs out, and the retry waits
    for that (a WARNING of the ``stepwell`` logger says so) before running
    the tool again. ``once_kwargs`` go to ``once()`` (``retention``,
    ``wait_timeout``, ...).
    """
    once_kwargs["lease"] = lease
    return _once_tool(client, run_key, _tool_session(client, run_key, session_id), once_kwargs)


def _once_tool(
    client: OnceClient, run_key: RunKey, session: SessionKey, once_kwargs: Dict[str, Any]
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """run_once's decorator: a sync wrapper for a Client, else an async one."""

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        if isinstance(client, Client):
            if inspect.iscoroutinefunction(f):
                raise TypeError("run_once: an async tool needs an AsyncClient (or a StepwellSession)")

            @functools.wraps(f)
            def sync_wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
                key = _call_key(run_key, session, ctx)
                return client.once(key, lambda: f(ctx, *args, **kwargs), **once_kwargs)

            return sync_wrapper

        @functools.wraps(f)
        async def wrapper(ctx: Any, *args: Any, **kwargs: Any) -> Any:
            aclient = client.client if isinstance(client, StepwellSession) else client
            key = _call_key(run_key, session, ctx)
            return await aclient.once(key, lambda: f(ctx, *args, **kwargs), **once_kwargs)

        return wrapper

    return deco


# -- approval across a restart -------------------------------------------------


def _aclient(client: Union[AsyncClient, StepwellSession]) -> AsyncClient:
    return client.client if isinstance(client, StepwellSession) else client


def _state_namespace(client: Union[AsyncClient, StepwellSession], namespace: Optional[str]) -> str:
    if namespace is not None:
        return namespace
    if isinstance(client, StepwellSession):
        return client.namespace
    return client.namespace or "default"


async def save_run_state(
    client: Union[AsyncClient, StepwellSession],
    session_id: str,
    run_id: str,
    state: Any,
    *,
    namespace: Optional[str] = None,
) -> None:
    """Stores a ``RunState`` (as its ``to_string()``) under ``run_id`` in the
    session's turn (kind ``agent-run-state``), replacing one saved before."""
    record = rec.Record(
        turn_id=check_session_id(session_id),
        scope="",
        kind=RUN_STATE_KIND,
        id=run_id,
        payload=state.to_string().encode("utf-8"),
        content_type=CONTENT_TYPE,
        metadata=_run_meta(run_id),
        mode=rec.PUT_MODE_UPSERT,
    )
    cl = _aclient(client)
    req = rec.PutRecordsRequest(namespace=_state_namespace(client, namespace), records=[record])
    await cl._call(cl.record_stub.PutRecords, req, None)


async def load_run_state(
    client: Union[AsyncClient, StepwellSession],
    session_id: str,
    run_id: str,
    agent: Any,
    *,
    namespace: Optional[str] = None,
    **from_string_kwargs: Any,
) -> Any:
    """The ``RunState`` saved under ``run_id`` (``RunState.from_string`` with
    the run's starting ``agent``), or None when none is saved."""
    from agents import RunState

    cl = _aclient(client)
    req = rec.ListRecordsRequest(
        namespace=_state_namespace(client, namespace),
        turn_id=check_session_id(session_id),
        scope="",
        has_scope=True,
        kind=RUN_STATE_KIND,
        id=run_id,
        page_size=1,
    )
    resp = await cl._call(cl.record_stub.ListRecords, req, None)
    if not resp.entries:
        return None
    text = resp.entries[0].record.payload.decode("utf-8")
    return await RunState.from_string(agent, text, **from_string_kwargs)


async def delete_run_state(
    client: Union[AsyncClient, StepwellSession], session_id: str, run_id: str, *, namespace: Optional[str] = None
) -> None:
    """Deletes the ``RunState`` saved under ``run_id`` (once the run is done)."""
    cl = _aclient(client)
    # DeleteRecords selects by metadata, not by id: a saved state carries its
    # run id in its metadata for this.
    req = rec.DeleteRecordsRequest(
        namespace=_state_namespace(client, namespace),
        turn_ids=[check_session_id(session_id)],
        kind=RUN_STATE_KIND,
        metadata_any=[_run_meta(run_id)],
    )
    await cl._call(cl.record_stub.DeleteRecords, req, None)


def _run_meta(run_id: str) -> bytes:
    return json.dumps({"run_id": run_id}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def approval_wait_name(run_id: str, interruption: Any) -> str:
    """The name of the wait that decides an interruption (a
    ``ToolApprovalItem``) of the run ``run_id``: ``approval:<run id>:<call id>``."""
    raw = getattr(interruption, "raw_item", None)
    call_id = raw.get("call_id") if isinstance(raw, dict) else getattr(raw, "call_id", None)
    if not call_id:
        raise ValueError("the interruption has no tool call id")
    return f"approval:{run_id}:{call_id}"


async def await_approval(
    client: Union[AsyncClient, StepwellSession],
    session_id: str,
    wait_name: str,
    *,
    timeout: Optional[float] = None,
    namespace: Optional[str] = None,
) -> Dict[str, Any]:
    """Waits for the decision signalled on the wait ``wait_name`` of the
    session's turn and returns it, a JSON object such as
    ``{"approved": true}``. The wait is created if it does not exist, and a
    signal sent before anyone waited is kept, so the approver may answer
    while no process of the run is alive. ``timeout`` (seconds, None: no
    limit) raises :class:`stepwell.WaitTimeout` with the wait still pending."""
    cl = _aclient(client)
    raw = await cl.wait_for_signal(
        check_session_id(session_id), wait_name, timeout=timeout, namespace=_state_namespace(client, namespace)
    )
    decision = json.loads(raw.decode("utf-8")) if raw else {}
    if not isinstance(decision, dict):
        raise ValueError(f"the approval signal of {wait_name!r} is not a JSON object: {decision!r}")
    return decision


def apply_approval(state: Any, interruption: Any, decision: Dict[str, Any]) -> bool:
    """Approves the interruption in ``state`` when ``decision["approved"]`` is
    true, else rejects it (with ``decision["message"]``, when given, as what
    the model is told). Returns whether it was approved."""
    if decision.get("approved") is True:
        state.approve(interruption)
        return True
    message = decision.get("message")
    state.reject(interruption, rejection_message=message if isinstance(message, str) else None)
    return False
