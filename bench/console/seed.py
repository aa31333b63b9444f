"""The store the console's page-speed benchmark reads, written as a
`stepwell export` file (NDJSON, format 3) so that `stepwell import` loads it
into SQLite and Postgres in chunks, far faster than appending 100,000 turns
one request at a time through the API.

The store holds, over a few namespaces and many sessions: turns that are
terminal, open and fresh, and open and stalled (no checkpoint for hours),
with one to three checkpoints each; one open turn of many checkpoints with
long gaps and skewed client clocks (the turn page's worst case); idempotency
keys in every state; waits pending (with deadlines, with timers, with
neither) and settled (resolved, cancelled, expired); and a LangGraph
thread's checkpoints as records of the long turn and of a small one. Every
time is relative to `now` and every future time is hours ahead, so nothing
falls due, expires or is purged while the benchmark runs, and the pages
read the same store throughout. Each turn line is the summary the target
rebuilds from the checkpoints, so the import's verification holds.

Random choices come from a seeded generator: the same sizes make the same
store (apart from `now`)."""

from __future__ import annotations

import base64
import json
import random
from typing import Any, Dict, IO, List, Optional

SECOND = 1_000_000_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
I64_MIN = -(2**63)

NAMESPACES = (("default", 0.60), ("billing", 0.25), ("support", 0.10), ("research", 0.05))
FLOWS = ("checkout", "refund", "triage", "ingest", "summarize")
LONG_TURN = "long-running-agent"
LONG_NS = "default"
KEY_STATES = (("in_progress", 0.15), ("expired", 0.15), ("completed", 0.50), ("failed", 0.10), ("released", 0.10))
WAIT_KINDS = (("pending_expiry", 0.30), ("pending_timer", 0.20), ("pending_plain", 0.10),
              ("resolved", 0.25), ("cancelled", 0.10), ("expired", 0.05))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pick(rng: random.Random, weighted: tuple) -> str:
    return rng.choices([k for k, _ in weighted], weights=[w for _, w in weighted])[0]


class Writer:
    """Writes the export's lines and counts them for its end line."""

    def __init__(self, out: IO[str]):
        self.out = out
        self.counts = {"checkpoints": 0, "turns": 0, "records": 0, "stored_records": 0, "waits": 0}

    def line(self, kind: str, row: Dict[str, Any], count: Optional[str] = None) -> None:
        self.out.write(json.dumps({"kind": kind, **row}, separators=(",", ":")))
        self.out.write("\n")
        if count:
            self.counts[count] += 1

    def end(self) -> None:
        self.line("end", dict(self.counts))


def checkpoint_row(ns: str, turn: str, phase: str, ts: int, session: str, state: bytes, terminal: bool,
                   version: str, recorded: int) -> Dict[str, Any]:
    return {"seq": 0, "namespace": ns, "turn_id": turn, "phase": phase, "ts_ns": ts, "session_id": session,
            "state": b64(state), "terminal": terminal, "workflow_version": version, "recorded_at_ns": recorded}


