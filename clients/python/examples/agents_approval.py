#!/usr/bin/env python3
"""An OpenAI Agents SDK agent whose conversation, paused runs and tool
effects live in stepwell.

A support agent answers "Order 42 arrived broken: please refund 30." by
calling a ``refund`` tool that needs a person's approval. The run stops
there; its state is saved in stepwell and the process exits. Another
service approves with a Signal of a stepwell wait; a new process loads the
run, takes the decision and resumes it. The refund runs under ``run_once``,
so when the resumed process dies after the refund and the run is resumed
again, the customer is refunded once.

    # all of it, each phase in a new process of its own:
    python examples/agents_approval.py --target 127.0.0.1:50051
    # or phase by phase:
    python examples/agents_approval.py --target 127.0.0.1:50051 start
    python examples/agents_approval.py --target 127.0.0.1:50051 approve
    python examples/agents_approval.py --target 127.0.0.1:50051 resume [--crash-after-tool]

The model is scripted (no network, no API key), so the transcript is the
same on every run. The refund's effect is a line in a ledger file, outside
stepwell. Needs, at the root of a checkout of this repository,
``pip install "./clients/python[agents]" openai-agents==0.24.0``, and a
running sidecar.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Optional

from agents import Agent, Model, ModelResponse, RunHooks, Runner, Usage, function_tool, set_tracing_disabled
from agents.tool_context import ToolContext
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from stepwell import AsyncClient
from stepwell.agents import (
    StepwellSession,
    apply_approval,
    approval_wait_name,
    await_approval,
    delete_run_state,
    load_run_state,
    run_once,
    save_run_state,
)

RUN_ID = "run-1"
ASK = "Order 42 arrived broken: please refund 30."


class ScriptedModel(Model):
    """Stands in for an LLM: asks for the refund, then reports its outcome."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else [{"role": "user", "content": input}]
        last = items[-1]
        if last.get("type") == "function_call_output":
            text = ResponseOutputText(type="output_text", text=f"Done: {last['output']}.", annotations=[])
            out: Any = ResponseOutputMessage(
                type="message", id="msg-1", role="assistant", status="completed", content=[text])
        else:
            out = ResponseFunctionToolCall(type="function_call", id="fc-1", call_id="call-refund-1",
                                           name="refund", arguments='{"order": 42, "amount": 30}')
        return ModelResponse(output=[out], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this example does not stream")


def build_agent(session: StepwellSession, ledger: Path) -> Agent:
    @function_tool(needs_approval=True)
    @run_once(session, run_key=RUN_ID)  # once per (run, tool call id), however often the run is replayed
    async def refund(ctx: ToolContext[Any], order: int, amount: int) -> str:
        """Refunds an order."""
        with ledger.open("a") as f:
            f.write(f"{session.session_id}: refunded {amount} for order {order}\n")
        print(f"refund tool: refunded {amount} for order {order}")
        return f"refunded {amount} for order {order}"

    return Agent(name="support", instructions="Help customers.", model=ScriptedModel(), tools=[refund])


async def start(session: StepwellSession, agent: Agent) -> None:
    print(f"user: {ASK}")
    result = await Runner.run(agent, ASK, session=session)
    for interruption in result.interruptions:
        wait = approval_wait_name(RUN_ID, interruption)
        # A pending wait that an approval service can list and answer.
        await session.client.create_wait(session.session_id, wait, metadata={"tool": interruption.name})
        print(f"agent calls {interruption.name}({interruption.arguments}): needs approval, wait {wait}")
    await save_run_state(session, session.session_id, RUN_ID, result.to_state())
    print("run saved in stepwell; this process exits")


async def approve(client: AsyncClient, session_id: str) -> None:
    """What another service does: approve every pending decision of the session."""
    for wait in (await client.list_waits(turn_id=session_id, status="pending")).waits:
        await client.signal(session_id, wait.name, json.dumps({"approved": True, "by": "ops"}))
        print(f"approval service: approved {wait.name}")


class CrashAfterTool(RunHooks):
    """Kills the process once a tool has run, before the run is finished."""

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: object) -> None:
        print("crash: the process dies before the run is finished", flush=True)
        os._exit(137)


async def resume(session: StepwellSession, agent: Agent, crash_after_tool: bool) -> None:
    state = await load_run_state(session, session.session_id, RUN_ID, agent)
    if state is None:
        raise SystemExit(f"no saved run {RUN_ID} in session {session.session_id}")
    for interruption in state.get_interruptions():
        decision = await await_approval(session, session.session_id, approval_wait_name(RUN_ID, interruption))
        verdict = "approved" if apply_approval(state, interruption, decision) else "rejected"
        print(f"loaded the run; {interruption.name} {verdict} by {decision.get('by')}")
    hooks = CrashAfterTool() if crash_after_tool else None
    result = await Runner.run(agent, state, session=session, hooks=hooks)
    print(f"agent: {result.final_output}")
    await delete_run_state(session, session.session_id, RUN_ID)
    kinds = [item.get("type", item.get("role")) for item in await session.get_items()]
    print(f"the session in stepwell: {', '.join(kinds)}")


async def phase(args: argparse.Namespace) -> None:
    set_tracing_disabled(True)
    if args.phase == "approve":
        async with AsyncClient(args.target, namespace=args.namespace) as client:
            await approve(client, args.session)
        return
    # Two lines differ from a conversation kept in a local SQLite file: the
    # import, and this one, which was SQLiteSession(args.session, "conversations.db").
    session = StepwellSession.from_address(args.session, args.target, namespace=args.namespace)
    async with session:
        agent = build_agent(session, Path(args.ledger))
        if args.phase == "start":
            await start(session, agent)
        else:
            await resume(session, agent, args.crash_after_tool)


def run_all(args: argparse.Namespace) -> int:
    """Runs each phase in a process of its own, as separate services would."""
    base = [sys.executable, os.path.abspath(__file__), "--target", args.target, "--namespace", args.namespace,
            "--session", args.session, "--ledger", args.ledger]
    steps = [
        ("start: a process runs the agent until the refund needs approval", ["start"], 0),
        ("approve: another service signals the decision", ["approve"], 0),
        ("resume: a new process loads the run and takes the decision", ["resume", "--crash-after-tool"], 137),
        ("resume again: the run is replayed from its saved state", ["resume"], 0),
    ]
    for title, extra, expected in steps:
        print(f"== {title}", flush=True)
        code = subprocess.run(base + extra).returncode
        if code != expected:
            print(f"{extra[0]} exited with {code}, not {expected}", file=sys.stderr)
            return 1
    refunds = [line for line in Path(args.ledger).read_text().splitlines() if line.startswith(f"{args.session}:")]
    print(f"the ledger (outside stepwell): {len(refunds)} refund")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="An Agents SDK run that waits for approval in stepwell.")
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--namespace", default="default")
    p.add_argument("--session", default="ticket-42")
    p.add_argument("--ledger", default="refunds.log", help="where the refund's effect is written")
    p.add_argument("phase", nargs="?", choices=["start", "approve", "resume"])
    p.add_argument("--crash-after-tool", action="store_true", help="resume: die once the refund has run")
    args = p.parse_args(argv)
    if args.phase is None:
        return run_all(args)
    asyncio.run(phase(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
