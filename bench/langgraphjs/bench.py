"""Benchmark of stepwell's LangGraph.js checkpoint saver against the Postgres
saver of LangGraph.js.

Measures, on one machine and one throwaway Postgres server, three savers:
PostgresSaver (``@langchain/langgraph-checkpoint-postgres``, over a ``pg``
pool of up to 64 connections, ``setup()`` once per database), stepwell's
``StepwellSaver`` on a sidecar whose store is that Postgres server, and
``StepwellSaver`` on a sidecar whose store is a fresh SQLite file; and
LangGraph.js's MemorySaver, which stores nothing, as the reference for what
LangGraph.js and the Node process cost without a store. Two workloads, the
same as the Python savers' benchmark (bench/langgraph):

* ``put`` at 1, 16 and 64 concurrent threads through one shared saver:
  puts/s, p50 and p99 of ``put``. Each thread writes a chain of checkpoints
  as a graph does: an input checkpoint with four ~1 KB channels, then steps
  that change one or two channels each (``newVersions`` names only those).
* a 10-node linear ``StateGraph`` compiled with the saver, invoked by 16
  concurrent loops, each invocation on a new thread: graph steps (nodes
  executed) per second.

The load runs in one Node process (load.mjs), which measures each point and
prints JSON; this script orchestrates it: the sidecars and the CPU meter of
bench/harness.py, the databases, the interleaving and the report. Each round
runs every point on every saver, the order rotating from round to round, on
fresh databases, a fresh SQLite file and fresh sidecars. The report gives
each point's median and [min-max] over the rounds, and the per-round ratio
stepwell / PostgresSaver. It checks what it measures (every thread's newest
checkpoint reads back as written, the graph's state holds every node's
value) and exits non-zero on any error or failed check.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    bench_args,
    Sidecar, cpu_seconds, database_url, failed, fmt, fmt_spread, line_of, loadavg, log, machine_busy,
    metric_summary, proc_stat, round_ratios, spread, target, tree_cpu_seconds,
)

SYSTEMS = {
    "postgres-saver": "PostgresSaver",
    "stepwell-postgres": "StepwellSaver (Postgres)",
    "stepwell-sqlite": "StepwellSaver (SQLite)",
    "memory": "MemorySaver (no store)",
}
# The processes whose CPU a run's log lines show.
PROCESSES = ("node", "sidecar", "postgres")
BASELINE = "postgres-saver"
STEPWELL_SYSTEMS = ("stepwell-postgres", "stepwell-sqlite")
PUT_CONCURRENCY = (1, 16, 64)
GRAPH_CONCURRENCY = 16
GRAPH_NODES = 10
POINTS = [f"put/c{c}" for c in PUT_CONCURRENCY] + [f"graph/c{GRAPH_CONCURRENCY}"]

MODES = {
    # warm-up and measured window per point, in seconds; rounds
    "smoke": {"warm": 0.3, "window": 0.7, "rounds": 1},
    "full": {"warm": 1.5, "window": 7.0, "rounds": 3},
}
PACKAGES = ("@langchain/langgraph-checkpoint-postgres", "@langchain/langgraph", "@langchain/langgraph-checkpoint",
            "@langchain/core", "pg", "@stepwell/client", "@connectrpc/connect-node", "@bufbuild/protobuf")


class Node:
    """The load program (load.mjs): one Node process for the run, asked one
    thing per JSON line; it answers events and then one result line."""

    def __init__(self, logdir: str):
        self.log_path = os.path.join(logdir, "node.log")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            ["node", os.path.join(HERE, "load.mjs")], cwd=HERE, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        ready = self._read()
        if ready.get("event") != "ready":
            raise RuntimeError(f"load.mjs did not start: {ready}")

    def _read(self) -> Dict[str, Any]:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"load.mjs exited with {self.proc.poll()}: {self.log_tail()}")
        return json.loads(line)

    def log_tail(self) -> str:
        self._log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def ask(self, request: Dict[str, Any], on_event=None) -> Dict[str, Any]:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        while True:
            msg = self._read()
            if msg.get("event") == "result":
                return msg
            if on_event is not None:
                on_event(msg)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(15)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()


class Meter:
    """CPU of the Node process, the sidecar and the Postgres server, the
    machine's busy time, and the sidecar's metrics, at a window's edges."""

    def __init__(self, node_pid: int, sidecar: Optional[Sidecar], postmaster: Optional[int]):
        self.node_pid = node_pid
        self.sidecar = sidecar
        self.postmaster = postmaster

    def snap(self) -> Dict[str, Any]:
        return {
            "t": time.monotonic(),
            "node": cpu_seconds(self.node_pid),
            "sidecar": cpu_seconds(self.sidecar.proc.pid) if self.sidecar else None,
            "postgres": tree_cpu_seconds(self.postmaster) if self.postmaster else None,
            "machine": machine_busy(),
            "metrics": self.sidecar.metrics() if self.sidecar else {},
        }

    @staticmethod
    def diff(a: Dict[str, Any], b: Dict[str, Any], ops: int) -> Dict[str, Any]:
        wall = b["t"] - a["t"]
        busy = b["machine"][0] - a["machine"][0]
        total = b["machine"][1] - a["machine"][1]
        out: Dict[str, Any] = {"meter_wall_s": wall, "machine_busy_pct": 100.0 * busy / total if total else None}
        for k in ("node", "sidecar", "postgres"):
            if a[k] is None or b[k] is None:
                continue
            cpu = b[k] - a[k]
            out[f"{k}_cpu_pct"] = 100.0 * cpu / wall if wall else None
            out[f"{k}_cpu_us_per_op"] = 1e6 * cpu / ops if ops else None
        if a["metrics"] or b["metrics"]:
            out["sidecar_metrics"] = metric_summary(a["metrics"], b["metrics"], ops)
        return out


