"""once() across a sidecar restart: the sidecar of its own (a free port, a
SQLite file) is SIGKILLed while the effect runs and brought back on the
same port and file only after the holder's Complete has failed; the holder
keeps sending Complete for as long as its lease lasts, so the effect runs
exactly once and a later once() gets the recorded result. Sync and asyncio.

The steps are ordered by events, not by time: the effect says it started,
the test kills the sidecar and lets the effect return, a client that
notes every failed Complete says one failed, and only then is the sidecar
started again."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import pytest

from conftest import Sidecar, free_port, fresh_namespace
from stepwell import AsyncClient, Client, RetryPolicy, StepwellError, Unavailable
from stepwell.v1 import idempotency_pb2 as ip

# Few attempts per call, so that a Complete fails soon while the sidecar is down.
RETRY = RetryPolicy(max_attempts=2, initial_backoff=0.01, max_backoff=0.2)
LIMIT = 60.0  # the longest any step is waited for; a step that takes it fails the test


class Steps:
    """The events that order a run: the effect started, the effect may
    return, a Complete failed; and how often the effect ran."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.go_on = threading.Event()
        self.complete_failed = threading.Event()
        self.complete_errors: List[StepwellError] = []
        self.runs = 0

    def note(self, request: Any, err: StepwellError) -> None:
        if isinstance(request, ip.CompleteRequest):
            self.complete_errors.append(err)
            self.complete_failed.set()


class NotingClient(Client):
    """A Client that tells ``steps`` of every call that failed."""

    steps: Steps

    def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        try:
            return super()._call(method, request, timeout)
        except StepwellError as err:
            self.steps.note(request, err)
            raise


class NotingAsyncClient(AsyncClient):
    """The asyncio twin of :class:`NotingClient`."""

    steps: Steps

    async def _call(self, method: Callable[..., Any], request: Any, timeout: Optional[float]) -> Any:
        try:
            return await super()._call(method, request, timeout)
        except StepwellError as err:
            self.steps.note(request, err)
            raise


@pytest.fixture
def own_sidecar(workdir: Path) -> Iterator[Sidecar]:
    """A plaintext sidecar of this test alone, on a free port and a SQLite file of its own."""
    s = Sidecar(f"127.0.0.1:{free_port()}", workdir)
    yield s
    if s.proc.poll() is None:
        s.stop()
    else:
        s.log.close()


def restart_while_held(sidecar: Sidecar, steps: Steps, holder: threading.Thread) -> None:
    """Kills the sidecar once the effect runs, lets the effect return, and
    starts the sidecar again once a Complete has failed."""
    holder.start()
    assert steps.started.wait(LIMIT), "the effect did not start"
    sidecar.kill()
    steps.go_on.set()
    assert steps.complete_failed.wait(LIMIT), "no Complete failed while the sidecar was down"
    sidecar.start()
    holder.join(LIMIT)
    assert not holder.is_alive(), "once() did not return after the sidecar came back"


def check_recorded(sidecar: Sidecar, namespace: str, key: str, steps: Steps) -> None:
    """The effect ran once, and a later once() returns its recorded result."""
    assert steps.runs == 1
    assert all(isinstance(e, Unavailable) for e in steps.complete_errors), steps.complete_errors

    def again() -> Any:
        steps.runs += 1
        return {"charge": "second"}

    with Client(sidecar.target, namespace=namespace) as sw:
        assert sw.once(key, again, wait_timeout=5.0) == {"charge": "ch_1"}
    assert steps.runs == 1


def test_a_sidecar_restart_during_the_effect_does_not_run_it_twice(own_sidecar: Sidecar) -> None:
    namespace, key = fresh_namespace("restart"), "run-1/charge"
    steps = Steps()
    out: Dict[str, Any] = {}

    def charge() -> Any:
        steps.runs += 1
        steps.started.set()
        assert steps.go_on.wait(LIMIT)
        return {"charge": "ch_1"}

    def hold() -> None:
        with NotingClient(own_sidecar.target, namespace=namespace, retry=RETRY, timeout=5.0) as sw:
            sw.steps = steps
            try:
                out["value"] = sw.once(key, charge, lease=30.0)
            except BaseException as exc:  # handed to the test's thread
                out["error"] = exc

    restart_while_held(own_sidecar, steps, threading.Thread(target=hold))
    assert "error" not in out, out.get("error")
    assert out["value"] == {"charge": "ch_1"}
    check_recorded(own_sidecar, namespace, key, steps)


def test_the_async_client_too(own_sidecar: Sidecar) -> None:
    namespace, key = fresh_namespace("restart-aio"), "run-1/charge"
    steps = Steps()
    out: Dict[str, Any] = {}

    async def charge() -> Any:
        steps.runs += 1
        steps.started.set()
        assert await asyncio.get_running_loop().run_in_executor(None, steps.go_on.wait, LIMIT)
        return {"charge": "ch_1"}

    async def hold() -> None:
        async with NotingAsyncClient(own_sidecar.target, namespace=namespace, retry=RETRY, timeout=5.0) as sw:
            sw.steps = steps
            out["value"] = await sw.once(key, charge, lease=30.0)

    def run() -> None:
        try:
            asyncio.run(hold())
        except BaseException as exc:  # handed to the test's thread
            out["error"] = exc

    restart_while_held(own_sidecar, steps, threading.Thread(target=run))
    assert "error" not in out, out.get("error")
    assert out["value"] == {"charge": "ch_1"}
    check_recorded(own_sidecar, namespace, key, steps)


def test_complete_timeout_bounds_the_holders_retries(own_sidecar: Sidecar) -> None:
    """With ``complete_timeout``, a holder whose sidecar stays down gives up
    and raises the last Unavailable; the key is left to its lease."""
    namespace = fresh_namespace("restart-bound")
    steps = Steps()

    def charge() -> Any:
        steps.runs += 1
        own_sidecar.kill()
        return {"charge": "ch_1"}

    with NotingClient(own_sidecar.target, namespace=namespace, retry=RETRY, timeout=5.0) as sw:
        sw.steps = steps
        with pytest.raises(Unavailable):
            sw.once("run-1/charge", charge, lease=30.0, complete_timeout=0.5)
    assert steps.runs == 1 and steps.complete_errors
