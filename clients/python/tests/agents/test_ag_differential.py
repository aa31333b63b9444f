"""StepwellSession against the SDK's reference SQLiteSession: the same seeded
random sequences of calls (add_items of varied items, get_items with every
kind of limit, pop_item, clear_session, sessions with a default limit) on
both, every answer compared. 1,000 sequences per backend by default, as
clients/python/test runs it alone; STEPWELL_DIFF_SEQUENCES changes it, and
the test command (scripts/test) sets 150 per store, its short version. The
suite prints how many it ran."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from agents import SQLiteSession

from ag_support import ag_namespace, ag_sidecar, ag_target, backend, new_session_id  # noqa: F401  (fixtures)
from stepwell import AsyncClient
from stepwell.agents import StepwellSession

SEQUENCES = int(os.environ.get("STEPWELL_DIFF_SEQUENCES", "1000"))
PARALLEL = 8
TEXTS = ["", "hello", "héllo wörld", "日本語のテキスト", "emoji 🎉🧪", "a\u2028b", "nul \x00 inside", "quote \" \\ /",
         "e\u0301 combining", "x" * 300]


def random_text(rnd: random.Random) -> str:
    return rnd.choice(TEXTS) + str(rnd.randrange(1000))


def random_item(rnd: random.Random, n: int) -> Dict[str, Any]:
    kind = rnd.randrange(5)
    if kind == 0:
        return {"role": "user", "content": random_text(rnd)}
    if kind == 1:
        return {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": random_text(rnd), "annotations": []}],
        }
    if kind == 2:
        args = {"q": random_text(rnd), "n": rnd.randrange(-5, 5), "f": rnd.choice([0.1, 1e-7, 2.5, -3.0]),
                "ok": rnd.choice([True, False, None])}
        return {"type": "function_call", "call_id": f"call_{n}", "name": "lookup", "arguments": repr(args),
                "id": f"fc_{n}", "status": "completed"}
    if kind == 3:
        return {"type": "function_call_output", "call_id": f"call_{n}", "output": random_text(rnd)}
    return {"role": rnd.choice(["system", "developer", "user"]),
            "content": [{"type": "input_text", "text": random_text(rnd)}], "extra": {"nested": [1, [2, {"k": "v"}]]}}


def random_limit(rnd: random.Random, size: int) -> Optional[int]:
    return rnd.choice([None, 0, 1, 2, max(size - 1, 1), size, size + 1, size + 50, -1, -rnd.randrange(2, 10),
                       rnd.randrange(1, 8)])


def random_call(rnd: random.Random, size: int, counter: List[int]) -> Tuple[str, Any]:
    op = rnd.choices(["add", "get", "pop", "clear"], weights=[5, 5, 3, 1])[0]
    if op == "add":
        items = []
        for _ in range(rnd.randrange(0, 6)):
            counter[0] += 1
            items.append(random_item(rnd, counter[0]))
        return op, items
    if op == "get":
        return op, random_limit(rnd, size)
    return op, None


async def call(session: Any, op: str, arg: Any) -> Any:
    if op == "add":
        return await session.add_items([dict(item) for item in arg])
    if op == "get":
        return await session.get_items(arg) if arg is not None else await session.get_items()
    if op == "pop":
        return await session.pop_item()
    return await session.clear_session()


async def one_sequence(seed: int, client: AsyncClient, db: Path) -> int:
    """Runs sequence ``seed`` on both sessions; returns how many calls it compared."""
    rnd = random.Random(seed)
    settings = rnd.choice([None, None, {"limit": rnd.randrange(1, 6)}, {"limit": None}])
    sid = new_session_id()
    reference = SQLiteSession(sid, db, session_settings=settings)
    ours = StepwellSession(sid, client=client, session_settings=settings)
    size, counter, calls = 0, [0], rnd.randrange(4, 16)
    try:
        for step in range(calls):
            op, arg = random_call(rnd, size, counter)
            want = await call(reference, op, arg)
            got = await call(ours, op, arg)
            assert got == want, f"seed {seed} step {step}: {op}({arg!r}) gave {got!r}, SQLiteSession {want!r}"
            size = 0 if op == "clear" else size + len(arg) if op == "add" else size - (want is not None and op == "pop")
    finally:
        reference.close()
    return calls


def test_differential_against_sqlite_session(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    async def main() -> Tuple[int, int]:
        # Sequences run PARALLEL at a time, each on a session of its own, so
        # that the sidecar commits their writes together (each sequence's
        # calls still go one after the other).
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:
            counts: List[int] = []
            for start in range(0, SEQUENCES, PARALLEL):
                seeds = range(start, min(start + PARALLEL, SEQUENCES))
                counts += await asyncio.gather(*[one_sequence(s, client, tmp_path / "reference.db") for s in seeds])
        return len(counts), sum(counts)

    sequences, calls = asyncio.run(main())
    print(f"differential ({backend()}): {sequences} sequences, {calls} calls, every answer equal")
    assert sequences == SEQUENCES, f"ran {sequences} of {SEQUENCES} sequences"
