"""The durable-execution checkpoint model that CheckpointStore implements
(one checkpoint per execution, overwritten after every step), its statements
about the store as checks, run by the test script's install check with the
installed package in a fresh virtualenv, against a sidecar the script
started: ``python -I checkpoint_store_contract.py HOST:PORT``. It needs
nothing but the package, so it is a script with its own small runner rather
than a pytest module (pytest does not collect it: its name does not start
with ``test_``).
"""

from __future__ import annotations

import sys
import traceback
import uuid
from pathlib import Path
from typing import Callable, List

import stepwell
from stepwell import CheckpointStore, Client

STATUSES = ("running", "failed", "paused", "completed")


CLIENTS: List[Client] = []


def fresh_store(target: str) -> CheckpointStore:
    """A store in a namespace of its own, so checks never see each other's executions."""
    client = Client(target, namespace=f"contract-{uuid.uuid4().hex[:12]}")
    CLIENTS.append(client)
    return CheckpointStore(client)


def task_state(step: int) -> dict:
    """What the model's checkpoint carries: the task and the execution context."""
    return {
        "task": {"description": "Summarise the quarterly report", "config": {"model": "m-1"}, "response_format": "markdown"},
        "context": {"messages": [{"role": "user", "content": "go"}] + [{"role": "tool", "step": i} for i in range(step)]},
        "agent": {"scratchpad": f"after step {step}"},
    }


def check_one_record_per_execution_with_the_latest_state(target: str) -> None:
    # The model's own example: three steps succeed, the fourth fails; each save overwrites the one before.
    store = fresh_store(target)
    for step in range(3):
        store.save("exec-1", task_state(step), status="running", step_index=step, step_name=f"step-{step}")
    store.save("exec-1", task_state(3), status="failed", step_index=3, step_name="step-3", error=TimeoutError("llm timed out"))
    last = store.load("exec-1")
    assert last is not None
    assert (last.execution_id, last.status, last.step_index, last.step_name) == ("exec-1", "failed", 3, "step-3"), last
    assert last.state == task_state(3), last.state
    assert last.error == {"type": "TimeoutError", "message": "llm timed out"}, last.error
    listed = store.list()
    assert [(s.execution_id, s.status) for s in listed] == [("exec-1", "failed")], listed
    # A store made after a restart, on a client of its own, loads the same latest checkpoint.
    with Client(store.client.target, namespace=store.client.namespace) as client:
        again = CheckpointStore(client).load("exec-1")
    assert again is not None and (again.status, again.step_index, again.state) == ("failed", 3, task_state(3)), again


def check_an_execution_never_saved_has_no_checkpoint(target: str) -> None:
    store = fresh_store(target)
    assert store.load("never-saved") is None
    assert store.history("never-saved") == []
    assert store.list() == []


def check_status_values(target: str) -> None:
    store = fresh_store(target)
    for status in STATUSES:
        store.save(f"exec-{status}", {"status": status}, status=status, step_index=0)
    for status in STATUSES:
        loaded = store.load(f"exec-{status}")
        assert loaded is not None and loaded.status == status, loaded
        # Only completed is final; running, failed and paused executions are resumed.
        assert loaded.terminal == (status == "completed") and loaded.resumable == (status != "completed"), loaded
        assert [s.execution_id for s in store.list(status)] == [f"exec-{status}"]
    assert sorted(s.execution_id for s in store.resumable()) == ["exec-failed", "exec-paused", "exec-running"]
    for bad in ("done", "RUNNING", ""):
        try:
            store.save("exec-bad", {}, status=bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"status {bad!r} was accepted")
    assert store.load("exec-bad") is None


def check_recovery_retries_the_failed_step_then_completes(target: str) -> None:
    store = fresh_store(target)
    store.save("exec-r", task_state(0), step_index=0, step_name="plan")
    store.save("exec-r", task_state(1), status="failed", step_index=1, step_name="call-llm", error="rate limited")
    resume = store.load("exec-r")
    assert resume is not None and resume.status == "failed" and resume.resumable
    # Retry the failed step (status failed), then go on to the end.
    store.save("exec-r", task_state(2), status="running", step_index=resume.step_index, step_name=resume.step_name)
    store.save("exec-r", task_state(3), status="completed", step_index=2, step_name="respond")
    done = store.load("exec-r")
    assert done is not None and done.status == "completed" and done.terminal and done.error is None, done
    assert store.resumable() == []
    assert [h.status for h in store.history("exec-r")] == ["running", "failed", "running", "completed"]


def check_cleanup_removes_finished_executions_only(target: str) -> None:
    store = fresh_store(target)
    store.save("exec-done", {}, status="completed")
    store.save("exec-open", {}, status="paused")
    assert store.cleanup() == 1
    assert store.load("exec-done") is None and store.history("exec-done") == []
    assert [s.execution_id for s in store.list()] == ["exec-open"]


CHECKS: List[Callable[[str], None]] = [
    check_one_record_per_execution_with_the_latest_state,
    check_an_execution_never_saved_has_no_checkpoint,
    check_status_values,
    check_recovery_retries_the_failed_step_then_completes,
    check_cleanup_removes_finished_executions_only,
]


def main(target: str) -> int:
    pkg = Path(stepwell.__file__).parent
    assert "site-packages" in pkg.parts, f"stepwell imported from {pkg}, not the installed package"
    failed = 0
    for check in CHECKS:
        try:
            check(target)
        except Exception:  # every check runs; each failure is reported with its traceback
            failed += 1
            print(f"FAIL {check.__name__}", flush=True)
            traceback.print_exc()
        else:
            print(f"ok   {check.__name__}", flush=True)
    for client in CLIENTS:
        client.close()
    print(f"checkpoint store contract on the installed stepwell ({pkg}): {len(CHECKS) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
