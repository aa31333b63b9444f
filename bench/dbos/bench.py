"""Benchmark of durable steps through stepwell's Python client against DBOS
Transact, on one throwaway Postgres server.

The same workflow three ways, each step a trivial function that returns a
small JSON value and counts its own side effect:

* ``dbos``: a ``@DBOS.workflow()`` calling a ``@DBOS.step()`` STEPS times,
  started with ``SetWorkflowID``; DBOS's system database is a fresh database
  of the Postgres server;
* ``stepwell-once``: each step is ``Client.once(key, fn)`` (Begin, the
  function, Complete), one key per step;
* ``stepwell-checkpoint``: the workflow restores its checkpoints (to skip
  the steps a previous run did), then runs each step and records its result
  with ``Client.checkpoint``, the last one terminal.

Both stepwell variants go through one blocking ``stepwell.Client`` shared by
every workflow, to a sidecar whose store is a fresh database of the same
Postgres server. Concurrency is threads, as users of DBOS's and stepwell's
blocking APIs write it: each of the 1 or 16 threads runs workflows back to
back in a closed loop. Each round runs every point on every system, the
order rotating from round to round, each on a fresh database and a fresh
sidecar (or a freshly launched DBOS). Throughput is steps per second.

After the rounds, a short pass counts the Postgres statements and transactions
per step of each system from the server's statement log (``log_statement``
set on that pass's databases only), and a cProfile of the stepwell variants
shows what the Python client's own time per call goes to.

Checks (every mode): every workflow a thread finished ran each of its steps'
side effects exactly once, and the store agrees: DBOS lists STEPS steps of a
successful workflow; every ``once()`` key is completed; every checkpointed
workflow restores STEPS phases in order, the last terminal. Any error or
failed check makes the run exit non-zero. ``--fault`` breaks one workflow on
purpose (a side effect run twice, or a step left out) to see the checks fail.

Started by ``bench/dbos/run`` (virtualenv, sidecar binary, throwaway
Postgres in STEPWELL_TEST_POSTGRES_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import cProfile
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional

from dbos import DBOS, SetWorkflowID
from stepwell import Client
from stepwell.v1 import idempotency_pb2 as ip

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    Meter, Sidecar, Window, bench_args, create_database, drop_databases, fmt, fmt_spread, line_of, loadavg, log,
    measure, median_of, package_versions, postmaster_pid, report_footer, rotation, run_and_report, run_header,
    summarize_rounds,
)
from statements import StatementLog  # noqa: E402 (beside this file)

SYSTEMS = {
    "dbos": "DBOS 3.4.0 steps",
    "stepwell-once": "stepwell once() per step",
    "stepwell-checkpoint": "stepwell checkpoint() per step",
}
STEPWELL_SYSTEMS = ("stepwell-once", "stepwell-checkpoint")
PROCESSES = ("python", "sidecar", "postgres")
CONCURRENCY = (1, 16)
POINTS = [f"steps/c{c}" for c in CONCURRENCY]
STEPS = 20
CHECK_MAX = 40  # workflows checked in the store per point outside --smoke (the side effects are checked for all)
COUNT_WORKFLOWS = 10  # workflows of the statement-counting pass, one at a time
PROFILE_WORKFLOWS = 10  # workflows of each cProfile run

MODES = {
    "smoke": {"warm": 0.2, "window": 1.0, "rounds": 1},
    "full": {"warm": 1.0, "window": 5.0, "rounds": 3},
}


# ---------------------------------------------------------------------------
# The steps and their side effects
# ---------------------------------------------------------------------------


class Effects:
    """How many times each (workflow, step) side effect ran, and the fault
    to inject, if any, in the first workflow it sees."""

    def __init__(self, fault: str = ""):
        self.counts: Dict[tuple, int] = {}
        self.lock = threading.Lock()
        self.fault = fault
        self.faulted = False

    def reset(self) -> None:
        with self.lock:
            self.counts.clear()
            self.faulted = False

    def step(self, wf: str, i: int) -> Dict[str, Any]:
        with self.lock:
            self.counts[(wf, i)] = self.counts.get((wf, i), 0) + 1
        return {"step": i, "square": i * i}

    def skip(self, wf: str, i: int) -> bool:
        """Whether the workflow leaves this step out (--fault skip: the last
        step of the first workflow)."""
        return self._take("skip") if i == STEPS - 1 else False

    def twice(self) -> bool:
        """Whether a step's side effect runs a second time (--fault twice)."""
        return self._take("twice")

    def _take(self, kind: str) -> bool:
        with self.lock:
            if self.fault == kind and not self.faulted:
                self.faulted = True
                return True
        return False

    def check(self, finished: List[str]) -> List[str]:
        """Every finished workflow ran each of its steps once, and no other
        workflow ran any."""
        problems = []
        done = set(finished)
        for (wf, i), n in self.counts.items():
            if n != 1 or wf not in done:
                problems.append(f"{wf} step {i}: side effect ran {n} time(s)" + ("" if wf in done else ", unfinished"))
        for wf in finished:
            missing = [i for i in range(STEPS) if (wf, i) not in self.counts]
            if missing:
                problems.append(f"{wf}: steps {missing} never ran")
        if not finished:
            problems.append("no workflow finished")
        return problems[:5]


