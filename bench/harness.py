"""What the Python benchmarks of stepwell share: the sidecars they start
(each on free loopback ports, its admin listener included), the CPU and
load figures they read from /proc, the database URLs of the throwaway
Postgres server they run on, the closed-loop windows they measure in and the
meter that reads CPU and metrics at a window's edges, what the
sidecar's metrics say of a window and how rounds become medians, spreads,
per-round ratios and targets. Each benchmark puts this folder on sys.path."""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(*parts: Any) -> None:
    print(*parts, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stat(pid: int) -> Optional[List[str]]:
    """The fields of /proc/PID/stat after the command name (field 3 first)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()
    except OSError:
        return None


def cpu_seconds(pid: int, children: bool = False) -> float:
    f = proc_stat(pid)
    if f is None:
        return 0.0
    ticks = int(f[11]) + int(f[12])  # utime, stime
    if children:
        ticks += int(f[13]) + int(f[14])  # cutime, cstime: reaped children
    return ticks / CLK_TCK


def tree_cpu_seconds(root: int) -> float:
    """CPU of a server and its children: the root's own and reaped children's
    time, plus every live child's (Postgres's backends are the postmaster's
    children; a backend that exits moves its time into the postmaster's
    cutime)."""
    total = cpu_seconds(root, children=True)
    for name in os.listdir("/proc"):
        if name.isdigit():
            f = proc_stat(int(name))
            if f is not None and int(f[1]) == root:
                total += cpu_seconds(int(name))
    return total


def machine_busy() -> tuple:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


class Sidecar:
    """A stepwell sidecar process on a free loopback port, with its admin
    listener (/metrics, /readyz) on another; `extra` are more serve flags."""

    def __init__(self, binary: str, database_url: str, name: str, logdir: str, extra: tuple = ()):
        self.name = name
        self.port = free_port()
        self.admin = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(logdir, f"{name}.log")
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, STEPWELL_LOG=os.environ.get("STEPWELL_LOG", "warn"))
        self.proc = subprocess.Popen(
            [binary, "serve", "--listen", self.address, "--database-url", database_url,
             "--admin-listen", f"127.0.0.1:{self.admin}", *extra],
            stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sidecar {self.name} exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.1)
        raise RuntimeError(f"sidecar {self.name} not ready after {timeout} s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def metrics(self) -> Dict[str, float]:
        """The counters, sums and counts of /metrics (no histogram buckets)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=2) as r:
                text = r.read().decode()
        except (urllib.error.URLError, OSError):
            return {}
        out = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            name = key.split("{", 1)[0]
            if name.endswith(("_sum", "_count", "_total")):
                try:
                    out[key] = float(value)
                except ValueError:
                    pass
        return out

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def database_url(base: str, name: str) -> str:
    u = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + name, u.query, u.fragment))


# ---------------------------------------------------------------------------
# Windows and rounds, as the Python benchmarks report them
# ---------------------------------------------------------------------------


class Window:
    """A closed-loop measurement: tasks run from the start through warm-up
    and window; operations that complete inside the window are counted.

    A window in which nothing has completed yet (an operation slower than
    the whole window, as on a starved machine) stretches until the first
    completion, up to `STRETCH_S` past its start, and the rate is taken
    over the stretched window: a point is then slow, not empty."""

    STRETCH_S = 60.0

    def __init__(self, warm: float, window: float):
        now = time.perf_counter()
        self.start = now + warm
        self.end = self.start + window
        self.window = window
        self.latencies: List[float] = []
        self.errors: List[str] = []
        self.harness_s = 0.0  # time spent making the load (checkpoints, items), inside the window

    def record(self, t0: float, t1: float) -> None:
        if not self.latencies and self.end < t1 <= self.start + self.STRETCH_S:
            self.end, self.window = t1, t1 - self.start
        if self.start <= t1 <= self.end:
            self.latencies.append(t1 - t0)

    def stretching(self, now: float) -> bool:
        """Whether the window goes on past its end, waiting for a first completion."""
        return not self.latencies and now < self.start + self.STRETCH_S

    def running(self) -> bool:
        now = time.perf_counter()
        return (now < self.end or self.stretching(now)) and len(self.errors) < 5


