"""Benchmark of stepwell's LangGraph checkpoint saver against PostgresSaver.

Measures, on one machine and one throwaway Postgres server, three savers:
PostgresSaver (``AsyncPostgresSaver`` of langgraph-checkpoint-postgres over an
``AsyncConnectionPool``), stepwell's ``AsyncStepwellSaver`` on a sidecar
whose store is that Postgres server, and ``AsyncStepwellSaver`` on a sidecar
whose store is a fresh SQLite file; and LangGraph's InMemorySaver, which
stores nothing, as the reference for what LangGraph and this process cost
without a store; and, at the targets' points only, PostgresSaver with one
saver per task (one AsyncPostgresSaver runs all its calls under one lock).
Two workloads:

* ``aput`` at 1, 16 and 64 concurrent LangGraph threads (distinct thread_ids,
  one asyncio task each) through one shared saver: puts/s, p50 and p99 of
  ``aput``. Each thread writes a chain of checkpoints as a graph does: an
  input checkpoint with four ~1 KB channels, then steps that change one or
  two channels each (``new_versions`` names only those).
* a 10-node linear ``StateGraph`` compiled with the saver, invoked by 16
  concurrent tasks, each invocation on a new thread_id: graph steps (nodes
  executed) per second.

The savers run interleaved: each round runs every point on every saver, the
saver order rotating from round to round, and every round gets fresh
databases, a fresh SQLite file and fresh sidecars, so rounds do not grow each
other's tables. The report gives each point's median and [min-max] over the
rounds, and the per-round ratio stepwell / PostgresSaver.

It is started by ``bench/langgraph/run``, which makes the virtualenv, builds
or picks the sidecar binary, and starts Postgres (STEPWELL_TEST_POSTGRES_URL).
It checks what it measures (a thread's newest checkpoint reads back as
written, the graph's state holds every node's value) and exits non-zero on
any error or failed check.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import hashlib
import importlib.metadata as md
import inspect
import json
import operator
import os
import platform
import random
import signal
import string
import subprocess
import sys
import tempfile
import time
from typing import Annotated, Any, Callable, Dict, List, Optional, TypedDict

import psycopg
from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    bench_args,
    Meter, Sidecar, Window, database_url, failed, fmt, fmt_spread, line_of, loadavg, log, measure,
    postmaster_pid, round_ratios, spread, target,
)

SYSTEMS = {
    "postgres-saver": "PostgresSaver",
    "stepwell-postgres": "stepwell (Postgres)",
    "stepwell-sqlite": "stepwell (SQLite)",
    "memory": "InMemorySaver (no store)",
    "postgres-saver-per-task": "PostgresSaver, one saver per task",
}
# PostgresSaver runs every call of one saver under one asyncio.Lock; one
# saver per task (on the same pool) shows it without that lock, at the points
# of the targets only.
SYSTEM_POINTS = {"postgres-saver-per-task": ("aput/c64", "graph/c16")}
# The processes whose CPU a run's log lines show.
PROCESSES = ("python", "sidecar", "postgres")
BASELINE = "postgres-saver"
STEPWELL_SYSTEMS = ("stepwell-postgres", "stepwell-sqlite")
PUT_CONCURRENCY = (1, 16, 64)
GRAPH_CONCURRENCY = 16
GRAPH_NODES = 10
CHANNELS = ("messages", "context", "plan", "scratch")
VALUE_BYTES = 1000
POOL_MIN, POOL_MAX = 16, 64

MODES = {
    # warm-up and measured window per point, in seconds; rounds
    "smoke": {"warm": 0.2, "window": 0.8, "rounds": 1},
    "full": {"warm": 1.5, "window": 7.0, "rounds": 3},
}


# ---------------------------------------------------------------------------
# Savers
# ---------------------------------------------------------------------------


async def open_stepwell_saver(stack: contextlib.AsyncExitStack, address: str, namespace: str) -> Any:
    """AsyncStepwellSaver.from_address, whether it answers a saver, an
    awaitable of one, or a context manager that yields one."""
    from stepwell.langgraph import AsyncStepwellSaver

    made = AsyncStepwellSaver.from_address(address, namespace=namespace)
    if inspect.isawaitable(made):
        made = await made
    if hasattr(made, "__aenter__"):
        return await stack.enter_async_context(made)
    if hasattr(made, "__enter__"):
        return stack.enter_context(made)
    for close in ("aclose", "close"):
        fn = getattr(made, close, None)
        if callable(fn):
            if inspect.iscoroutinefunction(fn):
                stack.push_async_callback(fn)
            else:
                stack.callback(fn)
            break
    return made


class Round:
    """One round's stores: a database for PostgresSaver, and a database and a
    SQLite file each with its sidecar, all made fresh and removed after."""

    def __init__(self, args: argparse.Namespace, index: int, tmp: str):
        self.args = args
        self.index = index
        self.tmp = tmp
        self.sidecars: Dict[str, Sidecar] = {}
        self.databases: List[str] = []
        self.pool: Optional[AsyncConnectionPool] = None

    async def __aenter__(self) -> "Round":
        a = self.args
        tag = f"lgbench_{os.getpid()}_r{self.index}"
        if BASELINE in a.systems or "postgres-saver-per-task" in a.systems:
            self.pg_db = self._create_db(f"{tag}_saver")
            self.pool = AsyncConnectionPool(
                database_url(a.postgres_url, self.pg_db), min_size=POOL_MIN, max_size=POOL_MAX, open=False,
                kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
            await self.pool.open(wait=True, timeout=60)
            await AsyncPostgresSaver(conn=self.pool).setup()
        if "stepwell-postgres" in a.systems:
            db = self._create_db(f"{tag}_stepwell")
            self.sidecars["stepwell-postgres"] = Sidecar(
                a.stepwell, database_url(a.postgres_url, db), f"r{self.index}-postgres", self.tmp)
        if "stepwell-sqlite" in a.systems:
            path = os.path.join(self.tmp, f"r{self.index}.db")
            self.sidecars["stepwell-sqlite"] = Sidecar(
                a.stepwell, f"sqlite://{path}", f"r{self.index}-sqlite", self.tmp)
        for s in self.sidecars.values():
            s.wait_ready()
        return self

    def _create_db(self, name: str) -> str:
        with psycopg.connect(self.args.postgres_url, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}"')
            c.execute(f'CREATE DATABASE "{name}"')
        self.databases.append(name)
        return name

    async def __aexit__(self, *exc: Any) -> None:
        if self.pool is not None:
            await self.pool.close()
        for s in self.sidecars.values():
            s.stop()
        with psycopg.connect(self.args.postgres_url, autocommit=True) as c:
            for name in self.databases:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for name in os.listdir(self.tmp):
            if name.startswith(f"r{self.index}.db"):
                os.remove(os.path.join(self.tmp, name))

    @contextlib.asynccontextmanager
    async def savers(self, system: str, namespace: str):
        """Yields saver_for(task): the saver task number `task` uses, one
        shared by all tasks, or for postgres-saver-per-task one per task."""
        async with contextlib.AsyncExitStack() as stack:
            if system == "postgres-saver-per-task":
                made: Dict[int, Any] = {}
                yield lambda task: made.setdefault(task, AsyncPostgresSaver(conn=self.pool))
                return
            if system == BASELINE:
                shared = AsyncPostgresSaver(conn=self.pool)
            elif system == "memory":
                shared = InMemorySaver()
            else:
                shared = await open_stepwell_saver(stack, self.sidecars[system].address, namespace)
            yield lambda task: shared

    def server_pid(self, system: str) -> Optional[int]:
        s = self.sidecars.get(system)
        return s.proc.pid if s else None


# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------

_FILLER = "".join(random.Random(7).choice(string.ascii_letters + " ") for _ in range(8192))


def channel_value(step: int, channel: str) -> Dict[str, Any]:
    """A ~1 KB channel value: a list of messages, as an agent's state holds."""
    start = (step * 131 + len(channel) * 17) % (len(_FILLER) - VALUE_BYTES)
    text = _FILLER[start:start + VALUE_BYTES]
    return {"channel": channel, "step": step,
            "messages": [{"role": "ai" if i % 2 else "human", "content": text[i * 250:(i + 1) * 250]}
                         for i in range(4)]}


