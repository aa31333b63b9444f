"""Benchmark of stepwell's Google ADK session service against ADK's own.

Measures, on one machine and one throwaway Postgres server, four session
services: ``StepwellSessionService`` on a sidecar whose store is that
Postgres server, ``StepwellSessionService`` on a sidecar whose store is a
fresh SQLite file, ADK's ``DatabaseSessionService`` (asyncpg) on its own
database of the same Postgres server, and ADK's ``DatabaseSessionService``
(aiosqlite) on a SQLite file of its own. Two calls, each at 1 and 16
concurrent sessions (one asyncio task per session, each on its own session,
all in this process):

* ``append_event`` of a model event with a function call (~540 bytes as
  ADK's JSON) and a state delta of two session keys, each append made with
  the session object the previous append left (as a Runner does);
* ``get_session`` of a session of 20 such events.

The StepwellSessionService tasks share one service on one ``AsyncClient``
per sidecar, and each DatabaseSessionService system is one service on one
engine (a pool of 16 connections on Postgres, of one on SQLite: see
ENGINE_POOLS), as an application's sessions would share them. The services run interleaved: each round runs every point on every
service, the order rotating from round to round, and every round gets fresh
databases, files and sidecars. The report gives each point's calls/s, p50 and
p99 latency, their medians and [min-max] over the rounds, and the per-round
ratios of StepwellSessionService to each DatabaseSessionService.

It is started by ``bench/adk/run``, which makes the virtualenv, picks the
sidecar binary and starts Postgres (STEPWELL_TEST_POSTGRES_URL). It checks
what it measures (every session's ``get_session`` has every event appended
to it, in order, and the state its last event set; each measured
``get_session`` answers 20 events) and exits non-zero on any error or failed
check.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import string
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions import DatabaseSessionService
from google.adk.sessions.session import Session
from google.genai import types
from stepwell import AsyncClient
from stepwell.adk import StepwellSessionService

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    bench_args,
    Meter, Sidecar, Window, create_database, drop_databases, fmt_spread, group_commit_rows, line_of, loadavg, log,
    measure, median_of, package_versions, postmaster_pid, remove_round_files, report_footer, rotation,
    run_and_report, run_header, summarize_rounds,
)

SYSTEMS = {
    "stepwell-postgres": "StepwellSessionService (Postgres)",
    "stepwell-sqlite": "StepwellSessionService (SQLite)",
    "database-postgres": "DatabaseSessionService (Postgres)",
    "database-sqlite": "DatabaseSessionService (SQLite)",
}
STEPWELL_SYSTEMS = ("stepwell-postgres", "stepwell-sqlite")
POSTGRES_SYSTEMS = ("stepwell-postgres", "database-postgres")
BASELINES = ("database-postgres", "database-sqlite")
PROCESSES = ("python", "sidecar", "postgres")
CONCURRENCY = (1, 16)
KINDS = ("append", "get")
POINTS = [f"{k}/c{c}" for k in KINDS for c in CONCURRENCY]
HISTORY_EVENTS = 20
# DatabaseSessionService's connection pools: one connection per session on
# Postgres; one in all on SQLite, whose file lock admits one writer at a
# time: with more, writers of different sessions wait on that lock in
# SQLite's busy handler, and an append that waits past the 5 s busy timeout
# fails with "database is locked" (seen at 16 sessions on a busy machine),
# where one connection queues them in the pool instead.
ENGINE_POOLS = {"database-postgres": 16, "database-sqlite": 1}
APP = "bench"

MODES = {
    # warm-up and measured window per point, in seconds; rounds
    "smoke": {"warm": 0.2, "window": 0.8, "rounds": 1},
    "full": {"warm": 1.0, "window": 5.0, "rounds": 3},
}


# ---------------------------------------------------------------------------
# Events
# ---------------------------------------------------------------------------

_FILLER = "".join(random.Random(7).choice(string.ascii_letters + " ") for _ in range(8192))


def _text(seed: int, size: int) -> str:
    start = (seed * 131) % (len(_FILLER) - size)
    return _FILLER[start:start + size]


def model_event(task: int, n: int) -> Event:
    """The event a model's turn with a tool call appends: a function call
    with a few arguments, and a state delta of two session keys."""
    seed = task * 100_000 + n
    call = types.FunctionCall(
        id=f"adk-{task}-{n}", name="lookup_order",
        args={"order_id": f"A-{seed}", "fields": ["status", "eta"], "note": _text(seed, 100)},
    )
    return Event(
        invocation_id=f"inv-{task}-{n}", author="support_agent",
        content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        actions=EventActions(state_delta={"last_order": f"A-{seed}", "turn": n}),
    )


def event_bytes() -> int:
    """The size of an event as ADK's JSON, the form both services store."""
    return len(model_event(0, 0).model_dump_json(exclude_none=True, by_alias=True))