def summary_of(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The turn summary the store rebuilds from `rows` (in insertion order):
    the latest checkpoint by (timestamp, insertion) decides phase and
    terminal, the latest naming a session or version names them."""
    last = max(range(len(rows)), key=lambda i: (rows[i]["ts_ns"], i))
    named = [r for r in rows if r["session_id"]]
    versioned = [r for r in rows if r["workflow_version"]]
    latest_named = max(named, key=lambda r: r["ts_ns"]) if named else None
    latest_versioned = max(versioned, key=lambda r: r["ts_ns"]) if versioned else None
    first = rows[0]
    return {
        "namespace": first["namespace"], "turn_id": first["turn_id"],
        "session_id": latest_named["session_id"] if latest_named else "",
        "first_ts_ns": min(r["ts_ns"] for r in rows), "last_ts_ns": rows[last]["ts_ns"],
        "last_phase": rows[last]["phase"], "checkpoint_count": len(rows), "terminal": rows[last]["terminal"],
        "workflow_version": latest_versioned["workflow_version"] if latest_versioned else "",
        "session_ts_ns": latest_named["ts_ns"] if latest_named else I64_MIN,
        "version_ts_ns": latest_versioned["ts_ns"] if latest_versioned else I64_MIN,
    }


def small_state(rng: random.Random, turn: str, step: int) -> bytes:
    return json.dumps({"turn": turn, "step": step, "messages": [{"role": "user", "content": f"request {step}"}],
                       "score": rng.random(), "done": False}).encode()


def plain_turn(rng: random.Random, now: int, index: int, ns: str, sessions: int) -> List[Dict[str, Any]]:
    """One ordinary turn's checkpoints: 1 to 3, terminal (80 %), open and
    fresh (5 %, written in the last 5 minutes) or open and stalled."""
    turn = f"{FLOWS[index % len(FLOWS)]}-{index:07d}"
    kind = rng.random()
    terminal = kind < 0.80
    last = now - rng.randrange(5 * MINUTE) if 0.80 <= kind < 0.85 else now - rng.randrange(2 * HOUR, 30 * DAY)
    n = 1 + index % 3
    session = f"session-{rng.randrange(sessions):05d}" if rng.random() < 0.9 else ""
    version = rng.choice(("v1", "v2", "v3"))
    skew = rng.choice((0, 0, 0, 0, 2 * HOUR, -3 * SECOND)) + rng.randrange(1_000_000, 20_000_000)
    rows = []
    for step in range(n):
        ts = last - (n - 1 - step) * rng.randrange(SECOND, 10 * MINUTE)
        phase = ("plan", "act", "observe")[step] if not (terminal and step == n - 1) else "done"
        rows.append(checkpoint_row(ns, turn, phase, ts, session, small_state(rng, turn, step),
                                   terminal and step == n - 1, version, ts + skew))
    return rows


def long_state(rng: random.Random, step: int) -> bytes:
    """A state of a few hundred bytes to a few KB, nested, for the JSON viewer."""
    messages = [{"role": rng.choice(("user", "assistant", "tool")), "content": "x" * rng.randrange(20, 400),
                 "meta": {"tokens": rng.randrange(1000), "tools": [f"t{j}" for j in range(rng.randrange(4))]}}
                for _ in range(rng.randrange(1, 6))]
    return json.dumps({"step": step, "messages": messages, "scratch": {"depth": {"deeper": {"deepest": step}}}}).encode()


def long_turn(rng: random.Random, now: int, checkpoints: int) -> List[Dict[str, Any]]:
    """The turn of many checkpoints, open and fresh: about 20 s apart, with a
    gap of hours every 1,000, the client's clock 2 h ahead for a stretch and
    3 s behind for another, and the version moving on part way."""
    ts = now - SECOND
    rows = []
    for step in reversed(range(checkpoints)):
        skew = rng.randrange(1_000_000, 5_000_000)
        if 2000 <= step < 2100:
            skew -= 2 * HOUR  # the client's clock ran 2 h ahead: it commits "before" it wrote
        elif 5000 <= step < 5100:
            skew += 3 * SECOND
        version = "v2" if step >= checkpoints // 2 else "v1"
        rows.append(checkpoint_row(LONG_NS, LONG_TURN, f"step-{step:05d}", ts, "session-long", long_state(rng, step),
                                   False, version, ts + skew))
        ts -= rng.randrange(5 * SECOND, 40 * SECOND) + (3 * HOUR if step % 1000 == 0 else 0)
    rows.reverse()
    return rows


def key_row(rng: random.Random, now: int, ns: str, key: str, token: int) -> Dict[str, Any]:
    """An idempotency key in a state drawn from KEY_STATES; leases in
    progress run hours ahead and every purge time is days ahead."""
    state = pick(rng, KEY_STATES)
    retention = 7 * DAY
    created = now - rng.randrange(MINUTE, 3 * DAY)
    updated = created + rng.randrange(SECOND, MINUTE)
    held, result, error = 1, b"", ""
    if state == "in_progress":
        expires = now + rng.randrange(2 * HOUR, 6 * HOUR)
        updated = now - rng.randrange(MINUTE)
    elif state == "expired":
        expires = updated + 30 * SECOND
    else:
        expires = updated
        held = {"completed": 2, "failed": 3, "released": 4}[state]
        if state == "completed":
            result = json.dumps({"charged": rng.randrange(10_000), "currency": "EUR"}).encode()
        elif state == "failed":
            error = rng.choice(("card declined", "upstream 503 after 3 tries", "quota exceeded"))
    purge = max(expires, updated) + retention
    return {"namespace": ns, "key": key, "held": held, "fingerprint": b64(token.to_bytes(8, "big")),
            "attempt": 1 + rng.randrange(3), "lease_token": token, "lease_expires_at_ns": expires,
            "result": b64(result), "error": error, "retention_ns": retention, "created_at_ns": created,
            "updated_at_ns": updated, "purge_after_ns": purge}


def wait_row(rng: random.Random, now: int, ns: str, turn: str, name: str) -> Dict[str, Any]:
    """A wait of a kind drawn from WAIT_KINDS; pending deadlines and timers
    are hours ahead, settled ones are in the past."""
    kind = pick(rng, WAIT_KINDS)
    created = now - rng.randrange(MINUTE, 2 * DAY)
    row: Dict[str, Any] = {
        "namespace": ns, "turn_id": turn, "name": name, "status": 1,
        "metadata": json.dumps({"reason": "approval", "by": "ops"}) if rng.random() < 0.5 else None,
        "created_at_ns": created, "expire_at_ns": None, "resolve_at_ns": None, "due_at_ns": None,
        "settled_at_ns": None, "payload": "", "content_type": "", "settled_by": "", "settled_span": None,
    }
    settled = created + rng.randrange(SECOND, HOUR)
    if kind == "pending_expiry":
        row["expire_at_ns"] = row["due_at_ns"] = now + rng.randrange(HOUR, 2 * DAY)
    elif kind == "pending_timer":
        row["resolve_at_ns"] = row["due_at_ns"] = now + rng.randrange(HOUR, 2 * DAY)
    elif kind == "resolved":
        row.update(status=2, settled_at_ns=settled, payload=b64(b'{"approved": true}'),
                   content_type="application/json", settled_by=rng.choice(("worker-billing", "ops@example.com")))
    elif kind == "cancelled":
        row.update(status=3, settled_at_ns=settled, settled_by="ops@example.com")
    elif kind == "expired":
        row.update(status=4, settled_at_ns=settled, expire_at_ns=settled, due_at_ns=settled,
                   settled_by="stepwell:expiry")
    return row


def write_store(out: IO[str], now: int, turns: int, long_checkpoints: int, keys: int, waits: int,
                seed: int = 33) -> Dict[str, Any]:
    """Writes the whole export to `out`; returns the counts and the ids the
    benchmark's pages name (a small turn with keys and a wait, the long
    turn, a session, a prefix and a time range)."""
    rng = random.Random(seed)
    w = Writer(out)
    w.line("header", {"format": 3, "backend": "sqlite", "fence": keys})
    summaries, chosen = [], {}
    for index in range(turns):
        ns = pick(rng, NAMESPACES)
        rows = plain_turn(rng, now, index, ns, max(1, turns // 100))
        summaries.append(emit_turn(w, rows))
        if ns == LONG_NS and len(rows) == 3 and not rows[-1]["terminal"] and "small_turn" not in chosen:
            chosen["small_turn"] = rows[0]["turn_id"]
            chosen["session"] = rows[0]["session_id"] or "session-00000"
    if long_checkpoints:
        summaries.append(emit_turn(w, long_turn(rng, now, long_checkpoints)))
    for s in summaries:
        w.line("turn", s, "turns")
    open_turns = [(s["namespace"], s["turn_id"]) for s in summaries if not s["terminal"]]
    emit_keys(w, rng, now, keys, summaries, chosen)
    emit_waits(w, rng, now, waits, open_turns, chosen)
    if long_checkpoints:
        emit_thread(w, now, LONG_TURN, min(400, long_checkpoints // 25))
    if "small_turn" in chosen:
        emit_thread(w, now, chosen["small_turn"], 3)
    w.end()
    return {"counts": w.counts, "now_ns": now, **chosen, "long_turn": LONG_TURN if long_checkpoints else None}


def emit_turn(w: Writer, rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    for r in rows:
        w.line("checkpoint", r, "checkpoints")
    return summary_of(rows)


def emit_keys(w: Writer, rng: random.Random, now: int, keys: int, summaries: List[Dict[str, Any]],
              chosen: Dict[str, Any]) -> None:
    """Keys in sorted order: four in ten named after a turn ("TURN/tool-N"),
    so that turn pages list some, the rest after a service; the small turn
    and the long turn have a few each."""
    named = {}
    for k in range(keys):
        if k < 8:
            ns, turn = (LONG_NS, LONG_TURN) if k % 2 else (LONG_NS, chosen.get("small_turn", LONG_TURN))
            named[(ns, f"{turn}/tool-{k}")] = None
        elif rng.random() < 0.4:
            s = summaries[rng.randrange(len(summaries))]
            named[(s["namespace"], f"{s['turn_id']}/tool-{k}")] = None
        else:
            named[(pick(rng, NAMESPACES), f"{rng.choice(('payment', 'email', 'refund'))}-{k:06d}")] = None
    for token, (ns, key) in enumerate(sorted(named), start=1):
        w.line("idempotency", key_row(rng, now, ns, key, token), "records")


def emit_waits(w: Writer, rng: random.Random, now: int, waits: int, open_turns: List[tuple],
               chosen: Dict[str, Any]) -> None:
    """Waits on open turns, in key order; the small turn and the long turn have some."""
    keys = set()
    for k in range(waits):
        if k < 6:
            ns, turn = (LONG_NS, LONG_TURN) if k % 2 else (LONG_NS, chosen.get("small_turn", LONG_TURN))
        else:
            ns, turn = open_turns[rng.randrange(len(open_turns))]
        keys.add((ns, turn, f"{rng.choice(('approval', 'callback', 'timer'))}-{k}"))
    for ns, turn, name in sorted(keys):
        w.line("wait", wait_row(rng, now, ns, turn, name), "waits")


def emit_thread(w: Writer, now: int, turn: str, n: int) -> None:
    """A LangGraph thread's checkpoints as records of the turn (kind
    "checkpoint", each the child of the one before), which the turn page
    draws as a tree; a fork at every 50th."""
    for i in range(n):
        # Every 50th forks: its parent is the one before its predecessor.
        parent = "" if i == 0 else f"ckpt-{i - 2 if i % 50 == 0 else i - 1:05d}"
        w.line("record", {
            "namespace": LONG_NS, "turn_id": turn, "record_kind": "checkpoint", "scope": "", "id": f"ckpt-{i:05d}",
            "parent_id": parent, "content_type": "application/json", "payload": b64(b'{"channel_values": {}}'),
            "metadata": json.dumps({"step": i, "source": "loop"}), "refs": "[]",
            "recorded_at_ns": now - (n - i) * SECOND,
        }, "stored_records")
