"""The Python half of memory-cross-language.spec.ts: the Python client's
stepwell.adk.StepwellMemoryService, from this checkout's working tree
(clients/python/src, ahead of any installed stepwell), driven one command at
a time by the spec.

    python xlang_memory_py.py TARGET NAMESPACE COMMAND JSON_ARGS
    python xlang_memory_py.py serve
        runs those commands, each a JSON line of stdin, in this one process
        (the Python client's tests/xlang_serve.py), as the spec does

Commands (JSON_ARGS an object; "embed": true gives the service the spec's
deterministic embedder, the same function as the TypeScript side's):

    add {"app", "user", "session", "events": [{"id", "author", "timestamp"
        (seconds), "texts": [...] or null (an event without content)}]}
        add_session_to_memory of that session
    search {"app", "user", "query"}
        prints search_memory's memories as JSON: [{"id", "author",
        "timestamp", "content" (camelCase, no nulls)}]
    delete {"app", "user", "id"}
        delete_memory of that id

Run it with a Python that has google-adk==2.13.0 and the client's
dependencies (the client's test venv); it exits non-zero, with the error on
stderr, when anything fails.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Dict, List

CHECKOUT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(CHECKOUT / "python" / "src"))

from google.adk.events.event import Event  # noqa: E402
from google.adk.sessions.session import Session  # noqa: E402
from google.genai import types  # noqa: E402

from stepwell.adk import StepwellMemoryService  # noqa: E402

CONCEPTS = {"colour": 0, "color": 0, "hue": 0, "teal": 0, "blue": 0, "green": 0, "puppy": 1, "dog": 1, "cat": 1,
            "pizza": 2, "pasta": 2, "lunch": 2}


def embedding(text: str) -> List[float]:
    """One dimension per concept (colour, pet, food), one for any other word (the spec's embedding())."""
    v = [0.0, 0.0, 0.0, 0.1]
    for w in re.findall(r"[a-z]+", text.lower()):
        c = CONCEPTS.get(w)
        if c is None:
            v[3] += 0.01
        else:
            v[c] += 1
    return v


def event(e: Dict[str, Any]) -> Event:
    content = None
    if e.get("texts") is not None:
        role = "user" if e.get("author") == "user" else "model"
        content = types.Content(role=role, parts=[types.Part(text=t) for t in e["texts"]])
    return Event(id=e["id"], author=e.get("author") or "user", invocation_id="inv", timestamp=e["timestamp"], content=content)


async def run(svc: StepwellMemoryService, command: str, a: Dict[str, Any]) -> Any:
    if command == "add":
        session = Session(id=a["session"], app_name=a["app"], user_id=a["user"], events=[event(e) for e in a["events"]])
        await svc.add_session_to_memory(session)
        return {"added": len(a["events"])}
    if command == "search":
        got = await svc.search_memory(app_name=a["app"], user_id=a["user"], query=a["query"])
        return [{"id": m.id, "author": m.author, "timestamp": m.timestamp,
                 "content": m.content.model_dump(mode="json", exclude_none=True, by_alias=True)} for m in got.memories]
    if command == "delete":
        await svc.delete_memory(app_name=a["app"], user_id=a["user"], memory_id=a["id"])
        return {"deleted": a["id"]}
    raise ValueError(f"unknown command {command}")


async def main(argv: List[str]) -> None:
    target, namespace, command, args = argv[:4]
    a = json.loads(args)
    embed = (lambda texts: [embedding(t) for t in texts]) if a.get("embed") else None
    async with StepwellMemoryService.from_address(target, namespace=namespace, embed=embed) as svc:
        print(json.dumps(await run(svc, command, a), ensure_ascii=False), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        # The Python client's tests hold the serving loop (xlang_serve.py).
        sys.path.insert(0, str(CHECKOUT / "python" / "tests"))
        from xlang_serve import serve

        serve(main)
    else:
        import asyncio

        asyncio.run(main(sys.argv[1:]))
