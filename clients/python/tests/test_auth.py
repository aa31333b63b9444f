"""The bearer token and the auth errors, against an in-process gRPC server.

The server here records the metadata of every call and answers the way the
sidecar does with auth on: UNAUTHENTICATED for a missing or unknown token,
PERMISSION_DENIED for a token without the role. That shows the header is on
every call (the methods, once(), CheckpointStore, the raw stubs, sync and
asyncio), that the two errors are typed and sent once, and that the token
shows up in no repr, error or log.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
from concurrent import futures
from typing import Any, Callable, Dict, Iterator, List, Tuple

import grpc
import pytest
from google.protobuf import any_pb2, message_factory
from google.rpc import error_details_pb2, status_pb2

from stepwell import (
    TLS,
    AsyncClient,
    CheckpointStore,
    Client,
    PermissionDenied,
    RetryPolicy,
    StepwellError,
    Unauthenticated,
)
from stepwell._security import BearerTokenInterceptor, check_token
from stepwell.errors import from_rpc_error
from stepwell.v1 import checkpoint_pb2 as cp
from stepwell.v1 import idempotency_pb2 as ip

TOKEN = "tok-3f9a1c7e5b2d4068a1f0c9e8d7b6a5f4"
READER = "reader-5e1d2c3b4a59687766554433221100ff"


class FakeSidecar:
    """Answers every RPC with an empty response (Begin: ACQUIRED) for TOKEN,
    PERMISSION_DENIED for READER and UNAUTHENTICATED for anything else."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, List[str]]] = []
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        for pb, name in ((cp, "CheckpointService"), (ip, "IdempotencyService")):
            service = pb.DESCRIPTOR.services_by_name[name]
            handlers = {
                m.name: grpc.unary_unary_rpc_method_handler(
                    self._handler(m.name, message_factory.GetMessageClass(m.output_type)),
                    request_deserializer=message_factory.GetMessageClass(m.input_type).FromString,
                    response_serializer=lambda msg: msg.SerializeToString(),
                )
                for m in service.methods
            }
            self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service.full_name, handlers),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.target = f"127.0.0.1:{self.port}"

    def _handler(self, method: str, response: Any) -> Callable[[Any, grpc.ServicerContext], Any]:
        def handle(request: Any, context: grpc.ServicerContext) -> Any:
            auth = [v for k, v in context.invocation_metadata() if k == "authorization"]
            with self._lock:
                self.calls.append((method, auth))
            if auth == [f"Bearer {READER}"]:
                self._refuse(context, grpc.StatusCode.PERMISSION_DENIED, "PERMISSION_DENIED", "no write grant")
            elif auth != [f"Bearer {TOKEN}"]:
                self._refuse(context, grpc.StatusCode.UNAUTHENTICATED, "UNAUTHENTICATED", "unknown or missing token")
            if method == "Begin":
                return ip.BeginResponse(outcome=ip.BEGIN_OUTCOME_ACQUIRED, lease_token=7, attempt=1)
            return response()

        return handle

    @staticmethod
    def _refuse(context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, message: str) -> None:
        status = status_pb2.Status(code=code.value[0], message=message)
        packed = any_pb2.Any()
        packed.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="stepwell.dev"))
        status.details.append(packed)
        context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
        context.abort(code, message)

    def methods(self) -> List[str]:
        return [m for m, _ in self.calls]


@pytest.fixture
def fake() -> Iterator[FakeSidecar]:
    f = FakeSidecar()
    yield f
    f.server.stop(None)


