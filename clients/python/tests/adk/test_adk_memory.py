"""StepwellMemoryService's behaviour, each case beside ADK's
InMemoryMemoryService where that defines it: what a session keeps, re-adds
that replace, deltas, deletions that hold, scopes, add_memory, the limits of
names, max_results and ttl, the one place the order differs on purpose, the
search by meaning an embedder gives, and a real ADK Runner whose scripted
model recalls with load_memory what one user said in an earlier session,
through a fresh client, and never what another user said.

Against SQLite, or Postgres when STEPWELL_TEST_POSTGRES_URL is set.
"""

from __future__ import annotations

import asyncio
from typing import Any, AsyncGenerator, Awaitable, Callable, List

import pytest
from google.adk.agents import LlmAgent
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools import load_memory
from google.genai import types

from adk_memory_help import aembed, content, embed, entries, event, ids, service, session, texts
from adk_support import adk_namespace, adk_sidecar, adk_target  # noqa: F401  (fixtures)
from stepwell import AsyncClient
from stepwell.adk import StepwellMemoryService, StepwellSessionService
from stepwell.v1 import memory_pb2 as mem


def run(target: str, namespace: str, body: Callable[[StepwellMemoryService], Awaitable[Any]], **kwargs: Any) -> Any:
    """``body`` on a service of its own, closed afterwards."""

    async def main() -> Any:
        async with service(target, namespace, **kwargs) as ours:
            return await body(ours)

    return asyncio.run(main())


async def both(call: Callable[[Any], Awaitable[Any]], ours: StepwellMemoryService) -> InMemoryMemoryService:
    """``call`` on a fresh InMemoryMemoryService and on ``ours``."""
    ref = InMemoryMemoryService()
    await call(ref)
    await call(ours)
    return ref


async def same(ref: InMemoryMemoryService, ours: StepwellMemoryService, query: str, app: str = "app",
               user: str = "user") -> List[Any]:
    want = entries(await ref.search_memory(app_name=app, user_id=user, query=query))
    got = entries(await ours.search_memory(app_name=app, user_id=user, query=query))
    assert got == want
    return got


EVENTS = [
    event("e1", "deploy the app", timestamp=1_700_000_000.5),
    event("e2", no_content=True),
    event("e3", parts=[]),
    event("e4", "status ready", "deploy done", author="agent", timestamp=1_700_000_060.0),
    event("e5", parts=[types.Part(function_call=types.FunctionCall(name="f", args={"q": "deploy"}))]),
]


def test_a_session_keeps_its_events_with_content_and_a_re_add_replaces_them(adk_target: str,
                                                                           adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        ref = await both(lambda s: s.add_session_to_memory(session("s1", EVENTS)), ours)
        assert [m["id"] for m in await same(ref, ours, "deploy")] == ["e1", "e4"], "ties in order"
        got = await same(ref, ours, "deploy status")
        assert [m["id"] for m in got] == ["e4", "e1"], "two words beat one"
        assert got[1]["content"] == {"parts": [{"text": "deploy the app"}], "role": "user"}
        again = [EVENTS[0], event("e6", "deploy again")]
        for s in (ref, ours):
            await s.add_session_to_memory(session("s1", again))
        assert [m["id"] for m in await same(ref, ours, "deploy")] == ["e1", "e6"]

    run(adk_target, adk_namespace, body)


def test_a_delta_adds_only_new_ids_after_the_sessions_others(adk_target: str, adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        ref = await both(lambda s: s.add_session_to_memory(session("s1", [EVENTS[0]])), ours)
        delta = [event("e1", "deploy changed"), event("e7", "deploy later"), event("e7", "deploy twice")]
        for s in (ref, ours):
            await s.add_events_to_memory(app_name="app", user_id="user", events=delta, session_id="s1")
            await s.add_events_to_memory(app_name="app", user_id="user", events=[event("e8", "deploy loose")])
        got = await same(ref, ours, "deploy")
        assert [(m["id"], texts_of(m)) for m in got] == [
            ("e1", "deploy the app"), ("e7", "deploy later"), ("e8", "deploy loose")]

    run(adk_target, adk_namespace, body)


def texts_of(entry: Any) -> str:
    return " ".join(p.get("text", "") for p in entry["content"].get("parts", []))


def test_a_deleted_memory_stays_deleted_when_its_session_is_added_again(adk_target: str, adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        ref = await both(lambda s: s.add_session_to_memory(session("s1", EVENTS)), ours)
        for s in (ref, ours):
            await s.delete_memory(app_name="app", user_id="user", memory_id="e1")
            await s.delete_memory(app_name="app", user_id="user", memory_id="unknown")
            await s.delete_memory(app_name="app", user_id="user", memory_id=None)
            await s.add_session_to_memory(session("s1", EVENTS))
            await s.add_events_to_memory(app_name="app", user_id="user", events=[EVENTS[0]], session_id="s2")
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="deploy")) == ["e4"]
        await same(ref, ours, "deploy")

    run(adk_target, adk_namespace, body)


def test_memories_are_scoped_by_app_and_user_and_names_never_mix(adk_target: str, adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        await ours.add_session_to_memory(session("s", [event("a", "deploy one")], app="app/x", user="u"))
        await ours.add_session_to_memory(session("s", [event("b", "deploy two")], app="app", user="x/u"))
        await ours.add_session_to_memory(session("", [event("c", "deploy three")], app="app", user="ü 2"))
        for app, user, want in [("app/x", "u", ["a"]), ("app", "x/u", ["b"]), ("app", "ü 2", ["c"]),
                                ("app", "u", []), ("other", "x/u", [])]:
            assert ids(await ours.search_memory(app_name=app, user_id=user, query="deploy")) == want, (app, user)

    run(adk_target, adk_namespace, body)


def test_empty_session_takes_its_place_at_its_first_memory(adk_target: str, adk_namespace: str) -> None:
    """The one order that differs on purpose: InMemory keeps a bucket for a
    session added with nothing to remember, so its later memories come
    first; stepwell stores nothing for it, so they come after the sessions
    that had memories before."""

    async def body(ours: StepwellMemoryService) -> None:
        ref = InMemoryMemoryService()
        for s in (ref, ours):
            await s.add_session_to_memory(session("empty first", [event("n", no_content=True)]))
            await s.add_session_to_memory(session("second", [event("b", "deploy b")]))
            await s.add_session_to_memory(session("empty first", [event("a", "deploy a")]))
        assert ids(await ref.search_memory(app_name="app", user_id="user", query="deploy")) == ["a", "b"]
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="deploy")) == ["b", "a"]

    run(adk_target, adk_namespace, body)


