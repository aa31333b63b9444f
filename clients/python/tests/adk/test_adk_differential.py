"""StepwellSessionService against ADK's own services, InMemorySessionService
and DatabaseSessionService on SQLite (aiosqlite): the same seeded random
sequences of calls on all three at once (create_session with and without an
id and with app:/user:/temp:/session state, get_session with every kind of
config, list_sessions for an app or one user, delete_session, append_event
of events with state deltas, partial events, get_user_state), and every
answer of stepwell's compared with each reference's: sessions (id, app,
user, merged state, events, last update time), events returned, errors
raised, and the session objects appended to. Each sequence runs once, on the
three services, so stepwell runs each sequence once per store.

ADK's clock and id generator are its platform providers; each sequence sets
them (in its own task's context) to a counter, so that generated session ids
and creation times are the same on every service and compare exactly. What
still legitimately differs, and how the test treats it:
- state values: stepwell stores them as JSON, so the values used here are
  JSON values (the in-memory service keeps Python objects as given);
- update times below the microsecond, which the database service rounds:
  compared to the microsecond;
- session ids with blanks around them: the database service keeps them as
  given, the in-memory service (and stepwell's) strips them, so the database
  service is given the stripped id;
- events with equal timestamps: the database service orders them by event
  id, the in-memory service (and stepwell's) in the order they were
  appended, so event ids here grow in append order (zero-padded);
- an append to a deleted session: every service raises SessionNotFoundError,
  but the database service has applied the event's temp: keys to the session
  object first, the in-memory service (and stepwell's) not: the test checks
  exactly that difference, then takes those keys off the object again.
The database service's SQLite file is on a memory file system when there is
one (/dev/shm), and one database serves many sequences, each with app names
of its own: with its file on disk the test took about twice as long.
1,000 sequences by default, as clients/python/test runs it alone;
STEPWELL_DIFF_SEQUENCES changes it, and the test command (scripts/test) sets
150 per store, its short version. The test prints how many ran.
"""

from __future__ import annotations

import asyncio
import copy
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.sessions import DatabaseSessionService, InMemorySessionService
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from adk_support import adk_namespace, adk_sidecar, adk_target, backend  # noqa: F401  (fixtures)
from conftest import fresh_namespace
from stepwell import AsyncClient
from stepwell.adk import StepwellSessionService

SEQUENCES = int(os.environ.get("STEPWELL_DIFF_SEQUENCES", "1000"))
PARALLEL = 8
# How many sequences share one database file (each with app names of its own).
PER_DATABASE = 100
APPS = ["app-1", "app/2"]
USERS = ["u1", "ü 2"]
SESSION_IDS = ["s1", "s2", " s1 ", "é/3"]
KEYS = ["a", "b", "", "app:c", "app:d", "user:e", "user:f", "temp:g", "temp:h"]
VALUES: List[Any] = [0, 1, -7, 2.5, "", "text", "日本語 🎉", None, True, [1, "x", None], {"k": [1, {"n": 2}]}]
MEMORY, DATABASE, STEPWELL = 0, 1, 2
NAMES = ["in-memory", "database", "stepwell"]


