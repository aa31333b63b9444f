"""Runs every language-neutral scenario of clients/scenarios, per
clients/scenarios/README.md: `call` steps through the client's one-to-one layer
(the raw stubs, no retries), adapter steps through stepwell.CheckpointStore,
sidecar steps against a sidecar of the scenario's own that they kill and start.

The TLS/auth pass of clients/python/test runs this file too: a scenario with
sidecar steps then gets its own sidecar with that pass's TLS and auth, so it
runs in both passes."""

from __future__ import annotations

import base64
import json
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import grpc
import pytest
from google.protobuf import json_format, timestamp_pb2

from conftest import Sidecar, free_port, security_from_env
from stepwell import CheckpointStore, Client, StepwellError
from stepwell.errors import from_rpc_error
from stepwell.v1 import checkpoint_pb2 as cp
from stepwell.v1 import idempotency_pb2 as ip

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
}


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


def step_kind(step: Dict[str, Any]) -> str:
    kinds = [k for k in ("call", "adapter", "sidecar") if k in step]
    assert len(kinds) == 1, f"a step has exactly one of call, adapter, sidecar: {step}"
    return kinds[0]


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    scenario = json.loads(path.read_text())
    ns = f"sc-{scenario['name'].replace('_', '-')}-{uuid.uuid4().hex[:8]}"
    saved: Dict[str, Any] = {}
    workers: Dict[str, Worker] = {}
    with ExitStack() as stack:
        own: Optional[Sidecar] = None
        if any(step_kind(step) == "sidecar" for step in scenario["steps"]):
            # A sidecar of the scenario's own: a fresh SQLite file in a
            # temporary folder, a free loopback port, this pass's security.
            own = Sidecar(f"127.0.0.1:{free_port()}", tmp_path, security_from_env())
            stack.callback(own.stop)
            target, connect = own.target, own.connect
        else:
            target, connect = request.getfixturevalue("target"), request.getfixturevalue("connect")
        # Made once and never remade, whatever happens to the sidecar. Its
        # retry policy is the default one, which the adapters use as they do
        # for their users; `call` steps use the raw stubs, which never retry.
        client = stack.enter_context(Client(target, namespace=ns, **connect))
        for i, step in enumerate(scenario["steps"]):
            kind = step_kind(step)
            where = f"{path.name} step {i} ({kind} {step[kind]})"
            if kind == "call":
                run_call_step(client, step, ns, saved, where)
            elif kind == "adapter":
                run_adapter_step(workers, client, step, where)
            else:
                run_sidecar_step(own, step, where)


def test_matcher_rejects_mismatches() -> None:
    assert matches({"a": 1, "b": [{"c": "x"}]}, {"a": "1", "b": [{"c": "x", "d": 2}]}) == []
    assert matches({"inserted": False, "n": 0, "s": "", "l": []}, {}) == []
    assert matches({"a": 1}, {"a": 2})
    assert matches({"l": [1]}, {"l": [1, 2]})
    assert matches({"ok": False}, {"ok": True})
    assert matches({"t": "2026-01-01T00:00:00Z"}, {"t": "2026-01-01T00:00:00.000Z"}) == []
