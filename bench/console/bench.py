"""Benchmark of the console's page speed: how long each kind of page takes
to render on a store of 100,000 turns with one turn of 10,000 checkpoints,
on SQLite and on Postgres, against the issue's bound of 100 ms a page.

The store is written as an export file (bench/console/seed.py) and loaded
with `stepwell import` into a fresh SQLite file and a fresh Postgres
database (then VACUUM ANALYZE, as autovacuum would have done on a store that
grew over time). A release sidecar serves each with `--console read` and no
auth file; one kept-alive HTTP connection GETs every kind of page (the
overview, the turns list and each of its filters, a deep page reached by
`rel=next`, a small turn, the long turn's newest and oldest pages, keys by
each state, waits by each status). After warm-up rounds, each round GETs
every page once, the order rotating from round to round, so that no page
always runs first and a noisy moment of this shared machine spreads over
all of them. The report gives, per page and store, the median, p95 and max
of the rounds' times (from the request sent to the body read, in this
process), the page's rows and bytes, the store's size and the machine.

Every answer is checked (status 200, the page's table or section, at least
one row); any failure exits non-zero. Started by bench/console/run, which
sets STEPWELL_TEST_POSTGRES_URL (scripts/with-postgres)."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
import pages  # noqa: E402 (found through the path set above)
import seed  # noqa: E402
from harness import Sidecar, binary_info, database_url, loadavg, log  # noqa: E402

MODES = {
    "quick": {"turns": 2_000, "long": 600, "keys": 300, "waits": 100, "rounds": 3, "warm": 1, "deep": 2},
    "full": {"turns": 100_000, "long": 10_000, "keys": 10_000, "waits": 2_000, "rounds": 30, "warm": 3, "deep": 20},
}
STORES = ("sqlite", "postgres")
STALLED_AFTER_S = 3600  # the seed's fresh turns were written in the last 5 minutes, its stalled ones hours ago
BOUND_MS = 100.0


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=sorted(MODES), default="quick")
    p.add_argument("--rounds", type=int)
    p.add_argument("--out", required=True)
    p.add_argument("--stepwell", required=True, help="the sidecar binary")
    p.add_argument("--stores", default=",".join(STORES), help="comma-separated: " + ", ".join(STORES))
    p.add_argument("--seed-only", action="store_true", help="seed, import and start the sidecars; time no page")
    p.add_argument("--keep", help="keep the seeded SQLite file and export here")
    p.add_argument("--command", default="bench/console/run")
    args = p.parse_args()
    args.size = MODES[args.mode]
    args.rounds = args.rounds or args.size["rounds"]
    args.stores = [s for s in args.stores.split(",") if s]
    for s in args.stores:
        if s not in STORES:
            p.error(f"unknown store {s}")
    args.postgres_url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    if "postgres" in args.stores and not args.postgres_url:
        p.error("STEPWELL_TEST_POSTGRES_URL is not set (run through bench/console/run or scripts/with-postgres)")
    args.psql = os.environ.get("STEPWELL_PSQL", "psql")
    return args


def psql(args: argparse.Namespace, url: str, sql: str) -> str:
    """Runs `sql` on the database at `url`; what it printed, unaligned."""
    done = subprocess.run([args.psql, "-XAtq", "-v", "ON_ERROR_STOP=1", "-d", url, "-c", sql],
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"psql {sql!r}: {done.stderr.strip()}")
    return done.stdout.strip()


def write_seed(args: argparse.Namespace, tmp: str) -> Tuple[str, Dict[str, Any]]:
    """The export file of the mode's store; its path and what seed.py says of it."""
    path = os.path.join(tmp, "store.ndjson")
    t0 = time.monotonic()
    size = args.size
    with open(path, "w") as f:
        info = seed.write_store(f, time.time_ns(), size["turns"], size["long"], size["keys"], size["waits"])
    info["write_s"] = time.monotonic() - t0
    info["file_bytes"] = os.path.getsize(path)
    log(f"==> seed: {info['counts']} in {info['write_s']:.1f} s ({info['file_bytes'] / 1e6:.0f} MB)")
    return path, info


def import_into(args: argparse.Namespace, url: str, path: str) -> float:
    """Imports the export at `path` into `url` and checks its verification; the seconds it took."""
    t0 = time.monotonic()
    done = subprocess.run([args.stepwell, "import", "--to", url, "--in", path, "--chunk-rows", "2000"],
                          capture_output=True, text=True, timeout=3600)
    took = time.monotonic() - t0
    if done.returncode != 0 or "verified: every namespace matches" not in done.stdout + done.stderr:
        raise RuntimeError(f"stepwell import into {url} failed ({done.returncode}): {done.stdout[-2000:]}"
                           f"{done.stderr[-2000:]}")
    return took


