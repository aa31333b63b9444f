"""signal, wait_for_signal and sleep_until, and the WaitService methods
under them, sync and asyncio, against the real sidecar: a signal before its
wait and after it, the first settlement winning, expiry, cancellation, a
timeout that leaves the wait pending, durable sleeps, handles, and a wait
that outlives a restart of its sidecar."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import grpc
import pytest

from conftest import Sidecar, free_port, fresh_namespace, security_from_env
from stepwell import (
    AsyncClient,
    Client,
    RetryPolicy,
    WaitCancelled,
    WaitExpired,
    WaitNotFound,
    WaitSettled,
    WaitTimeout,
)
from stepwell.v1 import waits_pb2 as wp

# Bounds of the polls below: generous, for a busy machine; no test sleeps
# to synchronise, each polls a condition until it holds or the bound passes.
LIMIT = 60.0


def poll_until(cond: Callable[[], Any], what: str, limit: float = LIMIT) -> Any:
    """cond()'s first truthy value, asked every 20 ms for at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what}: not within {limit}s"
        time.sleep(0.02)


def status_of(client: Client, turn: str, name: str) -> Optional[wp.Wait]:
    """The wait, or None while it does not exist."""
    try:
        return client.get_wait(turn, name).wait
    except WaitNotFound:
        return None


def pending(client: Client, turn: str, name: str) -> bool:
    w = status_of(client, turn, name)
    return w is not None and w.status == wp.WAIT_STATUS_PENDING


class Background:
    """Runs ``fn`` in a thread and keeps its value or its exception."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as e:  # kept for the test to look at
            self.error = e

    def join(self) -> Any:
        self._thread.join(LIMIT)
        assert not self._thread.is_alive(), "the background call did not return"
        if self.error is not None:
            raise self.error
        return self.value


class Recording(Client):
    """A client that notes the RPC of every call it makes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: List[str] = []

    def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        self.calls.append(type(request).__name__)
        return super()._call(method, request, timeout)


def test_a_signal_before_its_wait_is_kept(client: Client) -> None:
    assert client.signal("t", "approve", b"yes") is True
    assert client.wait_for_signal("t", "approve") == b"yes"
    w = client.get_wait("t", "approve").wait
    assert w.status == wp.WAIT_STATUS_RESOLVED and w.payload == b"yes"


def test_a_signal_wakes_a_waiting_run(client: Client) -> None:
    waiter = Background(lambda: client.wait_for_signal("t", "approve"))
    poll_until(lambda: pending(client, "t", "approve"), "the waiter's wait pending")
    assert client.signal("t", "approve", "yes") is True
    assert waiter.join() == b"yes"


def test_a_repeat_is_false_and_another_payload_sees_the_winner(client: Client) -> None:
    assert client.signal("t", "approve", b"yes") is True
    assert client.signal("t", "approve", b"yes") is False
    with pytest.raises(WaitSettled) as e:
        client.signal("t", "approve", b"no")
    assert e.value.code == grpc.StatusCode.ALREADY_EXISTS and e.value.reason == "WAIT_SETTLED"
    assert e.value.wait is not None
    assert e.value.wait.status == wp.WAIT_STATUS_RESOLVED and e.value.wait.payload == b"yes"
    assert not e.value.payload_omitted


def test_a_winner_too_large_for_the_trailers_is_read_back(client: Client) -> None:
    # More than the 4 KiB the sidecar puts in an error's trailers: it leaves
    # the payload out and the client reads it with GetWait.
    big = bytes(range(256)) * 64
    assert client.signal("t", "approve", big) is True
    with pytest.raises(WaitSettled) as e:
        client.signal("t", "approve", b"no")
    assert e.value.wait is not None and e.value.wait.payload == big
    assert not e.value.payload_omitted


def test_an_expired_wait_raises_wait_expired(client: Client) -> None:
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    client.create_wait("t", "approve", expire_at=past)
    with pytest.raises(WaitExpired) as e:
        client.wait_for_signal("t", "approve", timeout=LIMIT)
    assert e.value.wait is not None and e.value.wait.status == wp.WAIT_STATUS_EXPIRED
    assert e.value.wait.settled_by == "stepwell:expiry"
    assert e.value.reason == "EXPIRED"


