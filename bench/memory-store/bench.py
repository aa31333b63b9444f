"""Benchmarks long-term memory for LangGraph: stepwell's AsyncStepwellStore on
a Postgres sidecar (pgvector's approximate index) and on a SQLite sidecar
(exact), beside LangGraph's AsyncPostgresStore with pgvector (HNSW) on the
same Postgres and its InMemoryStore.

For each size N, each system in turn (the order shifted every round) gets a
fresh store and: puts N items of D dimensions into one namespace (16
concurrent aput calls; puts/s over the whole load, each put's latency),
then searches it for a window by filter alone (`{"group": g}`, limit 10)
and for a window by vector (a query near one of the corpus's clusters,
limit 10), p50 and p99 of each; a Postgres system's database is vacuumed
and analysed between its load and its searches. Every system then answers the same query
set once more, and recall@10 is each answer's overlap with the exact top
ten, computed here from the same vectors.

The corpus is deterministic: item i's vector is its cluster's centre
(i mod 50) plus two of 1,000 noise vectors, so the nearest items of a query
are a cluster's, as with real embeddings; the embedder the stores call
reads them from a table made before the first round, so no store pays for
making them.

Run through bench/memory-store/run, which starts a Postgres whose server has
pgvector (scripts/pgvector-bindir) and sets STEPWELL_TEST_POSTGRES_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import math
import operator
import os
import random
import sys
import tempfile
import time
from array import array
from typing import Any, Callable, Dict, List, Optional, Sequence

from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from stepwell.langgraph import AsyncStepwellStore

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from harness import (  # noqa: E402 (the shared harness is found through the path set above)
    Meter, Sidecar, Window, create_database, database_url, drop_databases, fmt, fmt_spread, line_of, log, measure,
    package_versions, postmaster_pid, remove_round_files, report_footer, rotation, run_and_report, run_header,
    spread, summarize_rounds, target,
)

SYSTEMS = ["stepwell-postgres", "stepwell-sqlite", "postgres-store", "in-memory"]
STEPWELL_SYSTEMS = ("stepwell-postgres", "stepwell-sqlite")
BASELINE = "postgres-store"
APPROXIMATE = ("stepwell-postgres", "postgres-store")
NAMES = {"stepwell-postgres": "stepwell, Postgres + pgvector", "stepwell-sqlite": "stepwell, SQLite",
         "postgres-store": "LangGraph PostgresStore + pgvector", "in-memory": "LangGraph InMemoryStore"}
MODES = {
    "smoke": {"rounds": 1, "warm": 0.2, "window": 0.8, "sizes": [300], "queries": 10},
    "full": {"rounds": 3, "warm": 1.0, "window": 5.0, "sizes": [10_000, 100_000], "queries": 20},
}
NS = ("bench", "docs")
CLUSTERS = 50
NOISE = 1000
PUT_TASKS = 16
SEARCH_TASKS = 4
GROUPS = 10


class Corpus:
    """The items' and queries' vectors, made once, and the embedder that reads them."""

    def __init__(self, dims: int, items: int, queries: int, seed: int = 7) -> None:
        rnd = random.Random(seed)
        unit = 1 / math.sqrt(dims)
        self.centres = [[rnd.gauss(0, 1) * unit for _ in range(dims)] for _ in range(CLUSTERS)]
        self.noise = [[rnd.gauss(0, 0.6) * unit for _ in range(dims)] for _ in range(NOISE)]
        self.items = [self._mix(i % CLUSTERS, i % NOISE, (i // NOISE) % NOISE) for i in range(items)]
        self.table: Dict[str, array] = {f"item {i}": v for i, v in enumerate(self.items)}
        self.norms: List[float] = []
        self.queries = [f"query {j}" for j in range(queries)]
        for j, q in enumerate(self.queries):
            self.table[q] = self._mix(j % CLUSTERS, (j * 7 + 3) % NOISE, (j * 13 + 5) % NOISE)

    def _mix(self, c: int, a: int, b: int) -> array:
        return array("f", [x + y + z for x, y, z in zip(self.centres[c], self.noise[a], self.noise[b])])

    def embed(self, texts: Sequence[str]) -> List[List[float]]:
        return [self.table[t].tolist() for t in texts]

    def exact(self, query: str, n: int, k: int = 10) -> List[str]:
        """The keys of the k items nearest `query` by cosine similarity, among the first n."""
        q = self.table[query]
        if len(self.norms) < n:
            self.norms = [math.sqrt(sum(map(operator.mul, v, v))) for v in self.items[:n]]
        scored = [(-sum(map(operator.mul, q, v)) / self.norms[i], i) for i, v in enumerate(self.items[:n])]
        return [f"k{i}" for _, i in heapq.nsmallest(k, scored)]


class Round:
    """One round's servers: a database for PostgresStore, a Postgres sidecar
    and a SQLite sidecar, each made fresh per size and removed after."""

    def __init__(self, args: argparse.Namespace, index: int, tmp: str) -> None:
        self.args, self.index, self.tmp = args, index, tmp
        self.sidecars: Dict[str, Sidecar] = {}
        self.databases: List[str] = []

    def sidecar(self, system: str, size: int) -> Sidecar:
        tag = f"r{self.index}-{size}-{system}"
        if system == "stepwell-postgres":
            name = f"msbench_{os.getpid()}_{self.index}_{size}_stepwell"
            self.databases.append(name)
            url = create_database(self.args.postgres_url, name)
        else:
            url = f"sqlite://{os.path.join(self.tmp, tag)}.db"
        s = Sidecar(self.args.stepwell, url, tag, self.tmp)
        self.sidecars[tag] = s
        s.wait_ready()
        return s

    def settle(self, system: str, size: int) -> None:
        """VACUUM ANALYZE of a Postgres system's database after its load, so
        that its searches are measured in steady state, not beside
        autovacuum's first pass over a fresh HNSW index."""
        suffix = {"stepwell-postgres": "stepwell", BASELINE: "pgstore"}.get(system)
        if suffix is None:
            return
        import psycopg

        name = f"msbench_{os.getpid()}_{self.index}_{size}_{suffix}"
        with psycopg.connect(database_url(self.args.postgres_url, name), autocommit=True) as c:
            c.execute("VACUUM ANALYZE")

    def close(self) -> None:
        for s in self.sidecars.values():
            s.stop()
        self.sidecars.clear()
        if self.databases:
            drop_databases(self.args.postgres_url, self.databases)
        self.databases.clear()
        remove_round_files(self.tmp, self.index)


