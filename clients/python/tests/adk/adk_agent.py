"""A real ADK agent for the agent-loop tests, with a fake model: an
``LlmAgent`` whose model is a ``BaseLlm`` answering scripted responses from
the request alone (no network), so every process, and every session
service, gets the same answers.

The agent keeps a shopping cart. ``add <item>`` makes the model call the
tool ``add_item``, which writes state through ``tool_context.state``: the
session's ``items``, the user's ``user:count``, the app's ``app:total`` and a
``temp:last`` that is never stored; the model then answers from the tool's
response. ``cart`` makes it answer from its instruction, into which ADK puts
the session's state. Anything else gets a greeting. ``ScriptedLlm(hold=...)``
names a file: the model writes it and then waits forever instead of
answering a tool's response, so a test can SIGKILL the process right after
the tool's response event is stored.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, AsyncGenerator, Dict, List, Optional

from google.adk.agents import LlmAgent
from google.adk.apps import App, ResumabilityConfig
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.tool_context import ToolContext
from google.genai import types

APP = "shop"
INSTRUCTION = "Help the shopper. Cart: {items?}"


def add_item(item: str, tool_context: ToolContext) -> Dict[str, Any]:
    """Adds an item to the shopper's cart."""
    items = list(tool_context.state.get("items", [])) + [item]
    tool_context.state["items"] = items
    tool_context.state["user:count"] = tool_context.state.get("user:count", 0) + 1
    tool_context.state["app:total"] = tool_context.state.get("app:total", 0) + 1
    tool_context.state["temp:last"] = item
    effects = os.environ.get("ADK_TEST_EFFECTS")
    if effects:
        # The tool's effect outside the store, to count how often it ran.
        with open(effects, "a") as log:
            log.write(f"{item} {os.getpid()}\n")
    return {"items": items, "user_count": tool_context.state["user:count"]}


def text(content: Any) -> str:
    """The text of a Content, or of an instruction (ADK passes a string)."""
    if isinstance(content, str) or content is None:
        return content or ""
    return "".join(p.text or "" for p in content.parts or [])


class ScriptedLlm(BaseLlm):
    model: str = "scripted"
    hold: Optional[str] = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        part = llm_request.contents[-1].parts[0]
        if part.function_response is not None:
            if self.hold:
                Path(self.hold).write_text(str(os.getpid()))
                await asyncio.Event().wait()
            got = part.function_response.response or {}
            answer = f"added; the cart has {', '.join(got['items'])} ({got['user_count']} by this user)"
        elif (part.text or "").startswith("add "):
            item = part.text[4:]
            call = types.FunctionCall(id=f"call-{item}", name="add_item", args={"item": item})
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(function_call=call)]))
            return
        elif part.text == "cart":
            lines = text(llm_request.config.system_instruction).splitlines()
            first = next(line for line in lines if line.startswith("Help the shopper."))
            answer = "the cart: " + first.split("Cart: ")[1]
        else:
            answer = f"hi, {part.text}"
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=answer)]))


def build_app(hold: Optional[str] = None) -> App:
    """The agent in a resumable app: a new process can continue an
    invocation that a killed one left unfinished (Runner.run_async with its
    invocation_id)."""
    agent = LlmAgent(name="shopper", model=ScriptedLlm(hold=hold), instruction=INSTRUCTION, tools=[add_item])
    return App(name=APP, root_agent=agent, resumability_config=ResumabilityConfig(is_resumable=True))


def user_message(line: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=line)])


def shape(events: List[Any]) -> List[str]:
    """Each event as ``author: what it says``, the way the tests compare conversations."""
    out = []
    for e in events:
        for p in (e.content.parts if e.content and e.content.parts else [None]):
            if p is None:
                out.append(f"{e.author}: (no content)")
            elif p.function_call:
                out.append(f"{e.author}: call {p.function_call.name}({p.function_call.args})")
            elif p.function_response:
                out.append(f"{e.author}: response {p.function_response.response}")
            else:
                out.append(f"{e.author}: {p.text}")
    return out
