"""Helpers of the StepwellMemoryService tests: events and sessions to add,
the answers of a search as plain data, a deterministic embedder, and a
service on a client of its own."""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any, Dict, List, Optional, Sequence

from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

from stepwell.adk import StepwellMemoryService

# Words of one meaning share a concept: the embedder places them together,
# the word search does not.
CONCEPTS = {
    "car": "vehicle", "automobile": "vehicle", "truck": "vehicle", "drive": "vehicle", "vehicle": "vehicle",
    "colour": "colour", "color": "colour", "teal": "colour", "blue": "colour", "favourite": "like",
    "like": "like", "love": "like", "dog": "pet", "puppy": "pet", "cat": "pet", "pet": "pet",
}
DIMS = 32


def embed(texts: List[str]) -> List[List[float]]:
    """A hashed bag of concepts (a word's own when it has none), normalised,
    with a small constant component so that no vector is all zero."""
    out = []
    for text in texts:
        v = [0.0] * DIMS
        v[0] = 0.05
        for word in re.findall(r"\w+", text.lower()):
            concept = CONCEPTS.get(word, word)
            v[1 + int(hashlib.sha256(concept.encode()).hexdigest(), 16) % (DIMS - 1)] += 1.0
        norm = math.sqrt(sum(x * x for x in v))
        out.append([x / norm for x in v])
    return out


async def aembed(texts: List[str]) -> List[List[float]]:
    """``embed``, as an async embedder."""
    return embed(texts)


def content(*texts: str, role: str = "user") -> types.Content:
    return types.Content(role=role, parts=[types.Part(text=t) for t in texts])


def event(event_id: str, *texts: str, author: str = "user", timestamp: float = 1_700_000_000.0,
          parts: Optional[List[types.Part]] = None, no_content: bool = False) -> Event:
    """An event with text parts (or ``parts``, or no content at all)."""
    if no_content:
        body = None
    elif parts is not None:
        body = types.Content(role="user", parts=parts)
    else:
        body = content(*texts)
    return Event(id=event_id, invocation_id="inv", author=author, timestamp=timestamp, content=body)


def session(session_id: str, events: Sequence[Event], app: str = "app", user: str = "user") -> Session:
    return Session(id=session_id, app_name=app, user_id=user, events=list(events))


def entries(response: Any) -> List[Dict[str, Any]]:
    """A search's memories as plain data, in order."""
    return [
        {"id": m.id, "author": m.author, "timestamp": m.timestamp,
         "content": m.content.model_dump(mode="json", exclude_none=True), "custom_metadata": m.custom_metadata}
        for m in response.memories
    ]


def texts(response: Any) -> List[str]:
    """Each memory's text parts, joined."""
    return [" ".join(p.text for p in m.content.parts or [] if p.text) for m in response.memories]


def ids(response: Any) -> List[Optional[str]]:
    return [m.id for m in response.memories]


def service(target: str, namespace: str, **kwargs: Any) -> StepwellMemoryService:
    """A service with a client of its own (closed by ``close()``)."""
    return StepwellMemoryService.from_address(target, namespace=namespace, **kwargs)
