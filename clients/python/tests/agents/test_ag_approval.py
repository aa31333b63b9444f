"""An approval across a restart, with two processes: the first runs an agent
whose tool needs approval, saves the RunState in stepwell and exits; the
approval comes as a Signal from another service (here the test, through the
client); the second process loads the state, takes the decision and
resumes. The tool runs exactly once when approved (its effect log, and its
run_once record, say so), also when the saved state is resumed again, and
never when rejected."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, List

from agents import Agent

from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)
from stepwell import Client, KeyNotFound
from stepwell.agents import StepwellSession, delete_run_state, load_run_state, tool_once_key
from stepwell.v1 import idempotency_pb2 as ip
from stepwell.v1 import waits_pb2 as wp

PROCESS = Path(__file__).with_name("ag_approval.py")


def run(args: List[str], mode: str) -> str:
    done = subprocess.run(args + [mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def items(target: str, namespace: str, sid: str) -> List[Any]:
    async def read() -> List[Any]:
        async with StepwellSession.from_address(sid, target, namespace=namespace) as s:
            return await s.get_items()

    return asyncio.run(read())


def effects(folder: Path) -> List[str]:
    log = folder / "effects.log"
    return log.read_text().splitlines() if log.exists() else []


def test_approved_across_a_restart(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    sid, run_id = new_session_id(), "run-approve"
    args = [sys.executable, str(PROCESS), ag_target, ag_namespace, sid, str(tmp_path), run_id]
    waits = run(args, "start")
    assert waits == [f"approval:{run_id}:call-refund-1"] and effects(tmp_path) == []
    # The second process starts before the decision, and waits for it.
    second = subprocess.Popen(args + ["resume"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with Client(ag_target, namespace=ag_namespace) as approver:
        deadline = time.monotonic() + 120
        while not any(w.name == waits[0] and w.status == wp.WAIT_STATUS_PENDING
                      for w in approver.list_waits(turn_id=sid).waits):
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline, "the resumed process never waited for the approval"
            time.sleep(0.05)
        assert approver.signal(sid, waits[0], json.dumps({"approved": True, "by": "ops"}))
        out, err = second.communicate(timeout=300)
        assert second.returncode == 0, err
        assert json.loads(out) == "refund result: refunded 30"
        assert effects(tmp_path) == [f"refunded 30 by {second.pid}"]
        record = approver.get(tool_once_key(run_id, "call-refund-1", session_id=sid))
        assert record.state == ip.RECORD_STATE_COMPLETED and json.loads(record.result) == "refunded 30"
    assert [i.get("type", i.get("role")) for i in items(ag_target, ag_namespace, sid)] == [
        "user", "function_call", "function_call_output", "message"]
    # Resuming the saved state again (a replay) gets the recorded result.
    assert run(args, "resume") == "refund result: refunded 30"
    assert effects(tmp_path) == [f"refunded 30 by {second.pid}"]


def test_rejected_across_a_restart(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    sid, run_id = new_session_id(), "run-reject"
    args = [sys.executable, str(PROCESS), ag_target, ag_namespace, sid, str(tmp_path), run_id]
    waits = run(args, "start")
    # The decision comes while no process of the run is alive; it is kept.
    with Client(ag_target, namespace=ag_namespace) as approver:
        assert approver.signal(sid, waits[0], json.dumps({"approved": False, "message": "not allowed"}))
        assert run(args, "resume") == "refund result: not allowed"
        assert effects(tmp_path) == []
        try:
            approver.get(tool_once_key(run_id, "call-refund-1", session_id=sid))
            raise AssertionError("a rejected tool call has a run_once record")
        except KeyNotFound:
            pass

    async def state_lifecycle() -> None:
        async with StepwellSession.from_address(sid, ag_target, namespace=ag_namespace) as s:
            assert await load_run_state(s, sid, run_id, Agent(name="support")) is not None
            await delete_run_state(s, sid, run_id)
            assert await load_run_state(s, sid, run_id, Agent(name="support")) is None
            # The conversation stays: only the saved state went.
            assert len(await s.get_items()) == 4

    asyncio.run(state_lifecycle())
