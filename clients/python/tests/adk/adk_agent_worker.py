"""A worker process of the agent kill test: runs the shopping agent of
adk_agent.py through ADK's Runner on a StepwellSessionService session.

    python adk_agent_worker.py <address> <namespace> <user> <session_id> <dir> first|resume

``first`` creates the session and runs the turns "hello" and "add apple";
its model, once the tool's response is stored, writes <dir>/holding and
waits forever, so the test can SIGKILL the process there. ``resume``
continues, in a new process, the invocation the killed one left unfinished
(its invocation id is the newest stored event's), then runs the turns "add
pear" and "cart", and prints what the runner yielded (the user's messages
included), one line per event part, as a JSON list.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from google.adk.runners import Runner  # noqa: E402

from adk_agent import APP, build_app, shape, user_message  # noqa: E402
from stepwell.adk import StepwellSessionService  # noqa: E402

# ADK marks resumable apps experimental; the warning would only clutter the test's output.
warnings.filterwarnings("ignore", category=UserWarning)


async def turns(runner: Runner, user: str, session_id: str, lines: List[str]) -> List[Any]:
    yielded = []
    for line in lines:
        async for event in runner.run_async(
            user_id=user, session_id=session_id, new_message=user_message(line), yield_user_message=True
        ):
            yielded.append(event)
    return yielded


async def main(address: str, namespace: str, user: str, session_id: str, folder: Path, mode: str) -> None:
    async with StepwellSessionService.from_address(address, namespace=namespace) as service:
        if mode == "first":
            runner = Runner(app=build_app(hold=str(folder / "holding")), session_service=service)
            await service.create_session(app_name=APP, user_id=user, session_id=session_id)
            await turns(runner, user, session_id, ["hello", "add apple"])
            raise SystemExit("the first process was not killed while its model held")
        runner = Runner(app=build_app(), session_service=service)
        session = await service.get_session(app_name=APP, user_id=user, session_id=session_id)
        assert session is not None and session.events, "no session to continue"
        yielded = []
        async for event in runner.run_async(
            user_id=user, session_id=session_id, invocation_id=session.events[-1].invocation_id
        ):
            yielded.append(event)
        yielded += await turns(runner, user, session_id, ["add pear", "cart"])
        print(json.dumps(shape(yielded)))


if __name__ == "__main__":
    a = sys.argv[1:]
    asyncio.run(main(a[0], a[1], a[2], a[3], Path(a[4]), a[5]))
