"""StepwellMemoryService against ADK's InMemoryMemoryService: the same seeded
random sequences of calls on both (sessions that grow and are added again,
deltas with and without a session id that repeat stored events, deletions of
stored, unknown and empty ids, searches of Latin, CJK, Korean, Cyrillic,
NFD, partial-word, punctuation-only and empty queries), every search's
answer compared: each memory's id, author, timestamp, content and custom
metadata, in order, at most ten.

The names are the awkward ones (a slash in an app name, blanks and accents
in a user id, an empty session id), one app and user take most calls, texts
come from a small vocabulary, and one sequence in five is long, so that its
searches match more than ten memories and rank them; an event id
sometimes recurs in another session, and events come with no content, with
no parts, with empty text or only a function call.

One difference is the service's on purpose (its module docstring): a session
added (or a delta) with nothing to remember creates an empty bucket in
InMemory, which holds its place in the order of sessions; stepwell stores
nothing, and the session takes its place when its first memory is stored.
The reference is held to that: after each add, a bucket that is empty and
has never held a memory is taken out of its dict (so it is made again, last,
when it first gets one); the generator still makes such adds, and
test_adk_memory.py's test_empty_session_takes_its_place_at_its_first_memory
shows the difference itself.

300 sequences by default; STEPWELL_ADK_MEMORY_DIFF_SEQS changes it. A
failure names its seed and step.
"""

from __future__ import annotations

import asyncio
import os
import random
import unicodedata
from typing import Dict, List, Optional, Set, Tuple

from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.in_memory_memory_service import _extract_searchable_words, _extract_words_lower
from google.genai import types

from adk_memory_help import entries, session
from adk_support import adk_sidecar, adk_target, backend  # noqa: F401  (fixtures)
from conftest import fresh_namespace
from stepwell import AsyncClient
from stepwell.adk import StepwellMemoryService

SEQUENCES = int(os.environ.get("STEPWELL_ADK_MEMORY_DIFF_SEQS", "300"))
PARALLEL = 8
APPS = ["app", "app/2"]
USERS = ["u1", "ü 2"]
SESSION_IDS = ["s1", "s/2", "", "é 3"]
WORDS = ["deploy", "status", "ready", "Python", "python3", "abc123", "abc", "café", "naïve", "東京", "日本語",
         "私はPythonを使う", "привет", "안녕하세요", "colour", "teal", "x_y", "READY"]
SEPARATORS = [" ", " ", ", ", "! ", "?", "\n", "."]
QUERIES = ["deploy", "deploy status ready", "READY?!", "python", "thon", "abc", "abc123", "日本", "東京 deploy",
           unicodedata.normalize("NFD", "café"), "naive", "ПРИВЕТ", "안녕하세요", "teal colour", "", "?!",
           "x_y", "x", "status python teal café"]


