"""Every method of Client and AsyncClient against the real sidecar."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time

import grpc
import pytest

from conftest import _SERVING, Sidecar, _HealthCheckRequest, _HealthCheckResponse, fresh_namespace
from stepwell import (
    AsyncClient,
    CheckpointConflict,
    Client,
    InvalidArgument,
    KeyNotFound,
    KeyReused,
    LeaseLost,
    NO_RETRY,
    NotAcquired,
    OnceContext,
    OperationFailed,
    ResultMismatch,
    RetryPolicy,
    StepwellError,
    Unavailable,
    WorkflowVersionMismatch,
)
from stepwell.v1 import checkpoint_pb2 as cp
from stepwell.v1 import checkpoint_pb2_grpc as cp_grpc
from stepwell.v1 import idempotency_pb2 as ip
from stepwell.v1 import idempotency_pb2_grpc as ip_grpc

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_checkpoint_restore_and_pages(client: Client) -> None:
    r = client.checkpoint("t", "started", {"n": 0}, timestamp=T0, session_id="s", workflow_version="1.0.0")
    assert r.inserted and r.checkpoint.phase == "started"
    assert json.loads(r.checkpoint.state) == {"n": 0}
    again = client.checkpoint("t", "started", {"n": 0}, timestamp=T0, session_id="s", workflow_version="1.0.0")
    assert not again.inserted
    with pytest.raises(CheckpointConflict) as e:
        client.checkpoint("t", "started", {"n": 1}, timestamp=T0, session_id="s", workflow_version="1.0.0")
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and e.value.reason == "CHECKPOINT_CONFLICT"
    for i in range(1, 6):
        client.checkpoint("t", f"p{i}", {"n": i}, timestamp=T0 + dt.timedelta(seconds=i))
    # restore iterates every page for the caller
    all_ = client.restore("t", page_size=2)
    assert [c.phase for c in all_] == ["started", "p1", "p2", "p3", "p4", "p5"]
    assert [c.phase for c in client.restore("t", newest_first=True, page_size=4)][:2] == ["p5", "p4"]
    page = client.restore_page("t", page_size=2)
    assert len(page.checkpoints) == 2 and page.next_page_token
    page2 = client.restore_page("t", page_size=2, page_token=page.next_page_token)
    assert [c.phase for c in page2.checkpoints] == ["p2", "p3"]
    assert client.latest("t").phase == "p5"
    assert client.latest("never") is None
    assert [c.phase for c in client.restore("t", phase="p3")] == ["p3"]
    assert client.restore("t", expect_workflow_version="1.4.0")
    with pytest.raises(WorkflowVersionMismatch) as v:
        client.restore("t", expect_workflow_version="2.0.0")
    assert v.value.expected_version == "2.0.0" and v.value.recorded_version == "1.0.0"


def test_restore_of_a_turn_larger_than_a_message(client: Client) -> None:
    # Six states of about 900 KB: 5.4 MB in all, more than the 4 MiB a gRPC
    # client accepts in one message. The sidecar cuts each page to fit and
    # restore follows the pages with the default limits.
    states = [f"{i}" + "x" * 900_000 for i in range(6)]
    for i, state in enumerate(states):
        client.checkpoint("big", f"p{i}", state, timestamp=T0 + dt.timedelta(seconds=i))
    first = client.restore_page("big")
    assert 1 <= len(first.checkpoints) < 6 and first.next_page_token
    restored = client.restore("big")
    assert [c.phase for c in restored] == [f"p{i}" for i in range(6)]
    assert [json.loads(c.state) for c in restored] == states


def test_raw_bytes_state_and_invalid(client: Client) -> None:
    r = client.checkpoint("raw", "a", b'{"k": [1, 2]}', timestamp=T0)
    assert r.checkpoint.state == b'{"k": [1, 2]}'
    with pytest.raises(InvalidArgument) as e:
        client.checkpoint("raw", "b", b"not json", timestamp=T0)
    assert e.value.reason == "STATE_NOT_JSON"
    with pytest.raises(InvalidArgument) as e:
        client.checkpoint("raw", "has space", {}, timestamp=T0)
    assert e.value.field == "phase" and e.value.reason == "FIELD_MALFORMED"
    assert e.value.violations and e.value.violations[0][0] == "phase"


def test_list_and_delete_turns(client: Client) -> None:
    client.checkpoint("a", "started", {}, timestamp=T0, session_id="s1")
    client.checkpoint("b", "started", {}, timestamp=T0, session_id="s2")
    client.checkpoint("b", "settled", {}, timestamp=T0 + dt.timedelta(seconds=1), session_id="s2", terminal=True)
    assert [t.turn_id for t in client.list_turns(status="open").turns] == ["a"]
    term = client.list_turns(status=cp.TURN_STATUS_TERMINAL).turns
    assert [(t.turn_id, t.checkpoint_count, t.last_phase) for t in term] == [("b", 2, "settled")]
    assert [t.turn_id for t in client.list_turns(session_id="s2").turns] == ["b"]
    assert [t.turn_id for t in client.iter_turns(page_size=1)] == ["a", "b"]
    assert client.list_turns(updated_before=T0).turns == []
    assert client.delete_turn("b") == 2
    assert client.delete_turn("b") == 0
    assert [t.turn_id for t in client.iter_turns()] == ["a"]


def test_idempotency_methods(client: Client) -> None:
    b = client.begin("k/1", fingerprint="fp", lease=5, retention=dt.timedelta(hours=1))
    assert b.outcome == ip.BEGIN_OUTCOME_ACQUIRED and b.attempt == 1 and b.lease_token > 0
    assert client.begin("k/1", fingerprint="fp").outcome == ip.BEGIN_OUTCOME_IN_PROGRESS
    with pytest.raises(KeyReused):
        client.begin("k/1", fingerprint="other")
    ext = client.extend("k/1", b.lease_token, lease=60)
    assert ext.lease_expires_at.seconds > time.time() + 30
    assert client.get("k/1").state == ip.RECORD_STATE_IN_PROGRESS
    client.complete("k/1", b.lease_token, "done")
    client.complete("k/1", b.lease_token, b"done")  # idempotent repeat
    with pytest.raises(ResultMismatch):
        client.complete("k/1", b.lease_token, "other")
    got = client.get("k/1")
    assert got.state == ip.RECORD_STATE_COMPLETED and got.result == b"done"
    with pytest.raises(NotAcquired):
        client.extend("k/1", b.lease_token)
    b2 = client.begin("k/2")
    assert client.release("k/2", b2.lease_token, error="retry").state == ip.RECORD_STATE_RELEASED
    b3 = client.begin("k/2")
    assert b3.attempt == 2
    with pytest.raises(LeaseLost):
        client.complete("k/2", b2.lease_token, "late")
    assert client.release("k/2", b3.lease_token, error="nope", permanent=True).state == ip.RECORD_STATE_FAILED
    with pytest.raises(KeyNotFound) as e:
        client.get("never")
    assert e.value.code == grpc.StatusCode.NOT_FOUND


def test_deadline_default_and_per_call() -> None:
    """A peer that accepts TCP but never speaks HTTP/2: the call ends at its deadline."""
    import socket

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        port = srv.getsockname()[1]
        with Client(f"127.0.0.1:{port}", timeout=0.3, retry=NO_RETRY) as c:
            t = time.monotonic()
            with pytest.raises(StepwellError) as e:
                c.get("x")
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert 0.2 < time.monotonic() - t < 2
            t = time.monotonic()
            with pytest.raises(StepwellError) as e:
                c.get("x", timeout=1.0)
            assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            assert 0.9 < time.monotonic() - t < 3


def test_retries_unavailable_with_the_same_request(workdir, namespace) -> None:
    """A sidecar that appears only after the first attempts: the retried Checkpoint lands once."""
    from conftest import free_port

    port = free_port()
    holder = {}

    def start_later() -> None:
        time.sleep(0.6)
        holder["s"] = Sidecar(f"127.0.0.1:{port}", workdir)

    t = threading.Thread(target=start_later)
    t.start()
    try:
        policy = RetryPolicy(max_attempts=60, initial_backoff=0.05, max_backoff=0.2)
        with Client(f"127.0.0.1:{port}", namespace=namespace, retry=policy, timeout=2) as c:
            r = c.checkpoint("retry", "p", {"x": 1}, timestamp=T0)
            assert r.inserted
            assert len(c.restore("retry")) == 1
        with Client(f"127.0.0.1:{free_port()}", retry=NO_RETRY, timeout=1) as dead:
            with pytest.raises(Unavailable):
                dead.get("k")
    finally:
        t.join()
        if "s" in holder:
            holder["s"].stop()


def test_once_runs_exactly_once_under_concurrency(client: Client) -> None:
    calls = []
    lock = threading.Lock()
    start = threading.Barrier(20)

    def effect(ctx: OnceContext) -> dict:
        with lock:
            calls.append(ctx.attempt)
        time.sleep(0.3)
        return {"receipt": "r-1", "items": (1, 2)}

    results = [None] * 20

    def worker(i: int) -> None:
        with Client(client.target, namespace=client.namespace) as c:
            start.wait()
            results[i] = c.once("order-1/charge", effect, lease=5, wait_timeout=20)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [1]
    assert all(r == {"receipt": "r-1", "items": [1, 2]} for r in results), results
    # COMPLETED: recorded result, fn not called
    assert client.once("order-1/charge", lambda: pytest.fail("must not run")) == {"receipt": "r-1", "items": [1, 2]}


def test_once_raise_releases_and_heartbeat_extends(client: Client) -> None:
    def boom() -> None:
        raise RuntimeError("downstream down")

    with pytest.raises(RuntimeError):
        client.once("k/boom", boom)
    assert client.get("k/boom").state == ip.RECORD_STATE_RELEASED
    seen = {}

    def slow(ctx: OnceContext) -> str:
        seen["attempt"], seen["prev"] = ctx.attempt, ctx.previous_lease_expired
        time.sleep(1.5)  # longer than the lease: the heartbeat keeps it
        seen["lost"] = ctx.lease_lost
        return "ok"

    assert client.once("k/boom", slow, lease=0.6, heartbeat=0.15) == "ok"
    assert seen == {"attempt": 2, "prev": False, "lost": False}
    assert client.get("k/boom").state == ip.RECORD_STATE_COMPLETED


def test_once_previous_lease_expired_and_failed(client: Client) -> None:
    client.begin("k/crashed", lease=0.2)  # a holder that dies
    time.sleep(0.4)
    ctxs = []
    assert client.once("k/crashed", lambda ctx: ctxs.append(ctx) or 7) == 7
    assert ctxs[0].previous_lease_expired and ctxs[0].attempt == 2
    b = client.begin("k/failed")
    client.release("k/failed", b.lease_token, error="card declined", permanent=True)
    with pytest.raises(OperationFailed) as e:
        client.once("k/failed", lambda: 1)
    assert "card declined" in str(e.value)


def test_once_decorator(client: Client) -> None:
    calls = []

    @client.once_decorator(lambda order, amount: f"{order}/charge")
    def charge(order: str, amount: int, once_context: OnceContext = None) -> dict:
        calls.append((order, once_context.attempt))
        return {"order": order, "amount": amount}

    assert charge("o-7", 100) == {"order": "o-7", "amount": 100}
    assert charge("o-7", 100) == {"order": "o-7", "amount": 100}
    assert calls == [("o-7", 1)]


def test_unix_socket(workdir) -> None:
    sock = workdir / "stepwell.sock"
    s = Sidecar(f"unix:{sock}", workdir)
    try:
        with Client(f"unix:{sock}", namespace=fresh_namespace()) as c:
            assert c.checkpoint("u", "p", {"unix": True}, timestamp=T0).inserted
            assert json.loads(c.latest("u").state) == {"unix": True}
    finally:
        s.stop()


def test_generated_stubs_reach_a_unix_socket_with_default_options(workdir) -> None:
    """Plain grpcio and the generated stubs, with no channel option: gRPC's
    C core sends a unix: target's path, percent-encoded, as :authority, and
    the sidecar must serve such calls (health, and the API) all the same."""
    sock = workdir / "stubs.sock"
    s = Sidecar(f"unix:{sock}", workdir)
    namespace = fresh_namespace()
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=_HealthCheckRequest.SerializeToString,
                response_deserializer=_HealthCheckResponse.FromString,
            )
            assert check(_HealthCheckRequest(service=""), timeout=10).status == _SERVING
            checkpoints = cp_grpc.CheckpointServiceStub(channel)
            # Several calls on one connection: after the first, the client
            # names its :authority by its index in the header table.
            for i in range(3):
                request = cp.CheckpointRequest(namespace=namespace, turn_id="stubs", phase=f"p{i}", state=b"{}")
                request.timestamp.FromDatetime(T0 + dt.timedelta(seconds=i))
                assert checkpoints.Checkpoint(request, timeout=10).inserted
            restored = checkpoints.Restore(cp.RestoreRequest(namespace=namespace, turn_id="stubs"), timeout=10)
            assert [c.phase for c in restored.checkpoints] == ["p0", "p1", "p2"]
            with pytest.raises(grpc.RpcError) as missing:
                ip_grpc.IdempotencyServiceStub(channel).Get(ip.GetRequest(namespace=namespace, key="k"), timeout=10)
            assert missing.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        s.stop()


def test_async_client_every_method(target: str, namespace: str) -> None:
    async def main() -> None:
        async with AsyncClient(target, namespace=namespace) as c:
            r = await c.checkpoint("t", "a", {"n": 1}, timestamp=T0, session_id="s")
            assert r.inserted
            assert not (await c.checkpoint("t", "a", {"n": 1}, timestamp=T0, session_id="s")).inserted
            with pytest.raises(CheckpointConflict):
                await c.checkpoint("t", "a", {"n": 2}, timestamp=T0, session_id="s")
            for i in range(1, 4):
                await c.checkpoint("t", f"b{i}", {"n": i}, timestamp=T0 + dt.timedelta(seconds=i), workflow_version="2.1.0")
            assert [x.phase for x in await c.restore("t", page_size=2)] == ["a", "b1", "b2", "b3"]
            page = await c.restore_page("t", page_size=1, newest_first=True)
            assert page.checkpoints[0].phase == "b3"
            assert (await c.latest("t")).phase == "b3"
            with pytest.raises(WorkflowVersionMismatch):
                await c.restore("t", expect_workflow_version="3.0.0")
            assert [t.turn_id for t in (await c.list_turns(status="open")).turns] == ["t"]
            assert [t.turn_id async for t in c.iter_turns(session_id="s")] == ["t"]
            assert await c.delete_turn("t") == 4

            b = await c.begin("k", fingerprint=b"f", lease=5)
            assert b.outcome == ip.BEGIN_OUTCOME_ACQUIRED
            await c.extend("k", b.lease_token, lease=10)
            await c.complete("k", b.lease_token, "res")
            assert (await c.get("k")).result == b"res"
            with pytest.raises(NotAcquired):
                await c.release("k", b.lease_token)
            b2 = await c.begin("k2")
            assert (await c.release("k2", b2.lease_token)).state == ip.RECORD_STATE_RELEASED
            with pytest.raises(KeyNotFound):
                await c.get("nope")

            calls = []

            async def effect(ctx: OnceContext) -> int:
                calls.append(ctx.attempt)
                await asyncio.sleep(0.2)
                return 42

            results = await asyncio.gather(*[c.once("once/k", effect, lease=5) for _ in range(10)])
            assert results == [42] * 10 and calls == [1]

            async def boom() -> None:
                raise ValueError("x")

            with pytest.raises(ValueError):
                await c.once("once/boom", boom)
            assert (await c.get("once/boom")).state == ip.RECORD_STATE_RELEASED

            @c.once_decorator(lambda x: f"dec/{x}")
            def double(x: int) -> int:
                calls.append(x)
                return 2 * x

            assert await double(21) == 42 and await double(21) == 42
            assert calls == [1, 21]

    asyncio.run(main())
