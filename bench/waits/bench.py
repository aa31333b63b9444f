"""Benchmark of stepwell's waits: how soon an Await wakes after its Signal,
and how late timers fire, beside DBOS's send and recv on the same Postgres.

Points, each measured in every round, the order rotating from round to round:

* ``wake/sqlite-same``: Await and Signal through one sidecar on SQLite;
* ``wake/postgres-same``: through one sidecar on Postgres;
* ``wake/postgres-cross``: Await through one sidecar, Signal through another
  sharing its Postgres store, so the wake crosses the database;
* ``wake/dbos``: a DBOS workflow blocked in ``recv`` and a ``send`` to it, on
  a database of the same Postgres server;
* ``timers/sqlite`` and ``timers/postgres``: many timers due in the same
  second (``resolve_at``); the lag of each is its ``settled_at`` less its
  ``resolve_at``, both on this machine's clock.

A wake sample creates a wait (or starts the receiving workflow), starts the
Await (or lets the workflow reach ``recv``) and gives it 50 ms to be waiting,
then times from just before the Signal (``send``) is sent to the moment the
waiting side has its answer, in this process, so both systems are timed by
the same clock and the same event loop. The stepwell side calls the RPCs
through the Python client's generated stubs, with no retries in between.

Started by ``bench/waits/run`` (virtualenv, sidecar binary, throwaway
Postgres in STEPWELL_TEST_POSTGRES_URL). It checks every answer (the payload
that woke the waiter is the one signalled; every timer fired once) and exits
non-zero on any error.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import Sidecar, database_url, loadavg, log  # noqa: E402 (found through the path set above)
from stepwell.v1 import waits_pb2 as wp  # noqa: E402
from stepwell.v1 import waits_pb2_grpc as wg  # noqa: E402

MODES = {
    "smoke": {"rounds": 1, "samples": 20, "timers": 100},
    "full": {"rounds": 5, "samples": 200, "timers": 1000},
}
WAKE_POINTS = ("wake/sqlite-same", "wake/postgres-same", "wake/postgres-cross", "wake/dbos")
TIMER_POINTS = ("timers/sqlite", "timers/postgres")
SETTLE_MS = 50


def percentile(values: List[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(ms: List[float]) -> Dict[str, float]:
    return {"n": len(ms), "p50_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99), "max_ms": max(ms)}


def create_database(postgres_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


class Stepwell:
    """The sidecars and their stubs: SQLite, and two on one Postgres store."""

    def __init__(self, binary: str, postgres_url: str, tmp: str):
        create_database(postgres_url, "waits_stepwell")
        self.sidecars = {
            "sqlite": Sidecar(binary, "sqlite://" + os.path.join(tmp, "waits.db"), "sqlite", tmp),
            "pg-a": Sidecar(binary, database_url(postgres_url, "waits_stepwell"), "pg-a", tmp),
        }
        self.sidecars["pg-a"].wait_ready()  # the first migrates the store; the second finds it migrated
        self.sidecars["pg-b"] = Sidecar(binary, database_url(postgres_url, "waits_stepwell"), "pg-b", tmp)
        for s in self.sidecars.values():
            s.wait_ready()
        self.channels = {k: grpc.aio.insecure_channel(s.address) for k, s in self.sidecars.items()}
        self.stubs = {k: wg.WaitServiceStub(c) for k, c in self.channels.items()}

    async def close(self) -> None:
        for c in self.channels.values():
            await c.close()
        for s in self.sidecars.values():
            s.stop()


async def stepwell_wake(awaiter: wg.WaitServiceStub, signaller: wg.WaitServiceStub, ns: str, n: int) -> List[float]:
    out = []
    for i in range(n):
        turn, payload = f"t{i}", f"p{i}".encode()
        await awaiter.CreateWait(wp.CreateWaitRequest(namespace=ns, turn_id=turn, name="approve"))

        async def wait() -> float:
            r = await awaiter.Await(wp.AwaitRequest(namespace=ns, turn_id=turn, name="approve",
                                                    timeout=duration_pb2.Duration(seconds=30)))
            woke = time.perf_counter()
            if r.wait.status != wp.WAIT_STATUS_RESOLVED or r.wait.payload != payload:
                raise RuntimeError(f"{ns}/{turn}: woke with {r.wait.status} {r.wait.payload!r}")
            return woke

        task = asyncio.create_task(wait())
        await asyncio.sleep(SETTLE_MS / 1000)  # the Await is in flight: the sample times a waiting Await's wake
        t0 = time.perf_counter()
        await signaller.Signal(wp.SignalRequest(namespace=ns, turn_id=turn, name="approve", payload=payload))
        out.append(1000 * (await task - t0))
    return out


class Dbos:
    """DBOS on its own database of the same Postgres server, launched once."""

    def __init__(self, postgres_url: str):
        from dbos import DBOS

        self.DBOS = DBOS
        create_database(postgres_url, "waits_dbos")
        DBOS(config={"name": "waits-bench", "system_database_url": database_url(postgres_url, "waits_dbos"),
                     "log_level": "WARNING"})

        @DBOS.workflow()
        async def receiver(expect: str) -> float:
            message = await DBOS.recv_async("approve", timeout_seconds=30)
            woke = time.perf_counter()
            if message != expect:
                raise RuntimeError(f"received {message!r}, expected {expect!r}")
            return woke

        self.receiver = receiver
        DBOS.launch()

    async def wake(self, n: int) -> List[float]:
        out = []
        for i in range(n):
            payload = f"p{i}"
            handle = await self.DBOS.start_workflow_async(self.receiver, payload)
            await asyncio.sleep(SETTLE_MS / 1000)
            t0 = time.perf_counter()
            await self.DBOS.send_async(handle.workflow_id, payload, topic="approve")
            out.append(1000 * (await handle.get_result() - t0))
        return out

    def close(self) -> None:
        self.DBOS.destroy()


def ts(t: dt.datetime) -> timestamp_pb2.Timestamp:
    out = timestamp_pb2.Timestamp()
    out.FromDatetime(t)
    return out


async def timers(stub: wg.WaitServiceStub, ns: str, n: int) -> List[float]:
    """Creates n timers due in one second, waits until none is pending, and
    answers each one's lag in ms."""
    due = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(seconds=4)
    for start in range(0, n, 100):
        await asyncio.gather(*(stub.CreateWait(wp.CreateWaitRequest(
            namespace=ns, turn_id=f"t{i}", name="nap", resolve_at=ts(due))) for i in range(start, min(n, start + 100))))
    if dt.datetime.now(dt.timezone.utc) >= due:
        raise RuntimeError(f"creating {n} timers took past their due time; the lag would not be the timers'")
    deadline = time.monotonic() + 120
    while True:
        waits = await list_all(stub, ns)
        if all(w.status != wp.WAIT_STATUS_PENDING for w in waits):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}: timers still pending 120 s after start")
        await asyncio.sleep(0.2)  # polling a benchmark's progress, not synchronising a test
    if len(waits) != n or any(w.status != wp.WAIT_STATUS_RESOLVED or w.settled_by != "stepwell:timer" for w in waits):
        raise RuntimeError(f"{ns}: not every timer resolved once by the timer")
    return [1000 * (w.settled_at.ToDatetime(dt.timezone.utc) - due).total_seconds() for w in waits]


