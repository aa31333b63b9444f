"""Runs every language-neutral scenario of clients/scenarios, per
clients/scenarios/README.md: `call` steps through the client's one-to-one layer
(the raw stubs, no retries), adapter steps through stepwell.CheckpointStore,
sidecar steps against a sidecar of the scenario's own that they kill and start,
worker steps through tests/scenario_worker.py as child processes, and
`signal` steps through the peer worker of another language whose command
line is in STEPWELL_SCENARIO_PEER (a scenario with one fails without it).

The TLS/auth pass of clients/python/test runs this file too: a scenario with
sidecar steps then gets its own sidecar with that pass's TLS and auth, so it
runs in both passes. A scenario with worker or signal steps gets a plaintext
sidecar of its own in both passes, because a worker's command line names only
the sidecar's address."""

from __future__ import annotations

import base64
import json
import os
import shlex
import subprocess
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import grpc
import pytest
from google.protobuf import json_format, timestamp_pb2

from conftest import Sidecar, free_port, security_from_env
from stepwell import CheckpointStore, Client, StepwellError
from stepwell.errors import from_rpc_error
from stepwell.v1 import checkpoint_pb2 as cp
from stepwell.v1 import idempotency_pb2 as ip
from stepwell.v1 import waits_pb2 as wp

SCENARIOS = sorted((Path(__file__).resolve().parents[2] / "scenarios").glob("*.json"))

CALLS = {
    "Checkpoint": ("checkpoint_stub", cp.CheckpointRequest),
    "Restore": ("checkpoint_stub", cp.RestoreRequest),
    "ListTurns": ("checkpoint_stub", cp.ListTurnsRequest),
    "DeleteTurn": ("checkpoint_stub", cp.DeleteTurnRequest),
    "Begin": ("idempotency_stub", ip.BeginRequest),
    "Complete": ("idempotency_stub", ip.CompleteRequest),
    "Release": ("idempotency_stub", ip.ReleaseRequest),
    "Extend": ("idempotency_stub", ip.ExtendRequest),
    "Get": ("idempotency_stub", ip.GetRequest),
    "CreateWait": ("wait_stub", wp.CreateWaitRequest),
    "Signal": ("wait_stub", wp.SignalRequest),
    "Await": ("wait_stub", wp.AwaitRequest),
    "GetWait": ("wait_stub", wp.GetWaitRequest),
    "ListWaits": ("wait_stub", wp.ListWaitsRequest),
    "CancelWait": ("wait_stub", wp.CancelWaitRequest),
}
WORKER = Path(__file__).resolve().parent / "scenario_worker.py"
PEER_ENV = "STEPWELL_SCENARIO_PEER"


def substitute(value: Any, saved: Dict[str, Any]) -> Any:
    if isinstance(value, str) and value.startswith("$") and value[1:] in saved:
        return saved[value[1:]]
    if isinstance(value, dict):
        return {k: substitute(v, saved) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, saved) for v in value]
    return value


def build_request(call: str, request: Dict[str, Any], ns: str, saved: Dict[str, Any]) -> Any:
    req = substitute(dict(request), saved)
    if "namespace" in req:
        req["namespace"] = str(req["namespace"]).replace("$ns", ns)
    else:
        req["namespace"] = ns
    raw: Dict[str, bytes] = {}
    if call == "Checkpoint" and "state" in req:
        raw["state"] = json.dumps(req.pop("state")).encode("utf-8")
    for f in ("result", "fingerprint"):
        if f in req:
            raw[f] = str(req.pop(f)).encode("utf-8")
    if call == "Signal" and "payload" in req:
        raw["payload"] = str(req.pop("payload")).encode("utf-8")
    msg = json_format.ParseDict(req, CALLS[call][1]())
    for f, b in raw.items():
        setattr(msg, f, b)
    return msg


def response_to_json(resp: Any) -> Dict[str, Any]:
    d = json_format.MessageToDict(resp)

    def state_of(ck: Dict[str, Any]) -> None:
        if "state" in ck:
            ck["state"] = json.loads(base64.b64decode(ck["state"]).decode("utf-8"))

    if isinstance(resp, cp.CheckpointResponse) and "checkpoint" in d:
        state_of(d["checkpoint"])
    if isinstance(resp, cp.RestoreResponse):
        for ck in d.get("checkpoints", []):
            state_of(ck)
    for f in ("result", "fingerprint"):
        if isinstance(resp, (ip.BeginResponse, ip.GetResponse)) and f in d:
            d[f] = base64.b64decode(d[f]).decode("utf-8")
    # A wait's payload, as a result, is compared as a UTF-8 string.
    for w in [d["wait"]] if "wait" in d else d.get("waits", []):
        if "payload" in w:
            w["payload"] = base64.b64decode(w["payload"]).decode("utf-8")
    return d