class Chain:
    """The checkpoints of one thread, in the order a graph writes them: step
    -1 (the input) sets every channel, each later step one or two."""

    def __init__(self, saver: Any, thread_id: str):
        self.saver = saver
        self.config: Dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.checkpoint = empty_checkpoint()
        self.step = -1
        self.ids: List[str] = []

    def next(self) -> tuple:
        step = self.step
        if step < 0:
            changed = CHANNELS
        else:
            changed = (CHANNELS[step % len(CHANNELS)],)
            if step % 2:
                changed += (CHANNELS[(step + 1) % len(CHANNELS)],)
        prev = self.checkpoint
        values = dict(prev["channel_values"])
        versions = dict(prev["channel_versions"])
        seen = dict(prev["versions_seen"])
        new_versions = {}
        for ch in changed:
            v = self.saver.get_next_version(versions.get(ch), None)
            versions[ch] = new_versions[ch] = v
            values[ch] = channel_value(step, ch)
        seen["__input__" if step < 0 else f"node_{step % GRAPH_NODES}"] = {ch: versions[ch] for ch in changed}
        base = dict(prev, channel_values=values, channel_versions=versions, versions_seen=seen)
        checkpoint = create_checkpoint(base, None, step)
        metadata = {"source": "input" if step < 0 else "loop", "step": step, "parents": {}}
        return checkpoint, metadata, new_versions

    def advance(self, checkpoint: Dict[str, Any], config: Dict[str, Any]) -> None:
        self.checkpoint = checkpoint
        self.config = config
        self.step += 1
        self.ids.append(checkpoint["id"])