async def list_all(stub: wg.WaitServiceStub, ns: str) -> List[Any]:
    waits, token = [], ""
    while True:
        r = await stub.ListWaits(wp.ListWaitsRequest(namespace=ns, page_token=token))
        waits.extend(r.waits)
        token = r.next_page_token
        if not token:
            return waits


def point_runners(sw: Stepwell, dbos: Dbos, a: argparse.Namespace, r: int) -> Dict[str, Callable[[], Any]]:
    s = sw.stubs
    return {
        "wake/sqlite-same": lambda: stepwell_wake(s["sqlite"], s["sqlite"], f"r{r}-ss", a.samples),
        "wake/postgres-same": lambda: stepwell_wake(s["pg-a"], s["pg-a"], f"r{r}-ps", a.samples),
        "wake/postgres-cross": lambda: stepwell_wake(s["pg-a"], s["pg-b"], f"r{r}-pc", a.samples),
        "wake/dbos": lambda: dbos.wake(a.samples),
        "timers/sqlite": lambda: timers(s["sqlite"], f"r{r}-ts", a.timers),
        "timers/postgres": lambda: timers(s["pg-a"], f"r{r}-tp", a.timers),
    }


async def run(a: argparse.Namespace) -> Dict[str, Any]:
    results: Dict[str, Any] = {"command": a.command, "rounds": [], "started": dt.datetime.now(dt.timezone.utc).isoformat()}
    with tempfile.TemporaryDirectory(prefix="stepwell-waits-bench-") as tmp:
        sw = Stepwell(a.stepwell, a.postgres_url, tmp)
        dbos = Dbos(a.postgres_url)
        try:
            points = list(WAKE_POINTS + TIMER_POINTS)
            for r in range(a.rounds):
                order = points[r % len(points):] + points[:r % len(points)]
                runners = point_runners(sw, dbos, a, r)
                rnd = {"load_before": loadavg()}
                for p in order:
                    rnd[p] = summary(await runners[p]())
                    log(f"round {r + 1}/{a.rounds} {p}: {rnd[p]}")
                results["rounds"].append(rnd)
        finally:
            dbos.close()
            await sw.close()
    return results


def report(results: Dict[str, Any]) -> str:
    lines = [f"`{results['command']}`, {len(results['rounds'])} rounds: median over rounds [min-max]", "",
             "| point | p50 ms | p99 ms | samples per round |", "|---|---|---|---|"]
    for p in WAKE_POINTS + TIMER_POINTS:
        p50 = [rnd[p]["p50_ms"] for rnd in results["rounds"]]
        p99 = [rnd[p]["p99_ms"] for rnd in results["rounds"]]
        cell = lambda v: f"{statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"  # noqa: E731
        lines.append(f"| {p} | {cell(p50)} | {cell(p99)} | {results['rounds'][0][p]['n']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=MODES, default="smoke")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--samples", type=int)
    ap.add_argument("--timers", type=int)
    ap.add_argument("--stepwell", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bench/waits/run")
    a = ap.parse_args()
    for k, v in MODES[a.mode].items():
        setattr(a, k, getattr(a, k) or v)
    a.postgres_url = os.environ.get("STEPWELL_TEST_POSTGRES_URL") or sys.exit("STEPWELL_TEST_POSTGRES_URL is not set")
    results = asyncio.run(run(a))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    text = report(results)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