def run_point(node: Node, meter: Meter, request: Dict[str, Any]) -> Dict[str, Any]:
    """Asks Node for one point and reads the meter at the window's edges: at
    the start Node announced with "go", and when Node prints "end"."""
    snaps: Dict[str, Any] = {}

    def on_event(msg: Dict[str, Any]) -> None:
        if msg.get("event") == "go":
            time.sleep(float(msg.get("start_in_s") or 0))
            snaps["a"] = meter.snap()
        elif msg.get("event") == "end" and "a" in snaps:
            snaps["b"] = meter.snap()

    res = node.ask(request, on_event)
    res.pop("event", None)
    if "a" in snaps and "b" in snaps and res.get("ops"):
        res.update(Meter.diff(snaps["a"], snaps["b"], res["ops"]))
    return res


class Round:
    """One round's stores: a database for PostgresSaver, and a database and a
    SQLite file each with its sidecar, all made fresh and removed after."""

    def __init__(self, args: argparse.Namespace, node: Node, index: int, tmp: str):
        self.args, self.node, self.index, self.tmp = args, node, index, tmp
        self.sidecars: Dict[str, Sidecar] = {}
        self.databases: List[str] = []
        self.saver_url: Optional[str] = None

    def __enter__(self) -> "Round":
        a = self.args
        tag = f"lgjsbench_{os.getpid()}_r{self.index}"
        if BASELINE in a.systems:
            self.saver_url = database_url(a.postgres_url, self._create_db(f"{tag}_saver"))
        if "stepwell-postgres" in a.systems:
            url = database_url(a.postgres_url, self._create_db(f"{tag}_stepwell"))
            self.sidecars["stepwell-postgres"] = Sidecar(a.stepwell, url, f"r{self.index}-postgres", self.tmp)
        if "stepwell-sqlite" in a.systems:
            path = os.path.join(self.tmp, f"r{self.index}.db")
            self.sidecars["stepwell-sqlite"] = Sidecar(a.stepwell, f"sqlite://{path}", f"r{self.index}-sqlite", self.tmp)
        for s in self.sidecars.values():
            s.wait_ready()
        return self

    def _create_db(self, name: str) -> str:
        self.databases.append(name)
        res = self.node.ask({"op": "create-db", "url": self.args.postgres_url, "name": name})
        if res.get("errors"):
            raise RuntimeError(f"create database {name}: {res['errors']}")
        return name

    def __exit__(self, *exc: Any) -> None:
        if self.saver_url and self.node.proc.poll() is None:
            self.node.ask({"op": "release", "url": self.saver_url})
        for s in self.sidecars.values():
            s.stop()
        for name in self.databases:
            if self.node.proc.poll() is None:
                self.node.ask({"op": "drop-db", "url": self.args.postgres_url, "name": name})
        for name in os.listdir(self.tmp):
            if name.startswith(f"r{self.index}.db"):
                os.remove(os.path.join(self.tmp, name))

    def request(self, system: str, point: str) -> Dict[str, Any]:
        kind, c = point.split("/")
        a = self.args
        req = {"op": "point", "system": system, "kind": kind, "threads": int(c[1:]), "warm_s": a.warm,
               "window_s": a.window, "prefix": f"r{self.index}-{kind}{c}-{system}",
               "namespace": f"lgjsbench-r{self.index}-{kind}{c}"}
        if system == BASELINE:
            req["postgres_url"] = self.saver_url
        elif system in self.sidecars:
            req["address"] = self.sidecars[system].address
        return req


