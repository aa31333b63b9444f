"""A worker process of the kill test: runs a conversation on a
StepwellSession with a fake model, with a tool that charges once (run_once;
its effect appends a line to a log file) and a tool that, in the first
process, blocks forever, so the test can SIGKILL the process mid-turn.

    python ag_worker.py <address> <namespace> <session_id> <dir> first|resume

``first`` runs the turn "hello", then the turn "charge 7", whose tools block.
``resume`` undoes what the killed turn left behind (pop_item back to the
items of the turns that completed, whose count ``first`` wrote to
<dir>/completed) and runs "charge 7" again; it prints the turn's output.
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

from ag_model import FakeModel, last_user_text, message, tool_call  # noqa: E402
from stepwell.agents import StepwellSession, run_once  # noqa: E402


def build_agent(session: StepwellSession, folder: Path, block: bool) -> Agent:
    @function_tool
    @run_once(session, run_key=session.session_id)
    async def charge(ctx: ToolContext[Any], amount: int) -> Any:
        """Charges the customer."""
        with open(folder / "effects.log", "a") as log:
            log.write(f"charged {amount} by {os.getpid()}\n")
        return {"charged": amount, "by": os.getpid()}

    @function_tool
    async def hold() -> str:
        """Waits for the test to kill the process (only in the first process)."""
        if block:
            (folder / "holding").write_text(str(os.getpid()))
            await asyncio.Event().wait()
        return "held"

    def respond(items: List[Any]) -> List[Any]:
        outputs = {i["call_id"]: i["output"] for i in items if i.get("type") == "function_call_output"}
        text = last_user_text(items)
        if text == "charge 7" and "call-charge-1" not in outputs:
            return [tool_call("charge", {"amount": 7}, "call-charge-1"), tool_call("hold", {}, "call-hold-1")]
        if text == "charge 7":
            return [message(f"done: {outputs['call-charge-1']}")]
        return [message(f"hi, {len(items)} items so far")]

    return Agent(name="worker", instructions="Work.", model=FakeModel(respond), tools=[charge, hold])


async def main(address: str, namespace: str, session_id: str, folder: Path, mode: str) -> None:
    set_tracing_disabled(True)
    async with StepwellSession.from_address(session_id, address, namespace=namespace) as session:
        if mode == "first":
            agent = build_agent(session, folder, block=True)
            await Runner.run(agent, "hello", session=session)
            (folder / "completed").write_text(str(len(await session.get_items())))
            await Runner.run(agent, "charge 7", session=session)
            return
        completed = int((folder / "completed").read_text())
        while len(await session.get_items()) > completed:
            await session.pop_item()
        result = await Runner.run(build_agent(session, folder, block=False), "charge 7", session=session)
        print(json.dumps(result.final_output))


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], Path(a[3]), a[4]))
