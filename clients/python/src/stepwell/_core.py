"""The logic of every client operation, written once for the sync and asyncio clients.

Each operation is a plain generator that does no I/O itself. It builds the
request, then yields an *effect* and receives its outcome:

* :class:`Call`: make this RPC, with retries; the driver hands it to the
  client's ``_call``, which runs :func:`retrying` (the retry loop, an
  operation too) and sends back the response, or throws the
  :class:`StepwellError` into the generator;
* :class:`Rpc`: one attempt of this stub method with this request, deadline
  and metadata; the driver sends back the response, or throws the
  ``grpc.RpcError`` in;
* :class:`Sleep`: wait this many seconds (retry backoff, ``once()`` polling,
  the heartbeat's interval);
* :class:`Hold`: run ``once()``'s function while its lease is heartbeaten
  (the heartbeat's own logic is :func:`heartbeat`, another operation); the
  driver sends back the function's value or throws its exception in.

The generator's return value is the operation's result. :class:`stepwell.Client`
drives operations with blocking calls, ``time.sleep`` and a thread for the
heartbeat; :class:`stepwell.AsyncClient` with ``await``, ``asyncio.sleep`` and
a task. Operations compose with ``yield from`` (``latest`` is a ``restore_page``,
every RPC goes through the retry loop of :func:`retrying`).
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import (
    Any,
    Callable,
    Dict,
    Generator,
    Generic,
    List,
    Optional,
    Protocol,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

import grpc

from . import _common as c
from ._common import DurationLike, OnceContext, RetryPolicy, TimestampLike
from .errors import (
    LeaseLost,
    NotAcquired,
    OnceTimeout,
    OperationFailed,
    StepwellError,
    Unavailable,
    WaitCancelled,
    WaitError,
    WaitExpired,
    WaitSettled,
    WaitTimeout,
    from_rpc_error,
)
from .v1 import checkpoint_pb2 as cp
from .v1 import idempotency_pb2 as ip
from .v1 import records_pb2 as rp
from .v1 import waits_pb2 as wp
from .v1 import checkpoint_pb2_grpc as cp_grpc
from .v1 import idempotency_pb2_grpc as ip_grpc
from .v1 import memory_pb2_grpc as mem_grpc
from .v1 import records_pb2_grpc as rec_grpc
from .v1 import waits_pb2_grpc as wp_grpc

T = TypeVar("T")


def attach(
    client: Any,
    channel: Any,
    target: str,
    namespace: str,
    timeout: float,
    retry: Optional[RetryPolicy],
    metadata: Optional[Sequence[Tuple[str, str]]],
) -> None:
    """Gives a client (either one) its channel, its settings and the raw
    one-to-one stubs of the five services."""
    client._channel = channel
    client.target = target
    client.namespace = namespace
    client.timeout = timeout
    client.retry = retry or RetryPolicy()
    client.metadata = list(metadata or [])
    client.checkpoint_stub = cp_grpc.CheckpointServiceStub(channel)
    client.idempotency_stub = ip_grpc.IdempotencyServiceStub(channel)
    client.record_stub = rec_grpc.RecordServiceStub(channel)
    client.wait_stub = wp_grpc.WaitServiceStub(channel)
    client.memory_stub = mem_grpc.MemoryServiceStub(channel)

# once() tells here (WARNING) when a call waits for another holder's lease.
log = logging.getLogger("stepwell")


class Call:
    """Effect: the client's ``_call(method, request, timeout)``, i.e. the RPC
    with the retry loop of :func:`retrying`; the driver sends back the
    response or throws the :class:`StepwellError` in. Every operation's RPCs
    go through ``_call``, so a subclass that overrides it sees them all."""

    __slots__ = ("method", "request", "timeout")

    def __init__(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> None:
        self.method = method
        self.request = request
        self.timeout = timeout


class Rpc:
    """Effect: one attempt, ``method(request, timeout=timeout, metadata=metadata)``."""

    __slots__ = ("method", "request", "timeout", "metadata")

    def __init__(self, method: Callable[..., Any], request: Any, timeout: float, metadata: Any) -> None:
        self.method = method
        self.request = request
        self.timeout = timeout
        self.metadata = metadata


class Sleep:
    """Effect: wait ``seconds``."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