def _default_like(expected: Any) -> Any:
    if isinstance(expected, bool):
        return False
    if isinstance(expected, (int, float)):
        return 0
    if isinstance(expected, str):
        return ""
    if isinstance(expected, list):
        return []
    if isinstance(expected, dict):
        return {}
    return None


def _as_timestamp(s: str) -> Any:
    ts = timestamp_pb2.Timestamp()
    try:
        ts.FromJsonString(s)
    except Exception:
        return None
    return (ts.seconds, ts.nanos)


def matches(expected: Any, actual: Any, path: str = "$") -> list:
    """Returns the mismatches of a subset match (empty when it matches)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object, got {actual!r}"]
        errs = []
        for k, v in expected.items():
            errs += matches(v, actual.get(k, _default_like(v)), f"{path}.{k}")
        return errs
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} elements, got {actual!r}"]
        errs = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            errs += matches(e, a, f"{path}[{i}]")
        return errs
    if isinstance(expected, bool):
        return [] if actual is expected else [f"{path}: expected {expected!r}, got {actual!r}"]
    if isinstance(expected, (int, float)) and isinstance(actual, str):
        try:
            actual = float(actual) if isinstance(expected, float) else int(actual)
        except ValueError:
            pass
    if isinstance(expected, str) and isinstance(actual, str) and expected != actual:
        a, b = _as_timestamp(expected), _as_timestamp(actual)
        if a is not None and a == b:
            return []
    if expected == actual and not isinstance(actual, bool):
        return []
    return [f"{path}: expected {expected!r}, got {actual!r}"]


def call_once(client: Client, call: str, msg: Any) -> Any:
    stub_name, _ = CALLS[call]
    method = getattr(getattr(client, stub_name), call)
    try:
        return method(msg, timeout=10)
    except grpc.RpcError as e:
        raise from_rpc_error(e) from None


def call_retrying_while(client: Client, step: Dict[str, Any], msg: Any) -> Tuple[Any, Optional[StepwellError]]:
    """One call, repeated every 20 ms while it fails with the step's
    ``retryWhile`` code (at most ``timeoutMs``): the response (as JSON) or
    the last error."""
    retry_while = step.get("retryWhile")
    deadline = time.monotonic() + step.get("timeoutMs", 5000) / 1000
    while True:
        try:
            return response_to_json(call_once(client, step["call"], msg)), None
        except StepwellError as err:
            if retry_while is None or err.code.name != retry_while or time.monotonic() >= deadline:
                return None, err
        time.sleep(0.02)


def instant_ns(rfc3339: str) -> int:
    ts = timestamp_pb2.Timestamp()
    ts.FromJsonString(rfc3339)
    return ts.seconds * 1_000_000_000 + ts.nanos


class Worker:
    """One adapter (a CheckpointStore) with a clock of its own: it reads the
    instant its worker's last step set (the system clock until one does)."""

    def __init__(self, client: Client) -> None:
        self.now_ns: Optional[int] = None
        self.store = CheckpointStore(client, clock=self.clock)

    def clock(self) -> int:
        return time.time_ns() if self.now_ns is None else self.now_ns


def run_adapter_step(workers: Dict[str, Worker], client: Client, step: Dict[str, Any], where: str) -> None:
    worker = workers.get(step["worker"])
    if worker is None:
        worker = workers[step["worker"]] = Worker(client)
    if "clock" in step:
        worker.now_ns = instant_ns(step["clock"])
    kind = step["adapter"]
    got: Any
    try:
        if kind == "save":
            worker.store.save(step["run"], step["state"], step_name=step["step"])
            got = {}
        elif kind == "load":
            ck = worker.store.load(step["run"])
            got = None if ck is None else {"step": ck.step_name, "state": ck.state}
        elif kind == "history":
            got = {"steps": [ck.step_name for ck in worker.store.history(step["run"])]}
        else:
            pytest.fail(f"{where}: unknown adapter step {kind!r}")
    except StepwellError as err:
        pytest.fail(f"{where}: the adapter raised {err!r}")
    if "expect" in step:
        errs = matches(step["expect"], got)
        assert not errs, f"{where}: {errs} in {got!r}"


def run_sidecar_step(own: Optional[Sidecar], step: Dict[str, Any], where: str) -> None:
    assert own is not None, f"{where}: no sidecar of the scenario's own"
    kind = step["sidecar"]
    if kind not in ("stop", "start", "restart"):
        pytest.fail(f"{where}: unknown sidecar step {kind!r}")
    if kind in ("stop", "restart"):
        own.kill()
    if kind in ("start", "restart"):
        own.start()