# ---------------------------------------------------------------------------
# Services
# ---------------------------------------------------------------------------


class Round:
    """One round's stores, all made fresh and removed after: a database and
    a SQLite file each with its sidecar (and a service on a client of each),
    a database and a SQLite file each with its DatabaseSessionService."""

    def __init__(self, args: argparse.Namespace, index: int, tmp: str):
        self.args = args
        self.index = index
        self.tmp = tmp
        self.sidecars: Dict[str, Sidecar] = {}
        self.clients: Dict[str, AsyncClient] = {}
        self.services: Dict[str, Any] = {}
        self.databases: List[str] = []

    async def __aenter__(self) -> "Round":
        a = self.args
        tag = f"adkbench_{os.getpid()}_r{self.index}"
        if "stepwell-postgres" in a.systems:
            self.sidecars["stepwell-postgres"] = Sidecar(
                a.stepwell, self._create_db(f"{tag}_stepwell"), f"r{self.index}-postgres", self.tmp)
        if "stepwell-sqlite" in a.systems:
            path = os.path.join(self.tmp, f"r{self.index}-sidecar.db")
            self.sidecars["stepwell-sqlite"] = Sidecar(a.stepwell, f"sqlite://{path}", f"r{self.index}-sqlite", self.tmp)
        for name, s in self.sidecars.items():
            s.wait_ready()
            self.clients[name] = AsyncClient(s.address, namespace="adkbench", timeout=60.0)
            self.services[name] = StepwellSessionService(self.clients[name])
        urls = {}
        if "database-postgres" in a.systems:
            urls["database-postgres"] = self._create_db(f"{tag}_database").replace(
                "postgres://", "postgresql+asyncpg://", 1)
        if "database-sqlite" in a.systems:
            urls["database-sqlite"] = "sqlite+aiosqlite:///" + os.path.join(self.tmp, f"r{self.index}-database.db")
        for name, url in urls.items():
            service = DatabaseSessionService(db_url=url, pool_size=ENGINE_POOLS[name], max_overflow=0)
            self.services[name] = service
            # The tables are made once, as an application's start-up would.
            await service.list_sessions(app_name=APP)
        return self

    def _create_db(self, name: str) -> str:
        self.databases.append(name)
        return create_database(self.args.postgres_url, name)

    async def __aexit__(self, *exc: Any) -> None:
        for client in self.clients.values():
            await client.close()
        for name, service in self.services.items():
            if name not in STEPWELL_SYSTEMS:
                await service.close()
        for s in self.sidecars.values():
            s.stop()
        drop_databases(self.args.postgres_url, self.databases)
        remove_round_files(self.tmp, self.index)

    def meter(self, system: str, postmaster: Optional[int]) -> Meter:
        return Meter(self.sidecars.get(system), postmaster if system in POSTGRES_SYSTEMS else None)


async def sqlite_pragmas(service: DatabaseSessionService) -> Dict[str, Any]:
    """The journal mode and synchronous setting DatabaseSessionService's
    SQLite connections get (2 = FULL: a commit waits for fsync)."""
    out = {}
    async with service.db_engine.connect() as c:
        for pragma in ("journal_mode", "synchronous", "busy_timeout"):
            out[pragma] = (await c.exec_driver_sql(f"PRAGMA {pragma}")).fetchone()[0]
    return out


# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------