class World:
    """One sequence's random choices, clock and generated ids."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        # App names of this sequence's own, so that sequences can share the
        # database service's tables without seeing each other's sessions.
        self.apps = [f"{seed}:{app}" for app in APPS]
        self.now = 1_700_000_000.0
        self.ids = 0
        self.events = 0
        # (app, user, id) -> each service's latest session object.
        self.held: Dict[Tuple[str, str, str], List[Any]] = {}
        self.stamps: List[float] = []

    def tick(self) -> float:
        # Often no time passes, so that sessions and events tie on their times.
        self.now += self.rnd.choice([0.0, 0.0, 0.001, 0.25, 1.0])
        return self.now

    def state(self) -> Dict[str, Any]:
        return {k: copy.deepcopy(self.rnd.choice(VALUES)) for k in self.rnd.sample(KEYS, self.rnd.randrange(0, 5))}

    def event(self) -> Event:
        self.events += 1
        stamp = self.tick()
        self.stamps.append(stamp)
        text = self.rnd.choice(["hello", "ünïcode ✓", "", "x" * 50])
        return Event(
            # Ids in append order: the database service breaks timestamp ties by id.
            id=f"ev-{self.events:06d}", invocation_id=f"inv-{self.events // 3}",
            author=self.rnd.choice(["user", "agent"]), timestamp=stamp, partial=self.rnd.random() < 0.1 or None,
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
    """Makes one random call on every service and checks the answers agree."""
    rnd = world.rnd
    op = rnd.choices(["create", "get", "list", "delete", "append", "user_state"], weights=[3, 3, 1, 1, 8, 1])[0]
    app, user, sid = rnd.choice(world.apps), rnd.choice(USERS), rnd.choice(SESSION_IDS + [None])
    if op == "append":
        await append(world, services)
        return op
    stamp, gen = world.tick(), f"gen-{world.ids}"
    world.ids += 1
    # The arguments are drawn once, for every service.
    state, config, list_user = world.state(), world.config(), user if rnd.random() < 0.5 else None
    answers = []
    for n, service in enumerate(services):
        # Every service sees the same clock reading and generated id.
        platform_time.set_time_provider(lambda: stamp)
        platform_uuid.set_id_provider(lambda: gen)
        # The database service takes a session id as given; the others strip it.
        given = sid.strip() if n == DATABASE and sid else sid
        args = Args(op, app, user, given, copy.deepcopy(state), config, list_user)
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
    """Appends one event, through each service's latest object of a held
    session, and compares the answers and the objects appended to."""
    if not world.held:
        return
    objects = world.held[world.rnd.choice(sorted(world.held))]
    event = world.event()
    before = copy.deepcopy(objects[DATABASE].state)
    answers = [await outcome(s.append_event(obj, copy.deepcopy(event))) for s, obj in zip(services, objects)]
    if answers[DATABASE][0] == "error" and not event.partial:
        # Refused (the session was deleted), the database service has applied
        # the event's temp: keys to its object, and the others not.
        temp = {k: v for k, v in event.actions.state_delta.items() if k.startswith("temp:")}
        assert objects[DATABASE].state == {**before, **temp}, "append: refused, the database object changed"
        objects[DATABASE].state = before
    check(answers, "append")
    check([("ok", obj) for obj in objects], "append: the session objects")


def check(answers: List[Tuple[str, Any]], op: str) -> None:
    """Stepwell's answer equals each reference's."""
    got = (answers[STEPWELL][0], norm(answers[STEPWELL][1]))
    for ref in (MEMORY, DATABASE):
        want = (answers[ref][0], norm(answers[ref][1]))
        assert want == got, f"{op}: {NAMES[ref]} {answers[ref]!r}, stepwell {answers[STEPWELL]!r}"


async def one_sequence(seed: int, client: AsyncClient, database: DatabaseSessionService) -> int:
    """Runs sequence ``seed`` on the three services; returns how many calls it compared."""
    world = World(seed)
    ours = StepwellSessionService(client, namespace=fresh_namespace("adk-diff"))
    services = [InMemorySessionService(), database, ours]
    calls = world.rnd.randrange(10, 40)
    for n in range(calls):
        try:
            await step(world, services)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} step {n}: {exc}") from None
    return calls


@pytest.fixture
def database_folder(tmp_path: Path) -> Iterator[Path]:
    """Where the database service's files go: a memory file system when
    there is one, else the test's folder."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(prefix="stepwell-adk-", dir=shm) as folder:
        yield Path(folder)


async def run_all(target: str, folder: Path, seeds: List[int]) -> Tuple[int, int]:
    """The sequences ``seeds``, PARALLEL at a time, each in a namespace of
    its own and a task of its own (so its clock and id providers are its
    own), PER_DATABASE of them in one database file."""
    counts: List[int] = []
    async with AsyncClient(target) as client:
        for first in range(0, len(seeds), PER_DATABASE):
            # The reference's concurrent sequences share one SQLite file: on a
            # busy machine a writer may wait past sqlite3's default 5 s for
            # the file's lock (OperationalError: database is locked), which
            # would fail the reference, not stepwell; it waits longer here.
            database = DatabaseSessionService(
                f"sqlite+aiosqlite:///{folder}/reference-{seeds[first]}.db", connect_args={"timeout": 120}
            )
            try:
                chunk = seeds[first:first + PER_DATABASE]
                for start in range(0, len(chunk), PARALLEL):
                    batch = chunk[start:start + PARALLEL]
                    counts += await asyncio.gather(*[one_sequence(s, client, database) for s in batch])
            finally:
                await database.close()
    return len(counts), sum(counts)


def test_differential(adk_target: str, database_folder: Path) -> None:
    sequences, calls = asyncio.run(run_all(adk_target, database_folder, list(range(SEQUENCES))))
    print(f"adk differential against in-memory and database ({backend()}): {sequences} sequences, {calls} calls,"
          " every answer equal")
    assert sequences >= SEQUENCES