EFFECTS = Effects()


@DBOS.step()
def dbos_step(wf: str, i: int) -> Dict[str, Any]:
    if EFFECTS.twice():
        EFFECTS.step(wf, i)
    return EFFECTS.step(wf, i)


@DBOS.workflow()
def dbos_workflow(wf: str, steps: int) -> int:
    total = 0
    for i in range(steps):
        if not EFFECTS.skip(wf, i):
            total += dbos_step(wf, i)["square"]
    return total


def once_workflow(sw: Client, wf: str, steps: int) -> int:
    """Each step through once(): its side effect at most once per key."""
    total = 0
    for i in range(steps):
        if not EFFECTS.skip(wf, i):
            total += sw.once(f"{wf}/s{i}", once_effect(wf, i))["square"]
    return total


def once_effect(wf: str, i: int) -> Callable[[], Dict[str, Any]]:
    """The step's function, without arguments (once() passes a context to
    a function that takes one)."""
    def effect() -> Dict[str, Any]:
        if EFFECTS.twice():
            EFFECTS.step(wf, i)
        return EFFECTS.step(wf, i)
    return effect


def checkpoint_workflow(sw: Client, wf: str, steps: int) -> int:
    """Each step run, then its result checkpointed; a resumed workflow skips
    the steps its restored checkpoints record."""
    done = {c.phase for c in sw.restore(wf)}
    total = 0
    for i in range(steps):
        if f"s{i}" in done or EFFECTS.skip(wf, i):
            continue
        if EFFECTS.twice():
            EFFECTS.step(wf, i)
        result = EFFECTS.step(wf, i)
        sw.checkpoint(wf, f"s{i}", result, terminal=i == steps - 1)
        total += result["square"]
    return total


# ---------------------------------------------------------------------------
# The systems, each on a fresh database of the Postgres server
# ---------------------------------------------------------------------------


class Target:
    """One system on a fresh database: a sidecar and a client, or a launched
    DBOS. `run(wf)` runs one workflow; `check(wfs)` reads the store."""

    def __init__(self, args: argparse.Namespace, system: str, db: str, tmp: str, log_statements: bool = False):
        self.args = args
        self.system = system
        self.db = db
        self.sidecar: Optional[Sidecar] = None
        self.client: Optional[Client] = None
        url = create_database(args.postgres_url, db)
        if log_statements:
            StatementLog.enable_for(args.postgres_url, db)
        if system == "dbos":
            DBOS(config={"name": "dbos-bench", "system_database_url": url, "log_level": "WARNING"})
            DBOS.launch()
        else:
            self.sidecar = Sidecar(args.stepwell, url, db, tmp)
            self.sidecar.wait_ready()
            self.client = Client(self.sidecar.address, namespace="dbosbench", timeout=60.0)

    def run(self, wf: str) -> int:
        if self.system == "dbos":
            with SetWorkflowID(wf):
                return dbos_workflow(wf, STEPS)
        if self.system == "stepwell-once":
            return once_workflow(self.client, wf, STEPS)
        return checkpoint_workflow(self.client, wf, STEPS)

    def check(self, wfs: List[str]) -> List[str]:
        """What the store holds of each workflow: STEPS steps, done."""
        problems = []
        for wf in wfs:
            try:
                problems += self._check_one(wf)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                problems.append(f"{wf}: {type(e).__name__}: {e}")
        return problems[:5]

    def _check_one(self, wf: str) -> List[str]:
        if self.system == "dbos":
            status = DBOS.retrieve_workflow(wf).get_status().status
            steps = DBOS.list_workflow_steps(wf)
            if status != "SUCCESS" or len(steps) != STEPS:
                return [f"{wf}: DBOS says {status} with {len(steps)} steps, want SUCCESS with {STEPS}"]
            return []
        if self.system == "stepwell-once":
            states = [self.client.get(f"{wf}/s{i}").state for i in range(STEPS)]
            bad = [i for i, s in enumerate(states) if s != ip.RECORD_STATE_COMPLETED]
            return [f"{wf}: once() keys of steps {bad} are not completed"] if bad else []
        cps = self.client.restore(wf)
        phases = [c.phase for c in cps]
        if phases != [f"s{i}" for i in range(STEPS)] or not cps[-1].terminal:
            return [f"{wf}: restored phases {phases}, want s0..s{STEPS - 1} with the last terminal"]
        return []

    def meter(self, postmaster: Optional[int]) -> Meter:
        return Meter(self.sidecar, postmaster)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.sidecar is not None:
            self.sidecar.stop()
        if self.system == "dbos":
            DBOS.destroy()
        drop_databases(self.args.postgres_url, [self.db])


