"""Checks of a sidecar serving TLS (client certificates required) and auth.

The second pass of clients/python/test runs this file with test_scenarios.py
after generating a CA, certificates, an auth file and tokens into the folder
named by STEPWELL_TEST_SECURITY_DIR (see conftest.Security). Its name keeps
it out of the plaintext pass: pytest collects it only when named.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import grpc
import pytest

from conftest import Security, Sidecar
from stepwell import (
    TLS,
    AsyncClient,
    CheckpointStore,
    Client,
    NO_RETRY,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def security(sidecar: Sidecar) -> Security:
    assert sidecar.security is not None, "run by the second pass of clients/python/test (STEPWELL_TEST_SECURITY_DIR)"
    return sidecar.security


def ns() -> str:
    return f"sec-{uuid.uuid4().hex[:10]}"


def test_token_and_client_certificate_reach_every_layer(sidecar: Sidecar, security: Security) -> None:
    with Client(sidecar.target, namespace=ns(), token=security.token, tls=security.tls()) as sw:
        assert sw.checkpoint("t", "started", {"n": 1}, timestamp=T0).inserted
        assert [c.phase for c in sw.restore("t")] == ["started"]
        assert sw.once("t/charge", lambda: {"charged": 1}) == {"charged": 1}
        assert sw.once("t/charge", lambda: 1 / 0) == {"charged": 1}
        store = CheckpointStore(sw, session_id="s")
        store.save("e1", {"x": 1}, step_index=1, step_name="a")
        assert store.load("e1").state == {"x": 1}

    async def run() -> None:
        async with AsyncClient(sidecar.target, namespace=ns(), token=security.token, tls=security.tls()) as aw:
            await aw.checkpoint("t", "started", {"n": 2}, timestamp=T0)
            assert await aw.once("k", lambda: "ran") == "ran"

    asyncio.run(run())


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_missing_or_wrong_token_is_unauthenticated(sidecar: Sidecar, security: Security, token: str) -> None:
    with Client(sidecar.target, namespace=ns(), token=token, tls=security.tls()) as sw:
        with pytest.raises(Unauthenticated) as info:
            sw.checkpoint("t", "started", {}, timestamp=T0)
    assert info.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert info.value.reason == "UNAUTHENTICATED"

    async def run() -> None:
        async with AsyncClient(sidecar.target, token=token, tls=security.tls()) as aw:
            with pytest.raises(Unauthenticated):
                await aw.get("k")

    asyncio.run(run())


def test_read_only_token_may_read_but_not_write(sidecar: Sidecar, security: Security) -> None:
    with Client(sidecar.target, namespace=ns(), token=security.reader_token, tls=security.tls()) as sw:
        assert sw.restore("t") == []
        with pytest.raises(PermissionDenied) as info:
            sw.checkpoint("t", "started", {}, timestamp=T0)
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert info.value.reason == "PERMISSION_DENIED"


def test_connections_the_sidecar_refuses(sidecar: Sidecar, security: Security) -> None:
    refused = {
        # No client certificate: --tls-client-ca requires one.
        "no client certificate": {"tls": security.tls(client_cert=False)},
        # The system roots do not know the throwaway CA.
        "untrusted server": {"tls": TLS()},
        "plaintext": {},
    }
    for what, kwargs in refused.items():
        with Client(sidecar.target, token=security.token, retry=NO_RETRY, timeout=5.0, **kwargs) as sw:
            with pytest.raises(Unavailable) as info:
                sw.get("k")
        assert info.value.code == grpc.StatusCode.UNAVAILABLE, what