class World:
    """One sequence's random choices and the sessions it has made."""

    def __init__(self, seed: int) -> None:
        self.rnd = random.Random(seed)
        self.events = 0
        self.now = 1_700_000_000.0
        # (app, user, session id) -> its events so far.
        self.sessions: Dict[Tuple[str, str, str], List[Event]] = {}
        self.seen_ids: List[str] = []

    def text(self) -> str:
        words = [self.rnd.choice(WORDS) for _ in range(self.rnd.randint(1, 4))]
        return "".join(w + self.rnd.choice(SEPARATORS) for w in words).strip(" ")

    def event(self, taken: Set[str]) -> Event:
        self.events += 1
        self.now += self.rnd.choice([0.0, 0.001, 0.25, 1.0, 3600.5])
        event_id = f"e{self.events}"
        if self.seen_ids and self.rnd.random() < 0.1:  # an id of another session
            reused = self.rnd.choice(self.seen_ids)
            event_id = reused if reused not in taken else event_id
        self.seen_ids.append(event_id)
        return Event(id=event_id, invocation_id="inv", author=self.rnd.choice(["user", "agent", "a b"]),
                     timestamp=self.now, content=self.body())

    def body(self) -> Optional[types.Content]:
        kind = self.rnd.choices(["text", "parts", "none", "empty", "blank", "call"], weights=[12, 3, 1, 1, 1, 1])[0]
        if kind == "none":
            return None
        if kind == "empty":
            return types.Content(role="user", parts=[])
        if kind == "blank":
            return types.Content(role="model", parts=[types.Part(text="")])
        if kind == "call":
            call = types.FunctionCall(name="f", args={"query": "deploy ready", "n": 2})
            return types.Content(role="model", parts=[types.Part(function_call=call)])
        n = 1 if kind == "text" else self.rnd.randint(2, 3)
        return types.Content(role=self.rnd.choice(["user", "model"]), parts=[types.Part(text=self.text()) for _ in range(n)])

    def grow(self, key: Tuple[str, str, str]) -> List[Event]:
        events = self.sessions.setdefault(key, [])
        taken = {e.id for e in events}
        for _ in range(self.rnd.choice([0, 0, 1, 2, 3])):
            e = self.event(taken)
            taken.add(e.id)
            events.append(e)
        return events


class Reference:
    """InMemoryMemoryService, with a bucket that never held a memory taken
    out after each add (see the module docstring)."""

    def __init__(self) -> None:
        self.service = InMemoryMemoryService()
        self.held: Set[Tuple[Tuple[str, str], str]] = set()
        self.taken_out = 0

    def settle(self, app: str, user: str, bucket: str) -> None:
        buckets = self.service._session_events.get((app, user), {})
        if buckets.get(bucket):
            self.held.add(((app, user), bucket))
        elif bucket in buckets and ((app, user), bucket) not in self.held:
            del buckets[bucket]
            self.taken_out += 1


async def step(world: World, ref: Reference, ours: StepwellMemoryService) -> str:
    """One random call on both services; a search's answers must be equal."""
    rnd = world.rnd
    op = rnd.choices(["session", "events", "delete", "search"], weights=[4, 2, 1, 5])[0]
    app, user = rnd.choices(APPS, weights=[4, 1])[0], rnd.choices(USERS, weights=[4, 1])[0]
    if op == "session":
        sid = rnd.choice(SESSION_IDS)
        events = world.grow((app, user, sid))
        for service in (ref.service, ours):
            await service.add_session_to_memory(session(sid, [e.model_copy(deep=True) for e in events], app, user))
        ref.settle(app, user, sid)
    elif op == "events":
        await add_events(world, ref, ours, app, user)
    elif op == "delete":
        memory_id = rnd.choice(world.seen_ids + ["nope", "", None]) if world.seen_ids else None
        for service in (ref.service, ours):
            await service.delete_memory(app_name=app, user_id=user, memory_id=memory_id)
    else:
        query = rnd.choice(QUERIES)
        want = entries(await ref.service.search_memory(app_name=app, user_id=user, query=query))
        got = entries(await ours.search_memory(app_name=app, user_id=user, query=query))
        assert got == want, f"search {query!r} as ({app!r}, {user!r}):\n in-memory {want}\n stepwell  {got}"
    return op


async def add_events(world: World, ref: Reference, ours: StepwellMemoryService, app: str, user: str) -> None:
    """A delta: some of a session's events (stored or not) and new ones, to
    that session's bucket or to no session's."""
    rnd = world.rnd
    sid = rnd.choice(SESSION_IDS)
    known = world.sessions.get((app, user, sid), [])
    delta = rnd.sample(known, min(len(known), rnd.randint(0, 2))) + world.grow((app, user, sid))[len(known):]
    if rnd.random() < 0.2:
        delta += delta[:1]  # an id twice in one delta: the first counts
    given: Optional[str] = sid if rnd.random() < 0.8 else rnd.choice([None, ""])
    for service in (ref.service, ours):
        await service.add_events_to_memory(
            app_name=app, user_id=user, events=[e.model_copy(deep=True) for e in delta], session_id=given,
            custom_metadata={"ignored": True},
        )
    ref.settle(app, user, given or "__unknown_session_id__")


