"""The Python side of the cross-language session check: reads, writes and
continues a StepwellSession from the command line, so that the TypeScript
client's tests can continue a conversation Python started, and the other
way round.

    python xlang_py.py <address> <namespace> <session_id> get
        prints the session's items (get_items()) as one JSON list
    python xlang_py.py <address> <namespace> <session_id> add
        reads a JSON list of items from stdin and add_items() them
    python xlang_py.py <address> <namespace> <session_id> run <prompt>
        runs one agent turn on the session with a fake model that answers
        "py:" + the last user message's text, and prints the final output
    python xlang_py.py serve
        runs those commands, each a line of stdin, in this one process
        (xlang_serve.py), as the TypeScript client's specs do

Run it with a Python that has the client and openai-agents==0.24.0 (the
test virtualenv of clients/python/test). It exits non-zero, with the error
on stderr, when anything fails.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402

from ag_model import echo_model  # noqa: E402
from stepwell.agents import StepwellSession  # noqa: E402
from xlang_serve import serve  # noqa: E402


async def main(argv: list) -> None:
    if len(argv) < 4 or argv[3] not in ("get", "add", "run") or (argv[3] == "run") != (len(argv) == 5):
        sys.exit("usage: xlang_py.py <address> <namespace> <session_id> get|add|run <prompt>")
    address, namespace, session_id, command = argv[:4]
    # No network: traces would otherwise be exported to the model's vendor.
    set_tracing_disabled(True)
    async with StepwellSession.from_address(session_id, address, namespace=namespace) as session:
        if command == "get":
            print(json.dumps(await session.get_items(), ensure_ascii=False))
        elif command == "add":
            items = json.loads(sys.stdin.read())
            if not isinstance(items, list):
                sys.exit("add: stdin must be a JSON list of items")
            await session.add_items(items)
        else:
            agent = Agent(name="py", instructions="Answer.", model=echo_model("py:"))
            result = await Runner.run(agent, argv[4], session=session)
            print(result.final_output)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve(main)
    else:
        asyncio.run(main(sys.argv[1:]))
