"""Calls whose connection to the sidecar is lost, through a DropProxy in
front of the session's sidecar (plaintext, or TLS in the second pass): the
client raises Unavailable and retries, but keeps the caller's own
cancellation and the sidecar's own CANCELLED as they are."""

from __future__ import annotations

import asyncio
import base64
from typing import Any, Dict, Iterator

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from conftest import Sidecar, fresh_namespace
from drop_proxy import ANSWER, CUT_FIN, CUT_RST, HOLD, RESET_STREAM, DropProxy, trailers_only
from stepwell import NO_RETRY, AsyncClient, Client, RetryPolicy, StepwellError, Unavailable

RETRY = RetryPolicy(max_attempts=5, initial_backoff=0.001)
LOST = [CUT_FIN, CUT_RST, RESET_STREAM]


@pytest.fixture
def proxy(sidecar: Sidecar) -> Iterator[DropProxy]:
    p = DropProxy(sidecar.target, sidecar.security)
    yield p
    p.close()


def stored(sidecar: Sidecar, namespace: str, turn: str) -> int:
    """How many checkpoints ``turn`` has, asked of the sidecar directly."""
    with Client(sidecar.target, namespace=namespace, **sidecar.connect) as c:
        return len(c.restore(turn))


def warm(c: Client) -> None:
    """A call through the proxy, so that the next call uses an established
    connection. A client without retries may first learn here that the proxy
    cut its last connection, so Unavailable is asked again (bounded)."""
    for _ in range(9):
        try:
            c.restore("warm")
            return
        except Unavailable:
            pass
    c.restore("warm")


@pytest.mark.parametrize("mode", LOST)
def test_a_call_whose_connection_is_lost_is_unavailable_and_retried(
    sidecar: Sidecar, proxy: DropProxy, connect: Dict[str, Any], mode: str
) -> None:
    namespace = fresh_namespace("lost")
    with Client(proxy.target, namespace=namespace, retry=NO_RETRY, **connect) as once:
        warm(once)
        proxy.arm(mode)
        with pytest.raises(Unavailable) as raised:
            once.checkpoint("once", "p", {"n": 1}, timestamp=1_000_000_000)
        proxy.wait_applied()
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE and raised.value.reason == ""
    assert stored(sidecar, namespace, "once") == 0

    with Client(proxy.target, namespace=namespace, retry=RETRY, **connect) as retrying:
        warm(retrying)
        proxy.arm(mode)
        before = proxy.requests
        assert retrying.checkpoint("retried", "p", {"n": 1}, timestamp=1_000_000_000).inserted
        assert proxy.requests - before == 2  # the lost attempt and its retry
    assert stored(sidecar, namespace, "retried") == 1


@pytest.mark.parametrize("mode", LOST)
def test_the_async_client_too(sidecar: Sidecar, proxy: DropProxy, connect: Dict[str, Any], mode: str) -> None:
    namespace = fresh_namespace("lost-aio")

    async def main() -> None:
        async with AsyncClient(proxy.target, namespace=namespace, retry=NO_RETRY, **connect) as once:
            await once.restore("warm")
            proxy.arm(mode)
            with pytest.raises(Unavailable):
                await once.checkpoint("once", "p", {"n": 1}, timestamp=1_000_000_000)
        async with AsyncClient(proxy.target, namespace=namespace, retry=RETRY, **connect) as retrying:
            await retrying.restore("warm")
            proxy.arm(mode)
            assert (await retrying.checkpoint("retried", "p", {"n": 1}, timestamp=1_000_000_000)).inserted

    asyncio.run(main())
    assert stored(sidecar, namespace, "once") == 0
    assert stored(sidecar, namespace, "retried") == 1


@pytest.mark.parametrize("reset", [False, True])
def test_a_sidecar_gone_between_calls_is_unavailable_and_retried(
    sidecar: Sidecar, connect: Dict[str, Any], reset: bool
) -> None:
    """The next call, made at once on the connection the client still
    holds, goes through on a new one or raises Unavailable, never another
    error; with retries it always goes through. Where the client learns of
    the loss is a race, so it is run many times."""
    namespace = fresh_namespace("gone")
    with DropProxy(sidecar.target, sidecar.security) as p_once, DropProxy(sidecar.target, sidecar.security) as p_retrying:
        with Client(p_once.target, namespace=namespace, retry=NO_RETRY, **connect) as once, Client(
            p_retrying.target, namespace=namespace, retry=RETRY, **connect
        ) as retrying:
            for i in range(1, 31):
                warm(once)
                p_once.cut_all(reset)
                try:
                    once.checkpoint("once", "p", {"n": i}, timestamp=i * 1_000_000_000)
                except Unavailable:
                    pass
                warm(retrying)
                p_retrying.cut_all(reset)
                retrying.checkpoint("retried", "p", {"n": i}, timestamp=i * 1_000_000_000)
    assert stored(sidecar, namespace, "retried") == 30


def test_the_callers_cancellation_stays_a_cancellation(proxy: DropProxy, connect: Dict[str, Any]) -> None:
    async def main() -> None:
        async with AsyncClient(proxy.target, namespace=fresh_namespace("cancel"), retry=RETRY, **connect) as c:
            await c.restore("warm")
            proxy.arm(HOLD)
            before = proxy.requests
            call = asyncio.ensure_future(c.checkpoint("t", "p", {"n": 1}, timestamp=1_000_000_000))
            await asyncio.get_running_loop().run_in_executor(None, proxy.wait_applied)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert proxy.requests - before == 1

    asyncio.run(main())


def test_a_cancelled_the_sidecar_sent_stays_cancelled(proxy: DropProxy, connect: Dict[str, Any]) -> None:
    """BODY_BROKEN_OFF (the request body broke off) is the sidecar's answer,
    not a lost connection: it keeps its code and reason and is not retried."""
    info = error_details_pb2.ErrorInfo(reason="BODY_BROKEN_OFF", domain="stepwell.dev")
    status = status_pb2.Status(code=grpc.StatusCode.CANCELLED.value[0], message="the request body broke off")
    status.details.add().Pack(info)
    answer = trailers_only(
        (":status", "200"),
        ("content-type", "application/grpc"),
        ("grpc-status", "1"),
        ("grpc-message", "the request body broke off"),
        ("grpc-status-details-bin", base64.b64encode(status.SerializeToString()).decode().rstrip("=")),
    )
    with Client(proxy.target, namespace=fresh_namespace("broken"), retry=RETRY, **connect) as c:
        warm(c)
        proxy.arm(ANSWER, answer)
        before = proxy.requests
        with pytest.raises(StepwellError) as raised:
            c.checkpoint("t", "p", {"n": 1}, timestamp=1_000_000_000)
        assert raised.value.code == grpc.StatusCode.CANCELLED and raised.value.reason == "BODY_BROKEN_OFF"
        assert proxy.requests - before == 1