def postmaster_pid(node: Node, url: str) -> Optional[int]:
    """The Postgres server's main process, from its data directory's
    postmaster.pid; None (not metered) for a server elsewhere."""
    data = node.ask({"op": "data-directory", "url": url}).get("dir")
    try:
        with open(os.path.join(data, "postmaster.pid")) as f:
            pid = int(f.readline())
    except (OSError, TypeError, ValueError):
        return None
    return pid if proc_stat(pid) is not None else None


def run_rounds(args: argparse.Namespace, node: Node, results: Dict[str, Any]) -> None:
    samples = results["samples"]
    postmaster = postmaster_pid(node, args.postgres_url)
    results["postmaster_pid_found"] = postmaster is not None
    systems = results["systems"]
    with tempfile.TemporaryDirectory(prefix="stepwell-lgjsbench.") as tmp:
        for r in range(1, args.rounds + 1):
            t_round = time.monotonic()
            shift = (r - 1) % len(systems)
            order = systems[shift:] + systems[:shift]
            with Round(args, node, r, tmp) as rnd:
                for point in results["points"]:
                    for system in order:
                        sidecar = rnd.sidecars.get(system)
                        sample: Dict[str, Any] = {"round": r, "point": point, "system": system,
                                                  "order": order.index(system)}
                        try:
                            sample.update(run_point(node, Meter(node.proc.pid, sidecar, postmaster),
                                                    rnd.request(system, point)))
                        except Exception as e:  # noqa: BLE001 - every failure is reported
                            sample.update({"errors": [f"{type(e).__name__}: {e}"], "checks": []})
                        if sidecar is not None and not sidecar.alive():
                            sample.setdefault("errors", []).append(
                                f"sidecar exited with {sidecar.proc.returncode}: {sidecar.log_tail()}")
                        samples.append(sample)
                        log(line_of(sample, PROCESSES))
            log(f"-- round {r} done in {time.monotonic() - t_round:.0f} s (load {loadavg()})")


FIELDS = ("ops_per_s", "p50_ms", "p99_ms", "node_cpu_us_per_op", "sidecar_cpu_us_per_op", "postgres_cpu_us_per_op",
          "harness_us_per_op", "node_cpu_pct", "sidecar_cpu_pct", "postgres_cpu_pct", "machine_busy_pct")
