"""Helpers of the StepwellStore tests: fake embeddings and stores on the session's sidecar.

``CharacterEmbeddings`` is our own take on the fake embedder of LangGraph's
store tests: each character gets a random projection the first time it is
seen (drawn from one seeded generator, so vectors depend on the order texts
are embedded in), a text is the count-weighted mean of its characters'
projections, L2-normalized; the empty text is all zeros.

``open_store(kind, target, **kwargs)`` is an async context manager of a
StepwellStore ("sync") or AsyncStepwellStore ("async") on a fresh stepwell
namespace; the tests drive both through LangGraph's async methods (the
blocking store's run its ``batch`` in an executor), and the blocking one's
sync methods where they test those.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections import defaultdict
from typing import Any, AsyncIterator, Dict, List, Optional

from langchain_core.embeddings import Embeddings

from conftest import fresh_namespace
from stepwell.langgraph import AsyncStepwellStore, StepwellStore

KINDS = ["sync", "async"]


class CharacterEmbeddings(Embeddings):
    def __init__(self, dims: int = 500, seed: int = 42) -> None:
        self.dims = dims
        rng = random.Random(seed)
        sigma = 1 / math.sqrt(dims)
        self._proj: Dict[str, List[float]] = defaultdict(lambda: [rng.gauss(0, sigma) for _ in range(dims)])
        self.calls: List[List[str]] = []

    def _one(self, text: str) -> List[float]:
        if not text:
            return [0.0] * self.dims
        counts: Dict[str, int] = {}
        for ch in text:
            counts[ch] = counts.get(ch, 0) + 1
        emb = [0.0] * self.dims
        for ch, n in counts.items():
            p = self._proj[ch]
            w = n / len(text)
            for i in range(self.dims):
                emb[i] += w * p[i]
        norm = math.sqrt(sum(x * x for x in emb))
        return [x / norm for x in emb] if norm else emb

    def embed_documents(self, texts: List[str]) -> List[List[float]]:
        self.calls.append(list(texts))
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> List[float]:
        return self._one(text)


def cosine(a: List[float], b: List[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@contextlib.asynccontextmanager
async def open_store(kind: str, target: str, namespace: Optional[str] = None, **kwargs: Any) -> AsyncIterator[Any]:
    ns = namespace or fresh_namespace("lgs")
    if kind == "sync":
        store = StepwellStore.from_address(target, namespace=ns, **kwargs)
        try:
            yield store
        finally:
            store.close()
    else:
        astore = AsyncStepwellStore.from_address(target, namespace=ns, **kwargs)
        try:
            yield astore
        finally:
            await astore.aclose()