class Meter:
    """CPU of this process, the sidecar and the Postgres server, the machine's
    busy time, and the sidecar's metrics, between two instants."""

    def __init__(self, sidecar: Optional[Sidecar], postmaster: Optional[int]):
        self.sidecar = sidecar
        self.postmaster = postmaster

    def snap(self) -> Dict[str, Any]:
        return {
            "t": time.perf_counter(),
            "python": cpu_seconds(os.getpid()),
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
        out: Dict[str, Any] = {"wall_s": wall, "machine_busy_pct": 100.0 * busy / total if total else None}
        for k in ("python", "sidecar", "postgres"):
            if a[k] is None or b[k] is None:
                out[f"{k}_cpu_pct"] = out[f"{k}_cpu_us_per_op"] = None
                continue
            cpu = b[k] - a[k]
            out[f"{k}_cpu_pct"] = 100.0 * cpu / wall if wall else None
            out[f"{k}_cpu_us_per_op"] = 1e6 * cpu / ops if ops else None
        if a["metrics"] or b["metrics"]:
            out["sidecar_metrics"] = metric_summary(a["metrics"], b["metrics"], ops)
        return out


async def measure(w: Window, meter: Meter, workers: List[Callable[[], Any]], ops_per_latency: int = 1) -> Dict[str, Any]:
    snaps: Dict[str, Any] = {}
    finished = False

    # The meter runs on a thread of its own, so that it reads at the window's
    # edges however busy the event loop is.
    def clock() -> None:
        time.sleep(max(0.0, w.start - time.perf_counter()))
        snaps["a"] = meter.snap()
        while True:
            now = time.perf_counter()
            if now < w.end:
                time.sleep(w.end - now)
            elif w.stretching(now) and len(w.errors) < 5 and not finished:
                time.sleep(0.05)  # the window stretches until a first completion ends it
            else:
                break
        snaps["b"] = meter.snap()

    clock_thread = threading.Thread(target=clock, name="meter", daemon=True)
    clock_thread.start()
    await asyncio.gather(*(worker() for worker in workers))
    # Workers that have all stopped (on errors) end a stretching window at once.
    finished = True
    await asyncio.to_thread(clock_thread.join)
    lat = sorted(w.latencies)
    n = len(lat)
    ops = n * ops_per_latency
    out = {
        "completed": n,
        "ops": ops,
        "ops_per_s": ops / w.window,
        "p50_ms": 1000 * lat[max(0, math.ceil(0.50 * n) - 1)] if n else None,
        "p99_ms": 1000 * lat[max(0, math.ceil(0.99 * n) - 1)] if n else None,
        "max_ms": 1000 * lat[-1] if n else None,
        "errors": w.errors,
    }
    if not n and not w.errors:
        w.errors.append("nothing completed inside the window")
    if w.errors:
        counts: Dict[str, int] = {}
        for e in w.errors:
            counts[e[:500]] = counts.get(e[:500], 0) + 1
        out["errors"] = [f"{e} (x{c})" if c > 1 else e for e, c in counts.items()]
    if ops and w.harness_s:
        out["harness_us_per_op"] = 1e6 * w.harness_s / ops
    if "a" in snaps and "b" in snaps:
        out.update(Meter.diff(snaps["a"], snaps["b"], ops))
    return out


def postmaster_pid(url: str) -> Optional[int]:
    """The pid of the Postgres server at `url` when it runs on this machine
    (the parent of this connection's backend), to meter its CPU; else None."""
    try:
        import psycopg  # only the benchmarks that run against Postgres have it

        with psycopg.connect(url, autocommit=True) as c:
            backend = c.execute("SELECT pg_backend_pid()").fetchone()[0]
        f = proc_stat(backend)
        return int(f[1]) if f else None
    except Exception:  # noqa: BLE001 - a remote server is not metered
        return None


def metric_summary(before: Dict[str, float], after: Dict[str, float], ops: int) -> Dict[str, Any]:
    """What the sidecar's metrics say about a window: batches, writes per
    batch, commit time and queue wait, and every counter that moved."""
    delta = {k: after[k] - before.get(k, 0.0) for k in after if after[k] != before.get(k, 0.0)}

    def total(prefix: str) -> float:
        return sum(v for k, v in delta.items() if k.split("{", 1)[0] == prefix)

    batches = total("stepwell_batch_writes_count")
    out: Dict[str, Any] = {"moved": delta}
    if batches:
        out["batches"] = batches
        out["writes_per_batch"] = total("stepwell_batch_writes_sum") / batches
        out["batches_per_op"] = batches / ops if ops else None
    commits = total("stepwell_batch_commit_duration_seconds_count")
    if commits:
        out["commit_ms_mean"] = 1000 * total("stepwell_batch_commit_duration_seconds_sum") / commits
    waits = total("stepwell_write_queue_wait_seconds_count")
    if waits:
        out["queue_wait_ms_mean"] = 1000 * total("stepwell_write_queue_wait_seconds_sum") / waits
    return out


def line_of(s: Dict[str, Any], processes: tuple) -> str:
    """One sample as the log line a run prints, with the CPU of `processes`."""
    bits = [f"round {s['round']}", f"{s['point']:<10}", f"{s['system']:<17}"]
    if s.get("ops_per_s") is not None:
        unit = s.get("unit") or ("steps/s" if s["point"].startswith("graph") else "puts/s")
        bits.append(f"{s['ops_per_s']:9.0f} {unit}")
        if s.get("p50_ms") is not None:
            bits.append(f"p50 {s['p50_ms']:.2f} ms p99 {s['p99_ms']:.2f} ms")
        for k in processes:
            v = s.get(f"{k}_cpu_pct")
            if v is not None:
                bits.append(f"{k} {v:.0f}%")
    for e in s.get("errors") or []:
        bits.append(f"ERROR {e}")
    for c in s.get("checks") or []:
        bits.append(f"CHECK FAILED {c}")
    return "  ".join(bits)


def spread(values: List[Optional[float]]) -> Optional[Dict[str, float]]:
    """The median, least, greatest and count of the values given (None left out)."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present), "n": len(present)}


def failed(sample: Dict[str, Any]) -> bool:
    return bool(sample.get("errors") or sample.get("checks"))


def round_ratios(mine: List[Dict[str, Any]], samples: List[Dict[str, Any]], baseline: str, field: str) -> Optional[Dict[str, float]]:
    """The spread of `field`'s ratio to the baseline's, taken round by round
    (each of `mine` against the baseline's sample of its point and round)."""
    ratios = []
    for s in mine:
        base = next((b for b in samples if b["point"] == s["point"] and b["system"] == baseline
                     and b["round"] == s["round"]), None)
        if base and base.get(field) and s.get(field) is not None:
            ratios.append(s[field] / base[field])
    return spread(ratios)


def target(system: str, text: str, s: Optional[Dict[str, float]], op: str, bound: float) -> Dict[str, Any]:
    """A target's row: whether the median of `s` is `op` (">=", "<=" or ">") `bound`."""
    if s is None:
        return {"system": system, "target": text, "met": None}
    m = s["median"]
    met = m >= bound if op == ">=" else m <= bound if op == "<=" else m > bound
    return {"system": system, "target": text, "median": m, "min": s["min"], "max": s["max"], "met": met}


def fmt(v: Optional[float], digits: int = 3) -> str:
    if v is None:
        return "–"
    if 0 < abs(v) < 0.01:
        return "<0.01"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def fmt_spread(s: Optional[Dict[str, float]], unit: str = "", digits: int = 3) -> str:
    if s is None:
        return "–"
    if s["n"] == 1:
        return f"{fmt(s['median'], digits)}{unit}"
    return f"{fmt(s['median'], digits)}{unit} [{fmt(s['min'], digits)}–{fmt(s['max'], digits)}]"


def bench_args(
    doc: str,
    modes: Dict[str, Dict[str, Any]],
    systems: List[str],
    points: List[str],
    name: str,
    stepwell_systems: Optional[List[str]] = None,
    stepwell_what: str = "",
) -> argparse.Namespace:
    """The command line every benchmark driver takes: its mode (the rounds,
    warm-up and window it sets, each overridable), where results go, the
    sidecar binary, the systems and points to run, and the throwaway
    Postgres (STEPWELL_TEST_POSTGRES_URL) its `run` script started. `name`
    is the benchmark's folder under bench/; with `stepwell_systems`, the
    binary is needed only when one of them runs, else always."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--mode", choices=sorted(modes), default="smoke")
    p.add_argument("--rounds", type=int)
    p.add_argument("--warm", type=float, help="warm-up seconds per point")
    p.add_argument("--window", type=float, help="measured seconds per point")
    p.add_argument("--out", default=f"bench/latest-{name}")
    p.add_argument("--stepwell", required=stepwell_systems is None, help=f"the sidecar binary{stepwell_what}")
    p.add_argument("--systems", default=",".join(systems), help="comma-separated: " + ", ".join(systems))
    p.add_argument("--points", default=",".join(points), help="comma-separated: " + ", ".join(points))
    p.add_argument("--command", default=f"bench/{name}/run", help="the command line, for the report")
    args = p.parse_args()
    mode = modes[args.mode]
    args.rounds = args.rounds or mode["rounds"]
    args.warm = mode["warm"] if args.warm is None else args.warm
    args.window = args.window or mode["window"]
    args.systems = [s for s in args.systems.split(",") if s]
    args.points = [s for s in args.points.split(",") if s]
    for s in args.systems:
        if s not in systems:
            p.error(f"unknown system {s}")
    for s in args.points:
        if s not in points:
            p.error(f"unknown point {s}")
    if stepwell_systems is not None and any(s in stepwell_systems for s in args.systems) and not args.stepwell:
        p.error(f"--stepwell BINARY is needed{stepwell_what}")
    args.postgres_url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    if not args.postgres_url:
        p.error(f"STEPWELL_TEST_POSTGRES_URL is not set (run through bench/{name}/run or scripts/with-postgres)")
    return args


# ---------------------------------------------------------------------------
# What a session benchmark's rounds and report share
# ---------------------------------------------------------------------------


def create_database(url: str, name: str) -> str:
    """A fresh database `name` on the Postgres server of `url` (dropped first
    if a previous run left it); its URL."""
    import psycopg  # only the benchmarks that run against Postgres have it

    with psycopg.connect(url, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}"')
        c.execute(f'CREATE DATABASE "{name}"')
    return database_url(url, name)


def drop_databases(url: str, names: List[str]) -> None:
    """Drops the databases, closing whatever connection still holds one."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        for name in names:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def remove_round_files(tmp: str, index: int) -> None:
    """Removes the files of round `index` (named r<index>-...) from `tmp`."""
    for name in os.listdir(tmp):
        if name.startswith(f"r{index}-"):
            os.remove(os.path.join(tmp, name))


def rotation(systems: List[str], round_index: int) -> List[str]:
    """The systems in round `round_index`'s order (1 is the first round): the
    order shifts by one each round, so that no system always runs first."""
    shift = (round_index - 1) % len(systems)
    return systems[shift:] + systems[:shift]


def package_versions(names: List[str]) -> Dict[str, str]:
    """Python's and SQLite's versions, and each installed package's."""
    import importlib.metadata as md
    import platform
    import sqlite3

    out = {"python": platform.python_version(), "sqlite": sqlite3.sqlite_version}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = "not installed"
    return out


def binary_info(path: Optional[str]) -> Dict[str, str]:
    """Which sidecar build ran (a binary may be replaced by a newer one
    later): its --version, sha256 and modification time."""
    if not path:
        return {}
    import datetime as dt
    import hashlib

    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {
        "stepwell_version": subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip(),
        "stepwell_binary_sha256": digest,
        "stepwell_binary_mtime": dt.datetime.fromtimestamp(os.stat(path).st_mtime, dt.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"),
    }


def run_header(args: argparse.Namespace, systems: List[str], points: List[str]) -> Dict[str, Any]:
    """What a run's report says of its setup before any sample: mode,
    command, rounds and windows, systems and points, the machine, the
    sidecar binary and the Python client measured."""
    import datetime as dt
    import platform

    out: Dict[str, Any] = {
        "mode": args.mode, "command": args.command,
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "rounds": args.rounds, "warm_s": args.warm, "window_s": args.window,
        "systems": [s for s in systems if s in args.systems], "points": [p for p in points if p in args.points],
        "stepwell_binary": args.stepwell,
        "machine": {"cpus": os.cpu_count(), "load_start": loadavg(), "platform": platform.platform()},
        "python_client": os.environ.get("STEPWELL_PYTHON_CLIENT_SOURCE", ""),
    }
    out.update(binary_info(args.stepwell))
    return out


def report_footer(results: Dict[str, Any]) -> List[str]:
    """The report's last lines: the versions, the sidecar build and the client."""
    lines = ["", "Versions: " + ", ".join(f"{k} {v}" for k, v in results["versions"].items()) + "."]
    if results.get("stepwell_binary"):
        lines += ["", f"Sidecar: `{results['stepwell_binary']}` (sha256 "
                  f"{results.get('stepwell_binary_sha256', '?')[:16]}…, built {results.get('stepwell_binary_mtime', '?')})"
                  + (f"; Python client: {results['python_client']}" if results.get("python_client") else "") + "."]
    return lines


def run_and_report(
    args: argparse.Namespace,
    results: Dict[str, Any],
    rounds: Callable[[argparse.Namespace, Dict[str, Any]], Any],
    summarize: Callable[[Dict[str, Any]], Dict[str, Any]],
    markdown: Callable[[Dict[str, Any]], str],
) -> int:
    """Runs a session benchmark's rounds (the coroutine `rounds(args,
    results)`, which appends to results["samples"]), then writes
    results.json and results.md to args.out and prints the table; 1 when
    any sample has an error or failed check, a point did not run, or the run
    was interrupted, else 0. SIGTERM and SIGHUP end the run as Ctrl-C does,
    so that the rounds' exits stop the sidecars and drop the databases."""
    import json
    import signal

    def interrupt(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)

    t0 = time.monotonic()
    log(f"==> {args.rounds} round(s) × {len(results['points'])} points × {len(results['systems'])} systems, "
        f"{args.warm:g} s + {args.window:g} s each (load {loadavg()})")
    interrupted = False
    try:
        asyncio.run(rounds(args, results))
    except KeyboardInterrupt:
        interrupted = True
        log("interrupted: writing what was measured")
    results["elapsed_s"] = time.monotonic() - t0
    results["machine"]["load_end"] = loadavg()
    results["summary"] = summarize(results)
    table = markdown(results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    print(table)
    failures = sum(len(s.get("errors") or []) + len(s.get("checks") or []) for s in results["samples"])
    missing = args.rounds * len(results["points"]) * len(results["systems"]) - len(results["samples"])
    if failures or missing or interrupted:
        log(f"==> {failures} error(s) or failed check(s), {missing} point(s) not run")
        return 1
    log(f"==> results in {args.out}/results.json and results.md")
    return 0


SUMMARY_FIELDS = ("ops_per_s", "p50_ms", "p99_ms", "python_cpu_us_per_op", "sidecar_cpu_us_per_op",
                  "postgres_cpu_us_per_op", "harness_us_per_op", "python_cpu_pct", "sidecar_cpu_pct",
                  "postgres_cpu_pct", "machine_busy_pct")
GROUP_COMMIT_FIELDS = ("writes_per_batch", "batches_per_op", "commit_ms_mean", "queue_wait_ms_mean")


def summarize_rounds(results: Dict[str, Any], stepwell_systems: tuple, baselines: tuple) -> Dict[str, Any]:
    """Each point's medians and spreads over the rounds per system, failed
    samples left out, and each of `stepwell_systems`' per-round ratios of
    calls/s and p99 to each of `baselines`."""
    samples = [s for s in results["samples"] if not failed(s)]
    summary: Dict[str, Any] = {}
    for point in results["points"]:
        for system in results["systems"]:
            mine = [s for s in samples if s["point"] == point and s["system"] == system]
            row = {f: spread([s.get(f) for s in mine]) for f in SUMMARY_FIELDS}
            row["failed_samples"] = sum(1 for s in results["samples"]
                                        if s["point"] == point and s["system"] == system and failed(s))
            for f in GROUP_COMMIT_FIELDS:
                row[f] = spread([s.get("sidecar_metrics", {}).get(f) for s in mine])
            if system in stepwell_systems:
                for base in baselines:
                    for f in ("ops_per_s", "p99_ms"):
                        row[f"ratio_{f}_{base}"] = round_ratios(mine, samples, base, f)
            summary[f"{point} {system}"] = row
    return summary


def median_of(row: Dict[str, Any], field: str) -> str:
    return fmt(row[field]["median"] if row.get(field) else None)


def group_commit_rows(results: Dict[str, Any], write_points: List[str], stepwell_systems: tuple,
                      names: Dict[str, str], label: Callable[[str], str], column: str = "System") -> List[str]:
    """The table of the sidecars' group commit at the points that write:
    writes per batch, batches per call, commit time, queue wait (medians);
    `column` heads the systems' column."""
    lines = [f"| Point | {column} | writes/batch | batches/call | commit ms/batch | queue wait ms/write |",
             "|---|---|--:|--:|--:|--:|"]
    for point in results["points"]:
        for system in stepwell_systems:
            row = results["summary"].get(f"{point} {system}")
            if point in write_points and row and row.get("writes_per_batch"):
                lines.append("| " + " | ".join([label(point), names[system]]
                                               + [median_of(row, f) for f in GROUP_COMMIT_FIELDS]) + " |")
    return lines
