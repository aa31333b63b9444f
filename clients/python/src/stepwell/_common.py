"""Helpers shared by the sync and asyncio clients."""

from __future__ import annotations

import asyncio
import datetime as _dt
import inspect
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, List, Optional, Tuple, TypeVar, Union

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from .errors import StepwellError

TimestampLike = Union[None, _dt.datetime, timestamp_pb2.Timestamp, int]
DurationLike = Union[None, float, int, _dt.timedelta, duration_pb2.Duration]

DEFAULT_TARGET = "127.0.0.1:50051"


# The RESOURCE_EXHAUSTED reasons worth a retry: OVERLOADED, and none at all
# (a status without ErrorInfo, e.g. from a proxy in between).
RETRYABLE_EXHAUSTED_REASONS = frozenset({"OVERLOADED", ""})


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of an RPC that failed with a retryable status.

    The very same request message is resent on every attempt (same dedup
    tuple, key, token and result), so a retry can never duplicate a write.
    ``UNAVAILABLE`` is retried, and so is ``RESOURCE_EXHAUSTED`` when its
    reason is OVERLOADED (nothing was stored) or when it carries no reason at
    all (e.g. from a proxy). ``RESOURCE_EXHAUSTED`` with MESSAGE_TOO_LARGE
    (the same request can never fit) or STORE_FULL (only an operator freeing
    space helps) is raised at once, as is everything else.
    """

    max_attempts: int = 5
    initial_backoff: float = 0.05
    max_backoff: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.2
    retryable: Tuple[grpc.StatusCode, ...] = field(
        default=(grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED)
    )

    def backoff(self, attempt: int) -> float:
        """Sleep before attempt number ``attempt + 1`` (attempt counts from 1)."""
        base = min(self.max_backoff, self.initial_backoff * (self.multiplier ** (attempt - 1)))
        return base * (1 + random.uniform(-self.jitter, self.jitter))

    def should_retry(self, err: StepwellError, attempt: int) -> bool:
        """Whether a failure of attempt number ``attempt`` is tried again."""
        if attempt >= self.max_attempts or err.code not in self.retryable:
            return False
        if err.code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            return err.reason in RETRYABLE_EXHAUSTED_REASONS
        return True


NO_RETRY = RetryPolicy(max_attempts=1)


def channel_target(target: str) -> Tuple[str, List[Tuple[str, Any]]]:
    """Returns the gRPC target and extra channel options for ``host:port`` or ``unix:/path``."""
    if target.startswith("unix:") or target.startswith("unix-abstract:"):
        return target, [("grpc.default_authority", "localhost")]
    if target.startswith("http://"):
        target = target[len("http://"):]
    return target, []


def to_timestamp(value: TimestampLike) -> timestamp_pb2.Timestamp:
    """None means now; an int is nanoseconds since the epoch; a naive datetime is UTC."""
    ts = timestamp_pb2.Timestamp()
    if value is None:
        ns = time.time_ns()
        ts.seconds, ts.nanos = divmod(ns, 1_000_000_000)
    elif isinstance(value, timestamp_pb2.Timestamp):
        ts.CopyFrom(value)
    elif isinstance(value, int):
        ts.seconds, ts.nanos = divmod(value, 1_000_000_000)
    elif isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        ts.FromDatetime(value.astimezone(_dt.timezone.utc))
    else:
        raise TypeError(f"unsupported timestamp {value!r}")
    return ts


def to_duration(value: DurationLike) -> Optional[duration_pb2.Duration]:
    """Seconds (float), timedelta or Duration; None leaves the field unset (server default)."""
    if value is None:
        return None
    d = duration_pb2.Duration()
    if isinstance(value, duration_pb2.Duration):
        d.CopyFrom(value)
    elif isinstance(value, _dt.timedelta):
        d.FromTimedelta(value)
    else:
        d.FromNanoseconds(int(round(float(value) * 1e9)))
    return d


def to_state_bytes(state: Any) -> bytes:
    """bytes/bytearray are sent as they are (they must be UTF-8 JSON); anything else is JSON-serialized."""
    if isinstance(state, (bytes, bytearray, memoryview)):
        return bytes(state)
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def to_bytes(value: Union[None, str, bytes]) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


def wants_context(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` can be called with one positional argument (the OnceContext)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    for p in sig.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL):
            return True
    return False


@dataclass
class OnceContext:
    """What ``once()`` hands to ``fn`` when fn takes one argument.

    ``previous_lease_expired`` is True when an earlier holder's lease ran out
    without Complete/Release: the effect may already have happened, so check
    the downstream system before acting again. ``lease_lost`` turns True if a
    heartbeat (Extend) found the lease taken over while fn was running.
    """

    key: str
    lease_token: int
    attempt: int
    previous_lease_expired: bool
    lease_lost: bool = False


def encode_result(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode("utf-8")


def decode_result(raw: bytes) -> Any:
    return json.loads(raw.decode("utf-8")) if raw else None


def seconds_until(ts: timestamp_pb2.Timestamp) -> float:
    if ts.seconds == 0 and ts.nanos == 0:
        return 0.0
    return (ts.seconds + ts.nanos / 1e9) - time.time()


_T = TypeVar("_T")


async def finish_mutation(mutation: Awaitable[_T]) -> _T:
    """Awaits ``mutation`` to its end even when the caller is cancelled
    meanwhile (then raising the cancellation after it), as the agent SDKs'
    own sessions do: a cancelled run must not leave a write half known."""
    task = asyncio.ensure_future(mutation)
    cancelled: Optional[BaseException] = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            cancelled = cancelled or exc
    if cancelled is not None:
        if not task.cancelled():
            task.exception()  # the cancellation is the answer; the write's error is seen, not logged
        raise cancelled
    return task.result()
