"""examples/resume_workflow.py: crash mid-run, resume without re-running done phases."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from stepwell import Client

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "resume_workflow.py"


def run(target: str, ns: str, run_id: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLE), "--target", target, "--namespace", ns, "--run-id", run_id, *extra],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_crash_and_resume(target: str, namespace: str) -> None:
    run_id = f"run-{uuid.uuid4().hex[:8]}"
    first = run(target, namespace, run_id, "--crash-after", "phase_3")
    assert first.returncode == 137, first.stderr
    assert "run phase_1" in first.stdout and "run phase_2" in first.stdout
    assert "run phase_3" not in first.stdout and "crash after marking phase_3" in first.stdout

    second = run(target, namespace, run_id)
    assert second.returncode == 0, second.stderr
    out = second.stdout
    assert "skip phase_1 (done)" in out and "skip phase_2 (done)" in out
    assert "run phase_1" not in out and "run phase_2" not in out
    assert "run phase_3" in out and "run phase_4" in out
    assert f"workflow {run_id} finished" in out

    with Client(target, namespace=namespace) as c:
        phases = [ck.phase for ck in c.restore(run_id)]
        assert phases.count("phase_1:done") == 1 and phases.count("phase_3:in_progress") == 2
        assert phases[-1] == "finished"
        assert c.get(f"{run_id}/phase_1").attempt == 1  # each effect ran once
        assert [t.turn_id for t in c.list_turns(status="terminal").turns] == [run_id]


def test_version_mismatch_refuses_resume(target: str, namespace: str) -> None:
    with Client(target, namespace=namespace) as c:
        c.checkpoint("old-run", "created", {"workflow_version": "0.9.0", "phases": {}}, workflow_version="0.9.0")
    r = run(target, namespace, "old-run")
    assert r.returncode == 3 and "0.9.0" in r.stderr