def test_add_memory_stores_direct_memories_searched_beside_sessions(adk_target: str, adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        with pytest.raises(NotImplementedError):
            await InMemoryMemoryService().add_memory(app_name="app", user_id="user", memories=[])
        await ours.add_session_to_memory(session("s1", [event("e1", "deploy from a session")]))
        first = MemoryEntry(id="m1", content=content("deploy by hand"), author="ops",
                            timestamp="2026-12-06T10:00:00+00:00", custom_metadata={"source": "runbook"})
        await ours.add_memory(app_name="app", user_id="user", memories=[first, MemoryEntry(content=content("deploy"))],
                              custom_metadata={"team": "infra"})
        got = (await ours.search_memory(app_name="app", user_id="user", query="deploy")).memories
        assert [m.id for m in got][:2] == ["e1", "m1"] and len(got) == 3 and got[2].id, "a new id for the one without"
        assert got[1].custom_metadata == {"team": "infra", "source": "runbook"} and got[1].author == "ops"
        await ours.add_memory(app_name="app", user_id="user", memories=[MemoryEntry(id="m1", content=content("replaced"))])
        assert texts(await ours.search_memory(app_name="app", user_id="user", query="replaced")) == ["replaced"]
        await ours.delete_memory(app_name="app", user_id="user", memory_id="m1")
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="replaced")) == []

    run(adk_target, adk_namespace, body)


def test_names_too_long_raise_before_anything_is_written(adk_target: str, adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        with pytest.raises(ValueError, match="app name"):
            await ours.add_session_to_memory(session("s", [event("e", "deploy")], app="a" * 257))
        with pytest.raises(ValueError, match="session id"):
            await ours.add_session_to_memory(session("é" * 50, [event("e", "deploy")]))
        with pytest.raises(ValueError, match="event id"):
            await ours.add_session_to_memory(session("s", [event("e", "deploy"), event("x" * 1025, "deploy")]))
        with pytest.raises(ValueError, match="user id"):
            await ours.search_memory(app_name="app", user_id="u" * 300, query="deploy")
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="deploy")) == []

    run(adk_target, adk_namespace, body)


def test_max_results_caps_a_search_and_ttl_gives_each_memory_its_time_to_live(adk_target: str,
                                                                              adk_namespace: str) -> None:
    async def body(ours: StepwellMemoryService) -> None:
        await ours.add_session_to_memory(session("s", [event(f"e{n}", f"hue {n}") for n in range(12)]))
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="hue")) == ["e0", "e1", "e2"]
        got = await ours._call("GetItems", mem.GetItemsRequest(
            namespace=ours.namespace, items=[mem.ItemAddress(path=["adk", "app", "user", "s", "s"], key="e0")]))
        (item,) = got.items
        assert item.ttl.ToTimedelta().total_seconds() == 3600
        lived = item.expires_at.ToDatetime() - item.updated_at.ToDatetime()
        assert lived.total_seconds() == pytest.approx(3600, abs=1)

    run(adk_target, adk_namespace, body, max_results=3, ttl=3600)
    with pytest.raises(ValueError, match="max_results"):
        StepwellMemoryService(max_results=0)
    with pytest.raises(ValueError, match="ttl"):
        StepwellMemoryService(ttl=0)