class Hold:
    """Effect: run ``fn`` (see :func:`call_holder`) while :func:`heartbeat`
    operations made by ``beat()`` keep the lease; stop the heartbeat before
    sending back fn's value (or throwing its exception in)."""

    __slots__ = ("fn", "ctx", "beat")

    def __init__(self, fn: Callable[..., Any], ctx: OnceContext, beat: Callable[[], "Op[None]"]) -> None:
        self.fn = fn
        self.ctx = ctx
        self.beat = beat


Effect = Union[Call, Rpc, Sleep, Hold]
# An operation: yields effects, receives their outcomes, returns a T.
Op = Generator[Effect, Any, T]


class Conf(Protocol):
    """What an operation reads from its client (read at each call: the
    attributes are public and may be changed)."""

    namespace: str
    timeout: float
    retry: RetryPolicy
    metadata: List[Tuple[str, str]]
    checkpoint_stub: Any
    idempotency_stub: Any
    wait_stub: Any


# -- the retry loop ----------------------------------------------------------


def retrying(cl: Conf, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Op[Any]:
    """Calls ``method`` with the same ``request`` until it succeeds or fails for good."""
    effect = Rpc(method, request, cl.timeout if timeout is None else timeout, cl.metadata or None)
    attempt = 0
    while True:
        attempt += 1
        try:
            return (yield effect)
        except grpc.RpcError as rpc_err:
            err = from_rpc_error(rpc_err)
            if not cl.retry.should_retry(err, attempt):
                raise err from None
        yield Sleep(cl.retry.backoff(attempt))


# -- CheckpointService -------------------------------------------------------

_STATUS = {
    None: cp.TURN_STATUS_ANY,
    "any": cp.TURN_STATUS_ANY,
    "open": cp.TURN_STATUS_OPEN,
    "terminal": cp.TURN_STATUS_TERMINAL,
}


def turn_status(status: Any) -> cp.TurnStatus.ValueType:
    """The TurnStatus of "open", "terminal", "any" (or None), or of a TurnStatus value."""
    if isinstance(status, int):
        return cp.TurnStatus.ValueType(status)
    return _STATUS[status.lower() if isinstance(status, str) else status]


def checkpoint(
    cl: Conf,
    turn_id: str,
    phase: str,
    state: Any,
    timestamp: TimestampLike,
    session_id: str,
    terminal: bool,
    workflow_version: str,
    timeout: Optional[float],
) -> Op[cp.CheckpointResponse]:
    req = cp.CheckpointRequest(
        namespace=cl.namespace,
        turn_id=turn_id,
        session_id=session_id,
        phase=phase,
        state=c.to_state_bytes(state),
        timestamp=c.to_timestamp(timestamp),
        terminal=terminal,
        workflow_version=workflow_version,
    )
    resp: cp.CheckpointResponse = yield Call(cl.checkpoint_stub.Checkpoint, req, timeout)
    return resp


def restore_page(
    cl: Conf,
    turn_id: str,
    *,
    page_size: int = 0,
    page_token: str = "",
    newest_first: bool = False,
    phase: str = "",
    expect_workflow_version: str = "",
    timeout: Optional[float] = None,
) -> Op[cp.RestoreResponse]:
    req = cp.RestoreRequest(
        namespace=cl.namespace,
        turn_id=turn_id,
        page_size=page_size,
        page_token=page_token,
        newest_first=newest_first,
        phase=phase,
        expect_workflow_version=expect_workflow_version,
    )
    resp: cp.RestoreResponse = yield Call(cl.checkpoint_stub.Restore, req, timeout)
    return resp


class Pages(Generic[T]):
    """Walks a paged RPC: each :meth:`next` is an operation returning the
    items of the next page; :attr:`done` turns True after the last page.
    The clients' lazy iterators run ``next()`` until done."""

    def __init__(self, fetch: Callable[[str], Op[Any]], items: Callable[[Any], Sequence[T]]) -> None:
        self._fetch = fetch
        self._items = items
        self._token = ""
        self.done = False

    def next(self) -> Op[Sequence[T]]:
        page = yield from self._fetch(self._token)
        self._token = page.next_page_token
        self.done = not self._token
        return self._items(page)

    def all(self) -> Op[List[T]]:
        out: List[T] = []
        while not self.done:
            out.extend((yield from self.next()))
        return out


def restore_pages(
    cl: Conf,
    turn_id: str,
    *,
    page_size: int = 0,
    newest_first: bool = False,
    phase: str = "",
    expect_workflow_version: str = "",
    timeout: Optional[float] = None,
) -> Pages[cp.Checkpoint]:
    def fetch(token: str) -> Op[cp.RestoreResponse]:
        return restore_page(
            cl,
            turn_id,
            page_size=page_size,
            page_token=token,
            newest_first=newest_first,
            phase=phase,
            expect_workflow_version=expect_workflow_version,
            timeout=timeout,
        )

    return Pages(fetch, lambda page: page.checkpoints)


def restore(cl: Conf, turn_id: str, **kwargs: Any) -> Op[List[cp.Checkpoint]]:
    return (yield from restore_pages(cl, turn_id, **kwargs).all())


def latest(
    cl: Conf, turn_id: str, *, expect_workflow_version: str = "", timeout: Optional[float] = None
) -> Op[Optional[cp.Checkpoint]]:
    page = yield from restore_page(
        cl,
        turn_id,
        page_size=1,
        newest_first=True,
        expect_workflow_version=expect_workflow_version,
        timeout=timeout,
    )
    return page.checkpoints[0] if page.checkpoints else None


def list_turns(
    cl: Conf,
    *,
    status: Any = None,
    session_id: str = "",
    updated_before: TimestampLike = None,
    page_size: int = 0,
    page_token: str = "",
    timeout: Optional[float] = None,
) -> Op[cp.ListTurnsResponse]:
    req = cp.ListTurnsRequest(
        namespace=cl.namespace,
        status=turn_status(status),
        session_id=session_id,
        page_size=page_size,
        page_token=page_token,
    )
    if updated_before is not None:
        req.updated_before.CopyFrom(c.to_timestamp(updated_before))
    resp: cp.ListTurnsResponse = yield Call(cl.checkpoint_stub.ListTurns, req, timeout)
    return resp


def turn_pages(cl: Conf, kwargs: Dict[str, Any]) -> Pages[cp.TurnSummary]:
    """The pages of ``list_turns(**kwargs)`` (a ``page_token`` in kwargs is ignored)."""
    kwargs.pop("page_token", None)
    return Pages(lambda token: list_turns(cl, page_token=token, **kwargs), lambda page: page.turns)


def delete_turn(cl: Conf, turn_id: str, timeout: Optional[float]) -> Op[int]:
    req = cp.DeleteTurnRequest(namespace=cl.namespace, turn_id=turn_id)
    resp = yield Call(cl.checkpoint_stub.DeleteTurn, req, timeout)
    return int(resp.deleted)


# -- IdempotencyService ------------------------------------------------------


def begin(
    cl: Conf,
    key: str,
    *,
    fingerprint: Any = None,
    lease: DurationLike = None,
    retention: DurationLike = None,
    timeout: Optional[float] = None,
) -> Op[ip.BeginResponse]:
    req = ip.BeginRequest(namespace=cl.namespace, key=key, fingerprint=c.to_bytes(fingerprint))
    d = c.to_duration(lease)
    if d is not None:
        req.lease.CopyFrom(d)
    r = c.to_duration(retention)
    if r is not None:
        req.retention.CopyFrom(r)
    resp: ip.BeginResponse = yield Call(cl.idempotency_stub.Begin, req, timeout)
    return resp


def complete(cl: Conf, key: str, lease_token: int, result: Any, timeout: Optional[float]) -> Op[ip.CompleteResponse]:
    req = ip.CompleteRequest(namespace=cl.namespace, key=key, lease_token=int(lease_token), result=c.to_bytes(result))
    resp: ip.CompleteResponse = yield Call(cl.idempotency_stub.Complete, req, timeout)
    return resp


def release(
    cl: Conf, key: str, lease_token: int, *, error: str = "", permanent: bool = False, timeout: Optional[float] = None
) -> Op[ip.ReleaseResponse]:
    req = ip.ReleaseRequest(
        namespace=cl.namespace, key=key, lease_token=int(lease_token), error=error, permanent=permanent
    )
    resp: ip.ReleaseResponse = yield Call(cl.idempotency_stub.Release, req, timeout)
    return resp


def extend(
    cl: Conf, key: str, lease_token: int, *, lease: DurationLike = None, timeout: Optional[float] = None
) -> Op[ip.ExtendResponse]:
    req = ip.ExtendRequest(namespace=cl.namespace, key=key, lease_token=int(lease_token))
    d = c.to_duration(lease)
    if d is not None:
        req.lease.CopyFrom(d)
    resp: ip.ExtendResponse = yield Call(cl.idempotency_stub.Extend, req, timeout)
    return resp


def get(cl: Conf, key: str, timeout: Optional[float]) -> Op[ip.GetResponse]:
    req = ip.GetRequest(namespace=cl.namespace, key=key)
    resp: ip.GetResponse = yield Call(cl.idempotency_stub.Get, req, timeout)
    return resp


# -- WaitService -------------------------------------------------------------

_WAIT_STATUS = {
    None: wp.WAIT_STATUS_UNSPECIFIED,
    "any": wp.WAIT_STATUS_UNSPECIFIED,
    "pending": wp.WAIT_STATUS_PENDING,
    "resolved": wp.WAIT_STATUS_RESOLVED,
    "cancelled": wp.WAIT_STATUS_CANCELLED,
    "expired": wp.WAIT_STATUS_EXPIRED,
}

# The longest single Await of wait_for_signal and sleep_until: the
# sidecar's default, well inside its --await-timeout-max-ms, so a wait of
# any length is a chain of bounded calls that each see a restarted sidecar.
AWAIT_POLL_MAX = 60.0
# The shortest: a Duration of zero could read as "unset" (the default 60 s).
_AWAIT_POLL_MIN = 0.001


def wait_status(status: Any) -> wp.WaitStatus.ValueType:
    """The WaitStatus of "pending", "resolved", "cancelled", "expired", "any" (or None), or of a WaitStatus value."""
    if isinstance(status, int):
        return wp.WaitStatus.ValueType(status)
    return _WAIT_STATUS[status.lower() if isinstance(status, str) else status]


def _wait_ns(cl: Conf, namespace: Optional[str], handle: str = "") -> str:
    """The namespace of a request: the caller's, else "" for a handle (which
    names its namespace itself), else the client's."""
    if namespace is not None:
        return namespace
    return "" if handle else cl.namespace


def create_wait(
    cl: Conf,
    turn_id: str,
    name: str = "",
    *,
    metadata: Any = None,
    expire_at: TimestampLike = None,
    resolve_at: TimestampLike = None,
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.CreateWaitResponse]:
    req = wp.CreateWaitRequest(
        namespace=_wait_ns(cl, namespace),
        turn_id=turn_id,
        name=name,
        metadata=b"" if metadata is None else c.to_state_bytes(metadata),
    )
    # None leaves a time unset here (to_timestamp would read it as now).
    if expire_at is not None:
        req.expire_at.CopyFrom(c.to_timestamp(expire_at))
    if resolve_at is not None:
        req.resolve_at.CopyFrom(c.to_timestamp(resolve_at))
    resp: wp.CreateWaitResponse = yield Call(cl.wait_stub.CreateWait, req, timeout)
    return resp


def _fill_payload(cl: Conf, err: WaitSettled) -> Op[None]:
    """Reads the winner's payload that did not fit the error's trailers."""
    if not err.payload_omitted or err.wait is None:
        return
    w = err.wait
    req = wp.GetWaitRequest(namespace=w.namespace, turn_id=w.turn_id, name=w.name)
    try:
        resp = yield Call(cl.wait_stub.GetWait, req, None)
    except StepwellError:
        return  # the error as it came is still the truth, less the payload
    err.wait, err.payload_omitted = resp.wait, False


def signal_wait(
    cl: Conf,
    turn_id: str = "",
    name: str = "",
    payload: Any = b"",
    *,
    handle: str = "",
    content_type: str = "",
    fence: Optional[rp.Fence] = None,
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.SignalResponse]:
    req = wp.SignalRequest(
        namespace=_wait_ns(cl, namespace, handle),
        turn_id=turn_id,
        name=name,
        handle=handle,
        payload=c.to_bytes(payload),
        content_type=content_type,
    )
    if fence is not None:
        req.fence.CopyFrom(fence)
    try:
        resp: wp.SignalResponse = yield Call(cl.wait_stub.Signal, req, timeout)
    except WaitSettled as err:
        yield from _fill_payload(cl, err)
        raise
    return resp


def await_wait(
    cl: Conf,
    turn_id: str = "",
    name: str = "",
    *,
    handle: str = "",
    await_timeout: DurationLike = None,
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.AwaitResponse]:
    """Await: the call's deadline (``timeout``) defaults to the sidecar's wait
    (``await_timeout``, default 60 s) plus the client's timeout, so that a
    pending answer comes back rather than DEADLINE_EXCEEDED."""
    req = wp.AwaitRequest(namespace=_wait_ns(cl, namespace, handle), turn_id=turn_id, name=name, handle=handle)
    d = c.to_duration(await_timeout)
    if d is not None:
        req.timeout.CopyFrom(d)
    if timeout is None:
        timeout = (d.ToNanoseconds() / 1e9 if d is not None else AWAIT_POLL_MAX) + cl.timeout
    resp: wp.AwaitResponse = yield Call(cl.wait_stub.Await, req, timeout)
    return resp


def get_wait(
    cl: Conf,
    turn_id: str = "",
    name: str = "",
    *,
    handle: str = "",
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.GetWaitResponse]:
    req = wp.GetWaitRequest(namespace=_wait_ns(cl, namespace, handle), turn_id=turn_id, name=name, handle=handle)
    resp: wp.GetWaitResponse = yield Call(cl.wait_stub.GetWait, req, timeout)
    return resp


def list_waits(
    cl: Conf,
    *,
    turn_id: str = "",
    status: Any = None,
    resolve_before: TimestampLike = None,
    page_size: int = 0,
    page_token: str = "",
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.ListWaitsResponse]:
    req = wp.ListWaitsRequest(
        namespace=_wait_ns(cl, namespace),
        turn_id=turn_id,
        status=wait_status(status),
        page_size=page_size,
        page_token=page_token,
    )
    if resolve_before is not None:
        req.resolve_before.CopyFrom(c.to_timestamp(resolve_before))
    resp: wp.ListWaitsResponse = yield Call(cl.wait_stub.ListWaits, req, timeout)
    return resp


def wait_pages(cl: Conf, kwargs: Dict[str, Any]) -> Pages[wp.Wait]:
    """The pages of ``list_waits(**kwargs)`` (a ``page_token`` in kwargs is ignored)."""
    kwargs.pop("page_token", None)
    return Pages(lambda token: list_waits(cl, page_token=token, **kwargs), lambda page: page.waits)


def cancel_wait(
    cl: Conf,
    turn_id: str = "",
    name: str = "",
    *,
    handle: str = "",
    namespace: Optional[str] = None,
    timeout: Optional[float] = None,
) -> Op[wp.CancelWaitResponse]:
    req = wp.CancelWaitRequest(namespace=_wait_ns(cl, namespace, handle), turn_id=turn_id, name=name, handle=handle)
    try:
        resp: wp.CancelWaitResponse = yield Call(cl.wait_stub.CancelWait, req, timeout)
    except WaitSettled as err:
        yield from _fill_payload(cl, err)
        raise
    return resp


# -- signal, wait_for_signal, sleep_until ------------------------------------


def signal(cl: Conf, turn_id: str, name: str, payload: Any, namespace: Optional[str]) -> Op[bool]:
    resp = yield from signal_wait(cl, turn_id, name, payload, namespace=namespace)
    return bool(resp.settled)


def wait_for_signal(
    cl: Conf, turn_id: str, name: str, timeout: Optional[float], namespace: Optional[str]
) -> Op[bytes]:
    """CreateWait (which finds the wait if it exists, settled or not), then
    Await until it is settled or ``timeout`` seconds have passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    created = yield from create_wait(cl, turn_id, name, namespace=namespace)
    w = yield from _until_settled(cl, created.wait, _wait_ns(cl, namespace), deadline, timeout)
    return bytes(w.payload)


def sleep_until(cl: Conf, turn_id: str, name: str, when: TimestampLike, namespace: Optional[str]) -> Op[None]:
    """CreateWait with the timer at ``when`` (a wait that exists keeps its
    own timer), then Await until it is settled; a pending wait whose timer
    is already due needs no Await: its time has come, and the store resolves
    it within about a second."""
    if when is None:
        raise ValueError("sleep_until needs a time to wake at")
    created = yield from create_wait(cl, turn_id, name, resolve_at=when, namespace=namespace)
    w = created.wait
    if w.status == wp.WAIT_STATUS_PENDING and w.HasField("resolve_at") and c.seconds_until(w.resolve_at) <= 0:
        return
    yield from _until_settled(cl, w, _wait_ns(cl, namespace), None, None)


def _until_settled(
    cl: Conf, w: wp.Wait, namespace: str, deadline: Optional[float], timeout: Optional[float]
) -> Op[wp.Wait]:
    """Awaits ``w`` in bounded long polls, each retried as every call is,
    and again after UNAVAILABLE until ``deadline``; returns it RESOLVED or raises WaitExpired, WaitCancelled, or WaitTimeout
    at ``deadline`` (a time.monotonic(); None waits for ever)."""
    down = 0
    while w.status == wp.WAIT_STATUS_PENDING:
        remaining = AWAIT_POLL_MAX if deadline is None else deadline - time.monotonic()
        if remaining <= 0:
            raise _wait_error(
                WaitTimeout, grpc.StatusCode.DEADLINE_EXCEEDED, w, f"still pending after {timeout}s"
            )
        poll = max(min(remaining, AWAIT_POLL_MAX), _AWAIT_POLL_MIN)
        try:
            resp = yield from await_wait(cl, w.turn_id, w.name, await_timeout=poll, namespace=namespace)
        except Unavailable:
            # The wait is in the store, not in the sidecar: a run waits
            # through a sidecar that is down or restarting for as long as its
            # own timeout allows, not only as long as one call's retries do.
            down += 1
            yield Sleep(min(cl.retry.backoff(down), max(remaining, 0.0)))
            continue
        down = 0
        w = resp.wait
    if w.status == wp.WAIT_STATUS_EXPIRED:
        raise _wait_error(WaitExpired, grpc.StatusCode.FAILED_PRECONDITION, w, "expired")
    if w.status == wp.WAIT_STATUS_CANCELLED:
        raise _wait_error(WaitCancelled, grpc.StatusCode.FAILED_PRECONDITION, w, "was cancelled")
    return w


def _wait_error(cls: type, code: grpc.StatusCode, w: wp.Wait, what: str) -> WaitError:
    """A WaitTimeout, WaitExpired or WaitCancelled: its reason is the wait's
    status (as once()'s errors carry the key's), ``.wait`` the wait."""
    reason = wp.WaitStatus.Name(w.status)[len("WAIT_STATUS_"):]
    err: WaitError = cls(
        code, f"wait {w.name!r} of turn {w.turn_id!r} {what}", reason, metadata={"turn_id": w.turn_id, "name": w.name}
    )
    err.wait = w
    return err


# -- once --------------------------------------------------------------------


def once(
    cl: Conf,
    key: str,
    fn: Callable[..., Any],
    *,
    fingerprint: Any,
    lease: float,
    retention: DurationLike,
    heartbeat: Optional[float],
    wait_timeout: float,
    poll_interval: float,
    complete_timeout: Optional[float] = None,
) -> Op[Any]:
    """The protocol of ``once()``: Begin, then return the recorded result,
    raise the recorded failure, wait for the holder, or hold the lease, run
    fn and Complete (or Release when fn raises)."""
    deadline = time.monotonic() + wait_timeout
    sleep = poll_interval
    waited = False
    while True:
        sent = time.monotonic()
        r = yield from begin(cl, key, fingerprint=fingerprint, lease=lease, retention=retention)
        if r.outcome == ip.BEGIN_OUTCOME_COMPLETED:
            return c.decode_result(r.result)
        if r.outcome == ip.BEGIN_OUTCOME_FAILED:
            raise OperationFailed(grpc.StatusCode.FAILED_PRECONDITION, r.error, "FAILED", metadata={"key": key})
        if r.outcome == ip.BEGIN_OUTCOME_ACQUIRED:
            held = LeaseEnd()
            held.renewed(sent, lease, r.lease_expires_at)
            return (yield from _hold(cl, key, r, fn, lease, heartbeat, held, complete_timeout))
        # IN_PROGRESS: wait for the holder, bounded.
        if not waited:
            waited = True
            _log_wait(key, r, wait_timeout)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise OnceTimeout(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"key {key!r} still in progress after {wait_timeout}s",
                "IN_PROGRESS",
                metadata={"key": key},
            )
        yield Sleep(min(sleep, remaining, max(c.seconds_until(r.lease_expires_at), 0.005)))
        sleep = min(sleep * 2, 1.0)


def _log_wait(key: str, r: ip.BeginResponse, wait_timeout: float) -> None:
    """One WARNING per call that finds the key held: nothing says whether the
    holder is at work or died holding it, and a dead holder keeps the key
    until its lease runs out, so the wait may be the whole lease."""
    log.warning(
        "once(%r): the key is held by another caller (attempt %d), whose lease runs out in %.1fs; "
        "waiting for it to complete or for its lease to run out (a holder that died keeps the key "
        "until then), for at most %.1fs",
        key,
        int(r.attempt),
        max(c.seconds_until(r.lease_expires_at), 0.0),
        wait_timeout,
    )


class LeaseEnd:
    """The holder's own bound on the end of its lease, on ``time.monotonic()``.

    A Begin or Extend sent at ``t`` for ``lease`` seconds holds the lease at
    least until ``t + lease`` (the store starts counting after the request
    left), and no longer than the ``lease_expires_at`` it answered (which
    counts when the sidecar shortened the lease); the sooner of the two is
    kept, so a clock that differs from the store's can only shorten it."""

    __slots__ = ("at",)

    def __init__(self) -> None:
        self.at = 0.0

    def renewed(self, sent: float, lease: float, expires_at: Any) -> None:
        end = sent + lease
        if expires_at.seconds or expires_at.nanos:
            end = min(end, time.monotonic() + c.seconds_until(expires_at))
        self.at = max(self.at, end)


def _hold(
    cl: Conf,
    key: str,
    r: ip.BeginResponse,
    fn: Callable[..., Any],
    lease: float,
    heartbeat: Optional[float],
    held: LeaseEnd,
    complete_timeout: Optional[float],
) -> Op[Any]:
    ctx = OnceContext(key, int(r.lease_token), int(r.attempt), bool(r.previous_lease_expired))
    interval = heartbeat if heartbeat is not None else max(lease / 3.0, 0.01)
    try:
        value = yield Hold(fn, ctx, lambda: _heartbeat(cl, ctx, lease, interval, held))
    except GeneratorExit:
        raise  # the driver abandoned the operation: nothing can be awaited any more
    except BaseException as exc:
        try:
            yield from release(cl, key, ctx.lease_token, error=f"{type(exc).__name__}: {exc}"[:16000])
        except StepwellError:
            pass  # the lease was lost or the sidecar is gone: the original error matters more
        raise
    raw = c.encode_result(value)
    until = held.at if complete_timeout is None else min(held.at, time.monotonic() + complete_timeout)
    yield from _complete_held(cl, key, ctx.lease_token, raw, until)
    return c.decode_result(raw)


def _complete_transient(err: StepwellError) -> bool:
    """Whether a Complete that failed so may be sent again: nothing was
    refused (the sidecar was unreachable, restarting, overloaded or too
    slow), and a repeat of the same token and result is always safe."""
    if err.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        return True
    return err.code == grpc.StatusCode.RESOURCE_EXHAUSTED and err.reason in c.RETRYABLE_EXHAUSTED_REASONS


def _complete_held(cl: Conf, key: str, token: int, raw: bytes, until: float) -> Op[None]:
    """Complete with the holder's fencing token, sent again with backoff
    past the retry policy's attempts until ``until`` (the lease's end, or
    sooner): the holder with the result in hand is the only one who may
    record it, and giving up early would leave the key to a later caller,
    who would run the effect again once the lease ran out."""
    attempt = 0
    while True:
        attempt += 1
        remaining = until - time.monotonic()
        timeout = None if attempt == 1 else min(cl.timeout, max(remaining, _COMPLETE_LAST_TRY))
        try:
            yield from complete(cl, key, token, raw, timeout)
            return
        except StepwellError as err:
            remaining = until - time.monotonic()
            if not _complete_transient(err) or remaining <= _COMPLETE_LAST_TRY:
                raise
        yield Sleep(min(cl.retry.backoff(attempt), remaining - _COMPLETE_LAST_TRY))


# The least time worth one more Complete: a shorter deadline would fail it
# before it reaches the sidecar.
_COMPLETE_LAST_TRY = 0.05


def _heartbeat(cl: Conf, ctx: OnceContext, lease: float, interval: float, held: LeaseEnd) -> Op[None]:
    """Extends the lease every ``interval`` seconds until the driver stops it
    (at a Sleep) or the lease turns out taken over (``ctx.lease_lost``);
    each Extend that succeeds moves ``held`` on."""
    while True:
        yield Sleep(interval)
        sent = time.monotonic()
        try:
            resp = yield from extend(cl, ctx.key, ctx.lease_token, lease=lease)
        except (LeaseLost, NotAcquired):
            ctx.lease_lost = True
            return
        except StepwellError:
            continue  # transient: try again at the next beat
        held.renewed(sent, lease, resp.lease_expires_at)


def call_holder(fn: Callable[..., Any], ctx: OnceContext) -> Any:
    """``fn(ctx)`` if fn takes an argument, else ``fn()`` (the asyncio client
    awaits the value when it is awaitable)."""
    return fn(ctx) if c.wants_context(fn) else fn()


def takes_once_context(f: Callable[..., Any]) -> bool:
    try:
        return "once_context" in inspect.signature(f).parameters
    except (TypeError, ValueError):
        return False


def bind_once(
    key_fn: Callable[..., str], f: Callable[..., Any]
) -> Callable[[Tuple[Any, ...], Dict[str, Any]], Tuple[str, Callable[[OnceContext], Any]]]:
    """For ``once_decorator``: maps a call's arguments to its key and the
    function ``once()`` runs (which passes ``once_context`` when f declares it)."""
    takes_ctx = takes_once_context(f)

    def bind(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Tuple[str, Callable[[OnceContext], Any]]:
        key = key_fn(*args, **kwargs)

        def run(ctx: OnceContext) -> Any:
            if takes_ctx:
                return f(*args, once_context=ctx, **kwargs)
            return f(*args, **kwargs)

        return key, run

    return bind
