"""StepwellSession's record format, its limits and its errors: the records as
the other languages read them, session id validation, batches larger than
one request, an item larger than a record, and a sidecar that is down."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, List

import pytest

from ag_support import ag_namespace, ag_sidecar, ag_target, new_session_id, start_sidecar  # noqa: F401  (fixtures)
from conftest import free_port
from stepwell import NO_RETRY, AsyncClient, InvalidArgument, Unavailable
from stepwell.agents import ITEM_KIND, StepwellSession
from stepwell.v1 import records_pb2 as rec


def test_record_format(ag_target: str, ag_namespace: str) -> None:
    """Each item is one record at the address and in the encoding the
    TypeScript client reads: id = 20-digit sequence number, compact UTF-8
    JSON payload, a fresh 32-hex "u" in the metadata."""
    items = [{"role": "user", "content": "héllo 🎉"}, {"type": "function_call_output", "call_id": "c", "output": "1"}]

    async def main() -> List[rec.Record]:
        sid = new_session_id()
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:
            session = StepwellSession(sid, client=client)
            await session.add_items(items)
            await session.add_items(items[:1])
            req = rec.ListRecordsRequest(namespace=ag_namespace, turn_id=sid, kind=ITEM_KIND, has_scope=True)
            resp = await client._call(client.record_stub.ListRecords, req, None)
        return [e.record for e in reversed(resp.entries)]

    records = asyncio.run(main())
    assert [r.id for r in records] == ["00000000000000000001", "00000000000000000002", "00000000000000000003"]
    want = items + items[:1]
    assert [r.payload for r in records] == [
        json.dumps(i, ensure_ascii=False, separators=(",", ":")).encode("utf-8") for i in want
    ]
    assert {(r.scope, r.kind, r.content_type, r.parent_id, len(r.refs)) for r in records} == {
        ("", "agent-item", "application/json", "", 0)
    }
    us = [json.loads(r.metadata)["u"] for r in records]
    assert all(re.fullmatch("[0-9a-f]{32}", u) for u in us) and len(set(us)) == 3


@pytest.mark.parametrize(
    "bad", ["", "x" * 257, "é" * 128 + "a", "line\nbreak", "tab\there", "del\x7f", "c1\x85", 42, None]
)
def test_session_id_is_checked(bad: Any) -> None:
    with pytest.raises(ValueError, match="session_id"):
        StepwellSession(bad, client=None)


def test_session_id_limits_accepted(ag_target: str, ag_namespace: str) -> None:
    async def main() -> None:
        for sid in ("x" * 256, "é" * 128, "spaces and / : ünïcode 🎉"):
            async with StepwellSession.from_address(sid, ag_target, namespace=ag_namespace) as s:
                await s.add_items([{"role": "user", "content": sid}])
                assert await s.get_items() == [{"role": "user", "content": sid}]

    asyncio.run(main())


def test_batches_beyond_one_request(ag_target: str, ag_namespace: str) -> None:
    """2,500 items (more than 1,000 records), and three items of 1.5 MiB
    (more than one request's bytes), are written in several requests, all
    in order; get_items pages through them."""
    many = [{"role": "user", "content": f"m{i}"} for i in range(2500)]
    big = [{"role": "user", "content": c * (3 << 19)} for c in "abc"]

    async def main() -> None:
        async with StepwellSession.from_address(new_session_id(), ag_target, namespace=ag_namespace) as s:
            await s.add_items(many)
            assert await s.get_items() == many
            assert await s.get_items(1500) == many[-1500:]
            await s.add_items(big)
            assert await s.get_items(4) == many[-1:] + big
            assert await s.pop_item() == big[-1]

    asyncio.run(main())


def test_item_larger_than_a_record(workdir: Path, ag_namespace: str) -> None:
    """An item over --record-bytes-max is refused by the sidecar, and nothing
    of its batch is stored."""
    sidecar = start_sidecar(workdir, ["--record-bytes-max", "65536"])

    async def main() -> None:
        async with StepwellSession.from_address(new_session_id(), sidecar.target, namespace=ag_namespace) as s:
            await s.add_items([{"role": "user", "content": "kept"}])
            with pytest.raises(InvalidArgument) as err:
                await s.add_items([{"role": "user", "content": "small"}, {"role": "user", "content": "x" * 70000}])
            assert "records[1]" in err.value.field
            assert await s.get_items() == [{"role": "user", "content": "kept"}]

    try:
        asyncio.run(main())
    finally:
        sidecar.stop()


def test_sidecar_down_is_unavailable(ag_namespace: str) -> None:
    async def main() -> None:
        target = f"127.0.0.1:{free_port()}"
        async with StepwellSession.from_address("s", target, namespace=ag_namespace, retry=NO_RETRY, timeout=5) as s:
            for call in (s.get_items(), s.add_items([{"role": "user", "content": "x"}]), s.pop_item(),
                         s.clear_session()):
                with pytest.raises(Unavailable):
                    await call

    asyncio.run(main())


def test_cancelled_add_items_still_writes(ag_target: str, ag_namespace: str) -> None:
    """A caller cancelled during add_items (or pop_item) is answered with the
    cancellation only once the write is done, as the SDK's sessions are."""
    items = [{"role": "user", "content": f"c{i}"} for i in range(3)]

    async def main() -> None:
        async with StepwellSession.from_address(new_session_id(), ag_target, namespace=ag_namespace) as s:
            task = asyncio.ensure_future(s.add_items(items))
            await asyncio.sleep(0)  # the write has started: it awaits its first call
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await s.get_items() == items
            task = asyncio.ensure_future(s.pop_item())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await s.get_items() == items[:2]

    asyncio.run(main())


def test_clear_session_leaves_other_records_of_the_turn(ag_target: str, ag_namespace: str) -> None:
    """clear_session deletes the session's items only: a record of another
    kind in the same turn (a saved run state, a LangGraph checkpoint) stays."""

    async def main() -> None:
        sid = new_session_id()
        async with AsyncClient(ag_target, namespace=ag_namespace) as client:
            other = rec.Record(turn_id=sid, kind="checkpoint", id="c1", payload=b"{}")
            await client._call(client.record_stub.PutRecords,
                               rec.PutRecordsRequest(namespace=ag_namespace, records=[other]), None)
            session = StepwellSession(sid, client=client)
            await session.add_items([{"role": "user", "content": "x"}])
            await session.clear_session()
            assert await session.get_items() == []
            req = rec.ListRecordsRequest(namespace=ag_namespace, turn_id=sid, kind="checkpoint")
            resp = await client._call(client.record_stub.ListRecords, req, None)
            assert [e.record.id for e in resp.entries] == ["c1"]

    asyncio.run(main())