async def open_store(rnd: Round, system: str, size: int, corpus: Corpus, stack: List[Callable[[], Any]]) -> Any:
    """A fresh store of `system` with the corpus's embedder; what closes it goes on `stack`."""
    index = {"dims": rnd.args.dims, "embed": corpus.embed, "fields": ["text"]}
    if system == "in-memory":
        return InMemoryStore(index=index)
    if system == BASELINE:
        name = f"msbench_{os.getpid()}_{rnd.index}_{size}_pgstore"
        rnd.databases.append(name)
        pool = AsyncConnectionPool(create_database(rnd.args.postgres_url, name), min_size=PUT_TASKS,
                                   max_size=PUT_TASKS, open=False,
                                   kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row})
        await pool.open(wait=True, timeout=60)
        stack.append(pool.close)
        store = AsyncPostgresStore(conn=pool, index=index)
        await store.setup()
        return store
    sidecar = rnd.sidecar(system, size)
    store = AsyncStepwellStore.from_address(sidecar.address, namespace="bench", index=index)
    stack.append(store.aclose)
    return store


def meter_for(rnd: Round, system: str, size: int) -> Meter:
    s = rnd.sidecars.get(f"r{rnd.index}-{size}-{system}")
    postgres = system in ("stepwell-postgres", BASELINE)
    return Meter(s, postmaster_pid(rnd.args.postgres_url) if postgres else None)


async def load(store: Any, size: int, meter: Meter) -> Dict[str, Any]:
    """Puts `size` items with PUT_TASKS concurrent aput calls: puts/s over
    the whole load, and each put's latency."""
    latencies: List[float] = []
    errors: List[str] = []
    counter = iter(range(size))

    async def worker() -> None:
        for i in counter:
            t0 = time.perf_counter()
            try:
                await store.aput(NS, f"k{i}", {"text": f"item {i}", "group": i % GROUPS, "n": i})
            except Exception as e:  # noqa: BLE001 - every error is reported
                errors.append(f"put: {e!r}"[:300])
                return
            latencies.append(time.perf_counter() - t0)

    a = meter.snap()
    await asyncio.gather(*(worker() for _ in range(PUT_TASKS)))
    b = meter.snap()
    lat = sorted(latencies)
    n = len(lat)
    out: Dict[str, Any] = {"completed": n, "ops": n, "unit": "puts/s", "errors": errors[:5]}
    out.update(Meter.diff(a, b, n))
    out["ops_per_s"] = n / out["wall_s"] if out["wall_s"] else None
    out["p50_ms"] = 1000 * lat[max(0, math.ceil(0.5 * n) - 1)] if n else None
    out["p99_ms"] = 1000 * lat[max(0, math.ceil(0.99 * n) - 1)] if n else None
    if n != size and not errors:
        out["checks"] = [f"{n} of {size} puts completed"]
    return out