def prepare(args: argparse.Namespace, store: str, tmp: str, path: str) -> Tuple[str, Dict[str, Any]]:
    """A fresh store of `store`'s kind loaded with the export; its URL and
    facts (import time, size)."""
    facts: Dict[str, Any] = {}
    if store == "sqlite":
        db = os.path.join(tmp, "console.db")
        url = f"sqlite://{db}"
        facts["import_s"] = import_into(args, url, path)
        facts["store_bytes"] = sum(os.path.getsize(db + ext) for ext in ("", "-wal") if os.path.exists(db + ext))
    else:
        psql(args, args.postgres_url, "DROP DATABASE IF EXISTS console_bench WITH (FORCE)")
        psql(args, args.postgres_url, "CREATE DATABASE console_bench")
        url = database_url(args.postgres_url, "console_bench")
        facts["import_s"] = import_into(args, url, path)
        t0 = time.monotonic()
        psql(args, url, "VACUUM ANALYZE")
        facts["vacuum_analyze_s"] = time.monotonic() - t0
        facts["store_bytes"] = int(psql(args, url, "SELECT pg_database_size(current_database())"))
    log(f"==> {store}: imported in {facts['import_s']:.1f} s, {facts['store_bytes'] / 1e6:.0f} MB")
    return url, facts


def console_flags(binary: str) -> Tuple[str, ...]:
    """The serve flags of a read-only console that calls a turn stalled
    after STALLED_AFTER_S, as this binary spells them; () without a console."""
    done = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True, timeout=30)
    if "--console-stalled-after-seconds" in done.stdout:
        return ("--console", "read", "--console-stalled-after-seconds", str(STALLED_AFTER_S))
    if "--console-stalled-after" in done.stdout:
        return ("--console", "read", "--console-stalled-after", f"{STALLED_AFTER_S}s")
    return ()


def percentile(values: List[float], p: float) -> float:
    """The nearest-rank percentile `p` (0 to 100) of `values`."""
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def time_pages(client: pages.Client, plist: List[Tuple[str, str, str]], rounds: int,
               warm: int) -> Dict[str, Dict[str, Any]]:
    """`warm` rounds untimed, then `rounds` timed, every page once a round,
    the order rotating; each page's times (ms), rows, bytes and problems."""
    out = {name: {"kind": kind, "path": path, "ms": [], "rows": None, "bytes": None, "problems": []}
           for name, kind, path in plist}
    for r in range(warm + rounds):
        shift = r % len(plist)
        for name, kind, path in plist[shift:] + plist[:shift]:
            status, body, ms = client.get(path)
            page = out[name]
            problems, rows = pages.check(kind, status, body)
            if problems and len(page["problems"]) < 5:
                when = f"round {r + 1 - warm}" if r >= warm else f"warm-up {r + 1}"
                page["problems"].append(f"{when}: {', '.join(problems)}")
            if page["rows"] is None:
                page["rows"], page["bytes"] = rows, len(body.encode())
            if r >= warm:
                page["ms"].append(ms)
    for page in out.values():
        ms = page["ms"]
        page.update(median_ms=statistics.median(ms), p95_ms=percentile(ms, 95), max_ms=max(ms))
    return out


def run_store(args: argparse.Namespace, store: str, tmp: str, path: str, info: Dict[str, Any],
              console: Tuple[str, ...]) -> Dict[str, Any]:
    """Loads the store, starts its sidecar (with the `console` flags, none
    for a binary without a console) and times its pages."""
    url, facts = prepare(args, store, tmp, path)
    sidecar = Sidecar(args.stepwell, url, store, tmp, console)
    try:
        sidecar.wait_ready(120)
        if not console:
            log(f"==> {store}: the sidecar serves the seeded store (no console in this binary: no page timed)")
            return {"store": store, **facts, "pages": {}}
        client = pages.Client(sidecar.admin)
        t0 = time.monotonic()
        plist = pages.walk(client, info, args.size["deep"])
        facts["walk_s"] = time.monotonic() - t0
        log(f"==> {store}: {len(plist)} pages, {args.size['warm']} warm-up and {args.rounds} timed rounds "
            f"(load {loadavg()})")
        facts["pages"] = time_pages(client, plist, args.rounds, args.size["warm"])
        client.close()
        if not sidecar.alive():
            raise RuntimeError(f"the {store} sidecar exited: {sidecar.log_tail()}")
        return {"store": store, **facts}
    finally:
        sidecar.stop()
        if store == "postgres":
            psql(args, args.postgres_url, "DROP DATABASE IF EXISTS console_bench WITH (FORCE)")