def run_call_step(client: Client, step: Dict[str, Any], ns: str, saved: Dict[str, Any], where: str) -> None:
    msg = build_request(step["call"], step.get("request", {}), ns, saved)
    if "until" in step:
        deadline = time.monotonic() + step.get("timeoutMs", 5000) / 1000
        while True:
            try:
                got = response_to_json(call_once(client, step["call"], msg))
                if not matches(step["until"], got):
                    break
            except StepwellError:
                pass
            assert time.monotonic() < deadline, f"{where}: 'until' not reached"
            time.sleep(0.02)
        if "expect" in step:
            errs = matches(step["expect"], got)
            assert not errs, f"{where}: {errs}"
        resp_json = got
    elif "expectError" in step:
        want = step["expectError"]
        resp_json, err = call_retrying_while(client, step, msg)
        assert err is not None, f"{where}: expected {want}, got {resp_json}"
        assert err.code.name == want["code"], f"{where}: {err}"
        # Without a reason only the code is checked (a refused connection carries no ErrorInfo).
        if "reason" in want:
            assert err.reason == want["reason"], f"{where}: {err}"
        if "field" in want:
            assert err.field == want["field"], f"{where}: {err}"
        return
    else:
        resp_json, err = call_retrying_while(client, step, msg)
        assert err is None, f"{where}: {err}"
        errs = matches(step.get("expect", {}), resp_json)
        assert not errs, f"{where}: {errs} in {resp_json}"
    for name, fieldname in step.get("save", {}).items():
        saved[name] = resp_json.get(fieldname)


class WorkerProcess:
    """A scenario worker program running as a child process: the lines it
    prints, kept by a thread of their own, and its exit."""

    def __init__(self, argv: List[str], log: Path) -> None:
        self.lines: List[str] = []
        self.log = log
        self._seen = threading.Condition()
        self._eof = False
        with open(log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()
        with self._seen:
            self._eof = True
            self._seen.notify_all()

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_line(self, line: str, limit: float, where: str) -> None:
        """Returns once the worker printed ``line``; fails if it exits (its
        output ends) first or ``limit`` seconds pass."""
        with self._seen:
            self._seen.wait_for(lambda: line in self.lines or self._eof, limit)
            if line in self.lines:
                return
            state = "exited" if self._eof else "still running"
        pytest.fail(f"{where}: the worker did not print {line!r} ({state}); it printed {self.lines}, "
                    f"its stderr: {self.stderr()}")

    def wait_exit(self, limit: float, where: str) -> int:
        try:
            code = self.proc.wait(limit)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{where}: the worker did not exit within {limit}s; it printed {self.lines}")
        self._reader.join(limit)
        return code

    def kill(self) -> None:
        """SIGKILL, as a crash would, and wait for the process to be gone."""
        self.proc.kill()
        self.proc.wait()
        self._reader.join()


class Workers:
    """The worker processes of one scenario run, on its sidecar and namespace,
    sharing its effects file."""

    def __init__(self, target: str, ns: str, folder: Path) -> None:
        self.target, self.ns, self.folder = target, ns, folder
        self.effects = folder / "effects"
        self.running: Dict[str, WorkerProcess] = {}

    def start(self, step: Dict[str, Any]) -> None:
        argv = [sys.executable, str(WORKER), step["start"], "--target", self.target, "--namespace", self.ns,
                "--run", step["run"], "--effects", str(self.effects)]
        if "seconds" in step:
            argv += ["--seconds", str(step["seconds"])]
        log = self.folder / f"worker-{step['worker']}-{uuid.uuid4().hex[:6]}.log"
        self.running[step["worker"]] = WorkerProcess(argv, log)

    def step(self, step: Dict[str, Any], where: str) -> None:
        if "start" in step:
            self.start(step)
            return
        w = self.running.get(step["worker"])
        assert w is not None, f"{where}: worker {step['worker']!r} was never started"
        limit = step.get("timeoutMs", 60000) / 1000
        if step.get("kill"):
            w.kill()
        elif "exit" in step:
            code = w.wait_exit(limit, where)
            assert code == step["exit"], f"{where}: exit {code}, printed {w.lines}, stderr: {w.stderr()}"
            if "line" in step:
                assert step["line"] in w.lines, f"{where}: printed {w.lines}, not {step['line']!r}"
        elif "line" in step:
            w.wait_line(step["line"], limit, where)
        else:
            pytest.fail(f"{where}: unknown worker step {step}")

    def signal(self, step: Dict[str, Any], where: str) -> None:
        """Signals through the peer, the worker program of another language."""
        prefix = os.environ.get(PEER_ENV, "")
        if not prefix.strip():
            pytest.fail(f"{where}: {PEER_ENV} is not set: it names the peer worker that signals")
        sig = step["signal"]
        argv = shlex.split(prefix) + ["signal", "--target", self.target, "--namespace", self.ns,
                                      "--run", sig["run"], "--name", sig["name"], "--payload", sig["payload"]]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=step.get("timeoutMs", 120000) / 1000)
        assert done.returncode == 0, f"{where}: the peer exited {done.returncode}: {done.stdout}{done.stderr}"
        lines = [line for line in done.stdout.splitlines() if line.strip()]
        assert lines and lines[-1] == step["expect"], f"{where}: the peer printed {lines}, not {step['expect']!r}"

    def check_effects(self, want: int, where: str) -> None:
        got = self.effects.read_text().splitlines() if self.effects.exists() else []
        assert len(got) == want, f"{where}: the effect ran {len(got)} times, not {want}: {got}"

    def stop(self) -> None:
        for w in self.running.values():
            if w.proc.poll() is None:
                w.kill()


