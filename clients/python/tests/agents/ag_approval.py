"""A process of the approval test: an agent whose refund tool needs
approval, on a StepwellSession, with a fake model.

    python ag_approval.py <address> <namespace> <session_id> <dir> <run_id> start|resume

``start`` runs "refund 30" until the run stops for the approval, saves the
RunState in stepwell and prints the names of the waits that decide its
interruptions (JSON list), then exits. ``resume`` loads the state, waits for
each decision (a Signal from another service), approves or rejects, runs
the rest and prints the final output (JSON). The tool's effect appends a
line to <dir>/effects.log, and runs under run_once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agents import Agent, Runner, function_tool, set_tracing_disabled  # noqa: E402
from agents.tool_context import ToolContext  # noqa: E402

from ag_model import FakeModel, last_output, message, tool_call  # noqa: E402
from stepwell.agents import (  # noqa: E402
    StepwellSession,
    apply_approval,
    approval_wait_name,
    await_approval,
    load_run_state,
    run_once,
    save_run_state,
)


def build_agent(session: StepwellSession, folder: Path, run_id: str) -> Agent:
    @function_tool(needs_approval=True)
    @run_once(session, run_key=run_id)
    async def refund(ctx: ToolContext[Any], amount: int) -> str:
        """Refunds the customer."""
        with open(folder / "effects.log", "a") as log:
            log.write(f"refunded {amount} by {os.getpid()}\n")
        return f"refunded {amount}"

    def respond(items: List[Any]) -> List[Any]:
        out = last_output(items)
        if out is None:
            return [tool_call("refund", {"amount": 30}, "call-refund-1")]
        return [message(f"refund result: {out['output']}")]

    return Agent(name="support", instructions="Support.", model=FakeModel(respond), tools=[refund])


async def main(address: str, namespace: str, sid: str, folder: Path, run_id: str, mode: str) -> None:
    set_tracing_disabled(True)
    async with StepwellSession.from_address(sid, address, namespace=namespace) as session:
        agent = build_agent(session, folder, run_id)
        if mode == "start":
            result = await Runner.run(agent, "refund 30", session=session)
            assert result.interruptions, "the run did not stop for an approval"
            await save_run_state(session, sid, run_id, result.to_state())
            print(json.dumps([approval_wait_name(run_id, i) for i in result.interruptions]))
            return
        state = await load_run_state(session, sid, run_id, agent)
        assert state is not None, f"no saved run state {run_id}"
        for interruption in state.get_interruptions():
            decision = await await_approval(session, sid, approval_wait_name(run_id, interruption), timeout=240)
            apply_approval(state, interruption, decision)
        result = await Runner.run(agent, state, session=session)
        print(json.dumps(result.final_output))


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], Path(a[3]), a[4], a[5]))
