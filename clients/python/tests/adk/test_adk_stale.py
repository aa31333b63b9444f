"""The stale-session check across processes: two processes each hold a
session object of one session; an append from an object that another
process's append overtook raises StaleSessionError and writes nothing, and
of two appends racing from objects of the same revision exactly one lands.
Each process is a worker (adk_worker.py) driven line by line over its pipes,
so the test orders their steps by their answers, not by time."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Iterator, List

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.genai import types

from adk_support import adk_namespace, adk_sidecar, adk_target  # noqa: F401  (fixtures)
from stepwell import AsyncClient
from stepwell.adk import StepwellSessionService

WORKER = Path(__file__).with_name("adk_worker.py")
APP, USER, SID = "stale-app", "u", "shared"
RACES = 50


class Worker:
    def __init__(self, target: str, namespace: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), target, namespace, APP, USER, SID],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def answer(self) -> str:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got, f"worker {self.proc.pid} ended (exit {self.proc.poll()})"
        return got

    def ask(self, line: str) -> str:
        self.send(line)
        return self.answer()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def workers(adk_target: str, adk_namespace: str) -> Iterator[List[Worker]]:
    asyncio.run(_create(adk_target, adk_namespace))
    ws = [Worker(adk_target, adk_namespace) for _ in range(2)]
    yield ws
    for w in ws:
        w.stop()


async def _create(target: str, namespace: str) -> None:
    async with AsyncClient(target, namespace=namespace) as client:
        await StepwellSessionService(client).create_session(app_name=APP, user_id=USER, session_id=SID)


async def _texts(target: str, namespace: str) -> List[str]:
    async with AsyncClient(target, namespace=namespace) as client:
        session = await StepwellSessionService(client).get_session(app_name=APP, user_id=USER, session_id=SID)
        assert session is not None
        return [e.content.parts[0].text for e in session.events]


def test_overtaken_object_is_stale(workers: List[Worker], adk_target: str, adk_namespace: str) -> None:
    a, b = workers
    assert a.ask("load") == "loaded 0"
    assert b.ask("load") == "loaded 0"
    assert a.ask("append from-a") == "ok"
    assert b.ask("append from-b") == "stale"
    assert b.ask("load") == "loaded 1"
    assert b.ask("append from-b") == "ok"
    assert a.ask("append again-a") == "stale"
    assert _texts_now(adk_target, adk_namespace) == ["from-a", "from-b"]


def _texts_now(target: str, namespace: str) -> List[str]:
    return asyncio.run(_texts(target, namespace))


def test_racing_appends_one_lands(workers: List[Worker], adk_target: str, adk_namespace: str) -> None:
    a, b = workers
    for n in range(RACES):
        assert a.ask("load") == f"loaded {n}"
        assert b.ask("load") == f"loaded {n}"
        # Both requests are sent before either answer is read.
        a.send(f"append a{n}")
        b.send(f"append b{n}")
        answers = sorted([a.answer(), b.answer()])
        assert answers == ["ok", "stale"], f"race {n}: {answers}"
    texts = _texts_now(adk_target, adk_namespace)
    assert len(texts) == RACES and all(t[1:] == str(n) for n, t in enumerate(texts)), texts


def test_retried_append_is_not_a_duplicate(adk_target: str, adk_namespace: str) -> None:
    """An append whose answer was lost is sent again from the same revision:
    it finds its own event at the id it claims, and is done."""

    async def main() -> None:
        async with AsyncClient(adk_target, namespace=adk_namespace) as client:
            service = StepwellSessionService(client)
            session = await service.create_session(app_name=APP, user_id=USER, session_id="retry")
            event = Event(author="user", invocation_id="inv", content=types.Content(parts=[types.Part(text="x")]))
            await service.append_event(session, event.model_copy(deep=True))
            session._storage_update_marker = "0" * 20  # as if the first answer never came
            await service.append_event(session, event.model_copy(deep=True))
            other = Event(author="user", invocation_id="inv", content=types.Content(parts=[types.Part(text="y")]))
            session._storage_update_marker = "0" * 20
            with pytest.raises(StaleSessionError):
                await service.append_event(session, other)
            got = await service.get_session(app_name=APP, user_id=USER, session_id="retry")
            assert got is not None and [e.id for e in got.events] == [event.id]

    asyncio.run(main())


class _DeletedAfterHeadRead(StepwellSessionService):
    """Deletes the session right after an append has read its head: the
    window in which another process's delete_session lands mid-append."""

    async def _head(self, turn: str):  # type: ignore[no-untyped-def]
        head = await super()._head(turn)
        if head is not None and self.delete_next:
            self.delete_next = False
            await self.delete_session(app_name=APP, user_id=USER, session_id="doomed")
        return head


def test_append_racing_a_delete_does_not_bring_the_session_back(adk_target: str, adk_namespace: str) -> None:
    async def main() -> None:
        async with AsyncClient(adk_target, namespace=adk_namespace) as client:
            service = _DeletedAfterHeadRead(client)
            service.delete_next = False
            session = await service.create_session(app_name=APP, user_id=USER, session_id="doomed", state={"k": 1})
            event = Event(
                author="user", invocation_id="inv", content=types.Content(parts=[types.Part(text="late")]),
                actions=EventActions(state_delta={"k": 2, "user:seen": True}),
            )
            service.delete_next = True
            with pytest.raises(SessionNotFoundError):
                await service.append_event(session, event)
            assert not service.delete_next, "the delete ran inside the append"
            assert await service.get_session(app_name=APP, user_id=USER, session_id="doomed") is None
            listed = await service.list_sessions(app_name=APP, user_id=USER)
            assert "doomed" not in [s.id for s in listed.sessions]
            assert await service.get_user_state(app_name=APP, user_id=USER) == {}, "no delta of the append landed"

    asyncio.run(main())