async def search_window(store: Any, corpus: Corpus, meter: Meter, args: argparse.Namespace, kind: str,
                        answers: Dict[str, List[str]]) -> Dict[str, Any]:
    """Searches for a window (SEARCH_TASKS at once), by filter or by vector;
    keeps each vector query's first answer in `answers`."""
    w = Window(args.warm, args.window)
    rnd = random.Random(11)

    async def worker() -> None:
        while w.running():
            t0 = time.perf_counter()
            try:
                if kind == "filter":
                    group = rnd.randrange(GROUPS)
                    hits = await store.asearch(NS, filter={"group": group}, limit=10)
                    bad = [h.key for h in hits if h.value["group"] != group]
                    if bad or len(hits) != 10:
                        w.errors.append(f"filter group {group}: {len(hits)} hits, wrong {bad[:3]}")
                else:
                    query = rnd.choice(corpus.queries)
                    hits = await store.asearch(NS, query=query, limit=10)
                    answers.setdefault(query, [h.key for h in hits])
            except Exception as e:  # noqa: BLE001 - every error is reported
                w.errors.append(f"{kind} search: {e!r}"[:300])
                return
            w.record(t0, time.perf_counter())

    out = await measure(w, meter, [worker for _ in range(SEARCH_TASKS)])
    out["unit"] = "searches/s"
    return out


async def recall(store: Any, corpus: Corpus, size: int, answers: Dict[str, List[str]],
                 exact: Dict[str, List[str]]) -> float:
    """recall@10 over the query set: the share of the exact top ten each answer holds."""
    found = 0
    for q in corpus.queries:
        if q not in answers:
            answers[q] = [h.key for h in await store.asearch(NS, query=q, limit=10)]
        found += len(set(answers[q]) & set(exact[q]))
    return found / (10 * len(corpus.queries))


async def one_system(rnd: Round, system: str, size: int, corpus: Corpus, exact: Dict[str, List[str]],
                     samples: List[Dict[str, Any]]) -> None:
    closers: List[Callable[[], Any]] = []
    base = {"round": rnd.index, "system": system}
    try:
        store = await open_store(rnd, system, size, corpus, closers)
        meter = meter_for(rnd, system, size)
        puts = await load(store, size, meter)
        samples.append({**base, "point": f"put@{size}", **puts})
        log(line_of(samples[-1], ("sidecar", "postgres", "python")))
        rnd.settle(system, size)
        samples.append({**base, "point": f"filter@{size}",
                        **await search_window(store, corpus, meter, rnd.args, "filter", {})})
        log(line_of(samples[-1], ("sidecar", "postgres", "python")))
        answers: Dict[str, List[str]] = {}
        vector = await search_window(store, corpus, meter, rnd.args, "vector", answers)
        vector["recall_at_10"] = await recall(store, corpus, size, answers, exact)
        samples.append({**base, "point": f"vector@{size}", **vector})
        log(line_of(samples[-1], ("sidecar", "postgres", "python")) + f"  recall@10 {vector['recall_at_10']:.3f}")
    finally:
        for close in reversed(closers):
            got = close()
            if asyncio.iscoroutine(got):
                await got


async def rounds(args: argparse.Namespace, results: Dict[str, Any]) -> None:
    corpus = Corpus(args.dims, max(args.sizes), args.queries)
    exact = {size: {q: corpus.exact(q, size) for q in corpus.queries} for size in args.sizes}
    log(f"==> corpus of {max(args.sizes)} vectors × {args.dims} and the exact answers made")
    with tempfile.TemporaryDirectory(prefix="stepwell-memory-store-") as tmp:
        for index in range(1, args.rounds + 1):
            rnd = Round(args, index, tmp)
            try:
                for size in args.sizes:
                    for system in rotation(args.systems, index):
                        if system == "in-memory" and size > args.in_memory_max:
                            skip(results["samples"], index, size, f"more than --in-memory-max {args.in_memory_max}")
                            continue
                        await one_system(rnd, system, size, corpus, exact[size], results["samples"])
                    rnd.close()
            finally:
                rnd.close()


def skip(samples: List[Dict[str, Any]], index: int, size: int, why: str) -> None:
    """InMemoryStore's points at a size it does not run: its vector search
    scores every item in Python, seconds per query at 100,000 items."""
    for kind in ("put", "filter", "vector"):
        samples.append({"round": index, "point": f"{kind}@{size}", "system": "in-memory", "skipped": why})
    log(f"round {index}  in-memory at {size} skipped: {why}")


