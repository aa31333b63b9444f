"""StepwellSessionService against ADK's own services, InMemorySessionService
and DatabaseSessionService on SQLite (aiosqlite): the same seeded random
sequences of calls on both (create_session with and without an id and with
app:/user:/temp:/session state, get_session with every kind of config,
list_sessions for an app or one user, delete_session, append_event of events
with state deltas, partial events, get_user_state), every answer compared:
sessions (id, app, user, merged state, events, last update time), events
returned, errors raised, and the session objects appended to.

ADK's clock and id generator are its platform providers; each sequence sets
them (in its own task's context) to a counter, so that generated session ids
and creation times are the same on both services and compare exactly. What
still legitimately differs, and is left out of the comparison:
- state values: stepwell stores them as JSON, so the values used here are
  JSON values (the in-memory service keeps Python objects as given);
- update times below the microsecond, which the database service rounds;
- session ids with blanks around them: the database service keeps them as
  given, the in-memory service (and stepwell's) strips them, so they are
  drawn against the in-memory service only;
- events with equal timestamps: the database service orders them by id,
  the in-memory service (and stepwell's) in the order they were appended,
  so against the database service events never tie;
- an append to a deleted session: every service raises SessionNotFoundError,
  but the database service has applied the event's temp: keys to the session
  object first, the in-memory service (and stepwell's) not.
At least 1,000 sequences per reference (STEPWELL_ADK_SEQUENCES changes it
for a quick run); the suite prints how many ran.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
from pathlib import Path
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
import pytest
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from adk_support import adk_namespace, adk_sidecar, adk_target, backend  # noqa: F401  (fixtures)
from conftest import fresh_namespace
from stepwell import AsyncClient
from stepwell.adk import StepwellSessionService

SEQUENCES = int(os.environ.get("STEPWELL_ADK_SEQUENCES", "1000"))
PARALLEL = 8
APPS = ["app-1", "app/2"]
USERS = ["u1", "ü 2"]
SESSION_IDS = ["s1", "s2", " s1 ", "é/3"]
KEYS = ["a", "b", "", "app:c", "app:d", "user:e", "user:f", "temp:g", "temp:h"]
VALUES: List[Any] = [0, 1, -7, 2.5, "", "text", "日本語 🎉", None, True, [1, "x", None], {"k": [1, {"n": 2}]}]


class World:
    """One sequence's random choices, clock and generated ids."""

    def __init__(self, seed: int, strips: bool) -> None:
        self.rnd = random.Random(seed)
        # ADK's database service takes a session id as given; its in-memory
        # service (and stepwell's) strips it, so ids with blanks around them
        # are only drawn against the in-memory one.
        self.strips = strips
        self.session_ids = SESSION_IDS if strips else [i for i in SESSION_IDS if i == i.strip()]
        self.now = 1_700_000_000.0
        self.ids = 0
        self.events = 0
        # (app, user, id) -> each service's latest session object.
        self.held: Dict[Tuple[str, str, str], List[Any]] = {}
        self.stamps: List[float] = []

    def tick(self) -> float:
        # Often no time passes, so that sessions tie on their update time.
        self.now += self.rnd.choice([0.0, 0.0, 0.001, 0.25, 1.0])
        return self.now

    def state(self) -> Dict[str, Any]:
        return {k: copy.deepcopy(self.rnd.choice(VALUES)) for k in self.rnd.sample(KEYS, self.rnd.randrange(0, 5))}

    def event(self) -> Event:
        self.events += 1
        stamp = self.tick()
        if not self.strips and self.stamps and stamp == self.stamps[-1]:
            # Against the database service events never tie: it orders tied
            # events by id, the others by when they were appended.
            stamp = self.now = stamp + 0.001
        self.stamps.append(stamp)
        text = self.rnd.choice(["hello", "ünïcode ✓", "", "x" * 50])
        return Event(
            id=f"ev-{self.events}", invocation_id=f"inv-{self.events // 3}", author=self.rnd.choice(["user", "agent"]),
            timestamp=stamp, partial=self.rnd.random() < 0.1 or None,
            content=types.Content(role="user", parts=[types.Part(text=text)]),
            actions=EventActions(state_delta=self.state()),
        )

    def config(self) -> Optional[GetSessionConfig]:
        kind = self.rnd.randrange(5)
        if kind == 0:
            return None
        after = self.rnd.choice(self.stamps) + self.rnd.choice([-0.0001, 0, 0.0001]) if self.stamps else 5.0
        limit = self.rnd.choice([0, 1, 2, 5, 100])
        return [GetSessionConfig(), GetSessionConfig(num_recent_events=limit), GetSessionConfig(after_timestamp=after),
                GetSessionConfig(num_recent_events=limit, after_timestamp=after)][kind - 1]


def norm_event(event: Event) -> Dict[str, Any]:
    return event.model_dump(mode="json", exclude_none=True)


def norm(result: Any) -> Any:
    """An answer as plain data: sessions with their events, lists of them."""
    if result is None or isinstance(result, (dict, str)):
        return result
    if isinstance(result, Event):
        return norm_event(result)
    if hasattr(result, "sessions"):
        return [norm(s) for s in result.sessions]
    return {
        "id": result.id, "app": result.app_name, "user": result.user_id, "state": result.state,
        "events": [norm_event(e) for e in result.events],
        # ADK's database service keeps update times as datetimes, to the microsecond.
        "last_update_time": round(result.last_update_time, 6),
    }


