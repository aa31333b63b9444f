"""An ADK agent's process SIGKILLed mid-conversation, and the conversation
continued by a new process: a worker (adk_agent_worker.py) runs the
shopping agent of adk_agent.py on a StepwellSessionService session and is
killed right after the tool's response event is stored, while its model
would answer; a second worker continues the unfinished invocation (ADK's
resumable app) and two more turns. Every event stored before the kill is
still there, unchanged, once, in its place; nothing is lost or repeated,
the tool ran once per item, and the state is what the whole conversation
wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

from adk_agent import APP, shape
from adk_support import adk_namespace, adk_sidecar, adk_target  # noqa: F401  (fixtures)
from stepwell.adk import StepwellSessionService

WORKER = Path(__file__).with_name("adk_agent_worker.py")
USER, SID = "ann", "killed"
BEFORE_KILL = [
    "user: hello", "shopper: hi, hello", "shopper: (no content)",
    "user: add apple", "shopper: call add_item({'item': 'apple'})",
    "shopper: response {'items': ['apple'], 'user_count': 1}",
]
CONTINUED = [
    "shopper: added; the cart has apple (1 by this user)", "shopper: (no content)",
    "user: add pear", "shopper: call add_item({'item': 'pear'})",
    "shopper: response {'items': ['apple', 'pear'], 'user_count': 2}",
    "shopper: added; the cart has apple, pear (2 by this user)", "shopper: (no content)",
    "user: cart", "shopper: the cart: ['apple', 'pear']", "shopper: (no content)",
]


def poll(what: str, check: Callable[[], bool], proc: "subprocess.Popen[bytes]", limit: float = 120.0) -> None:
    """Waits until ``check()`` holds, failing if the worker exits first or
    ``limit`` seconds pass."""
    deadline = time.monotonic() + limit
    while not check():
        assert proc.poll() is None, f"the worker exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {limit}s"
        time.sleep(0.05)


def stored(target: str, namespace: str) -> List[Any]:
    async def read() -> List[Any]:
        async with StepwellSessionService.from_address(target, namespace=namespace) as service:
            session = await service.get_session(app_name=APP, user_id=USER, session_id=SID)
            return [] if session is None else [session, *session.events]

    return asyncio.run(read())


def test_sigkilled_agent_continued_elsewhere(adk_target: str, adk_namespace: str, tmp_path: Path) -> None:
    args = [sys.executable, str(WORKER), adk_target, adk_namespace, USER, SID, str(tmp_path)]
    env = {**os.environ, "ADK_TEST_EFFECTS": str(tmp_path / "effects.log")}
    first = subprocess.Popen(args + ["first"], env=env)
    try:
        # The tool's response is stored and the model holds: nothing more can be stored.
        poll("held model", lambda: (tmp_path / "holding").exists(), first)
        poll("stored tool response", lambda: shape(stored(adk_target, adk_namespace)[1:])[-1:] == BEFORE_KILL[-1:],
             first)
    finally:
        first.kill()
        first.wait()
    session, *before = stored(adk_target, adk_namespace)
    assert shape(before) == BEFORE_KILL
    assert session.state == {"items": ["apple"], "user:count": 1, "app:total": 1}

    second = subprocess.run(args + ["resume"], env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    assert json.loads(second.stdout) == CONTINUED, "what the continued run yielded"
    session, *after = stored(adk_target, adk_namespace)
    # What the killed process stored is unchanged and in its place; after
    # it, exactly what the new process yielded; every event once.
    dump = [e.model_dump(mode="json") for e in after]
    assert dump[:len(before)] == [e.model_dump(mode="json") for e in before]
    assert shape(after) == BEFORE_KILL + CONTINUED
    assert len({e.id for e in after}) == len(after)
    # The killed invocation was continued, not started again.
    assert len({e.invocation_id for e in after}) == 4
    assert after[len(before)].invocation_id == before[-1].invocation_id
    effects = (tmp_path / "effects.log").read_text().splitlines()
    # The tool ran once per item: apple in the killed process, pear in the new one.
    assert [e.split()[0] for e in effects] == ["apple", "pear"], effects
    assert effects[0] == f"apple {first.pid}" and effects[1] != f"pear {first.pid}", effects
    assert session.state == {"items": ["apple", "pear"], "user:count": 2, "app:total": 2}
