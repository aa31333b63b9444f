"""Benchmark of stepwell's OpenAI Agents SDK session against the SDK's own.

Measures, on one machine and one throwaway Postgres server, four sessions:
``StepwellSession`` on a sidecar whose store is that Postgres server,
``StepwellSession`` on a sidecar whose store is a fresh SQLite file, the SDK's
reference ``SQLiteSession`` on a file of its own, and the SDK's
``SQLAlchemySession`` (asyncpg) on its own database of the same Postgres
server. Three calls, each at 1 and 16 concurrent sessions (one asyncio task
per session, each on its own session id, all in this process):

* ``add_items`` of a batch of three ~300-byte items, as one turn with a tool
  call adds them: a user message, a ``function_call`` and its output;
* ``get_items()`` (no limit) of a session of 20 items;
* ``get_items(10)`` of the same.

The StepwellSession tasks share one ``AsyncClient``, the SQLAlchemySession
tasks one engine (a pool of 16 connections), and the SQLiteSession tasks one
file, as an application's sessions would. The sessions run interleaved: each
round runs every point on every session, the order rotating from round to
round, and every round gets fresh databases, files and sidecars. The report
gives each point's calls/s, p50 and p99 latency, their medians and
[min-max] over the rounds, and the per-round ratios of StepwellSession to
each of the SDK's sessions.

It is started by ``bench/agents/run``, which makes the virtualenv, picks the
sidecar binary and starts Postgres (STEPWELL_TEST_POSTGRES_URL). It checks
what it measures (every session's ``get_items()`` equals what was added, each
``get_items`` answers as many items as it should) and exits non-zero on any
error or failed check.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import string
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

from agents import SQLiteSession
from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
from sqlalchemy.ext.asyncio import create_async_engine
from stepwell import AsyncClient
from stepwell.agents import StepwellSession

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    bench_args,
    Meter, Sidecar, Window, create_database, drop_databases, fmt_spread, group_commit_rows, line_of, loadavg, log,
    measure, median_of, package_versions, postmaster_pid, remove_round_files, report_footer, rotation,
    run_and_report, run_header, summarize_rounds,
)

SYSTEMS = {
    "stepwell-postgres": "StepwellSession (Postgres)",
    "stepwell-sqlite": "StepwellSession (SQLite)",
    "sqlite-session": "SQLiteSession (file)",
    "sqlalchemy-postgres": "SQLAlchemySession (Postgres)",
}
STEPWELL_SYSTEMS = ("stepwell-postgres", "stepwell-sqlite")
POSTGRES_SYSTEMS = ("stepwell-postgres", "sqlalchemy-postgres")
BASELINES = {"sqlite-session": "SQLiteSession", "sqlalchemy-postgres": "SQLAlchemySession"}
PROCESSES = ("python", "sidecar", "postgres")
CONCURRENCY = (1, 16)
KINDS = ("add", "get", "get10")
POINTS = [f"{k}/c{c}" for k in KINDS for c in CONCURRENCY]
ITEMS_PER_ADD = 3
HISTORY_ITEMS = 20
GET_LIMIT = 10
ENGINE_POOL = 16

MODES = {
    # warm-up and measured window per point, in seconds; rounds
    "smoke": {"warm": 0.2, "window": 0.8, "rounds": 1},
    "full": {"warm": 1.0, "window": 5.0, "rounds": 3},
}


# ---------------------------------------------------------------------------
# Items
# ---------------------------------------------------------------------------

_FILLER = "".join(random.Random(7).choice(string.ascii_letters + " ") for _ in range(8192))


def _text(seed: int, size: int) -> str:
    start = (seed * 131) % (len(_FILLER) - size)
    return _FILLER[start:start + size]


def turn_items(task: int, n: int) -> List[Dict[str, Any]]:
    """The three items one turn with a tool call adds, ~300 bytes of JSON
    each: the user's message, the model's function call and its output."""
    call_id = f"call_{task}_{n}"
    seed = task * 1000 + n
    return [
        {"role": "user", "content": _text(seed, 270)},
        {"type": "function_call", "id": f"fc_{task}_{n}", "call_id": call_id, "name": "lookup_order",
         "arguments": json.dumps({"order_id": f"A-{seed}", "fields": ["status", "eta"],
                                  "note": _text(seed + 1, 150)}),
         "status": "completed"},
        {"type": "function_call_output", "call_id": call_id,
         "output": json.dumps({"status": "shipped", "eta": "2 days", "detail": _text(seed + 2, 200)})},
    ]


def item_bytes() -> float:
    """The mean size of an item of a batch, as compact JSON."""
    items = turn_items(0, 0)
    return sum(len(json.dumps(i, separators=(",", ":"))) for i in items) / len(items)


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------


class Round:
    """One round's stores, all made fresh and removed after: a database and
    a SQLite file each with its sidecar (and a client of each), a SQLite file
    for SQLiteSession, and a database with an engine for SQLAlchemySession."""

    def __init__(self, args: argparse.Namespace, index: int, tmp: str):
        self.args = args
        self.index = index
        self.tmp = tmp
        self.sidecars: Dict[str, Sidecar] = {}
        self.clients: Dict[str, AsyncClient] = {}
        self.databases: List[str] = []
        self.engine: Any = None
        self.sqlite_path = os.path.join(tmp, f"r{index}-sdk.db")

    async def __aenter__(self) -> "Round":
        a = self.args
        tag = f"agbench_{os.getpid()}_r{self.index}"
        if "stepwell-postgres" in a.systems:
            self.sidecars["stepwell-postgres"] = Sidecar(
                a.stepwell, self._create_db(f"{tag}_stepwell"), f"r{self.index}-postgres", self.tmp)
        if "stepwell-sqlite" in a.systems:
            path = os.path.join(self.tmp, f"r{self.index}-sidecar.db")
            self.sidecars["stepwell-sqlite"] = Sidecar(a.stepwell, f"sqlite://{path}", f"r{self.index}-sqlite", self.tmp)
        for name, s in self.sidecars.items():
            s.wait_ready()
            self.clients[name] = AsyncClient(s.address, namespace="agbench", timeout=60.0)
        if "sqlalchemy-postgres" in a.systems:
            url = self._create_db(f"{tag}_sqlalchemy").replace("postgres://", "postgresql+asyncpg://", 1)
            self.engine = create_async_engine(url, pool_size=ENGINE_POOL, max_overflow=0)
            # The tables are made once, as an application's start-up would.
            await SQLAlchemySession("setup", engine=self.engine, create_tables=True).get_items()
        return self

    def _create_db(self, name: str) -> str:
        self.databases.append(name)
        return create_database(self.args.postgres_url, name)

    async def __aexit__(self, *exc: Any) -> None:
        for client in self.clients.values():
            await client.close()
        if self.engine is not None:
            await self.engine.dispose()
        for s in self.sidecars.values():
            s.stop()
        drop_databases(self.args.postgres_url, self.databases)
        remove_round_files(self.tmp, self.index)

    def session(self, system: str, session_id: str) -> Any:
        if system in STEPWELL_SYSTEMS:
            return StepwellSession(session_id, client=self.clients[system])
        if system == "sqlite-session":
            return SQLiteSession(session_id, self.sqlite_path)
        return SQLAlchemySession(session_id, engine=self.engine)

    def meter(self, system: str, postmaster: Optional[int]) -> Meter:
        return Meter(self.sidecars.get(system), postmaster if system in POSTGRES_SYSTEMS else None)


def close_sessions(sessions: List[Any]) -> None:
    """Closes what a session holds of its own (SQLiteSession's connections
    and its share of the file lock); the others share their client or engine."""
    for s in sessions:
        if isinstance(s, SQLiteSession):
            s.close()


def sqlite_synchronous(path: str) -> Optional[int]:
    """SQLite's synchronous setting on a connection made as SQLiteSession
    makes its own (2 = FULL: a commit waits for fsync)."""
    try:
        with sqlite3.connect(path) as c:
            return c.execute("PRAGMA synchronous").fetchone()[0]
    except sqlite3.Error:
        return None


# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------


async def add_point(sessions: List[Any], w: Window, meter: Meter) -> Dict[str, Any]:
    """Each task adds a turn's three items per call to its own session; after
    the window every session's items read back as added, in order."""
    added: List[List[Dict[str, Any]]] = [[] for _ in sessions]

    def worker(k: int) -> Callable[[], Any]:
        async def run() -> None:
            n = 0
            while w.running():
                h0 = time.perf_counter()
                items = turn_items(k, n)
                t0 = time.perf_counter()
                if w.start <= h0 and t0 <= w.end:
                    w.harness_s += t0 - h0
                try:
                    await sessions[k].add_items(items)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    w.errors.append(f"add_items: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                added[k].extend(items)
                n += 1
        return run

    result = await measure(w, meter, [worker(k) for k in range(len(sessions))])
    result["items_added"] = sum(len(a) for a in added)
    result["checks"] = await check_sessions(sessions, added)
    return result


async def get_point(sessions: List[Any], limit: Optional[int], w: Window, meter: Meter) -> Dict[str, Any]:
    """Each task reads its own session of HISTORY_ITEMS items, whole or its
    newest `limit`; every answer has the length it should, and after the
    window every session's items read back as added."""
    history = [[i for n in range(HISTORY_ITEMS // ITEMS_PER_ADD + 1) for i in turn_items(k, n)][:HISTORY_ITEMS]
               for k in range(len(sessions))]
    await asyncio.gather(*(s.add_items(h) for s, h in zip(sessions, history)))
    want = HISTORY_ITEMS if limit is None else min(limit, HISTORY_ITEMS)

    def worker(k: int) -> Callable[[], Any]:
        async def run() -> None:
            while w.running():
                t0 = time.perf_counter()
                try:
                    got = await sessions[k].get_items(limit)
                except Exception as e:  # noqa: BLE001
                    w.errors.append(f"get_items: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                if len(got) != want:
                    w.errors.append(f"get_items({limit}) answered {len(got)} items, want {want}")
                    return
        return run

    result = await measure(w, meter, [worker(k) for k in range(len(sessions))])
    problems = await check_sessions(sessions, history)
    if limit is not None:
        newest = await sessions[0].get_items(limit)
        if newest != history[0][-want:]:
            problems.append(f"get_items({limit}) is not the newest {want} items, oldest first")
    result["checks"] = problems
    return result


async def check_sessions(sessions: List[Any], added: List[List[Dict[str, Any]]]) -> List[str]:
    """Every session's get_items() equals the items added to it, in order."""
    problems = []
    for k, (s, want) in enumerate(zip(sessions, added)):
        try:
            got = await s.get_items()
        except Exception as e:  # noqa: BLE001
            problems.append(f"session {k}: get_items: {type(e).__name__}: {e}")
            continue
        if got != want:
            problems.append(f"session {k}: get_items() answered {len(got)} items, not the {len(want)} added")
    if not any(added):
        problems.append("no item was added")
    return problems[:5]


# ---------------------------------------------------------------------------
# Plan, report
# ---------------------------------------------------------------------------

CALLS = {"add": f"add_items({ITEMS_PER_ADD} items)", "get": f"get_items() of {HISTORY_ITEMS}",
         "get10": f"get_items({GET_LIMIT}) of {HISTORY_ITEMS}"}


def point_label(point: str) -> str:
    kind, c = point.split("/")
    n = int(c[1:])
    return f"{CALLS[kind]}, {n} session{'s' if n != 1 else ''}"


async def run_point(rnd: Round, system: str, point: str, prefix: str, args: argparse.Namespace,
                    postmaster: Optional[int]) -> Dict[str, Any]:
    """One point on one session kind: fresh session ids, the workload, and
    the sidecar's health after it."""
    kind, c = point.split("/")
    sessions = [rnd.session(system, f"{prefix}-s{k}") for k in range(int(c[1:]))]
    w = Window(args.warm, args.window)
    meter = rnd.meter(system, postmaster)
    try:
        if kind == "add":
            res = await add_point(sessions, w, meter)
        else:
            res = await get_point(sessions, None if kind == "get" else GET_LIMIT, w, meter)
    except Exception as e:  # noqa: BLE001
        res = {"errors": [f"{type(e).__name__}: {e}"], "checks": []}
    finally:
        close_sessions(sessions)
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
    with tempfile.TemporaryDirectory(prefix="stepwell-agbench.") as tmp:
        for r in range(1, args.rounds + 1):
            t_round = time.monotonic()
            async with Round(args, r, tmp) as rnd:
                if "sqlite-session" in systems:
                    results.setdefault("sqlite_session_synchronous", sqlite_synchronous(rnd.sqlite_path))
                order = rotation(systems, r)
                for point in results["points"]:
                    for system in order:
                        kind, c = point.split("/")
                        res = await run_point(rnd, system, point, f"r{r}-{kind}{c}-{system}", args, postmaster)
                        sample = {"round": r, "point": point, "system": system, "order": order.index(system)}
                        sample.update(res)
                        samples.append(sample)
                        log(line_of(sample, PROCESSES))
            log(f"-- round {r} done in {time.monotonic() - t_round:.0f} s (load {loadavg()})")


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds, failed samples left
    out, and StepwellSession's per-round ratios to each of the SDK's sessions."""
    return summarize_rounds(results, STEPWELL_SYSTEMS, tuple(BASELINES))


def table_rows(results: Dict[str, Any]) -> List[str]:
    """The main table's rows: one per point and session kind."""
    lines = []
    for point in results["points"]:
        for system in results["systems"]:
            row = results["summary"][f"{point} {system}"]
            lines.append("| " + " | ".join([
                point_label(point), SYSTEMS[system],
                fmt_spread(row["ops_per_s"]),
                fmt_spread(row.get("ratio_ops_per_s_sqlite-session"), "×"),
                fmt_spread(row.get("ratio_ops_per_s_sqlalchemy-postgres"), "×"),
                fmt_spread(row["p50_ms"]), fmt_spread(row["p99_ms"]),
                median_of(row, "python_cpu_us_per_op"), median_of(row, "sidecar_cpu_us_per_op"),
                median_of(row, "postgres_cpu_us_per_op"), median_of(row, "machine_busy_pct"),
                str(row["failed_samples"]),
            ]) + " |")
    return lines


def markdown(results: Dict[str, Any]) -> str:
    lines = [
        f"## Agents SDK sessions: StepwellSession against SQLiteSession and SQLAlchemySession ({results['mode']} mode)",
        "",
        f"`{results['command']}` — started {results['started']}, {results['elapsed_s']:.0f} s, "
        f"{results['rounds']} round(s) of {results['warm_s']:g} s warm-up + {results['window_s']:g} s window per point, "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['load_start']} at start. "
        "Sessions, sidecar and Postgres share the CPUs.",
        "",
        "Medians over the rounds, [min–max] where there is more than one. Throughput is session calls/s "
        f"over all sessions; `add_items` adds {ITEMS_PER_ADD} items of ~{results['item_bytes']:.0f} bytes per call. "
        "× SQLiteSession and × SQLAlchemySession are StepwellSession's per-round ratios. CPU is µs per call "
        "(medians): this Python process, the sidecar, every Postgres process.",
        "",
        "| Point | Session | calls/s | × SQLiteSession | × SQLAlchemySession | p50 ms | p99 ms "
        "| Python CPU µs/call | sidecar CPU µs/call | Postgres CPU µs/call | machine busy % | failed rounds |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += table_rows(results)
    lines += ["", "The sidecars' group commit at the `add_items` points, from their metrics over each window "
              "(medians): an `add_items` is one PutRecords, one write of a batch.", ""]
    lines += group_commit_rows(results, [p for p in POINTS if p.startswith("add/")], STEPWELL_SYSTEMS, SYSTEMS,
                               point_label, "Session")
    lines += report_footer(results)
    return "\n".join(lines) + "\n"


def versions() -> Dict[str, str]:
    return package_versions(["openai-agents", "stepwell", "grpcio", "protobuf", "SQLAlchemy", "asyncpg", "greenlet"])


def parse_args() -> argparse.Namespace:
    return bench_args(__doc__, MODES, SYSTEMS, POINTS, "agents", STEPWELL_SYSTEMS, " for StepwellSession")


def describe(args: argparse.Namespace) -> Dict[str, Any]:
    """What a run's report says of its setup before any sample."""
    results = run_header(args, list(SYSTEMS), POINTS)
    results.update({
        "item_bytes": item_bytes(), "items_per_add": ITEMS_PER_ADD,
        "history_items": HISTORY_ITEMS, "get_limit": GET_LIMIT,
        "sqlalchemy_engine": {"pool_size": ENGINE_POOL, "max_overflow": 0, "driver": "asyncpg"},
        "versions": versions(), "samples": [],
    })
    return results


def main() -> int:
    args = parse_args()
    return run_and_report(args, describe(args), run_rounds, summarize, markdown)


if __name__ == "__main__":
    sys.exit(main())