def test_an_embedder_searches_by_meaning_best_first_and_never_across_users(adk_target: str,
                                                                          adk_namespace: str) -> None:
    """Where stepwell answers better than InMemory: "automobile" shares no
    word with "I drive a car", which the word search misses."""

    async def body(ours: StepwellMemoryService) -> None:
        said = [event("car", "I drive a car"), event("pet", "my dog is a puppy"), event("blank", "")]
        await ours.add_session_to_memory(session("s", said))
        await ours.add_session_to_memory(session("s", [event("other", "a truck")], user="someone else"))
        ref = InMemoryMemoryService()
        await ref.add_session_to_memory(session("s", said))
        assert ids(await ref.search_memory(app_name="app", user_id="user", query="automobile")) == []
        got = (await ours.search_memory(app_name="app", user_id="user", query="automobile")).memories
        assert [m.id for m in got] == ["car", "pet"]
        scores = [m.custom_metadata["score"] for m in got]
        assert scores[0] > 0.5 > scores[1] and scores == sorted(scores, reverse=True)
        assert ids(await ours.search_memory(app_name="app", user_id="user", query="  ")) == []

    run(adk_target, adk_namespace, body, embed=embed)
    run(adk_target, adk_namespace, lambda ours: _first_id(ours, "vehicle"), embed=aembed)


async def _first_id(ours: StepwellMemoryService, query: str) -> None:
    got = ids(await ours.search_memory(app_name="app", user_id="user", query=query))
    assert got[0] == "car", got


def _plain(value: Any) -> Any:
    """A tool's response as JSON data (ADK may hand the model its pydantic
    result, wrapped as ``{"result": ...}``)."""
    return value.model_dump(mode="json", exclude_none=True) if hasattr(value, "model_dump") else value


class RecallingLlm(BaseLlm):
    """A scripted model: "recall X" calls load_memory(X) and then answers
    "recalled: " and the memories' texts; anything else gets "ok"."""

    model: str = "scripted"

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        part = llm_request.contents[-1].parts[0]
        if part.function_response is not None:
            got = _plain(part.function_response.response or {})
            memories = _plain(got.get("result", got)).get("memories", [])
            said = [" ".join(p.get("text", "") for p in m["content"]["parts"]) for m in memories]
            answer = types.Part(text="recalled: " + " | ".join(said))
        elif (part.text or "").startswith("recall "):
            call = types.FunctionCall(id="fc-1", name="load_memory", args={"query": part.text[7:]})
            answer = types.Part(function_call=call)
        else:
            answer = types.Part(text="ok")
        yield LlmResponse(content=types.Content(role="model", parts=[answer]))


async def turn(runner: Runner, user: str, session_id: str, line: str) -> List[str]:
    out = []
    message = types.Content(role="user", parts=[types.Part(text=line)])
    async for e in runner.run_async(user_id=user, session_id=session_id, new_message=message):
        out += [p.text for p in (e.content.parts if e.content and e.content.parts else []) if p.text]
    return out


def test_an_agent_recalls_what_its_user_said_in_an_earlier_session_and_nobody_else(adk_target: str,
                                                                                  adk_namespace: str) -> None:
    agent = LlmAgent(name="helper", model=RecallingLlm(), instruction="Help.", tools=[load_memory])

    async def first() -> None:
        async with AsyncClient(adk_target) as client:
            sessions = StepwellSessionService(client, namespace=adk_namespace)
            memories = StepwellMemoryService(client, namespace=adk_namespace)
            runner = Runner(app_name="app", agent=agent, session_service=sessions, memory_service=memories)
            s1 = await sessions.create_session(app_name="app", user_id="alice")
            assert await turn(runner, "alice", s1.id, "my favourite colour is teal") == ["ok"]
            await memories.add_session_to_memory(
                await sessions.get_session(app_name="app", user_id="alice", session_id=s1.id))

    async def later() -> None:
        async with AsyncClient(adk_target) as client:
            sessions = StepwellSessionService(client, namespace=adk_namespace)
            memories = StepwellMemoryService(client, namespace=adk_namespace)
            runner = Runner(app_name="app", agent=agent, session_service=sessions, memory_service=memories)
            s2 = await sessions.create_session(app_name="app", user_id="alice")
            assert await turn(runner, "alice", s2.id, "recall favourite colour") == [
                "recalled: my favourite colour is teal"]
            s3 = await sessions.create_session(app_name="app", user_id="bob")
            assert await turn(runner, "bob", s3.id, "recall favourite colour") == ["recalled: "]

    asyncio.run(first())
    asyncio.run(later())