def test_every_sync_call_carries_the_token(fake: FakeSidecar) -> None:
    with Client(fake.target, namespace="n", token=TOKEN, metadata=[("x-trace", "t1")]) as sw:
        sw.checkpoint("t", "started", {"a": 1})
        sw.restore("t")
        sw.latest("t")
        sw.list_turns()
        sw.delete_turn("t")
        sw.begin("k")
        sw.complete("k", 7, b"1")
        sw.release("k", 7)
        sw.extend("k", 7)
        sw.get("k")
        assert sw.once("k2", lambda: {"done": True}) == {"done": True}
        store = CheckpointStore(sw, session_id="s")
        store.save("e1", {"x": 1}, step_index=1, step_name="a")
        store.load("e1")
        sw.checkpoint_stub.Restore(cp.RestoreRequest(turn_id="t"), timeout=5)
        sw.idempotency_stub.Get(ip.GetRequest(key="k"), timeout=5)
    expected = {"Checkpoint", "Restore", "ListTurns", "DeleteTurn", "Begin", "Complete", "Release", "Extend", "Get"}
    assert set(fake.methods()) == expected
    assert all(auth == [f"Bearer {TOKEN}"] for _, auth in fake.calls), fake.calls


def test_every_async_call_carries_the_token(fake: FakeSidecar) -> None:
    async def run() -> None:
        async with AsyncClient(fake.target, namespace="n", token=TOKEN) as sw:
            await sw.checkpoint("t", "started", {"a": 1})
            await sw.restore("t")
            await sw.get("k")
            assert await sw.once("k2", lambda: 5) == 5
            await sw.checkpoint_stub.ListTurns(cp.ListTurnsRequest(), timeout=5)

    asyncio.run(run())
    assert {"Checkpoint", "Restore", "Get", "Begin", "Complete", "ListTurns"} <= set(fake.methods())
    assert all(auth == [f"Bearer {TOKEN}"] for _, auth in fake.calls), fake.calls


def test_no_token_sends_no_authorization(fake: FakeSidecar) -> None:
    with Client(fake.target) as sw:
        with pytest.raises(Unauthenticated):
            sw.get("k")
    assert fake.calls == [("Get", [])]


def _counting_policy() -> Tuple[RetryPolicy, List[int]]:
    """A generous retry policy that records every attempt it is asked about."""
    asked: List[int] = []

    class Counting(RetryPolicy):
        def should_retry(self, err: StepwellError, attempt: int) -> bool:
            asked.append(attempt)
            return super().should_retry(err, attempt)

    return Counting(max_attempts=5, initial_backoff=0.001), asked


def test_unknown_token_is_unauthenticated_and_not_retried(fake: FakeSidecar) -> None:
    policy, asked = _counting_policy()
    with Client(fake.target, token="not-the-token", retry=policy) as sw:
        with pytest.raises(Unauthenticated) as info:
            sw.checkpoint("t", "started", {})
    err = info.value
    assert err.code == grpc.StatusCode.UNAUTHENTICATED and err.reason == "UNAUTHENTICATED"
    assert asked == [1] and fake.methods() == ["Checkpoint"]


def test_missing_grant_is_permission_denied_and_not_retried(fake: FakeSidecar) -> None:
    policy, asked = _counting_policy()
    with Client(fake.target, token=READER, retry=policy) as sw:
        with pytest.raises(PermissionDenied) as info:
            sw.begin("k")
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED and info.value.reason == "PERMISSION_DENIED"
    assert asked == [1] and fake.methods() == ["Begin"]

    async def run() -> None:
        async with AsyncClient(fake.target, token=READER, retry=policy) as sw:
            with pytest.raises(PermissionDenied):
                await sw.get("k")

    asyncio.run(run())
    assert asked == [1, 1]


def test_codes_without_error_info_are_typed_too() -> None:
    class Bare(grpc.RpcError):
        def __init__(self, code: grpc.StatusCode) -> None:
            self._code = code

        def code(self) -> grpc.StatusCode:
            return self._code

        def details(self) -> str:
            return "refused by a proxy"

        def trailing_metadata(self) -> Any:
            return ()

    assert isinstance(from_rpc_error(Bare(grpc.StatusCode.UNAUTHENTICATED)), Unauthenticated)
    assert isinstance(from_rpc_error(Bare(grpc.StatusCode.PERMISSION_DENIED)), PermissionDenied)
    assert type(from_rpc_error(Bare(grpc.StatusCode.INTERNAL))) is StepwellError


