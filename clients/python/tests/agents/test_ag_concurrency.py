"""StepwellSession under concurrency: racing add_items keep each batch whole
and the batches in one order; racing pop_item calls never return the same
item and remove exactly as many as they return."""

from __future__ import annotations

import asyncio
from typing import Any, List

from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id  # noqa: F401  (fixtures)
from stepwell import AsyncClient, RecordExists
from stepwell.agents import StepwellSession

ROUNDS = 40
BATCH = 5


class CountingSession(StepwellSession):
    """Counts the PutRecords the sidecar refused because another writer had
    taken the ids first, to show that the races were real."""

    refused = 0

    async def _call(self, method_name: str, request: Any) -> Any:
        try:
            return await super()._call(method_name, request)
        except RecordExists:
            CountingSession.refused += 1
            raise


def batch(writer: str, round_: int) -> List[Any]:
    return [{"role": "user", "content": f"{writer}-{round_}-{i}"} for i in range(BATCH)]


def check_whole_batches(items: List[Any], writers: List[str]) -> None:
    """Every batch of every round is there once, whole and in its own order."""
    texts = [item["content"] for item in items]
    assert len(texts) == ROUNDS * len(writers) * BATCH
    for start in range(0, len(texts), BATCH):
        chunk = texts[start : start + BATCH]
        prefix = chunk[0].rsplit("-", 1)[0]
        assert chunk == [f"{prefix}-{i}" for i in range(BATCH)], f"a batch was split: {chunk}"
    heads = sorted(t.rsplit("-", 1)[0] for t in texts[::BATCH])
    assert heads == sorted(f"{w}-{r}" for w in writers for r in range(ROUNDS))


def test_racing_add_items_keep_batches_whole(ag_target: str, ag_namespace: str) -> None:
    async def main() -> None:
        sid = new_session_id()
        async with AsyncClient(ag_target, namespace=ag_namespace) as c1, \
                AsyncClient(ag_target, namespace=ag_namespace) as c2:
            # Two sessions on two clients, and a third object sharing the
            # first client: all three race in every round.
            writers = {"a": CountingSession(sid, client=c1), "b": CountingSession(sid, client=c2),
                       "c": CountingSession(sid, client=c1)}
            CountingSession.refused = 0
            for r in range(ROUNDS):
                # Each knows the same newest id, so each round's first tries collide.
                await asyncio.gather(*[s.get_items(1) for s in writers.values()])
                await asyncio.gather(*[s.add_items(batch(w, r)) for w, s in writers.items()])
            check_whole_batches(await writers["a"].get_items(), list(writers))
            assert CountingSession.refused >= ROUNDS * 2

    asyncio.run(main())


def test_racing_pops_never_return_the_same_item(ag_target: str, ag_namespace: str) -> None:
    async def main() -> None:
        sid = new_session_id()
        async with AsyncClient(ag_target, namespace=ag_namespace) as c1, \
                AsyncClient(ag_target, namespace=ag_namespace) as c2:
            sessions = [StepwellSession(sid, client=c) for c in (c1, c2, c1, c2)]
            items = [{"role": "user", "content": f"m{i}"} for i in range(30)]
            await sessions[0].add_items(items)
            for take in (12, 18):
                popped = await asyncio.gather(*[sessions[i % 4].pop_item() for i in range(take)])
                got = [p["content"] for p in popped]
                assert len(set(got)) == take, f"an item was returned twice: {got}"
                left = await sessions[1].get_items()
                assert sorted(got) == sorted(i["content"] for i in items[len(left) : len(left) + take])
                items = items[: len(left)]
                assert left == items
            # The session is empty: every further pop, however many race, gets None.
            assert await asyncio.gather(*[s.pop_item() for s in sessions]) == [None] * 4

    asyncio.run(main())


def test_an_add_after_a_clear_follows_items_written_since(ag_target: str, ag_namespace: str) -> None:
    """Sessions that wrote before a clear add after what others wrote since:
    none puts its batch in a gap the clear left below newer items."""

    async def main() -> None:
        sid = new_session_id()
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:
            a, b, c = (StepwellSession(sid, client=client) for _ in range(3))
            await a.add_items([{"role": "user", "content": f"a{i}"} for i in range(3)])
            await b.add_items([{"role": "user", "content": f"b{i}"} for i in range(3)])
            await c.clear_session()
            await c.add_items([{"role": "user", "content": "c0"}])
            await b.add_items([{"role": "user", "content": "b-late"}])
            await a.add_items([{"role": "user", "content": "a-later"}])
            items = await c.get_items()
            assert [i["content"] for i in items] == ["c0", "b-late", "a-later"]

    asyncio.run(main())