async def one_sequence(seed: int, client: AsyncClient) -> Tuple[int, int]:
    """Runs sequence ``seed``; returns how many calls and searches it made."""
    world, ref = World(seed), Reference()
    ours = StepwellMemoryService(client, namespace=fresh_namespace("adk-mem-diff"))
    calls = length(world, seed)
    searches = 0
    for n in range(calls):
        try:
            searches += await step(world, ref, ours) == "search"
        except AssertionError as exc:
            raise AssertionError(f"seed {seed} step {n}: {exc}") from None
    return calls, searches


def length(world: World, seed: int) -> int:
    """How many calls sequence ``seed`` makes: one in five is long."""
    return world.rnd.randrange(60, 120) if seed % 5 == 0 else world.rnd.randrange(10, 30)


async def run_all(target: str, seeds: List[int]) -> List[Tuple[int, int]]:
    counts: List[Tuple[int, int]] = []
    async with AsyncClient(target) as client:
        for start in range(0, len(seeds), PARALLEL):
            counts += await asyncio.gather(*[one_sequence(s, client) for s in seeds[start:start + PARALLEL]])
    return counts


def test_memory_differential(adk_target: str) -> None:
    counts = asyncio.run(run_all(adk_target, list(range(SEQUENCES))))
    calls, searches = sum(c for c, _ in counts), sum(s for _, s in counts)
    print(f"adk memory differential against InMemoryMemoryService ({backend()}): {len(counts)} sequences,"
          f" {calls} calls, {searches} searches, every answer equal")
    assert len(counts) == SEQUENCES and searches > SEQUENCES


def test_generator_makes_every_case(adk_target: str) -> None:
    """The sequences do make the cases they are for: searches with more than
    ten matches, empty answers, deletions that hold, empty buckets the
    reference takes out, and one id in two sessions."""
    seen: Dict[str, int] = {}

    async def main() -> None:
        async with AsyncClient(adk_target) as client:
            for seed in range(40):
                await census(seed, client, seen)

    asyncio.run(main())
    for case in ("more than ten", "no match", "deleted", "empty bucket taken out", "id in two sessions"):
        assert seen.get(case, 0) > 0, (case, seen)


async def census(seed: int, client: AsyncClient, seen: Dict[str, int]) -> None:
    world, ref = World(seed), Reference()
    ours = StepwellMemoryService(client, namespace=fresh_namespace("adk-mem-census"))
    for _ in range(length(world, seed)):
        deleted_before = sum(len(v) for v in ref.service._deleted_memory_ids.values())
        await step(world, ref, ours)
        if sum(len(v) for v in ref.service._deleted_memory_ids.values()) > deleted_before:
            seen["deleted"] = seen.get("deleted", 0) + 1
    seen["empty bucket taken out"] = seen.get("empty bucket taken out", 0) + ref.taken_out
    for (app, user), buckets in ref.service._session_events.items():
        all_ids = [e.id for events in buckets.values() for e in events]
        if len(all_ids) != len(set(all_ids)):
            seen["id in two sessions"] = seen.get("id in two sessions", 0) + 1
        for query in ("deploy status ready", "zzz"):
            matched = _count_matches(ref.service, app, user, query)
            case = "more than ten" if matched > 10 else "no match" if matched == 0 else "some"
            seen[case] = seen.get(case, 0) + 1


def _count_matches(service: InMemoryMemoryService, app: str, user: str, query: str) -> int:
    """How many memories match ``query`` before the limit of ten, as the
    reference matches them (a word in common)."""
    words = _extract_words_lower(query)
    n = 0
    for events in service._session_events.get((app, user), {}).values():
        for e in events:
            text = " ".join(p.text for p in (e.content.parts or []) if p.text)
            n += bool(words & _extract_searchable_words(text))
    return n