def test_the_token_is_never_shown(fake: FakeSidecar, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    caplog.set_level(logging.DEBUG)
    shown: List[str] = []
    with Client(fake.target, token=TOKEN) as sw:
        sw.get("k")
        shown += [repr(sw), str(vars(sw)), repr(sw._channel)]
        with Client(fake.target, token=TOKEN[::-1] + "x") as wrong:
            with pytest.raises(Unauthenticated) as info:
                wrong.get("k")
            err = info.value
            shown += [str(err), repr(err), str(err.metadata), err.message, str(vars(err)), str(vars(wrong))]

    async def run() -> None:
        async with AsyncClient(fake.target, token=TOKEN) as aw:
            await aw.get("k")
            shown.extend([repr(aw), str(vars(aw))])

    asyncio.run(run())
    # What the client holds the token in, printed every way it can be.
    held = check_token(TOKEN)
    shown += [repr(held), str(held), f"{held}", f"{held!r}", repr(BearerTokenInterceptor(held)), repr([held])]
    with pytest.raises(TypeError):
        pickle.dumps(held)
    out, errout = capfd.readouterr()
    shown += [caplog.text, out, errout]
    # The check has teeth: the calls did carry the token.
    assert (("Get", [f"Bearer {TOKEN}"])) in fake.calls
    for text in shown:
        assert TOKEN not in text and TOKEN[::-1] not in text, text


def test_bad_options_are_refused_without_echoing_the_token() -> None:
    for bad in ("two words", "line\nbreak", "tab\tbed", ""):
        with pytest.raises(ValueError) as info:
            Client("127.0.0.1:1", token=bad)
        assert not bad or bad not in str(info.value)
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", token=TOKEN, metadata=[("Authorization", "Bearer other")])
    with pytest.raises(ValueError):
        TLS(ca=b"x", cert=b"cert-without-key")
    with pytest.raises(ValueError):
        Client("127.0.0.1:1", tls=TLS(), credentials=grpc.ssl_channel_credentials())
    with pytest.raises(ValueError) as missing:
        Client("127.0.0.1:1", tls=TLS(ca="/nonexistent/ca.pem"))
    assert "/nonexistent/ca.pem" in str(missing.value)


REMOTE_TARGETS = ("stepwell.internal:50051", "10.0.0.7:50051", "[2001:db8::1]:50051", "dns:///stepwell.internal:50051", "ipv4:127.0.0.1:1,10.0.0.7:1")
LOCAL_TARGETS = ("127.0.0.1:1", "127.8.9.10:1", "localhost:1", "[::1]:1", "unix:/tmp/stepwell.sock", "dns:///localhost:1", "ipv4:127.0.0.1:1")


def test_a_token_is_never_sent_in_the_clear_beyond_loopback() -> None:
    for target in REMOTE_TARGETS:
        with pytest.raises(ValueError, match="never sent in the clear") as info:
            Client(target, token=TOKEN)
        assert TOKEN not in str(info.value)

        async def make_async(target: str = target) -> None:
            AsyncClient(target, token=TOKEN)

        with pytest.raises(ValueError, match="never sent in the clear"):
            asyncio.run(make_async())
        # Without a token, or with TLS, the same target is fine.
        Client(target).close()
        Client(target, token=TOKEN, tls=True).close()
        Client(target, token=TOKEN, credentials=grpc.ssl_channel_credentials()).close()
    for target in LOCAL_TARGETS:
        Client(target, token=TOKEN).close()


def test_tls_repr_leaves_out_the_private_key() -> None:
    key = b"-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
    tls = TLS(ca=b"ca-pem", cert=b"cert-pem", key=key)
    assert b"c2VjcmV0" not in repr(tls).encode() and "cert-pem" in repr(tls)