def summarize(results: Dict[str, Any]) -> Dict[str, Any]:
    summary = summarize_rounds(results, STEPWELL_SYSTEMS, (BASELINE,))
    for key, row in summary.items():
        point, system = key.split(" ")
        if point.startswith("vector@"):
            row["recall_at_10"] = spread([s.get("recall_at_10") for s in results["samples"]
                                          if s["point"] == point and s["system"] == system])
    size = max(results["sizes"])
    targets = []
    for system in STEPWELL_SYSTEMS:
        for kind in ("filter", "vector"):
            row = summary.get(f"{kind}@{size} {system}", {})
            targets.append(target(system, f"{kind} search p99 ≤ 50 ms at {size}", row.get("p99_ms"), "<=", 50))
        ratio = summary.get(f"put@{size} {system}", {}).get(f"ratio_ops_per_s_{BASELINE}")
        targets.append(target(system, f"puts/s ≥ 2× PostgresStore's at {size}", ratio, ">=", 2))
    for system in APPROXIMATE:
        row = summary.get(f"vector@{size} {system}", {})
        targets.append(target(system, f"recall@10 ≥ 0.95 at {size}", row.get("recall_at_10"), ">=", 0.95))
    summary["targets"] = [t for t in targets if t.get("met") is not None or t["system"] in results["systems"]]
    return summary


def markdown(results: Dict[str, Any]) -> str:
    s = results["summary"]
    lines = [f"# Memory store: {results['dims']} dimensions, one namespace", "",
             f"`{results['command']}`: {results['rounds']} round(s), searches {results['warm_s']:g} s warm-up + "
             f"{results['window_s']:g} s window, {PUT_TASKS} concurrent puts, {SEARCH_TASKS} concurrent searches; "
             "medians [min–max] over the rounds.", "",
             "| Items | System | puts/s | put p99 ms | filter p50 / p99 ms | vector p50 / p99 ms | recall@10 |",
             "|--:|---|--:|--:|--:|--:|--:|"]
    for size in results["sizes"]:
        for system in results["systems"]:
            put, flt, vec = (s.get(f"{k}@{size} {system}", {}) for k in ("put", "filter", "vector"))
            lines.append(f"| {size} | {NAMES[system]} | {fmt_spread(put.get('ops_per_s'))} | "
                         f"{fmt_spread(put.get('p99_ms'))} | {fmt_spread(flt.get('p50_ms'))} / "
                         f"{fmt_spread(flt.get('p99_ms'))} | {fmt_spread(vec.get('p50_ms'))} / "
                         f"{fmt_spread(vec.get('p99_ms'))} | {fmt_spread(vec.get('recall_at_10'))} |")
    lines += ["", "| System | Target | Median [min–max] | Met |", "|---|---|--:|---|"]
    for t in s["targets"]:
        met = "–" if t["met"] is None else "yes" if t["met"] else "no"
        value = "–" if t["met"] is None else f"{fmt(t['median'])} [{fmt(t['min'])}–{fmt(t['max'])}]"
        lines.append(f"| {NAMES[t['system']]} | {t['target']} | {value} | {met} |")
    lines += report_footer(results)
    return "\n".join(lines) + "\n"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=sorted(MODES), default="smoke")
    p.add_argument("--rounds", type=int)
    p.add_argument("--warm", type=float)
    p.add_argument("--window", type=float)
    p.add_argument("--sizes", help="comma-separated item counts (the mode's by default)")
    p.add_argument("--dims", type=int, default=768)
    p.add_argument("--in-memory-max", type=int, default=10_000,
                   help="the largest size InMemoryStore runs at (its vector search is pure Python)")
    p.add_argument("--out", default="bench/latest-memory-store")
    p.add_argument("--stepwell", required=True, help="the sidecar binary")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated: " + ", ".join(SYSTEMS))
    p.add_argument("--command", default="bench/memory-store/run")
    args = p.parse_args()
    mode = MODES[args.mode]
    args.rounds = args.rounds or mode["rounds"]
    args.warm = mode["warm"] if args.warm is None else args.warm
    args.window = args.window or mode["window"]
    args.sizes = [int(n) for n in args.sizes.split(",")] if args.sizes else mode["sizes"]
    args.queries = mode["queries"]
    args.systems = [s for s in args.systems.split(",") if s]
    for s in args.systems:
        if s not in SYSTEMS:
            p.error(f"unknown system {s}")
    args.points = [f"{k}@{n}" for n in args.sizes for k in ("put", "filter", "vector")]
    args.postgres_url = os.environ.get("STEPWELL_TEST_POSTGRES_URL")
    if not args.postgres_url:
        p.error("STEPWELL_TEST_POSTGRES_URL is not set (run through bench/memory-store/run)")
    return args


def main() -> int:
    args = parse()
    results: Dict[str, Any] = run_header(args, SYSTEMS, args.points)
    results.update({"sizes": args.sizes, "dims": args.dims, "queries": args.queries, "samples": [],
                    "versions": package_versions(["langgraph", "langgraph-checkpoint-postgres", "psycopg"])})
    return run_and_report(args, results, rounds, summarize, markdown)


if __name__ == "__main__":
    sys.exit(main())
