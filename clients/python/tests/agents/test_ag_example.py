"""examples/agents_approval.py and the README's section about it: the
example, run phase by phase in processes of its own against the test's
sidecar, prints exactly the transcript the README shows, refunds once
(its ledger file, outside the store, and its run_once record say so), and
the README's excerpt of it and its operator command are the real ones."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import List

from agents import Agent

from ag_support import ag_namespace, ag_sidecar, ag_target  # noqa: F401  (fixtures)
from conftest import stepwell_bin
from stepwell import Client
from stepwell.agents import StepwellSession, load_run_state, tool_once_key
from stepwell.v1 import idempotency_pb2 as ip
from stepwell.v1 import waits_pb2 as wp

CLIENT = Path(__file__).resolve().parents[2]
EXAMPLE = CLIENT / "examples" / "agents_approval.py"
README = CLIENT / "README.md"
SESSION, RUN_ID = "ticket-42", "run-1"


def readme_block(marker: str) -> str:
    """The fenced block right after the README's ``<!-- marker: ... -->`` line."""
    lines = README.read_text().splitlines(keepends=True)
    at = [n for n, line in enumerate(lines) if line.startswith(f"<!-- {marker}: ")]
    assert len(at) == 1, f"README.md has {len(at)} {marker} markers"
    start = at[0] + 1
    assert lines[start].startswith("```"), f"no fenced block after the {marker} marker"
    end = next(n for n in range(start + 1, len(lines)) if lines[n].rstrip() == "```")
    return "".join(lines[start + 1:end])


def operator_command() -> List[str]:
    """The README's `stepwell waits signal ...` line, as argv."""
    found = [line for line in README.read_text().splitlines() if line.startswith("stepwell waits signal ")]
    assert len(found) == 1, found
    return shlex.split(found[0])


def example(target: str, namespace: str, folder: Path, *phase: str) -> subprocess.CompletedProcess:
    args = ["--target", target, "--namespace", namespace, "--ledger", str(folder / "ledger"), *phase]
    return subprocess.run([sys.executable, str(EXAMPLE), *args], capture_output=True, text=True,
                          timeout=900, cwd=folder)


def ledger(folder: Path) -> List[str]:
    path = folder / "ledger"
    return path.read_text().splitlines() if path.exists() else []


def saved_state_and_items(target: str, namespace: str) -> tuple:
    async def read() -> tuple:
        async with StepwellSession.from_address(SESSION, target, namespace=namespace) as s:
            state = await load_run_state(s, SESSION, RUN_ID, Agent(name="support"))
            return state, await s.get_items()

    return asyncio.run(read())


def test_readme_shows_the_example() -> None:
    excerpt = readme_block("agents-example")
    assert "@run_once(" in excerpt and "save_run_state(" in excerpt and "await_approval(" in excerpt
    assert ("\n" + excerpt) in ("\n" + EXAMPLE.read_text()), "README.md's excerpt differs from the example"


def test_example_prints_the_readme_transcript(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    done = example(ag_target, ag_namespace, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == readme_block("agents-transcript")
    # The resumed process died after the refund; the replay did not refund again.
    assert ledger(tmp_path) == [f"{SESSION}: refunded 30 for order 42"]
    with Client(ag_target, namespace=ag_namespace) as c:
        record = c.get(tool_once_key(RUN_ID, "call-refund-1", session_id=SESSION))
        assert record.state == ip.RECORD_STATE_COMPLETED and record.attempt == 1
        assert json.loads(record.result) == "refunded 30 for order 42"
        wait = c.get_wait(SESSION, f"approval:{RUN_ID}:call-refund-1").wait
        assert wait.status == wp.WAIT_STATUS_RESOLVED and json.loads(wait.payload)["approved"] is True
    state, items = saved_state_and_items(ag_target, ag_namespace)
    assert state is None, "the finished run's saved state was not deleted"
    assert [i.get("type", i.get("role")) for i in items] == ["user", "function_call", "function_call_output", "message"]


def test_an_operator_approves_with_the_readme_command(ag_target: str, ag_namespace: str, tmp_path: Path) -> None:
    first = example(ag_target, ag_namespace, tmp_path, "start")
    assert first.returncode == 0, first.stderr
    assert "needs approval, wait approval:run-1:call-refund-1" in first.stdout and ledger(tmp_path) == []
    argv = operator_command()
    assert argv[:3] == ["stepwell", "waits", "signal"]
    cli = [stepwell_bin(), "waits", "signal", "--target", ag_target, "--namespace", ag_namespace, *argv[3:]]
    signalled = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert signalled.returncode == 0, signalled.stderr
    second = example(ag_target, ag_namespace, tmp_path, "resume")
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[:3] == [
        "loaded the run; refund approved by ops",
        "refund tool: refunded 30 for order 42",
        "agent: Done: refunded 30 for order 42.",
    ]
    assert ledger(tmp_path) == [f"{SESSION}: refunded 30 for order 42"]
