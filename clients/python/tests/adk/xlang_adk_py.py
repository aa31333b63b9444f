"""The Python side of the cross-language ADK session check: the TypeScript
client's tests drive it to continue, with a Python ADK agent, a session its
TypeScript agent started on stepwell, and to read the session back.

    python xlang_adk_py.py <address> <namespace> <app> <user> <session_id> run <text>
        runs one turn of the agent (ADK's Runner, an LlmAgent on a fake model,
        no network) on the session, creating it when it does not exist, and
        prints the final text
    python xlang_adk_py.py <address> <namespace> <app> <user> <session_id> route <name>
        appends a workflow event routed to <name> (Event(route=...), which
        Python keeps as actions.route) with output {"done": true}
    python xlang_adk_py.py <address> <namespace> <app> <user> <session_id> get
        prints the session as JSON: {"events": [each event's
        model_dump(mode="json", exclude_none=True, by_alias=True)], "state",
        "lastUpdateTime"} (times in seconds, as ADK's Python keeps them)
    python xlang_adk_py.py serve
        runs those commands, each a line of stdin, in this one process
        (../xlang_serve.py), as the TypeScript client's specs do

The agent is the TypeScript tests' agent in Python: named "assistant", its
model answers the newest user text "call NAME ARG" with a call of tool NAME
({"arg": ARG}, call id "fc-" + the first 12 hex digits of the text's
SHA-256), then with "py:" + the tool's response as JSON; any other text
with "py:" + the text. Tools: note (writes "note", "user:notes" (a count),
"app:last" and "temp:scratch") and recall (answers note, notes and last).
Run it with a Python that has the client and google-adk==2.13.0; it exits
non-zero, with the error on stderr, when anything fails.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from typing import Any, AsyncGenerator, Dict

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from stepwell.adk import StepwellSessionService

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from xlang_serve import serve  # noqa: E402


def _last_turn(request: LlmRequest) -> tuple:
    """The newest user text of the request and the function responses after it."""
    contents = request.contents
    i = len(contents) - 1
    while i >= 0 and not (contents[i].role == "user" and any(p.text is not None for p in contents[i].parts or [])):
        i -= 1
    text = "" if i < 0 else "".join(p.text or "" for p in contents[i].parts or [])
    responses = [p.function_response.response for c in contents[i + 1:] for p in c.parts or [] if p.function_response]
    return text, responses


class FakeLlm(BaseLlm):
    """Answers by the rules in the module docstring, never over the network."""

    model: str = "fake-model"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        text, responses = _last_turn(llm_request)
        words = text.split(" ")
        if words[0] == "call" and len(words) > 1 and not responses:
            call_id = "fc-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
            args = {"arg": words[2] if len(words) > 2 else ""}
            part = types.Part(function_call=types.FunctionCall(id=call_id, name=words[1], args=args))
        else:
            answer = json.dumps(responses[0], separators=(",", ":")) if words[0] == "call" else text
            part = types.Part(text="py:" + answer)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def note(arg: str, tool_context: ToolContext) -> Dict[str, Any]:
    """Notes an argument in the state."""
    tool_context.state["note"] = arg
    tool_context.state["user:notes"] = (tool_context.state.get("user:notes") or 0) + 1
    tool_context.state["app:last"] = arg
    tool_context.state["temp:scratch"] = arg
    return {"noted": arg}


def recall(arg: str, tool_context: ToolContext) -> Dict[str, Any]:
    """Answers what the state holds."""
    state = tool_context.state
    return {"note": state.get("note"), "notes": state.get("user:notes"), "last": state.get("app:last")}


async def run(service: StepwellSessionService, app: str, user: str, session_id: str, text: str) -> str:
    if await service.get_session(app_name=app, user_id=user, session_id=session_id) is None:
        await service.create_session(app_name=app, user_id=user, session_id=session_id)
    agent = LlmAgent(name="assistant", model=FakeLlm(), instruction="Help.", tools=[note, recall])
    runner = Runner(app_name=app, agent=agent, session_service=service)
    last = ""
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for event in runner.run_async(user_id=user, session_id=session_id, new_message=message):
        got = "".join(p.text or "" for p in (event.content.parts or [])) if event.content else ""
        last = got or last
    return last


async def main(argv: list) -> None:
    if len(argv) < 6 or argv[5] not in ("run", "route", "get") or (argv[5] != "get") != (len(argv) == 7):
        sys.exit("usage: xlang_adk_py.py <address> <namespace> <app> <user> <session_id> run <text> | route <name> | get")
    address, namespace, app, user, session_id, command = argv[:6]
    async with StepwellSessionService.from_address(address, namespace=namespace) as service:
        if command == "run":
            print(await run(service, app, user, session_id, argv[6]))
            return
        session = await service.get_session(app_name=app, user_id=user, session_id=session_id)
        if command == "route":
            await service.append_event(session, Event(author="assistant", invocation_id="wf-py", route=argv[6], output={"done": True}))
            return
        events = [e.model_dump(mode="json", exclude_none=True, by_alias=True) for e in session.events]
        print(json.dumps({"events": events, "state": session.state, "lastUpdateTime": session.last_update_time}, ensure_ascii=False))


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve(main)
    else:
        asyncio.run(main(sys.argv[1:]))
