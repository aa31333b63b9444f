"""A worker SIGKILLed mid-conversation, and the conversation continued from
another process: the history of the turns that completed is intact, and the
tool that completed before the kill (run_once) is not run again; its
recorded output is what the continued turn gets."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, List

from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)
from stepwell.agents import StepwellSession

WORKER = Path(__file__).with_name("ag_worker.py")


def poll(what: str, check: Callable[[], bool], proc: "subprocess.Popen[bytes]", limit: float = 120.0) -> None:
    """Waits until ``check()`` holds, failing if the worker exits first or
    ``limit`` seconds pass."""
    deadline = time.monotonic() + limit
    while not check():
        assert proc.poll() is None, f"the worker exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} within {limit}s"
        time.sleep(0.05)


def stored(target: str, namespace: str, sid: str) -> List[Any]:
    async def read() -> List[Any]:
        async with StepwellSession.from_address(sid, target, namespace=namespace) as s:
            return await s.get_items()

    return asyncio.run(read())


def test_sigkilled_worker_continued_elsewhere(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    sid = new_session_id()
    args = [sys.executable, str(WORKER), ag_target, ag_namespace, sid, str(tmp_path)]
    first = subprocess.Popen(args + ["first"])
    try:
        # Blocked in the second turn's tool, after the charge ran and the
        # first turn and the second turn's input were stored.
        poll("blocked tool", lambda: (tmp_path / "holding").exists(), first)
        poll("charge", lambda: (tmp_path / "effects.log").exists(), first)
        poll("stored input", lambda: [i.get("content") for i in stored(ag_target, ag_namespace, sid)][-1:]
             == ["charge 7"], first)
    finally:
        first.kill()
        first.wait()
    before = stored(ag_target, ag_namespace, sid)
    completed = int((tmp_path / "completed").read_text())
    assert completed == 2 and [i.get("role") for i in before[:2]] == ["user", "assistant"]

    second = subprocess.run(args + ["resume"], capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    effects = (tmp_path / "effects.log").read_text().splitlines()
    assert effects == [f"charged 7 by {first.pid}"], effects
    # The continued turn got the output recorded by the killed process.
    assert json.loads(second.stdout) == f"done: {{'by': {first.pid}, 'charged': 7}}"
    after = stored(ag_target, ag_namespace, sid)
    assert after[:completed] == before[:completed]
    assert [i.get("content") for i in after if i.get("role") == "user"] == ["hello", "charge 7"]
    outputs = [i["output"] for i in after if i.get("type") == "function_call_output"]
    assert outputs == [f"{{'by': {first.pid}, 'charged': 7}}", "held"]
