"""stepwell for Google's Agent Development Kit: durable session and memory services.

:class:`StepwellMemoryService`, an ADK ``BaseMemoryService`` on stepwell's
MemoryService, lives in :mod:`stepwell._adk_memory` (its docstring has the
layout, decision record 0047) and is re-exported here, imported at first use.
The rest of this docstring is the session service's.

:class:`StepwellSessionService` is an ADK ``BaseSessionService`` that keeps
sessions, their events and their ``app:``/``user:``/session state in
stepwell's record service, so every process that names the same session
continues it. It follows ADK's ``InMemorySessionService`` (errors, ordering,
merged state, fresh copies returned) and, like ADK's persistent services,
refuses an append from a session object another writer has overtaken
(``StaleSessionError``).

How a session is stored (all in one namespace; names in turn ids are
percent-encoded, so ``/`` separates them unambiguously and no control
character reaches the store):

* the session's turn ``adk:<app>/<user>/<session id>`` holds
  - a head record, kind ``adk-session``, id ``s``: payload JSON
    ``{"app", "user", "id", "create_time", "last_update_time"}``, metadata
    ``{"app": <app>, "user": <user>}`` so that ``list_sessions`` finds the
    heads of an app (or of one user) across turns in one listing;
  - one record per event, kind ``adk-event``, id = the event's sequence
    number in 20 digits (1 is the first; bytewise order is append order),
    payload ``Event.model_dump_json(exclude_none=True, by_alias=True)``:
    ADK's camelCase wire form, which the TypeScript service also reads and
    writes (timestamps in seconds), so either language continues a session;
  - one record per session-state key, kind ``adk-state``, id ``k`` + the
    key (a key may be empty; an id may not), payload the value's JSON,
    parent ``s``, so that a listing of heads carries each session's state;
* the app's turn ``adk-app:<app>`` holds its ``app:`` keys (without the
  prefix) as ``adk-state`` records, metadata ``{"s": "app", "app": <app>}``;
* the user's turn ``adk-user:<app>/<user>`` holds the ``user:`` keys the same
  way, metadata ``{"s": "user", "app": <app>, "user": <user>}``.

``temp:`` keys are never stored. An append writes its event (with
``PUT_MODE_CREATE``), the new head (with ``PUT_MODE_UPDATE``) and every
state key it changes in ONE PutRecords, so all of it commits or none; a
session deleted meanwhile refuses it whole (``SessionNotFoundError``), so an
append racing a deletion never brings the session back. The event's id is the one after the
newest event the session object has seen (kept in the session's
``_storage_update_marker``, ADK's own field for a storage revision): when
another writer appended first, that id is taken, the sidecar refuses the
whole request, and the append raises ``StaleSessionError``. A state value is
stored as JSON (``to_jsonable_python``, as ADK's database service does).

Limits: a turn id has at most 256 bytes, so app name, user id and session id
together (percent-encoded) must fit; a state key has at most 1023 bytes and
no NUL; an event at most the sidecar's ``--record-bytes-max``.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import quote

try:
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.errors.already_exists_error import AlreadyExistsError
    from google.adk.errors.session_not_found_error import SessionNotFoundError
    from google.adk.events.event import Event
    from google.adk.platform import time as platform_time
    from google.adk.platform import uuid as platform_uuid
    from google.adk.sessions import _session_util
    from google.adk.sessions.base_session_service import (
        BaseSessionService,
        GetSessionConfig,
        ListSessionsResponse,
    )
    from google.adk.sessions.session import Session
    from google.adk.sessions.state import State
except ImportError as exc:  # pragma: no cover - depends on what is installed
    raise ImportError(
        "stepwell.adk needs google-adk 2.x: pip install './clients/python[adk]' google-adk==2.13.0 "
        "(from a checkout of stepwell)"
    ) from exc

from ._common import finish_mutation as _finish
from ._owned import OwnedClient
from .aio import AsyncClient
from .errors import RecordExists, RecordNotFound
from .v1 import records_pb2 as rec

if TYPE_CHECKING:
    from ._adk_memory import StepwellMemoryService

__all__ = ["EVENT_KIND", "SESSION_KIND", "STATE_KIND", "StepwellMemoryService", "StepwellSessionService"]


def __getattr__(name: str) -> Any:
    """``StepwellMemoryService`` (:mod:`stepwell._adk_memory`), imported at first use."""
    if name == "StepwellMemoryService":
        from ._adk_memory import StepwellMemoryService

        return StepwellMemoryService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

SESSION_KIND = "adk-session"
EVENT_KIND = "adk-event"
STATE_KIND = "adk-state"
HEAD_ID = "s"
KEY_PREFIX = "k"
ID_DIGITS = 20
CONTENT_TYPE = "application/json"
PAGE_SIZE = 1000
TURN_BYTES_MAX = 256
_STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


def _q(name: str) -> str:
    return quote(name, safe="")


def _turn(*parts: str) -> str:
    turn = parts[0] + "/".join(_q(p) for p in parts[1:])
    if len(turn.encode("utf-8")) > TURN_BYTES_MAX:
        raise ValueError(f"app name, user id and session id are too long for a stepwell turn id: {turn!r}")
    return turn


def session_turn(app_name: str, user_id: str, session_id: str) -> str:
    return _turn("adk:", app_name, user_id, session_id)


def app_turn(app_name: str) -> str:
    return _turn("adk-app:", app_name)


def user_turn(app_name: str, user_id: str) -> str:
    return _turn("adk-user:", app_name, user_id)


def event_id(seq: int) -> str:
    return f"{seq:0{ID_DIGITS}d}"


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _state_records(turn: str, delta: Dict[str, Any], meta: Optional[Dict[str, str]], parent: str = "") -> List[rec.Record]:
    return [
        rec.Record(
            turn_id=turn,
            kind=STATE_KIND,
            id=KEY_PREFIX + key,
            parent_id=parent,
            payload=_json(value),
            content_type=CONTENT_TYPE,
            metadata=_json(meta) if meta else b"",
            mode=rec.PUT_MODE_UPSERT,
        )
        for key, value in delta.items()
    ]


def _state_of(records: Any) -> Dict[str, Any]:
    return {r.id[len(KEY_PREFIX):]: json.loads(r.payload.decode("utf-8")) for r in records}


def _merge(app: Dict[str, Any], user: Dict[str, Any], session: Dict[str, Any]) -> Dict[str, Any]:
    merged = dict(session)
    merged.update({State.APP_PREFIX + k: v for k, v in app.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user.items()})
    return merged


class StepwellSessionService(OwnedClient, BaseSessionService):
    """An ADK session service whose sessions live in stepwell.

    ``StepwellSessionService(client=AsyncClient(...))`` uses a client you own
    (the service never closes it); :meth:`from_address` makes one of its own
    at the first call, inside the event loop that runs the agent, which
    :meth:`close` closes.

    Args:
        client: the :class:`stepwell.AsyncClient` to call.
        namespace: the stepwell namespace; default the client's, or ``"default"``.
        timeout: per-call deadline in seconds; the client's default when None.
    """

    def __init__(
        self, client: Optional[AsyncClient] = None, *, namespace: Optional[str] = None, timeout: Optional[float] = None
    ) -> None:
        self._use_client(client, namespace, timeout)

    @classmethod
    def from_address(cls, target: str, *, namespace: str = "default", **client_kwargs: Any) -> "StepwellSessionService":
        """A service with its own :class:`stepwell.AsyncClient` of ``target``
        (``client_kwargs`` go to it: ``token``, ``tls``, ``timeout``, ...)."""
        service = cls(namespace=namespace)
        return service._make_client(target, namespace, client_kwargs)

    # -- record calls ----------------------------------------------------------

    async def _put(self, records: List[rec.Record]) -> None:
        await self._call("PutRecords", rec.PutRecordsRequest(namespace=self.namespace, records=records))

    async def _list(
        self, kind: str, *, turn: str = "", limit: Optional[int] = None, meta: Optional[Dict[str, str]] = None,
        children: str = "",
    ) -> List[rec.RecordEntry]:
        """Entries of ``kind``, newest id first: at most ``limit`` (all when None)."""
        got: List[rec.RecordEntry] = []
        token = ""
        while limit is None or len(got) < limit:
            req = rec.ListRecordsRequest(
                namespace=self.namespace, turn_id=turn, scope="", has_scope=True, kind=kind,
                metadata_contains=_json(meta) if meta else b"", children_kind=children,
                page_size=PAGE_SIZE if limit is None else min(limit - len(got), PAGE_SIZE), page_token=token,
            )
            resp = await self._call("ListRecords", req)
            got.extend(resp.entries)
            token = resp.next_page_token
            if not token:
                break
        return got

    async def _scoped_state(self, turn: str) -> Dict[str, Any]:
        return _state_of(e.record for e in await self._list(STATE_KIND, turn=turn))

    async def _head(self, turn: str) -> Optional[rec.RecordEntry]:
        """The session's head with its session-state records, None when it
        does not exist."""
        entries = await self._list(SESSION_KIND, turn=turn, limit=1, children=STATE_KIND)
        return entries[0] if entries else None

    # -- the session service ---------------------------------------------------

    async def create_session(
        self, *, app_name: str, user_id: str, state: Optional[Dict[str, Any]] = None, session_id: Optional[str] = None
    ) -> Session:
        # As ADK's in-memory service: a blank id is no id, and an id is stripped.
        session_id = (session_id.strip() if session_id else None) or platform_uuid.new_uuid()
        turn = session_turn(app_name, user_id, session_id)
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        now = platform_time.get_time()
        head = _head_record(turn, app_name, user_id, session_id, now, now, rec.PUT_MODE_CREATE)
        records = [head] + _state_records(turn, deltas["session"], None, HEAD_ID)
        records += _state_records(app_turn(app_name), deltas["app"], {"s": "app", "app": app_name})
        records += _state_records(user_turn(app_name, user_id), deltas["user"], _user_meta(app_name, user_id))
        try:
            await _finish(self._put(records))
        except RecordExists:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        app, user = await asyncio.gather(
            self._scoped_state(app_turn(app_name)), self._scoped_state(user_turn(app_name, user_id))
        )
        session = Session(
            app_name=app_name, user_id=user_id, id=session_id,
            state=_merge(app, user, deltas["session"]), last_update_time=now,
        )
        session._storage_update_marker = event_id(0)
        return session

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str, config: Optional[GetSessionConfig] = None
    ) -> Optional[Session]:
        session_id = session_id.strip() if session_id else session_id
        turn = session_turn(app_name, user_id, session_id)
        # Events first: state read after them is at least as new, and the
        # marker (the newest event's id) makes an append from this copy
        # stale if anything was appended since.
        events, marker = await self._events(turn, config)
        head, app, user = await asyncio.gather(
            self._head(turn), self._scoped_state(app_turn(app_name)), self._scoped_state(user_turn(app_name, user_id))
        )
        if head is None:
            return None
        info = json.loads(head.record.payload.decode("utf-8"))
        session = Session(
            app_name=app_name, user_id=user_id, id=session_id,
            state=_merge(app, user, _state_of(head.children)), events=events,
            last_update_time=info["last_update_time"],
        )
        session._storage_update_marker = marker
        return session

    async def _events(self, turn: str, config: Optional[GetSessionConfig]) -> Tuple[List[Event], str]:
        """The events ``config`` selects, oldest first, and the id of the
        session's newest event (``event_id(0)`` when it has none)."""
        limit = config.num_recent_events if config else None
        after = config.after_timestamp if config else None
        # At least one record is read even for num_recent_events=0: the
        # newest id is the session's revision.
        entries = await self._list(EVENT_KIND, turn=turn, limit=None if limit is None else max(limit, 1))
        marker = entries[0].record.id if entries else event_id(0)
        events: List[Event] = []
        for entry in entries[: limit if limit is not None else len(entries)]:
            event = Event.model_validate_json(entry.record.payload)
            # As the in-memory service: the events after the newest one
            # older than after_timestamp.
            if after is not None and event.timestamp < after:
                break
            events.append(event)
        events.reverse()
        return events, marker

    async def list_sessions(self, *, app_name: str, user_id: Optional[str] = None) -> ListSessionsResponse:
        meta = {"app": app_name} if user_id is None else {"app": app_name, "user": user_id}
        heads, app, users = await asyncio.gather(
            self._list(SESSION_KIND, meta=meta, children=STATE_KIND),
            self._scoped_state(app_turn(app_name)),
            self._user_states(app_name, user_id),
        )
        sessions = []
        for head in heads:
            info = json.loads(head.record.payload.decode("utf-8"))
            sessions.append(Session(
                app_name=app_name, user_id=info["user"], id=info["id"],
                state=_merge(app, users.get(info["user"], {}), _state_of(head.children)),
                last_update_time=info["last_update_time"],
            ))
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    async def _user_states(self, app_name: str, user_id: Optional[str]) -> Dict[str, Dict[str, Any]]:
        """The user state of ``user_id``, or of every user of the app when None."""
        if user_id is not None:
            return {user_id: await self._scoped_state(user_turn(app_name, user_id))}
        states: Dict[str, Dict[str, Any]] = {}
        for entry in await self._list(STATE_KIND, meta={"s": "user", "app": app_name}):
            user = json.loads(entry.record.metadata.decode("utf-8"))["user"]
            states.setdefault(user, {}).update(_state_of([entry.record]))
        return states

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        session_id = session_id.strip() if session_id else session_id
        turn = session_turn(app_name, user_id, session_id)
        await _finish(self._call("DeleteRecords", rec.DeleteRecordsRequest(namespace=self.namespace, turn_ids=[turn])))

    async def get_user_state(self, *, app_name: str, user_id: str) -> Dict[str, Any]:
        return await self._scoped_state(user_turn(app_name, user_id))

    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        turn = session_turn(session.app_name, session.user_id, session.id)
        head = await self._head(turn)
        if head is None:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        seq = await self._revision(session, turn) + 1
        info = json.loads(head.record.payload.decode("utf-8"))
        records = [
            _event_record(turn, seq, event),
            _head_record(turn, session.app_name, session.user_id, session.id, info["create_time"], event.timestamp,
                         rec.PUT_MODE_UPDATE),
        ] + self._delta_records(session, turn, event)
        try:
            await _finish(self._put(records))
        except RecordNotFound:
            # Deleted since the head was read: the update of the head refuses
            # the whole append, so a deleted session never comes back.
            raise SessionNotFoundError(f"Session {session.id} not found.") from None
        except RecordExists:
            if not await self._stored_as(turn, seq, event):
                raise StaleSessionError(_STALE_MESSAGE) from None
        session._storage_update_marker = event_id(seq)
        self._commit_event_to_session(session, event)
        session.last_update_time = event.timestamp
        return event

    def _delta_records(self, session: Session, turn: str, event: Event) -> List[rec.Record]:
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        deltas = _session_util.extract_json_safe_state_delta(delta)
        app, user = session.app_name, session.user_id
        return (
            _state_records(turn, deltas["session"], None, HEAD_ID)
            + _state_records(app_turn(app), deltas["app"], {"s": "app", "app": app})
            + _state_records(user_turn(app, user), deltas["user"], _user_meta(app, user))
        )

    async def _revision(self, session: Session, turn: str) -> int:
        """The sequence number of the newest event ``session`` has seen. A
        session object this service did not load carries no marker; as
        ADK's database service, it is current only when its last event is
        the newest stored."""
        if session._storage_update_marker is not None:
            try:
                return int(session._storage_update_marker)
            except ValueError:
                raise StaleSessionError(_STALE_MESSAGE) from None
        entries = await self._list(EVENT_KIND, turn=turn, limit=1)
        if not entries:
            if session.events:
                raise StaleSessionError(_STALE_MESSAGE)
            return 0
        newest = Event.model_validate_json(entries[0].record.payload)
        if not session.events or session.events[-1].id != newest.id:
            raise StaleSessionError(_STALE_MESSAGE)
        return int(entries[0].record.id)

    async def _stored_as(self, turn: str, seq: int, event: Event) -> bool:
        """Whether event ``seq`` is ``event`` itself: a retried request whose
        first attempt committed (its answer lost) is refused by its own
        event, and is then done."""
        req = rec.ListRecordsRequest(
            namespace=self.namespace, turn_id=turn, scope="", has_scope=True, kind=EVENT_KIND, id=event_id(seq),
            page_size=1,
        )
        resp = await self._call("ListRecords", req)
        return bool(resp.entries) and resp.entries[0].record.payload == _event_payload(event)


def _user_meta(app_name: str, user_id: str) -> Dict[str, str]:
    return {"s": "user", "app": app_name, "user": user_id}


def _event_payload(event: Event) -> bytes:
    return event.model_dump_json(exclude_none=True, by_alias=True).encode("utf-8")


def _event_record(turn: str, seq: int, event: Event) -> rec.Record:
    return rec.Record(
        turn_id=turn, kind=EVENT_KIND, id=event_id(seq), payload=_event_payload(event),
        content_type=CONTENT_TYPE, mode=rec.PUT_MODE_CREATE,
    )


def _head_record(
    turn: str, app_name: str, user_id: str, session_id: str, create_time: float, update_time: float, mode: int
) -> rec.Record:
    info = {"app": app_name, "user": user_id, "id": session_id, "create_time": create_time,
            "last_update_time": update_time}
    return rec.Record(
        turn_id=turn, kind=SESSION_KIND, id=HEAD_ID, payload=_json(info), content_type=CONTENT_TYPE,
        metadata=_json({"app": app_name, "user": user_id}), mode=mode,
    )