SIDECAR_FIELDS = ("writes_per_batch", "batches_per_op", "commit_ms_mean", "queue_wait_ms_mean")


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds, failed samples left
    out, and the per-round ratios to PostgresSaver."""
    samples = [s for s in results["samples"] if not failed(s)]
    summary: Dict[str, Any] = {}
    for point in results["points"]:
        for system in results["systems"]:
            mine = [s for s in samples if s["point"] == point and s["system"] == system]
            row = {f: spread([s.get(f) for s in mine]) for f in FIELDS}
            row["failed_samples"] = sum(1 for s in results["samples"]
                                        if s["point"] == point and s["system"] == system and failed(s))
            for f in SIDECAR_FIELDS:
                row[f] = spread([s.get("sidecar_metrics", {}).get(f) for s in mine])
            if system != BASELINE:
                for f in ("ops_per_s", "p50_ms", "p99_ms"):
                    row[f"ratio_{f}"] = round_ratios(mine, samples, BASELINE, f)
            summary[f"{point} {system}"] = row
    return summary


def targets(results: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Issue 30's target at 64 threads, per stepwell store: the median of the
    per-round ratios decides it."""
    out = []
    checks = [("ratio_ops_per_s", ">=", 3.0, "puts/s at 64 threads ≥ 3× PostgresSaver's"),
              ("ratio_p99_ms", "<=", 0.25, "p99 at 64 threads ≤ ¼ of PostgresSaver's")]
    for system in results["systems"]:
        if system not in STEPWELL_SYSTEMS:
            continue
        row = results["summary"].get(f"put/c64 {system}")
        for field, op, bound, text in checks:
            out.append(target(system, text, row.get(field) if row else None, op, bound))
    return out


def point_label(point: str) -> str:
    kind, c = point.split("/")
    n = int(c[1:])
    threads = f"{n} thread{'s' if n != 1 else ''}"
    return f"put, {threads}" if kind == "put" else f"{GRAPH_NODES}-node graph, {threads}"


def median_of(row: Dict[str, Any], field: str) -> str:
    return fmt(row[field]["median"] if row.get(field) else None)


def markdown(results: Dict[str, Any]) -> str:
    summary = results["summary"]
    lines = [
        f"## LangGraph.js savers: StepwellSaver against PostgresSaver ({results['mode']} mode)", "",
        f"`{results['command']}` — started {results['started']}, {results['elapsed_s']:.0f} s, "
        f"{results['rounds']} round(s) of {results['warm_s']:g} s warm-up + {results['window_s']:g} s window per "
        f"point, {results['machine']['cpus']} CPUs, load {results['machine']['load_start']} at start and "
        f"{results['machine'].get('load_end', '?')} at the end. Node, sidecar and Postgres share the CPUs.", "",
        "Medians over the rounds, [min–max] where there is more than one. Throughput is puts/s for `put` points "
        f"and graph steps/s (nodes executed, {GRAPH_NODES} per invocation) for the graph point; latency is one "
        "`put`, or one whole invocation for the graph. × PostgresSaver is the per-round ratio. CPU is µs per put "
        "or per step (medians): the Node process (saver, LangGraph.js and the load; of it, `harness` is the time "
        "spent making the checkpoints to put), the sidecar, and every Postgres process; `Node %` is the Node "
        "process's CPU over the window (100 = one core). MemorySaver keeps nothing: it shows what LangGraph.js "
        "and this Node process do without a store.", "",
        "| Point | Saver | Throughput /s | × PostgresSaver | p50 ms | p99 ms | p99 × PostgresSaver | Node CPU µs/op "
        "| harness µs/op | sidecar CPU µs/op | Postgres CPU µs/op | Node % | machine busy % | failed rounds |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for point in results["points"]:
        for system in results["systems"]:
            row = summary[f"{point} {system}"]
            lines.append("| " + " | ".join([
                point_label(point), SYSTEMS[system], fmt_spread(row["ops_per_s"]),
                fmt_spread(row.get("ratio_ops_per_s"), "×"), fmt_spread(row["p50_ms"]), fmt_spread(row["p99_ms"]),
                fmt_spread(row.get("ratio_p99_ms"), "×"), median_of(row, "node_cpu_us_per_op"),
                median_of(row, "harness_us_per_op"), median_of(row, "sidecar_cpu_us_per_op"),
                median_of(row, "postgres_cpu_us_per_op"), median_of(row, "node_cpu_pct"),
                median_of(row, "machine_busy_pct"), str(row["failed_samples"])]) + " |")
    lines += ["", "The sidecars' group commit, from their metrics over each window (medians): a put is one "
              "PutRecords, one write of a batch.", "",
              "| Point | Saver | writes/batch | batches/op | commit ms/batch | queue wait ms/write |",
              "|---|---|--:|--:|--:|--:|"]
    for point in results["points"]:
        for system in results["systems"]:
            row = summary[f"{point} {system}"]
            if system in STEPWELL_SYSTEMS and row.get("writes_per_batch"):
                lines.append("| " + " | ".join([point_label(point), SYSTEMS[system]] + [
                    median_of(row, f) for f in SIDECAR_FIELDS]) + " |")
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
                  f"{results.get('stepwell_binary_sha256', '?')[:16]}…, built {results.get('stepwell_binary_mtime', '?')}); "
                  f"TypeScript client: {results.get('client_source') or '?'}."]
    return "\n".join(lines) + "\n"


