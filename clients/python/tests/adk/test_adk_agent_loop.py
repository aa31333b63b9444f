"""A real ADK agent loop on StepwellSessionService: ADK's Runner runs an
LlmAgent with a fake model (adk_agent.py) through a multi-turn conversation
with a tool call, the tool writes session, user: and app: state (and a
temp: key), and a second session of the same user, and one of another user,
see the user: and app: keys as ADK shares them. The same conversation runs
on ADK's InMemorySessionService, and both must end with the same events
(but for generated ids and times) and the same state; the stored events
must be exactly what the runner yielded, each once, in order."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Tuple

import pytest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService

from adk_agent import APP, build_app, shape, user_message
from adk_support import adk_namespace, adk_sidecar, adk_target  # noqa: F401  (fixtures)
from stepwell import AsyncClient
from stepwell.adk import StepwellSessionService

# (user, session id, the user's lines): the second session of "ann" and the
# session of "bob" come after the first, and read what it wrote.
SCRIPT = [
    ("ann", "first", ["hello", "add apple", "add pear", "cart"]),
    ("ann", "second", ["add fig", "cart"]),
    ("bob", "third", ["add kiwi"]),
]
# ADK marks resumable apps experimental; the warning would only clutter the output.
pytestmark = pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\]:UserWarning")


async def converse(service: Any) -> Dict[str, Tuple[List[Any], Any]]:
    """Runs SCRIPT; for each session, the events the runner yielded (the
    user's messages included) and the session as stored afterwards."""
    runner = Runner(app=build_app(), session_service=service)
    yielded: Dict[str, List[Any]] = {}
    for user, sid, lines in SCRIPT:
        await service.create_session(app_name=APP, user_id=user, session_id=sid)
        yielded[sid] = []
        for line in lines:
            async for event in runner.run_async(
                user_id=user, session_id=sid, new_message=user_message(line), yield_user_message=True
            ):
                yielded[sid].append(event)
    stored = {}
    for user, sid, _ in SCRIPT:
        stored[sid] = (yielded[sid], await service.get_session(app_name=APP, user_id=user, session_id=sid))
    return stored


def comparable(event: Any) -> Dict[str, Any]:
    """An event without what each run generates: its id, invocation id and time."""
    return event.model_dump(mode="json", exclude_none=True, exclude={"id", "invocation_id", "timestamp"})


def test_agent_loop(adk_target: str, adk_namespace: str) -> None:
    async def main() -> Tuple[Dict[str, Any], Dict[str, Any]]:
        async with AsyncClient(adk_target, namespace=adk_namespace) as client:
            return await converse(StepwellSessionService(client)), await converse(InMemorySessionService())

    ours, theirs = asyncio.run(main())
    for sid, (yielded, session) in ours.items():
        # Stored: every event the runner yielded, once, in order, as yielded.
        assert [e.model_dump(mode="json") for e in session.events] == [e.model_dump(mode="json") for e in yielded], sid
        assert [comparable(e) for e in session.events] == [comparable(e) for e in theirs[sid][1].events], sid
        assert session.state == theirs[sid][1].state, sid
        # temp: keys live in an invocation only.
        assert all(not k.startswith("temp:") for e in session.events for k in e.actions.state_delta), sid
    assert shape(ours["first"][1].events) == [
        "user: hello", "shopper: hi, hello", "shopper: (no content)",
        "user: add apple", "shopper: call add_item({'item': 'apple'})",
        "shopper: response {'items': ['apple'], 'user_count': 1}",
        "shopper: added; the cart has apple (1 by this user)", "shopper: (no content)",
        "user: add pear", "shopper: call add_item({'item': 'pear'})",
        "shopper: response {'items': ['apple', 'pear'], 'user_count': 2}",
        "shopper: added; the cart has apple, pear (2 by this user)", "shopper: (no content)",
        "user: cart", "shopper: the cart: ['apple', 'pear']", "shopper: (no content)",
    ]
    # The user's count went on from the first session in the second; the
    # app's total counts every user's items.
    assert "shopper: response {'items': ['fig'], 'user_count': 3}" in shape(ours["second"][1].events)
    assert ours["first"][1].state == {"items": ["apple", "pear"], "user:count": 3, "app:total": 4}
    assert ours["second"][1].state == {"items": ["fig"], "user:count": 3, "app:total": 4}
    assert ours["third"][1].state == {"items": ["kiwi"], "user:count": 1, "app:total": 4}