def test_a_cancelled_wait_raises_wait_cancelled(client: Client) -> None:
    waiter = Background(lambda: client.wait_for_signal("t", "approve"))
    poll_until(lambda: pending(client, "t", "approve"), "the waiter's wait pending")
    assert client.cancel_wait("t", "approve").cancelled is True
    with pytest.raises(WaitCancelled) as e:
        waiter.join()
    assert e.value.wait is not None and e.value.wait.status == wp.WAIT_STATUS_CANCELLED
    assert client.cancel_wait("t", "approve").cancelled is False
    with pytest.raises(WaitSettled):
        client.signal("t", "approve", b"yes")


def test_a_timeout_leaves_the_wait_pending(client: Client) -> None:
    with pytest.raises(WaitTimeout) as e:
        client.wait_for_signal("t", "approve", timeout=0.5)
    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and e.value.reason == "PENDING"
    assert e.value.wait is not None and e.value.wait.status == wp.WAIT_STATUS_PENDING
    assert pending(client, "t", "approve")
    # The wait is still there to be signalled and waited for again.
    assert client.signal("t", "approve", b"later") is True
    assert client.wait_for_signal("t", "approve", timeout=LIMIT) == b"later"


def test_sleep_until_a_time_past_returns_without_waiting(target: str, connect: Dict[str, Any]) -> None:
    past = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    with Recording(target, namespace=fresh_namespace(), **connect) as client:
        client.sleep_until("t", "nap", past)
        assert client.calls == ["CreateWaitRequest"]
        # The store's timer resolves the wait on its own.
        w = poll_until(
            lambda: (w := status_of(client, "t", "nap")) is not None and w.status != wp.WAIT_STATUS_PENDING and w,
            "the timer settles the wait",
        )
    assert w.status == wp.WAIT_STATUS_RESOLVED and w.settled_by == "stepwell:timer"


def test_sleep_until_a_time_ahead_wakes_on_the_timer(client: Client) -> None:
    when = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    client.sleep_until("t", "nap", when)
    w = client.get_wait("t", "nap").wait
    assert w.status == wp.WAIT_STATUS_RESOLVED and w.settled_by == "stepwell:timer"


def test_sleep_until_keeps_the_first_time_and_a_signal_wakes_it_early(client: Client) -> None:
    hour = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    first = client.create_wait("t", "nap", resolve_at=hour).wait
    sleeper = Background(lambda: client.sleep_until("t", "nap", hour + dt.timedelta(hours=1)))
    poll_until(lambda: pending(client, "t", "nap"), "the sleeper's wait pending")
    assert client.signal("t", "nap") is True
    assert sleeper.join() is None
    w = client.get_wait("t", "nap").wait
    assert w.resolve_at == first.resolve_at and w.status == wp.WAIT_STATUS_RESOLVED and w.settled_by != "stepwell:timer"


def test_sleep_until_a_cancelled_wait_raises(client: Client) -> None:
    client.cancel_wait("t", "nap")
    with pytest.raises(WaitCancelled):
        client.sleep_until("t", "nap", dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))


def test_an_unnamed_wait_is_signalled_by_its_handle(client: Client) -> None:
    created = client.create_wait("t", metadata={"ticket": 42})
    assert created.created and created.wait.name and created.wait.handle
    handle = created.wait.handle
    # Whoever holds the handle needs neither the turn nor the namespace: a
    # call by handle sends none.
    assert client.signal_wait(handle=handle, payload=b"ok", content_type="text/plain").settled is True
    assert client.wait_for_signal("t", created.wait.name) == b"ok"
    w = client.get_wait(handle=handle).wait
    assert (w.name, w.payload, w.content_type) == (created.wait.name, b"ok", "text/plain")
    assert client.await_wait(handle=handle, await_timeout=1).wait.status == wp.WAIT_STATUS_RESOLVED