def versions() -> Dict[str, str]:
    """The versions installed in bench/langgraphjs/node_modules."""
    out = {"node": subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()}
    for name in PACKAGES:
        try:
            with open(os.path.join(HERE, "node_modules", name, "package.json")) as f:
                out[name] = json.load(f)["version"]
        except (OSError, ValueError, KeyError):
            out[name] = "not installed"
    return out


def binary_facts(path: str) -> Dict[str, str]:
    """Which sidecar build ran: a binary may be replaced by a newer one later."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    mtime = dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    return {"stepwell_binary_sha256": digest, "stepwell_binary_mtime": mtime, "stepwell_version": version}


def parse_args() -> argparse.Namespace:
    return bench_args(__doc__, MODES, SYSTEMS, POINTS, "langgraphjs")


def write(results: Dict[str, Any], out: str) -> str:
    results["summary"] = summarize(results)
    results["targets"] = targets(results)
    table = markdown(results)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(table)
    return table


def main() -> int:
    args = parse_args()

    # SIGTERM and SIGHUP end the run as Ctrl-C does, so that the rounds' exits
    # stop the sidecars and drop the databases.
    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)

    t0 = time.monotonic()
    results: Dict[str, Any] = {
        "mode": args.mode, "command": args.command,
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rounds": args.rounds, "warm_s": args.warm, "window_s": args.window,
        "systems": [s for s in SYSTEMS if s in args.systems], "points": [p for p in POINTS if p in args.points],
        "stepwell_binary": args.stepwell, "postgres_saver_pool": {"max": 64},
        "graph": {"nodes": GRAPH_NODES, "durability": "LangGraph.js's default (async)"},
        "checkpoint": {"channels": 4, "value_bytes": 1000,
                       "changed_per_step": "1 on even steps, 2 on odd; all 4 at the input step"},
        "versions": versions(), "client_source": os.environ.get("STEPWELL_TS_CLIENT_SOURCE", ""),
        "machine": {"cpus": os.cpu_count(), "load_start": loadavg(), "platform": platform.platform()},
        "samples": [],
    }
    results.update(binary_facts(args.stepwell))
    log(f"==> {args.rounds} round(s) × {len(results['points'])} points × {len(results['systems'])} savers, "
        f"{args.warm:g} s + {args.window:g} s each (load {loadavg()})")
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="stepwell-lgjsnode.") as logdir:
        node = Node(logdir)
        try:
            run_rounds(args, node, results)
        except KeyboardInterrupt:
            interrupted = True
            log("interrupted: writing what was measured")
        finally:
            node.stop()
    results["elapsed_s"] = time.monotonic() - t0
    results["machine"]["load_end"] = loadavg()
    print(write(results, args.out))
    failures = sum(len(s.get("errors") or []) + len(s.get("checks") or []) for s in results["samples"])
    missing = args.rounds * len(results["points"]) * len(results["systems"]) - len(results["samples"])
    if failures or missing or interrupted:
        log(f"==> {failures} error(s) or failed check(s), {missing} point(s) not run")
        return 1
    log(f"==> results in {args.out}/results.json and results.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
