"""examples/langgraph_agent.py: a run paused for approval in one process, finished by another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lg_support import lg_namespace, lg_sidecar, lg_target, new_thread  # noqa: F401  (fixtures)
from stepwell.langgraph import StepwellSaver

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_agent.py"


def run(target: str, ns: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--target", target, "--namespace", ns, *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_agent_pauses_and_resumes_in_another_process(lg_target: str, lg_namespace: str) -> None:
    thread = new_thread()
    first = run(lg_target, lg_namespace, "--thread", thread, "--ticket", "Order 42 arrived broken")
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == 'waiting for approval: {"approve_reply": "We are sorry: a full refund is on its way."}'

    with StepwellSaver.from_address(lg_target, namespace=lg_namespace) as saver:
        tup = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        assert tup is not None and tup.checkpoint["channel_values"]["category"] == "refund"
        assert any(w[1] == "__interrupt__" for w in tup.pending_writes or [])

    second = run(lg_target, lg_namespace, "--thread", thread, "--answer", "yes")
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "reply sent: We are sorry: a full refund is on its way. (6 checkpoints)"

    again = run(lg_target, lg_namespace, "--thread", thread, "--answer", "yes")
    assert again.returncode == 2 and "no paused run" in again.stderr