async def put_point(saver_for: Callable[[int], Any], prefix: str, threads: int, warm: float, window: float,
                    meter: Meter) -> Dict[str, Any]:
    w = Window(warm, window)
    chains = [Chain(saver_for(i), f"{prefix}-t{i}") for i in range(threads)]
    # InMemorySaver's aput never suspends: without a yield one task would
    # run alone to the end of the window.
    yield_each = isinstance(chains[0].saver, InMemorySaver)

    def worker(chain: Chain) -> Callable[[], Any]:
        async def run() -> None:
            while w.running():
                h0 = time.perf_counter()
                checkpoint, metadata, new_versions = chain.next()
                t0 = time.perf_counter()
                if w.start <= h0 and t0 <= w.end:
                    w.harness_s += t0 - h0
                try:
                    config = await chain.saver.aput(chain.config, checkpoint, metadata, new_versions)
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    w.errors.append(f"aput: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                chain.advance(checkpoint, config)
                if yield_each:
                    await asyncio.sleep(0)
        return run

    result = await measure(w, meter, [worker(c) for c in chains])
    result["puts_total"] = sum(len(c.ids) for c in chains)
    result["checks"] = await check_chain(chains[0]) if chains[0].ids else ["no checkpoint was put"]
    return result


async def check_chain(chain: Chain) -> List[str]:
    """A thread's newest checkpoint reads back as written, and its newest
    checkpoints list newest first."""
    saver = chain.saver
    problems = []
    config = {"configurable": {"thread_id": chain.config["configurable"]["thread_id"], "checkpoint_ns": ""}}
    try:
        got = await saver.aget_tuple(config)
        if got is None:
            return ["aget_tuple found no checkpoint"]
        if got.checkpoint["id"] != chain.ids[-1]:
            problems.append(f"aget_tuple answered {got.checkpoint['id']}, the newest put was {chain.ids[-1]}")
        want = chain.checkpoint["channel_values"]
        if got.checkpoint["channel_values"] != want:
            problems.append("aget_tuple's channel values differ from those put")
        if got.metadata.get("step") != chain.step - 1:
            problems.append(f"aget_tuple's metadata step is {got.metadata.get('step')}, put {chain.step - 1}")
        listed = [t.checkpoint["id"] async for t in saver.alist(config, limit=5)]
        if listed != chain.ids[::-1][:5]:
            problems.append(f"alist(limit=5) answered {listed}, the newest puts were {chain.ids[::-1][:5]}")
    except Exception as e:  # noqa: BLE001
        problems.append(f"reading back: {type(e).__name__}: {e}")
    return problems


class GraphState(TypedDict):
    items: Annotated[List[str], operator.add]


def build_graph(saver: Any) -> Any:
    builder = StateGraph(GraphState)

    def node(i: int) -> Callable[[GraphState], Any]:
        async def run(state: GraphState) -> Dict[str, List[str]]:
            return {"items": [f"n{i}"]}
        return run

    names = [f"n{i}" for i in range(GRAPH_NODES)]
    for i, name in enumerate(names):
        builder.add_node(name, node(i))
    builder.add_edge(START, names[0])
    for a, b in zip(names, names[1:]):
        builder.add_edge(a, b)
    builder.add_edge(names[-1], END)
    return builder.compile(checkpointer=saver)


async def graph_point(saver_for: Callable[[int], Any], prefix: str, tasks: int, warm: float, window: float,
                      meter: Meter) -> Dict[str, Any]:
    compiled: Dict[int, Any] = {}
    graphs = [compiled.setdefault(id(saver_for(k)), build_graph(saver_for(k))) for k in range(tasks)]
    w = Window(warm, window)
    want = [f"n{i}" for i in range(GRAPH_NODES)]
    last: Dict[str, Any] = {}

    def worker(k: int) -> Callable[[], Any]:
        async def run() -> None:
            n = 0
            while w.running():
                thread_id = f"{prefix}-g{k}-{n}"
                n += 1
                t0 = time.perf_counter()
                try:
                    out = await graphs[k].ainvoke({"items": []}, {"configurable": {"thread_id": thread_id}})
                except Exception as e:  # noqa: BLE001
                    w.errors.append(f"ainvoke: {type(e).__name__}: {e}")
                    return
                w.record(t0, time.perf_counter())
                if out.get("items") != want:
                    w.errors.append(f"ainvoke answered items={out.get('items')}")
                    return
                last["thread_id"], last["graph"] = thread_id, graphs[k]
        return run

    result = await measure(w, meter, [worker(k) for k in range(tasks)], ops_per_latency=GRAPH_NODES)
    problems = []
    if "thread_id" in last:
        try:
            snap = await last["graph"].aget_state({"configurable": {"thread_id": last["thread_id"]}})
            if snap.values.get("items") != want:
                problems.append(f"aget_state answered items={snap.values.get('items')}")
            if snap.metadata.get("step") != GRAPH_NODES:
                problems.append(f"aget_state's step is {snap.metadata.get('step')}, want {GRAPH_NODES}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"aget_state: {type(e).__name__}: {e}")
    else:
        problems.append("no invocation completed")
    result["checks"] = problems
    return result


# ---------------------------------------------------------------------------
# Plan, report
# ---------------------------------------------------------------------------

POINTS = [f"aput/c{c}" for c in PUT_CONCURRENCY] + [f"graph/c{GRAPH_CONCURRENCY}"]


def point_label(point: str) -> str:
    kind, c = point.split("/")
    n = int(c[1:])
    threads = f"{n} thread{'s' if n != 1 else ''}"
    return (f"aput, {threads}" if kind == "aput"
            else f"{GRAPH_NODES}-node graph, {threads}")


async def run_rounds(args: argparse.Namespace, results: Dict[str, Any]) -> None:
    samples = results["samples"]
    postmaster = postmaster_pid(args.postgres_url)
    results["postmaster_pid_found"] = postmaster is not None
    systems = [s for s in SYSTEMS if s in args.systems]
    with tempfile.TemporaryDirectory(prefix="stepwell-lgbench.") as tmp:
        for r in range(1, args.rounds + 1):
            t_round = time.monotonic()
            async with Round(args, r, tmp) as rnd:
                for point in args.points:
                    shift = (r - 1) % len(systems)
                    for system in systems[shift:] + systems[:shift]:
                        if not planned(point, system):
                            continue
                        kind, c = point.split("/")
                        conc = int(c[1:])
                        prefix = f"r{r}-{kind}{conc}-{system}"
                        sidecar = rnd.sidecars.get(system)
                        meter = Meter(sidecar, postmaster)
                        sample: Dict[str, Any] = {"round": r, "point": point, "system": system,
                                                  "order": (systems[shift:] + systems[:shift]).index(system)}
                        try:
                            async with rnd.savers(system, f"lgbench-r{r}-{kind}{conc}") as saver_for:
                                if kind == "aput":
                                    res = await put_point(saver_for, prefix, conc, args.warm, args.window, meter)
                                else:
                                    res = await graph_point(saver_for, prefix, conc, args.warm, args.window, meter)
                        except Exception as e:  # noqa: BLE001
                            res = {"errors": [f"{type(e).__name__}: {e}"], "checks": []}
                        if sidecar is not None and not sidecar.alive():
                            res.setdefault("errors", []).append(
                                f"sidecar exited with {sidecar.proc.returncode}: {sidecar.log_tail()}")
                        if system.startswith(BASELINE) and rnd.pool is not None:
                            res["pool"] = {k: v for k, v in rnd.pool.get_stats().items()
                                           if k in ("pool_min", "pool_max", "pool_size", "requests_waiting",
                                                    "requests_num", "requests_wait_ms")}
                        sample.update(res)
                        samples.append(sample)
                        log(line_of(sample, PROCESSES))
            log(f"-- round {r} done in {time.monotonic() - t_round:.0f} s (load {loadavg()})")


def planned(point: str, system: str) -> bool:
    return point in SYSTEM_POINTS.get(system, (point,))


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds, failed samples left
    out, and the per-round ratios to PostgresSaver."""
    samples = [s for s in results["samples"] if not failed(s)]
    summary: Dict[str, Any] = {}
    fields = ("ops_per_s", "p50_ms", "p99_ms", "python_cpu_us_per_op", "sidecar_cpu_us_per_op",
              "postgres_cpu_us_per_op", "harness_us_per_op", "python_cpu_pct", "sidecar_cpu_pct",
              "postgres_cpu_pct", "machine_busy_pct")
    for point in results["points"]:
        for system in results["systems"]:
            if not planned(point, system):
                continue
            mine = [s for s in samples if s["point"] == point and s["system"] == system]
            row = {f: spread([s.get(f) for s in mine]) for f in fields}
            row["failed_samples"] = sum(1 for s in results["samples"]
                                        if s["point"] == point and s["system"] == system and failed(s))
            row["writes_per_batch"] = spread(
                [s.get("sidecar_metrics", {}).get("writes_per_batch") for s in mine])
            for f in ("commit_ms_mean", "queue_wait_ms_mean", "batches_per_op"):
                row[f] = spread([s.get("sidecar_metrics", {}).get(f) for s in mine])
            if system != BASELINE:
                for f in ("ops_per_s", "p99_ms", "p50_ms"):
                    row[f"ratio_{f}"] = round_ratios(mine, samples, BASELINE, f)
            summary[f"{point} {system}"] = row
    return summary


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    summary = results["summary"]
    for system in results["systems"]:
        if system not in STEPWELL_SYSTEMS:
            continue
        checks = [
            ("aput/c64", "ratio_ops_per_s", ">=", 3.0, "puts/s at 64 threads ≥ 3× PostgresSaver's"),
            ("aput/c64", "ratio_p99_ms", "<=", 0.25, "p99 at 64 threads ≤ ¼ of PostgresSaver's"),
            (f"graph/c{GRAPH_CONCURRENCY}", "ratio_ops_per_s", ">", 1.0,
             f"graph steps/s at {GRAPH_CONCURRENCY} threads > PostgresSaver's"),
        ]
        for point, field, op, bound, text in checks:
            row = summary.get(f"{point} {system}")
            out.append(target(system, text, row.get(field) if row else None, op, bound))
    return out


def markdown(results: Dict[str, Any]) -> str:
    summary = results["summary"]
    lines = [
        f"## LangGraph savers: stepwell against PostgresSaver ({results['mode']} mode)",
        "",
        f"`{results['command']}` — started {results['started']}, {results['elapsed_s']:.0f} s, "
        f"{results['rounds']} round(s) of {results['warm_s']:g} s warm-up + {results['window_s']:g} s window per point, "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['load_start']} at start. "
        "Saver, sidecar and Postgres share the CPUs.",
        "",
        "Medians over the rounds, [min–max] where there is more than one. Throughput is puts/s for `aput` "
        f"points and graph steps/s (nodes executed, {GRAPH_NODES} per invocation) for the graph point; "
        "latency is one `aput`, or one whole invocation for the graph. × PostgresSaver is the per-round "
        "ratio. CPU is µs per put or per step (medians): the Python process (saver, LangGraph and the "
        "load; of it, `harness` is the time spent making the checkpoints to put), the sidecar, and every "
        "Postgres process; `Python %` is the Python process's CPU over the window (100 = one core). "
        "`writes/batch` is the sidecar's group commit (its metrics). InMemorySaver keeps nothing: it "
        "shows what LangGraph and this Python process do without a store.",
        "",
        "| Point | Saver | Throughput /s | × PostgresSaver | p50 ms | p99 ms | p99 × PostgresSaver "
        "| Python CPU µs/op | harness µs/op | sidecar CPU µs/op | Postgres CPU µs/op | Python % | machine busy % "
        "| writes/batch | failed rounds |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]

    def median(row: Dict[str, Any], field: str) -> str:
        return fmt(row[field]["median"] if row.get(field) else None)

    for point in results["points"]:
        for system in results["systems"]:
            if not planned(point, system):
                continue
            row = summary[f"{point} {system}"]
            lines.append("| " + " | ".join([
                point_label(point), SYSTEMS[system],
                fmt_spread(row["ops_per_s"]),
                fmt_spread(row.get("ratio_ops_per_s"), "×"),
                fmt_spread(row["p50_ms"]), fmt_spread(row["p99_ms"]),
                fmt_spread(row.get("ratio_p99_ms"), "×"),
                median(row, "python_cpu_us_per_op"), median(row, "harness_us_per_op"),
                median(row, "sidecar_cpu_us_per_op"), median(row, "postgres_cpu_us_per_op"),
                median(row, "python_cpu_pct"), median(row, "machine_busy_pct"),
                median(row, "writes_per_batch"),
                str(row["failed_samples"]),
            ]) + " |")
    lines += ["", "The sidecars' group commit, from their metrics over each window (medians): a put is one "
              "PutRecords, one write of a batch.", "",
              "| Point | Saver | writes/batch | batches/op | commit ms/batch | queue wait ms/write |",
              "|---|---|--:|--:|--:|--:|"]
    for point in results["points"]:
        for system in results["systems"]:
            row = summary.get(f"{point} {system}")
            if system in STEPWELL_SYSTEMS and row and row.get("writes_per_batch"):
                lines.append("| " + " | ".join([
                    point_label(point), SYSTEMS[system], median(row, "writes_per_batch"),
                    median(row, "batches_per_op"), median(row, "commit_ms_mean"),
                    median(row, "queue_wait_ms_mean")]) + " |")
    lines += ["", "| Target | Saver | median [min–max] | met |", "|---|---|--:|---|"]
    for t in results["targets"]:
        if t["met"] is None:
            lines.append(f"| {t['target']} | {SYSTEMS[t['system']]} | – | not measured |")
        else:
            lines.append(f"| {t['target']} | {SYSTEMS[t['system']]} | {fmt(t['median'])}× "
                         f"[{fmt(t['min'])}–{fmt(t['max'])}] | {'yes' if t['met'] else 'no'} |")
    lines += ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + "."]
    if results.get("stepwell_binary"):
        lines += ["", f"Sidecar: `{results['stepwell_binary']}` (sha256 "
                  f"{results.get('stepwell_binary_sha256', '?')[:16]}…, built {results.get('stepwell_binary_mtime', '?')})"
                  + (f"; Python client: {results['python_client']}" if results.get("python_client") else "") + "."]
    return "\n".join(lines) + "\n"


def versions() -> Dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres", "psycopg",
                 "psycopg-pool", "stepwell", "grpcio", "protobuf"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def main() -> int:
    args = bench_args(__doc__, MODES, SYSTEMS, POINTS, "langgraph", STEPWELL_SYSTEMS, " for the stepwell savers")

    # SIGTERM and SIGHUP end the run as Ctrl-C does, so that the rounds' exits
    # stop the sidecars and drop the databases.
    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)

    started = dt.datetime.now(dt.timezone.utc)
    t0 = time.monotonic()
    results: Dict[str, Any] = {
        "mode": args.mode, "command": args.command, "started": started.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rounds": args.rounds, "warm_s": args.warm, "window_s": args.window,
        "systems": [s for s in SYSTEMS if s in args.systems], "points": [p for p in POINTS if p in args.points],
        "stepwell_binary": args.stepwell, "postgres_saver_pool": {"min_size": POOL_MIN, "max_size": POOL_MAX},
        "graph": {"nodes": GRAPH_NODES, "durability": "async (LangGraph's default)"},
        "checkpoint": {"channels": list(CHANNELS), "value_bytes": VALUE_BYTES,
                       "changed_per_step": "1 on even steps, 2 on odd; all 4 at the input step"},
        "versions": versions(),
        "machine": {"cpus": os.cpu_count(), "load_start": loadavg(), "platform": platform.platform()},
        "samples": [],
    }
    if args.stepwell:
        try:
            results["stepwell_version"] = subprocess.run(
                [args.stepwell, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
            # Which build ran: a binary may be replaced by a newer one later.
            with open(args.stepwell, "rb") as f:
                results["stepwell_binary_sha256"] = hashlib.sha256(f.read()).hexdigest()
            results["stepwell_binary_mtime"] = dt.datetime.fromtimestamp(
                os.stat(args.stepwell).st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        except OSError as e:
            p.error(f"--stepwell {args.stepwell}: {e}")
    results["python_client"] = os.environ.get("STEPWELL_PYTHON_CLIENT_SOURCE", "")
    log(f"==> {args.rounds} round(s) × {len(results['points'])} points × {len(results['systems'])} savers, "
        f"{args.warm:g} s + {args.window:g} s each (load {loadavg()})")
    interrupted = False
    try:
        asyncio.run(run_rounds(args, results))
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: writing what was measured")
    results["elapsed_s"] = time.monotonic() - t0
    results["machine"]["load_end"] = loadavg()
    results["summary"] = summarize(results)
    results["targets"] = targets(results)
    table = markdown(results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    print(table)
    failures = sum(len(s.get("errors") or []) + len(s.get("checks") or []) for s in results["samples"])
    missing = args.rounds * sum(1 for p in results["points"] for s in results["systems"] if planned(p, s)) \
        - len(results["samples"])
    if failures or missing or interrupted:
        log(f"==> {failures} error(s) or failed check(s), {missing} point(s) not run")
        return 1
    log(f"==> results in {args.out}/results.json and results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