def test_list_waits_filters_and_pages(client: Client) -> None:
    for i in range(5):
        client.create_wait("t", f"w{i}")
    client.signal("t", "w0", b"x")
    client.create_wait("u", "w0")
    assert [w.name for w in client.iter_waits(turn_id="t", page_size=2)] == [f"w{i}" for i in range(5)]
    assert [w.name for w in client.iter_waits(turn_id="t", status="pending")] == ["w1", "w2", "w3", "w4"]
    assert [(w.turn_id, w.name) for w in client.iter_waits(status="resolved")] == [("t", "w0")]
    page = client.list_waits(page_size=2)
    assert len(page.waits) == 2 and page.next_page_token


def test_get_wait_of_an_unknown_wait_is_wait_not_found(client: Client) -> None:
    with pytest.raises(WaitNotFound) as e:
        client.get_wait("t", "never")
    assert e.value.code == grpc.StatusCode.NOT_FOUND and e.value.reason == "WAIT_NOT_FOUND"


def test_the_namespace_option_names_another_namespace(client: Client) -> None:
    other = fresh_namespace()
    assert client.signal("t", "approve", b"yes", namespace=other) is True
    assert status_of(client, "t", "approve") is None
    assert client.wait_for_signal("t", "approve", namespace=other) == b"yes"


def test_a_wait_outlives_a_restart_of_its_sidecar(tmp_path: Path) -> None:
    own = Sidecar(f"127.0.0.1:{free_port()}", tmp_path, security_from_env())
    try:
        # The waiter has the default retry policy, which gives up on one call
        # within about a second: wait_for_signal itself waits through the
        # restart. The signaller retries enough to reach the restarted sidecar.
        patient = RetryPolicy(max_attempts=200, initial_backoff=0.05, max_backoff=0.5)
        ns = fresh_namespace()
        with Client(own.target, namespace=ns, **own.connect) as client, Client(
            own.target, namespace=ns, retry=patient, **own.connect
        ) as signaller:
            waiter = Background(lambda: client.wait_for_signal("t", "approve"))
            poll_until(lambda: pending(client, "t", "approve"), "the waiter's wait pending")
            own.kill()
            own.start()
            assert signaller.signal("t", "approve", b"yes") is True
            assert waiter.join() == b"yes"
    finally:
        own.stop()


def test_the_async_client_waits_signals_and_sleeps(target: str, connect: Dict[str, Any]) -> None:
    async def main() -> None:
        async with AsyncClient(target, namespace=fresh_namespace(), **connect) as sw:
            waiter = asyncio.ensure_future(sw.wait_for_signal("t", "approve", timeout=LIMIT))
            deadline = time.monotonic() + LIMIT
            while True:
                try:
                    if (await sw.get_wait("t", "approve")).wait.status == wp.WAIT_STATUS_PENDING:
                        break
                except WaitNotFound:
                    pass
                assert time.monotonic() < deadline, "the waiter's wait pending: not in time"
                await asyncio.sleep(0.02)
            assert await sw.signal("t", "approve", b"yes") is True
            assert await waiter == b"yes"
            assert await sw.signal("t", "approve", b"yes") is False
            with pytest.raises(WaitSettled) as e:
                await sw.signal("t", "approve", b"no")
            assert e.value.wait is not None and e.value.wait.payload == b"yes"
            with pytest.raises(WaitTimeout):
                await sw.wait_for_signal("t", "other", timeout=0.5)
            await sw.create_wait("t", "gone", expire_at=dt.datetime.now(dt.timezone.utc))
            with pytest.raises(WaitExpired):
                await sw.wait_for_signal("t", "gone", timeout=LIMIT)
            await sw.sleep_until("t", "nap", dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1))
            w = (await sw.get_wait("t", "nap")).wait
            assert w.status == wp.WAIT_STATUS_RESOLVED and w.settled_by == "stepwell:timer"
            assert [w.name async for w in sw.iter_waits(turn_id="t")] == ["approve", "gone", "nap", "other"]

    asyncio.run(main())