async def append_point(service: Any, sessions: List[Session], args: argparse.Namespace, meter: Meter) -> Dict[str, Any]:
    """Each task appends model events to its own session, through the session
    object its previous append updated; after the window every session reads
    back every event appended to it, in order."""
    w = Window(args.warm, args.window)
    appended: List[List[Event]] = [[] for _ in sessions]

    def worker(k: int) -> Callable[[], Any]:
        async def run() -> None:
            n = 0
            while w.running():
                h0 = time.perf_counter()
                event = model_event(k, n)
                t0 = time.perf_counter()
                if w.start <= h0 and t0 <= w.end:
                    w.harness_s += t0 - h0
                try:
                    await service.append_event(sessions[k], event)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    w.errors.append(f"append_event: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                appended[k].append(event)
                n += 1
        return run

    result = await measure(w, meter, [worker(k) for k in range(len(sessions))])
    result["events_appended"] = sum(len(a) for a in appended)
    result["checks"] = await check_sessions(service, sessions, appended)
    return result


async def get_point(service: Any, sessions: List[Session], args: argparse.Namespace, meter: Meter) -> Dict[str, Any]:
    """Each task reads its own session of HISTORY_EVENTS events; every answer
    has them all, and after the window every session reads back as appended.
    The warm-up starts once the sessions are filled."""
    history = [[model_event(k, n) for n in range(HISTORY_EVENTS)] for k in range(len(sessions))]

    async def seed(k: int) -> None:
        for event in history[k]:
            await service.append_event(sessions[k], event)
    await asyncio.gather(*(seed(k) for k in range(len(sessions))))
    w = Window(args.warm, args.window)

    def worker(k: int) -> Callable[[], Any]:
        async def run() -> None:
            s = sessions[k]
            while w.running():
                t0 = time.perf_counter()
                try:
                    got = await service.get_session(app_name=s.app_name, user_id=s.user_id, session_id=s.id)
                except Exception as e:  # noqa: BLE001
                    w.errors.append(f"get_session: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                if got is None or len(got.events) != HISTORY_EVENTS:
                    w.errors.append(f"get_session answered {None if got is None else len(got.events)} events, "
                                    f"want {HISTORY_EVENTS}")
                    return
        return run

    result = await measure(w, meter, [worker(k) for k in range(len(sessions))])
    result["checks"] = await check_sessions(service, sessions, history)
    return result


async def check_sessions(service: Any, sessions: List[Session], appended: List[List[Event]]) -> List[str]:
    """Every session's get_session has the events appended to it, in order
    (ids and contents), and the state the last of them set."""
    problems = []
    for k, (s, want) in enumerate(zip(sessions, appended)):
        try:
            got = await service.get_session(app_name=s.app_name, user_id=s.user_id, session_id=s.id)
        except Exception as e:  # noqa: BLE001
            problems.append(f"session {k}: get_session: {type(e).__name__}: {e}")
            continue
        if got is None:
            problems.append(f"session {k}: get_session answered None")
            continue
        if [e.id for e in got.events] != [e.id for e in want]:
            problems.append(f"session {k}: get_session answered {len(got.events)} events, "
                            f"not the {len(want)} appended in order")
        elif [e.content for e in got.events] != [e.content for e in want]:
            problems.append(f"session {k}: an event's content does not read back as appended")
        elif want and got.state.get("turn") != len(want) - 1:
            problems.append(f"session {k}: state turn is {got.state.get('turn')!r}, want {len(want) - 1}")
    if not any(appended):
        problems.append("no event was appended")
    return problems[:5]


# ---------------------------------------------------------------------------
# Plan, report
# ---------------------------------------------------------------------------

CALLS = {"append": "append_event", "get": f"get_session of {HISTORY_EVENTS} events"}


def point_label(point: str) -> str:
    kind, c = point.split("/")
    n = int(c[1:])
    return f"{CALLS[kind]}, {n} session{'s' if n != 1 else ''}"


async def run_point(rnd: Round, system: str, point: str, prefix: str, args: argparse.Namespace,
                    postmaster: Optional[int]) -> Dict[str, Any]:
    """One point on one service: fresh sessions (each of its own user), the
    workload, and the sidecar's health after it."""
    kind, c = point.split("/")
    service = rnd.services[system]
    meter = rnd.meter(system, postmaster)
    try:
        sessions = await asyncio.gather(*(
            service.create_session(app_name=APP, user_id=f"u{k}", session_id=f"{prefix}-s{k}")
            for k in range(int(c[1:]))))
        if kind == "append":
            res = await append_point(service, list(sessions), args, meter)
        else:
            res = await get_point(service, list(sessions), args, meter)
    except Exception as e:  # noqa: BLE001
        res = {"errors": [f"{type(e).__name__}: {e}"], "checks": []}
    sidecar = rnd.sidecars.get(system)
    if sidecar is not None and not sidecar.alive():
        res.setdefault("errors", []).append(f"sidecar exited with {sidecar.proc.returncode}: {sidecar.log_tail()}")
    res["unit"] = "calls/s"
    return res


async def run_rounds(args: argparse.Namespace, results: Dict[str, Any]) -> None:
    samples = results["samples"]
    postmaster = postmaster_pid(args.postgres_url)
    results["postmaster_pid_found"] = postmaster is not None
    systems = results["systems"]
    with tempfile.TemporaryDirectory(prefix="stepwell-adkbench.") as tmp:
        for r in range(1, args.rounds + 1):
            t_round = time.monotonic()
            async with Round(args, r, tmp) as rnd:
                log(f"-- round {r}: stores ready in {time.monotonic() - t_round:.1f} s")
                if "database-sqlite" in systems:
                    results.setdefault("database_sqlite_pragmas", await sqlite_pragmas(rnd.services["database-sqlite"]))
                order = rotation(systems, r)
                for point in results["points"]:
                    for system in order:
                        kind, c = point.split("/")
                        t_point = time.monotonic()
                        res = await run_point(rnd, system, point, f"r{r}-{kind}{c}-{system}", args, postmaster)
                        sample = {"round": r, "point": point, "system": system, "order": order.index(system),
                                  "point_s": time.monotonic() - t_point}
                        sample.update(res)
                        samples.append(sample)
                        log(f"{line_of(sample, PROCESSES)}  ({sample['point_s']:.1f} s)")
            log(f"-- round {r} done in {time.monotonic() - t_round:.0f} s (load {loadavg()})")


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds, failed samples left
    out, and StepwellSessionService's per-round ratios to each
    DatabaseSessionService."""
    return summarize_rounds(results, STEPWELL_SYSTEMS, BASELINES)


def table_rows(results: Dict[str, Any]) -> List[str]:
    """The main table's rows: one per point and service."""
    lines = []
    for point in results["points"]:
        for system in results["systems"]:
            row = results["summary"][f"{point} {system}"]
            lines.append("| " + " | ".join([
                point_label(point), SYSTEMS[system],
                fmt_spread(row["ops_per_s"]),
                fmt_spread(row.get("ratio_ops_per_s_database-postgres"), "×"),
                fmt_spread(row.get("ratio_ops_per_s_database-sqlite"), "×"),
                fmt_spread(row["p50_ms"]), fmt_spread(row["p99_ms"]),
                median_of(row, "python_cpu_us_per_op"), median_of(row, "sidecar_cpu_us_per_op"),
                median_of(row, "postgres_cpu_us_per_op"), median_of(row, "machine_busy_pct"),
                str(row["failed_samples"]),
            ]) + " |")
    return lines


def markdown(results: Dict[str, Any]) -> str:
    lines = [
        f"## ADK sessions: StepwellSessionService against DatabaseSessionService ({results['mode']} mode)",
        "",
        f"`{results['command']}` — started {results['started']}, {results['elapsed_s']:.0f} s, "
        f"{results['rounds']} round(s) of {results['warm_s']:g} s warm-up + {results['window_s']:g} s window per point, "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['load_start']} at start. "
        "Services, sidecar and Postgres share the CPUs.",
        "",
        "Medians over the rounds, [min–max] where there is more than one. Throughput is calls/s over all "
        f"sessions; `append_event` appends a model event with a function call ({results['event_bytes']} bytes "
        "as ADK's JSON) and two session-state keys. × DB (Postgres) and × DB (SQLite) are "
        "StepwellSessionService's per-round ratios to DatabaseSessionService. CPU is µs per call (medians): "
        "this Python process, the sidecar, every Postgres process.",
        "",
        "| Point | Service | calls/s | × DB (Postgres) | × DB (SQLite) | p50 ms | p99 ms "
        "| Python CPU µs/call | sidecar CPU µs/call | Postgres CPU µs/call | machine busy % | failed rounds |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += table_rows(results)
    lines += ["", "The sidecars' group commit at the `append_event` points, from their metrics over each window "
              "(medians): an `append_event` is one PutRecords, one write of a batch.", ""]
    lines += group_commit_rows(results, [p for p in POINTS if p.startswith("append/")], STEPWELL_SYSTEMS, SYSTEMS,
                               point_label, "Service")
    pools = results["database_engine"]["pool_size"]
    lines += ["", f"DatabaseSessionService's engines: a pool of {pools['database-postgres']} connections on "
              f"Postgres, of {pools['database-sqlite']} on SQLite."]
    if results.get("database_sqlite_pragmas"):
        lines[-1] += " Its SQLite connections: " + ", ".join(
            f"{k} {v}" for k, v in results["database_sqlite_pragmas"].items()) + "."
    lines += report_footer(results)
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    return bench_args(__doc__, MODES, SYSTEMS, POINTS, "adk", STEPWELL_SYSTEMS, " for StepwellSessionService")


def describe(args: argparse.Namespace) -> Dict[str, Any]:
    """What a run's report says of its setup before any sample."""
    results = run_header(args, list(SYSTEMS), POINTS)
    results.update({
        "event_bytes": event_bytes(), "history_events": HISTORY_EVENTS,
        "database_engine": {"pool_size": ENGINE_POOLS, "max_overflow": 0,
                            "drivers": {"database-postgres": "asyncpg", "database-sqlite": "aiosqlite"}},
        "versions": package_versions(["google-adk", "google-genai", "stepwell", "grpcio", "protobuf", "SQLAlchemy",
                                      "asyncpg", "aiosqlite", "greenlet"]),
        "samples": [],
    })
    return results


def main() -> int:
    args = parse_args()
    return run_and_report(args, describe(args), run_rounds, summarize, markdown)


if __name__ == "__main__":
    sys.exit(main())