# ---------------------------------------------------------------------------
# A point: threads running workflows back to back
# ---------------------------------------------------------------------------


async def steps_point(target: Target, threads: int, prefix: str, w: Window, meter: Meter) -> Dict[str, Any]:
    """Each thread runs workflows until the window ends; a workflow's
    latency is recorded, and its STEPS steps are the operations counted."""
    finished: List[List[str]] = [[] for _ in range(threads)]
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="workflow")

    def blocking(k: int) -> None:
        n = 0
        while w.running():
            wf = f"{prefix}-t{k}-w{n}"
            t0 = time.perf_counter()
            try:
                target.run(wf)
            except Exception as e:  # noqa: BLE001 - every failure is reported
                w.errors.append(f"workflow {wf}: {type(e).__name__}: {e}")
                return
            w.record(t0, time.perf_counter())
            finished[k].append(wf)
            n += 1

    def worker(k: int) -> Callable[[], Any]:
        return lambda: loop.run_in_executor(pool, blocking, k)

    try:
        result = await measure(w, meter, [worker(k) for k in range(threads)], ops_per_latency=STEPS)
    finally:
        pool.shutdown(wait=True)
    done = [wf for f in finished for wf in f]
    result["workflows_finished"] = len(done)
    result["checks"] = EFFECTS.check(done) + await asyncio.to_thread(target.check, store_sample(target, done))
    return result