def header(args: argparse.Namespace, info: Dict[str, Any]) -> Dict[str, Any]:
    import platform

    out = {
        "mode": args.mode, "command": args.command, "rounds": args.rounds, "warm_rounds": args.size["warm"],
        "started": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {"cpus": os.cpu_count(), "load_start": loadavg(), "platform": platform.platform()},
        "stepwell_binary": args.stepwell, "seed": info, "stalled_after_s": STALLED_AFTER_S, "bound_ms": BOUND_MS,
    }
    out.update(binary_info(args.stepwell))
    return out


def ms(v: float) -> str:
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def markdown(results: Dict[str, Any]) -> str:
    """The report: the setup, then one row a page with each store's median,
    p95 and max, and which pages' p95 passed the bound."""
    seed_info, stores = results["seed"], results["stores"]
    c = seed_info["counts"]
    lines = [f"`{results['command']}`: {results['rounds']} timed rounds after {results['warm_rounds']} warm-up "
             f"rounds, each page GET once a round, the order rotating; ms from request to body read",
             "",
             f"Store: {c['turns']:,} turns ({c['checkpoints']:,} checkpoints, one turn of "
             f"{MODES[results['mode']]['long']:,}), {c['records']:,} idempotency keys, {c['waits']:,} waits; "
             f"the pages read namespace `default`. "
             + "; ".join(f"{s['store']}: {s['store_bytes'] / 1e6:.0f} MB, imported in {s['import_s']:.0f} s"
                         for s in stores) + ".",
             "",
             f"Machine: {results['machine']['cpus']} CPUs (nproc), load {results['machine']['load_start']} at the "
             f"start, {results['machine'].get('load_end', '?')} at the end.",
             ""]
    names = [n for n in (stores[0]["pages"] if stores else {})]
    head = "| page | rows | " + " | ".join(f"{s['store']} median | p95 | max" for s in stores) + " |"
    lines += [head, "|---|--:|" + "--:|--:|--:|" * len(stores)]
    for name in names:
        cells = [name, str(stores[0]["pages"][name]["rows"] or "–")]
        for s in stores:
            p = s["pages"].get(name)
            cells += [ms(p["median_ms"]), ms(p["p95_ms"]), ms(p["max_ms"])] if p else ["–"] * 3
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for s in stores:
        over = [n for n, p in s["pages"].items() if p["p95_ms"] > BOUND_MS]
        lines.append(f"{s['store']}: " + (f"p95 over {BOUND_MS:.0f} ms: {', '.join(over)}." if over
                                         else f"every page's p95 within {BOUND_MS:.0f} ms."))
    lines += ["", f"Sidecar: `{results['stepwell_binary']}` ({results.get('stepwell_version', '?')}, sha256 "
              f"{results.get('stepwell_binary_sha256', '?')[:16]}…, built {results.get('stepwell_binary_mtime', '?')})."]
    return "\n".join(lines) + "\n"


def write_results(args: argparse.Namespace, results: Dict[str, Any]) -> str:
    results["machine"]["load_end"] = loadavg()
    table = markdown(results)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    return table


def interrupt(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main() -> int:
    # SIGTERM and SIGHUP end the run as Ctrl-C does, through the finally
    # clauses that stop the sidecars and remove the files.
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    args = parse_args()
    console = console_flags(args.stepwell)
    if not console and not args.seed_only:
        log(f"{args.stepwell} has no --console flag: a sidecar with the console is needed (or --seed-only)")
        return 1
    tmp = tempfile.mkdtemp(prefix="stepwell-console-bench.")
    try:
        path, info = write_seed(args, tmp)
        results = header(args, info)
        results["stores"] = [run_store(args, store, tmp, path, info, console) for store in args.stores]
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
            for name in ("store.ndjson", "console.db"):
                if os.path.exists(os.path.join(tmp, name)):
                    shutil.copy(os.path.join(tmp, name), args.keep)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.seed_only:
        log(f"==> seeded and served every store: {json.dumps([{k: v for k, v in s.items() if k != 'pages'} for s in results['stores']])}")
        return 0
    print(write_results(args, results))
    problems = [f"{s['store']} {name}: {pr}" for s in results["stores"] for name, p in s["pages"].items()
                for pr in p["problems"]]
    for pr in problems:
        log(f"CHECK FAILED {pr}")
    log(f"==> {len(problems)} failed check(s); results in {args.out}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