STEP_KINDS = ("call", "adapter", "sidecar", "signal", "effects")


def step_kind(step: Dict[str, Any]) -> str:
    """The step's kind; an adapter step names a worker too (its adapter),
    so a worker step is one that names a worker and is of no other kind."""
    kinds = [k for k in STEP_KINDS if k in step]
    if not kinds and "worker" in step:
        return "worker"
    assert len(kinds) == 1, f"a step has exactly one of {', '.join(STEP_KINDS)}, or is a worker step: {step}"
    return kinds[0]


def scenario_sidecar(
    stack: ExitStack, steps: List[Dict[str, Any]], request: pytest.FixtureRequest, tmp_path: Path
) -> Tuple[Optional[Sidecar], str, Dict[str, Any]]:
    """The sidecar a scenario runs on: the session's, unless it has steps
    that need one of its own (see the module's docstring)."""
    kinds = {step_kind(step) for step in steps}
    if not kinds & {"sidecar", "worker", "signal"}:
        return None, request.getfixturevalue("target"), request.getfixturevalue("connect")
    # A fresh SQLite file in a temporary folder, a free loopback port.
    security = None if kinds & {"worker", "signal"} else security_from_env()
    own = Sidecar(f"127.0.0.1:{free_port()}", tmp_path, security)
    stack.callback(own.stop)
    return own, own.target, own.connect


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    scenario = json.loads(path.read_text())
    ns = f"sc-{scenario['name'].replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    saved: Dict[str, Any] = {}
    workers: Dict[str, Worker] = {}
    steps = scenario["steps"]
    if any(step_kind(step) == "signal" for step in steps) and not os.environ.get(PEER_ENV, "").strip():
        pytest.fail(f"{path.name} signals through a peer worker: set {PEER_ENV} to its command line")
    with ExitStack() as stack:
        own, target, connect = scenario_sidecar(stack, steps, request, tmp_path)
        processes = Workers(target, ns, tmp_path)
        stack.callback(processes.stop)
        # Made once and never remade, whatever happens to the sidecar. Its
        # retry policy is the default one, which the adapters use as they do
        # for their users; `call` steps use the raw stubs, which never retry.
        client = stack.enter_context(Client(target, namespace=ns, **connect))
        for i, step in enumerate(steps):
            kind = step_kind(step)
            where = f"{path.name} step {i} ({kind} {step[kind]})"
            if kind == "call":
                run_call_step(client, step, ns, saved, where)
            elif kind == "adapter":
                run_adapter_step(workers, client, step, where)
            elif kind == "sidecar":
                run_sidecar_step(own, step, where)
            elif kind == "worker":
                processes.step(step, where)
            elif kind == "signal":
                processes.signal(step, where)
            else:
                processes.check_effects(step["effects"], where)


def test_matcher_rejects_mismatches() -> None:
    assert matches({"a": 1, "b": [{"c": "x"}]}, {"a": "1", "b": [{"c": "x", "d": 2}]}) == []
    assert matches({"inserted": False, "n": 0, "s": "", "l": []}, {}) == []
    assert matches({"a": 1}, {"a": 2})
    assert matches({"l": [1]}, {"l": [1, 2]})
    assert matches({"ok": False}, {"ok": True})
    assert matches({"t": "2026-01-01T00:00:00Z"}, {"t": "2026-01-01T00:00:00.000Z"}) == []
