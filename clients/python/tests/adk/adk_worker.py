"""A second process holding a session object of StepwellSessionService, for
the stale-session tests. It answers one line on stdout per line on stdin:

    python adk_worker.py <address> <namespace> <app> <user> <session_id>

``load`` gets the session and answers ``loaded <number of events>``;
``append <text>`` appends an event with that text to the loaded object and
answers ``ok``, or ``stale`` when the service raised StaleSessionError.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from google.adk.errors._stale_session_error import StaleSessionError  # noqa: E402
from google.adk.events.event import Event  # noqa: E402
from google.genai import types  # noqa: E402

from stepwell import AsyncClient  # noqa: E402
from stepwell.adk import StepwellSessionService  # noqa: E402


def text_event(text: str) -> Event:
    return Event(author="user", invocation_id="inv", content=types.Content(role="user", parts=[types.Part(text=text)]))


async def main(target: str, namespace: str, app: str, user: str, session_id: str) -> None:
    loop = asyncio.get_running_loop()
    async with AsyncClient(target, namespace=namespace) as client:
        service = StepwellSessionService(client)
        session = None
        while True:
            line = (await loop.run_in_executor(None, sys.stdin.readline)).rstrip("\n")
            if not line:
                return
            command, _, text = line.partition(" ")
            if command == "load":
                session = await service.get_session(app_name=app, user_id=user, session_id=session_id)
                print(f"loaded {len(session.events)}", flush=True)
            elif command == "append":
                try:
                    await service.append_event(session, text_event(text))
                    print("ok", flush=True)
                except StaleSessionError:
                    print("stale", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
