"""A fake model for the agent tests: the SDK's Model interface answering
scripted responses, so that the agent loop runs without any network.

``FakeModel(respond)`` calls ``respond(input_items)`` for each turn of the
model and returns what it gives (a list of output items) as a ModelResponse;
``message``, ``tool_call`` and ``handoff_call`` build those items.
``echo_model(prefix)`` answers every turn with ``prefix`` + the text of the
last user message (what the cross-language programs use).
"""

from __future__ import annotations

import itertools
import json
from typing import Any, AsyncIterator, Callable, List

from agents import Model, ModelResponse, Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

Respond = Callable[[List[Any]], List[Any]]
_ids = itertools.count(1)


def message(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{next(_ids)}",
        content=[ResponseOutputText(text=text, annotations=[], type="output_text")],
        role="assistant",
        status="completed",
        type="message",
    )


def tool_call(name: str, arguments: Any, call_id: str) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        id=f"fc_{next(_ids)}",
        call_id=call_id,
        name=name,
        arguments=json.dumps(arguments),
        type="function_call",
        status="completed",
    )


def handoff_call(agent_name: str, call_id: str) -> ResponseFunctionToolCall:
    """The call a model makes to hand off to ``agent_name`` (the SDK names
    the handoff tool ``transfer_to_<name>``)."""
    return tool_call("transfer_to_" + agent_name.lower().replace(" ", "_"), {}, call_id)


def text_of(item: Any) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return ""


def last_user_text(items: List[Any]) -> str:
    for item in reversed(items):
        if isinstance(item, dict) and item.get("role") == "user":
            return text_of(item)
    return ""


def last_output(items: List[Any]) -> Any:
    """The last item when it is a function call's output, else None."""
    last = items[-1] if items else None
    return last if isinstance(last, dict) and last.get("type") == "function_call_output" else None


class FakeModel(Model):
    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.inputs: List[List[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        return ModelResponse(output=self.respond(items), usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


def echo_model(prefix: str) -> FakeModel:
    return FakeModel(lambda items: [message(prefix + last_user_text(items))])