async def outcome(coro: Any) -> Tuple[str, Any]:
    try:
        return "ok", await coro
    except Exception as exc:  # the error's type is what is compared
        return "error", type(exc).__name__


async def step(world: World, services: List[Any]) -> str:
    """Makes one random call on both services and checks the answers agree."""
    rnd = world.rnd
    op = rnd.choices(["create", "get", "list", "delete", "append", "user_state"], weights=[3, 3, 1, 1, 8, 1])[0]
    app, user, sid = rnd.choice(APPS), rnd.choice(USERS), rnd.choice(world.session_ids + [None])
    if op == "append":
        await append(world, services)
        return op
    stamp, gen = world.tick(), f"gen-{world.ids}"
    world.ids += 1
    # The arguments are drawn once, for both services.
    state, config, list_user = world.state(), world.config(), user if rnd.random() < 0.5 else None
    answers = []
    for service in services:
        # Both services see the same clock reading and generated id.
        platform_time.set_time_provider(lambda: stamp)
        platform_uuid.set_id_provider(lambda: gen)
        args = Args(op, app, user, sid, copy.deepcopy(state), config, list_user)
        answers.append(await outcome(call(service, args)))
    if op in ("create", "get") and all(a[0] == "ok" and a[1] is not None for a in answers):
        world.held[(app, user, answers[0][1].id)] = [a[1] for a in answers]
    if op == "delete" and rnd.random() < 0.7:
        # Otherwise the deleted session's objects stay held, and appending
        # through them must fail alike (SessionNotFoundError).
        world.held.pop((app, user, (sid or "s1").strip()), None)
    check(answers, op)
    return op


class Args(NamedTuple):
    op: str
    app: str
    user: str
    sid: Optional[str]
    state: Dict[str, Any]
    config: Optional[GetSessionConfig]
    list_user: Optional[str]


def call(service: Any, a: Args) -> Any:
    if a.op == "create":
        return service.create_session(app_name=a.app, user_id=a.user, state=a.state, session_id=a.sid)
    if a.op == "get":
        return service.get_session(app_name=a.app, user_id=a.user, session_id=a.sid or "s1", config=a.config)
    if a.op == "list":
        return service.list_sessions(app_name=a.app, user_id=a.list_user)
    if a.op == "delete":
        return service.delete_session(app_name=a.app, user_id=a.user, session_id=a.sid or "s1")
    return service.get_user_state(app_name=a.app, user_id=a.user)


async def append(world: World, services: List[Any]) -> None:
    """Appends one event, through each service's latest object of a held session."""
    if not world.held:
        return
    key = world.rnd.choice(sorted(world.held))
    event = world.event()
    answers = [await outcome(s.append_event(obj, copy.deepcopy(event))) for s, obj in zip(services, world.held[key])]
    # The session objects themselves (temp: state applied, event appended)
    # must agree too; except that on an append refused (the session was
    # deleted) the database service has applied the temp: keys already, and
    # the in-memory one (and stepwell's) not.
    comparable = world.strips or answers[0][0] == "ok"
    check(answers + ([("ok", obj) for obj in world.held[key]] if comparable else []), "append")
    if not comparable:
        del world.held[key]


def check(answers: List[Tuple[str, Any]], op: str) -> None:
    want, got = answers[0], answers[1]
    assert (want[0], norm(want[1])) == (got[0], norm(got[1])), f"{op}: in-memory {want!r}, stepwell {got!r}"
    if len(answers) == 4:
        assert norm(answers[2][1]) == norm(answers[3][1]), f"{op}: session objects differ"


def reference(kind: str, folder: Path, seed: int) -> Any:
    if kind == "memory":
        return InMemorySessionService()
    return DatabaseSessionService(f"sqlite+aiosqlite:///{folder}/reference-{seed}.db")


async def one_sequence(seed: int, client: AsyncClient, kind: str, folder: Path) -> int:
    """Runs sequence ``seed`` on both services; returns how many calls it compared."""
    world = World(seed, strips=kind == "memory")
    services = [reference(kind, folder, seed), StepwellSessionService(client, namespace=fresh_namespace("adk-diff"))]
    calls = world.rnd.randrange(10, 40)
    try:
        for n in range(calls):
            try:
                await step(world, services)
            except AssertionError as exc:
                raise AssertionError(f"{kind} seed {seed} step {n}: {exc}") from None
    finally:
        if kind == "database":
            await services[0].close()
    return calls


@pytest.mark.parametrize("kind", ["memory", "database"])
def test_differential(adk_target: str, kind: str, tmp_path: Path) -> None:
    async def main() -> Tuple[int, int]:
        # PARALLEL sequences at a time, each in a namespace of its own and a
        # task of its own (so its clock and id providers are its own).
        async with AsyncClient(adk_target) as client:
            counts: List[int] = []
            for start in range(0, SEQUENCES, PARALLEL):
                seeds = range(start, min(start + PARALLEL, SEQUENCES))
                counts += await asyncio.gather(*[one_sequence(s, client, kind, tmp_path) for s in seeds])
        return len(counts), sum(counts)

    sequences, calls = asyncio.run(main())
    print(f"adk differential against {kind} ({backend()}): {sequences} sequences, {calls} calls, every answer equal")
    assert sequences >= SEQUENCES
