"""RESOURCE_EXHAUSTED and its three reasons: which typed error each becomes and
which of them the client retries.

OVERLOADED (and a RESOURCE_EXHAUSTED without ErrorInfo) is retried with
backoff; MESSAGE_TOO_LARGE and STORE_FULL are raised after one attempt. The
oversized message is sent to the real sidecar; the others are statuses built
here and raised in place of the RPC, so the client's own retry loop decides.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any, Callable, Dict, List, Optional

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from stepwell import (
    AsyncClient,
    Client,
    MessageTooLarge,
    Overloaded,
    RetryPolicy,
    StepwellError,
    StoreFull,
    Unavailable,
)
from stepwell.errors import from_rpc_error

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
# The sidecar's default --message-bytes-max.
MESSAGE_BYTES_MAX = 4_194_304
# A JSON string state of 4.5 MB: the message is over the limit.
OVERSIZED_STATE = "x" * 4_500_000


class ConstructedRpcError(grpc.RpcError):
    """A failed RPC as grpc raises it, with an optional stepwell ErrorInfo."""

    def __init__(self, code: grpc.StatusCode, reason: Optional[str], metadata: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        self._code = code
        status = status_pb2.Status(code=code.value[0], message="constructed")
        if reason is not None:
            info = error_details_pb2.ErrorInfo(reason=reason, domain="stepwell.dev", metadata=metadata or {})
            packed = any_pb2.Any()
            packed.Pack(info)
            status.details.append(packed)
        self._trailing = (("grpc-status-details-bin", status.SerializeToString()),)

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return "constructed"

    def trailing_metadata(self) -> Any:
        return self._trailing


def exhausted(reason: Optional[str], metadata: Optional[Dict[str, str]] = None) -> ConstructedRpcError:
    return ConstructedRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, reason, metadata)


class Counting:
    """Wraps a stub method (or stands in for one) and counts the attempts."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self.attempts = 0

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        self.attempts += 1
        return self.call(request, **kwargs)


def always_failing(err: grpc.RpcError) -> Callable[..., Any]:
    def fail(request: Any, **kwargs: Any) -> Any:
        raise err

    return fail


# A policy that would retry four times, with backoffs too short to matter.
FAST = RetryPolicy(max_attempts=5, initial_backoff=0.001, max_backoff=0.002)


def test_each_reason_maps_to_its_typed_error() -> None:
    too_large = from_rpc_error(exhausted("MESSAGE_TOO_LARGE", {"limit_bytes": "4194304"}))
    assert type(too_large) is MessageTooLarge
    assert too_large.code == grpc.StatusCode.RESOURCE_EXHAUSTED and too_large.reason == "MESSAGE_TOO_LARGE"
    assert too_large.limit_bytes == 4_194_304
    assert from_rpc_error(exhausted("MESSAGE_TOO_LARGE")).limit_bytes is None

    store_full = from_rpc_error(exhausted("STORE_FULL"))
    assert type(store_full) is StoreFull and store_full.reason == "STORE_FULL"
    assert type(from_rpc_error(exhausted("OVERLOADED"))) is Overloaded
    # Neither new reason is an Overloaded: code that retries Overloaded must not see them.
    assert not isinstance(too_large, Overloaded) and not isinstance(store_full, Overloaded)

    # An unknown or missing reason keeps the generic error, as before.
    for reason in ("SOMETHING_NEW", None):
        err = from_rpc_error(exhausted(reason))
        assert type(err) is StepwellError and err.code == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    "reason, retried",
    [
        ("OVERLOADED", True),
        (None, True),  # no ErrorInfo at all, e.g. from a proxy
        ("MESSAGE_TOO_LARGE", False),
        ("STORE_FULL", False),
        ("SOMETHING_NEW", False),
    ],
)
def test_retry_decision_by_reason(reason: Optional[str], retried: bool) -> None:
    err = from_rpc_error(exhausted(reason))
    assert FAST.should_retry(err, 1) is retried
    assert FAST.should_retry(err, FAST.max_attempts) is False


@pytest.mark.parametrize("reason", ["STORE_UNAVAILABLE", "NOT_READY", None])
def test_unavailable_is_still_retried(reason: Optional[str]) -> None:
    err = from_rpc_error(ConstructedRpcError(grpc.StatusCode.UNAVAILABLE, reason))
    assert isinstance(err, Unavailable)
    assert FAST.should_retry(err, 1) is True
    assert FAST.should_retry(err, FAST.max_attempts) is False


@pytest.mark.parametrize(
    "reason, error_type, attempts",
    [
        ("OVERLOADED", Overloaded, 5),
        (None, StepwellError, 5),
        ("MESSAGE_TOO_LARGE", MessageTooLarge, 1),
        ("STORE_FULL", StoreFull, 1),
    ],
)
def test_client_attempts_by_reason(target: str, namespace: str, reason: Optional[str], error_type: type, attempts: int) -> None:
    with Client(target, namespace=namespace, retry=FAST) as c:
        fake = Counting(always_failing(exhausted(reason)))
        c.checkpoint_stub.Checkpoint = fake
        with pytest.raises(error_type) as e:
            c.checkpoint("t", "started", {}, timestamp=T0)
        assert type(e.value) is error_type
        assert fake.attempts == attempts

    async def run() -> int:
        async with AsyncClient(target, namespace=namespace, retry=FAST) as ac:

            async def fail(request: Any, **kwargs: Any) -> Any:
                raise exhausted(reason)

            fake = Counting(fail)
            ac.checkpoint_stub.Checkpoint = fake
            with pytest.raises(error_type):
                await ac.checkpoint("t", "started", {}, timestamp=T0)
            return fake.attempts

    assert asyncio.run(run()) == attempts


def test_oversized_checkpoint_is_message_too_large_not_retried_and_not_stored(target: str, namespace: str) -> None:
    with Client(target, namespace=namespace, retry=FAST) as c:
        counting = Counting(c.checkpoint_stub.Checkpoint)
        c.checkpoint_stub.Checkpoint = counting
        with pytest.raises(MessageTooLarge) as e:
            c.checkpoint("big", "started", OVERSIZED_STATE, timestamp=T0)
        assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.value.reason == "MESSAGE_TOO_LARGE"
        assert e.value.limit_bytes == MESSAGE_BYTES_MAX
        assert counting.attempts == 1
        assert c.restore("big") == []
        # The client stays usable: a small checkpoint of the same turn is stored.
        assert c.checkpoint("big", "started", {"small": True}, timestamp=T0).inserted
        assert counting.attempts == 2
        assert [ck.phase for ck in c.restore("big")] == ["started"]


def test_oversized_checkpoint_async(target: str, namespace: str) -> None:
    async def run() -> List[Any]:
        async with AsyncClient(target, namespace=namespace, retry=FAST) as c:
            real = c.checkpoint_stub.Checkpoint
            attempts = []

            async def counting(request: Any, **kwargs: Any) -> Any:
                attempts.append(1)
                return await real(request, **kwargs)

            c.checkpoint_stub.Checkpoint = counting
            with pytest.raises(MessageTooLarge) as e:
                await c.checkpoint("big-async", "started", OVERSIZED_STATE, timestamp=T0)
            assert e.value.limit_bytes == MESSAGE_BYTES_MAX
            assert len(attempts) == 1
            return await c.restore("big-async")

    assert asyncio.run(run()) == []