def store_sample(target: Target, done: List[str]) -> List[str]:
    """The workflows whose store records are read: all in --smoke, else at
    most CHECK_MAX spread over the point."""
    if target.args.mode == "smoke" or len(done) <= CHECK_MAX:
        return done
    return done[:: max(1, len(done) // CHECK_MAX)][:CHECK_MAX]


async def run_point(args: argparse.Namespace, system: str, point: str, r: int, tmp: str,
                    postmaster: Optional[int]) -> Dict[str, Any]:
    """One point on one system: a fresh database and sidecar (or DBOS), the
    workload, the checks, and the sidecar's health after it."""
    threads = int(point.split("/c")[1])
    EFFECTS.reset()
    target = None
    try:
        db = f"dbosbench_{os.getpid()}_r{r}_c{threads}_{system}".replace("-", "_")
        target = await asyncio.to_thread(Target, args, system, db, tmp)
        w = Window(args.warm, args.window)
        res = await steps_point(target, threads, f"r{r}-c{threads}", w, target.meter(postmaster))
        if target.sidecar is not None and not target.sidecar.alive():
            res.setdefault("errors", []).append(
                f"sidecar exited with {target.sidecar.proc.returncode}: {target.sidecar.log_tail()}")
    except Exception as e:  # noqa: BLE001 - every failure is reported
        res = {"errors": [f"{type(e).__name__}: {e}"], "checks": []}
    finally:
        if target is not None:
            await asyncio.to_thread(target.close)
    res["unit"] = "steps/s"
    return res


async def run_rounds(args: argparse.Namespace, results: Dict[str, Any]) -> None:
    postmaster = postmaster_pid(args.postgres_url)
    results["postmaster_pid_found"] = postmaster is not None
    with tempfile.TemporaryDirectory(prefix="stepwell-dbosbench.") as tmp:
        for r in range(1, args.rounds + 1):
            t_round = time.monotonic()
            order = rotation(results["systems"], r)
            for point in results["points"]:
                for system in order:
                    res = await run_point(args, system, point, r, tmp, postmaster)
                    sample = {"round": r, "point": point, "system": system, "order": order.index(system),
                              "load": loadavg()}
                    sample.update(res)
                    results["samples"].append(sample)
                    log(line_of(sample, PROCESSES))
            log(f"-- round {r} done in {time.monotonic() - t_round:.0f} s (load {loadavg()})")
        if not args.no_extras:
            results["statements"] = await asyncio.to_thread(count_statements, args, results["systems"], tmp)
            results["profiles"] = await asyncio.to_thread(profile_client, args, results["systems"], tmp)


# ---------------------------------------------------------------------------
# Statements per step, and the Python client's profile
# ---------------------------------------------------------------------------


def count_statements(args: argparse.Namespace, systems: List[str], tmp: str) -> Dict[str, Any]:
    """Each system's Postgres statements and transactions per step, from the
    server's statement log over COUNT_WORKFLOWS workflows run one at a time."""
    slog = StatementLog.open(args.postgres_url)
    if slog is None:
        return {"skipped": "the server's log file is not readable from here"}
    out: Dict[str, Any] = {}
    try:
        for system in systems:
            EFFECTS.reset()
            target = Target(args, system, f"dbosbench_{os.getpid()}_count_{system}".replace("-", "_"), tmp,
                            log_statements=True)
            try:
                target.run("count-warm")  # the first workflow's one-off statements (a cache's, a pool's) are left out
                start = slog.offset()
                wfs = [f"count-w{n}" for n in range(COUNT_WORKFLOWS)]
                for wf in wfs:
                    target.run(wf)
                counted = slog.count(start, target.db)
                problems = EFFECTS.check(["count-warm"] + wfs) + target.check(wfs)
            finally:
                target.close()
            steps = STEPS * COUNT_WORKFLOWS
            out[system] = {"workflows": COUNT_WORKFLOWS, "steps": steps, "checks": problems,
                           "statements_per_step": counted["statements"] / steps,
                           "transactions_per_step": counted["transactions"] / steps,
                           "by_statement": {k: v / steps for k, v in counted["by_statement"].items()}}
            log(f"statements: {system}: {out[system]['statements_per_step']:.2f} statements and "
                f"{out[system]['transactions_per_step']:.2f} transactions per step")
    finally:
        slog.close()
    return out


def profile_client(args: argparse.Namespace, systems: List[str], tmp: str) -> Dict[str, Any]:
    """A cProfile of PROFILE_WORKFLOWS workflows, one at a time, of each
    stepwell variant: the Python process's CPU per call and where it goes."""
    out: Dict[str, Any] = {}
    for system in [s for s in systems if s in STEPWELL_SYSTEMS]:
        EFFECTS.reset()
        target = Target(args, system, f"dbosbench_{os.getpid()}_profile_{system}".replace("-", "_"), tmp)
        try:
            target.run("profile-warm")
            c0, t0 = time.process_time(), time.perf_counter()
            for n in range(PROFILE_WORKFLOWS):
                target.run(f"plain-w{n}")
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            prof = cProfile.Profile()
            prof.enable()
            for n in range(PROFILE_WORKFLOWS):
                target.run(f"profile-w{n}")
            prof.disable()
        finally:
            target.close()
        calls = STEPS * PROFILE_WORKFLOWS
        stats = pstats.Stats(prof, stream=io.StringIO())
        top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:8]  # by own time
        out[system] = {
            "calls": calls, "cpu_us_per_call": 1e6 * cpu / calls, "wall_us_per_call": 1e6 * wall / calls,
            "top_own_time": [{"function": f"{os.path.basename(f)}:{line}({name})", "calls_per_step": v[1] / calls,
                              "own_us_per_step": 1e6 * v[2] / calls} for (f, line, name), v in top],
        }
    return out


# ---------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------


def point_label(point: str) -> str:
    n = int(point.split("/c")[1])
    return f"{STEPS}-step workflows, {n} thread{'s' if n != 1 else ''}"


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds, failed samples left
    out, and each stepwell variant's per-round ratios to DBOS."""
    return summarize_rounds(results, STEPWELL_SYSTEMS, ("dbos",))


def table_rows(results: Dict[str, Any]) -> List[str]:
    lines = []
    for point in results["points"]:
        for system in results["systems"]:
            row = results["summary"][f"{point} {system}"]
            lines.append("| " + " | ".join([
                point_label(point), SYSTEMS[system], fmt_spread(row["ops_per_s"]),
                fmt_spread(row.get("ratio_ops_per_s_dbos"), "×"),
                fmt_spread(row["p50_ms"]), fmt_spread(row["p99_ms"]),
                median_of(row, "python_cpu_us_per_op"), median_of(row, "sidecar_cpu_us_per_op"),
                median_of(row, "postgres_cpu_us_per_op"), median_of(row, "machine_busy_pct"),
                str(row["failed_samples"]),
            ]) + " |")
    return lines


def extra_rows(results: Dict[str, Any]) -> List[str]:
    """The statements per step and the Python client's cost per call."""
    lines = []
    st = results.get("statements") or {}
    if st.get("skipped"):
        lines += ["", f"Statements per step: not counted ({st['skipped']})."]
    elif st:
        lines += ["", f"Postgres statements and transactions per step, from the server's statement log over "
                  f"{COUNT_WORKFLOWS} workflows run one at a time, the workflow's own statements included "
                  "(BEGIN, COMMIT and a pool's empty liveness check count as statements; a statement outside "
                  "a BEGIN ... COMMIT block is a transaction of its own); the most frequent statements:", "",
                  "| System | statements/step | transactions/step | most frequent (per step) |", "|---|--:|--:|---|"]
        for system, c in st.items():
            top = sorted(c["by_statement"].items(), key=lambda kv: -kv[1])[:4]
            often = "; ".join(f"{fmt(n)}× `{k[:40].replace('|', '/')}`" for k, n in top)
            lines.append(f"| {SYSTEMS[system]} | {fmt(c['statements_per_step'])} | "
                         f"{fmt(c['transactions_per_step'])} | {often} |")
    for system, p in (results.get("profiles") or {}).items():
        lines += ["", f"{SYSTEMS[system]}: the Python process's CPU is {fmt(p['cpu_us_per_call'])} µs per call "
                  f"of a {fmt(p['wall_us_per_call'])} µs call ({p['calls']} calls, one workflow at a time); "
                  "a cProfile's top functions by own time, per call:", "",
                  "| function | calls/call | own µs/call |", "|---|--:|--:|"]
        for t in p["top_own_time"][:6]:
            lines.append(f"| `{t['function']}` | {fmt(t['calls_per_step'])} | {fmt(t['own_us_per_step'])} |")
    return lines


def markdown(results: Dict[str, Any]) -> str:
    lines = [
        f"## Durable steps: stepwell's Python client against DBOS Transact ({results['mode']} mode)",
        "",
        f"`{results['command']}` — started {results['started']}, {results['elapsed_s']:.0f} s, "
        f"{results['rounds']} round(s) of {results['warm_s']:g} s warm-up + {results['window_s']:g} s window per point, "
        f"{results['machine']['cpus']} CPUs, load {results['machine']['load_start']} at start, "
        f"{results['machine'].get('load_end', '?')} at the end. Workflows, sidecar and Postgres share the CPUs.",
        "",
        f"Medians over the rounds, [min–max] where there is more than one. A workflow is {STEPS} steps, "
        "each a trivial function returning a small JSON value; throughput is steps/s over all threads; "
        "× DBOS is the per-round ratio. Latency is a whole workflow's. CPU is µs per step (medians): "
        "this Python process, the sidecar, every Postgres process.",
        "",
        "| Point | System | steps/s | × DBOS | p50 ms | p99 ms | Python CPU µs/step | sidecar CPU µs/step "
        "| Postgres CPU µs/step | machine busy % | failed rounds |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += table_rows(results)
    lines += extra_rows(results)
    lines += report_footer(results)
    return "\n".join(lines) + "\n"


def parse_args() -> argparse.Namespace:
    sys.argv, extra = split_own_args(sys.argv)
    args = bench_args(__doc__, MODES, list(SYSTEMS), POINTS, "dbos", list(STEPWELL_SYSTEMS), " for the stepwell variants")
    args.fault, args.no_extras = extra.fault, extra.no_extras
    return args


def split_own_args(argv: List[str]) -> tuple:
    """This benchmark's own flags, taken out before the shared ones are read."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--fault", choices=["twice", "skip"], default="",
                   help="break the first workflow of every point, to see the checks fail")
    p.add_argument("--no-extras", action="store_true", help="skip the statement count and the profile")
    own, rest = p.parse_known_args(argv[1:])
    return [argv[0]] + rest, own


def main() -> int:
    args = parse_args()
    EFFECTS.fault = args.fault
    results = run_header(args, list(SYSTEMS), POINTS)
    results.update({"steps_per_workflow": STEPS, "concurrency": "threads (one per concurrent workflow)",
                    "fault": args.fault, "samples": [],
                    "versions": package_versions(["dbos", "stepwell", "grpcio", "protobuf", "SQLAlchemy", "psycopg"])})
    status = run_and_report(args, results, run_rounds, summarize, markdown)
    extra_checks = [c for s in (results.get("statements") or {}).values() if isinstance(s, dict) for c in s.get("checks", [])]
    if extra_checks:
        log(f"==> the statement-counting pass failed its checks: {extra_checks}")
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
