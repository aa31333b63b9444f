#!/usr/bin/env python3
"""A Google ADK agent whose session lives in stepwell: a process starts a
conversation, another one continues it.

A shopping agent (an ``LlmAgent`` run by ADK's ``Runner``) adds what the
user asks for to a cart with a tool, ``add_to_cart``, which writes the
session's ``cart``, the user's ``user:orders`` and the app's ``app:orders``
through ``tool_context.state``. The session service is
``StepwellSessionService``: the first process talks and exits; the second
one gets the same session from stepwell, events and state, and goes on.

    # both, each in a new process of its own:
    python examples/adk_agent.py --target 127.0.0.1:50051
    # or one at a time:
    python examples/adk_agent.py --target 127.0.0.1:50051 start
    python examples/adk_agent.py --target 127.0.0.1:50051 continue

The model is scripted (no network, no API key), so the transcript is the
same on every run. ``start`` deletes a session left by an earlier run, so
the example can run again; the ``user:`` and ``app:`` counts, which belong
to no session, go on counting. Needs, at the root of a checkout of this
repository, ``pip install "./clients/python[adk]" google-adk==2.13.0``, and a
running sidecar.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from typing import Any, AsyncGenerator, Dict, List, Optional

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from stepwell.adk import StepwellSessionService

APP, USER = "shop", "ann"


def add_to_cart(item: str, tool_context: ToolContext) -> Dict[str, Any]:
    """Adds an item to the shopper's cart."""
    cart = tool_context.state.get("cart", []) + [item]
    tool_context.state["cart"] = cart
    tool_context.state["user:orders"] = tool_context.state.get("user:orders", 0) + 1
    tool_context.state["app:orders"] = tool_context.state.get("app:orders", 0) + 1
    return {"cart": cart}


class ScriptedModel(BaseLlm):
    """Stands in for an LLM: "add X" calls the tool, a tool's response is
    reported, anything else is answered from the cart in the instruction."""

    model: str = "scripted"

    async def generate_content_async(
        self, request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = request.contents[-1].parts[0]
        if part.function_response is not None:
            reply = types.Part(text=f"Added. Your cart: {', '.join(part.function_response.response['cart'])}.")
        elif (part.text or "").startswith("add "):
            call = types.FunctionCall(id=f"call-{part.text[4:]}", name="add_to_cart", args={"item": part.text[4:]})
            reply = types.Part(function_call=call)
        else:
            # ADK put the session's state into the instruction: "... Cart: [...]".
            instruction = str(request.config.system_instruction).splitlines()[0]
            reply = types.Part(text=f"Your cart holds {instruction.split('Cart: ')[1]}.")
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0, candidates_token_count=0)
        yield LlmResponse(content=types.Content(role="model", parts=[reply]), usage_metadata=usage)


agent = LlmAgent(name="shopper", model=ScriptedModel(), instruction="Help the shopper. Cart: {cart?}",
                 tools=[add_to_cart])


async def say(runner: Runner, session_id: str, text: str) -> None:
    print(f"user: {text}")
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=USER, session_id=session_id, new_message=message):
        for part in event.content.parts if event.content and event.content.parts else []:
            if part.function_call:
                print(f"agent calls {part.function_call.name}({part.function_call.args})")
            elif part.text:
                print(f"agent: {part.text}")


async def phase(args: argparse.Namespace) -> None:
    async with StepwellSessionService.from_address(args.target, namespace=args.namespace) as session_service:
        runner = Runner(agent=agent, app_name=APP, session_service=session_service)
        if args.phase == "start":
            await session_service.delete_session(app_name=APP, user_id=USER, session_id=args.session)
            await session_service.create_session(app_name=APP, user_id=USER, session_id=args.session)
            await say(runner, args.session, "add tea")
            await say(runner, args.session, "add milk")
            return
        session = await session_service.get_session(app_name=APP, user_id=USER, session_id=args.session)
        if session is None:
            raise SystemExit(f"no session {args.session}: run the start phase first")
        print(f"loaded session {session.id}: {len(session.events)} events, state {session.state}")
        await say(runner, args.session, "add honey")
        await say(runner, args.session, "what is in my cart?")


def run_all(args: argparse.Namespace) -> int:
    """Runs each phase in a process of its own, as a restarted service would."""
    base = [sys.executable, os.path.abspath(__file__), "--target", args.target, "--namespace", args.namespace,
            "--session", args.session]
    for name, title in [("start", "a process starts the conversation"),
                        ("continue", "a new process continues the session from stepwell")]:
        print(f"== {name}: {title}", flush=True)
        code = subprocess.run(base + [name]).returncode
        if code != 0:
            print(f"{name} exited with {code}", file=sys.stderr)
            return 1
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description="An ADK agent whose session lives in stepwell.")
    p.add_argument("--target", default="127.0.0.1:50051")
    p.add_argument("--namespace", default="default")
    p.add_argument("--session", default="cart-1")
    p.add_argument("phase", nargs="?", choices=["start", "continue"])
    args = p.parse_args(argv)
    if args.phase is None:
        return run_all(args)
    asyncio.run(phase(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
